"""Where batch streams come from: a trace file (batch or request trace) or the embedded default.

Every source yields `BatchSet` chunks, so `plan`, `layout`, `batches` and `replay-check` work on
any of them. Request traces go through the scheduler simulation (`scheduler.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cpbcg.planner.batch_trace import read_batch_trace
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.requests import TraceFormat, detect_format, read_requests, request_spec
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.synthetic import synthetic_batches

EMBEDDED_DEFAULT = "embedded default (seeded synthetic chat workload, 20,000 forwards)"


@dataclass(frozen=True)
class BatchSource:
    """An opened batch stream and, for request traces, the simulation producing it."""

    batches: Iterator[BatchSet]
    """The forwards, in chunks (lazy: reading happens while iterating)."""
    trace_format: TraceFormat | None
    """Format of the trace as read (never `auto`); None for the embedded default."""
    simulation: Simulation | None
    """The scheduler simulation for request traces (its `summary()` is complete after iterating)."""


def open_source(
    trace: Path | None,
    trace_format: TraceFormat | str = TraceFormat.auto,
    scheduler: SchedulerSettings | None = None,
    length_field: str | None = None,
    time_field: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchSource:
    """Open `trace` (or the embedded default when None) as a batch stream.

    `trace_format` `auto` detects the format from the first line; request traces are turned
    into forwards by the scheduler simulation with `scheduler` (defaults when None), which calls
    `progress(requests read so far)` as it reads the trace.
    Raises `TraceError` (`FILE:LINE: ...`) for unreadable, unknown or malformed traces.
    """
    if trace is None:
        return BatchSource(iter([synthetic_batches()]), None, None)
    trace = Path(trace)
    fmt = TraceFormat(trace_format)
    if fmt is TraceFormat.auto:
        fmt = detect_format(trace, length_field)
    if fmt is TraceFormat.batches:
        return BatchSource(read_batch_trace(trace), fmt, None)
    spec = request_spec(fmt, length_field, time_field)
    settings = scheduler.to_settings() if hasattr(scheduler, "to_settings") else scheduler  # pydantic config
    simulation = Simulation(read_requests(trace, spec), settings or SchedulerSettings(), progress)
    return BatchSource(iter(simulation), fmt, simulation)


def open_batches(
    trace: Path | None,
    trace_format: TraceFormat | str = TraceFormat.auto,
    scheduler: SchedulerSettings | None = None,
    length_field: str | None = None,
    time_field: str | None = None,
) -> Iterator[BatchSet]:
    """Batch stream of `trace`, or of the embedded default workload when `trace` is None.

    The one entry point for batch streams (see `open_source` for the options).
    Raises `TraceError` (`FILE:LINE: ...`) for malformed traces.
    """
    return open_source(trace, trace_format, scheduler, length_field, time_field).batches


def describe_source(trace: Path | None) -> str:
    """One-line description of the source for report headers."""
    return EMBEDDED_DEFAULT if trace is None else str(trace)
