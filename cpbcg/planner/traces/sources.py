"""Where batch streams come from: a trace file (batch or request trace) or the embedded default.

Every source yields `BatchSet` chunks, so `plan`, `layout`, `batches` and `replay-check` work on
any of them. The trace readers (`cpbcg.planner.traces`) detect and read the format; request
traces then go through the scheduler simulation (`scheduler.py`). Server logs give forward
sizes only (`ForwardSizes`, a bound): they are in `BatchSource.forwards`, not in `batches`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from cpbcg.errors import TraceError
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.traces.embedded import synthetic_batches
from cpbcg.planner.traces.records import ReadNotes
from cpbcg.planner.traces import ForwardSizes, ReadOptions, TraceFormat, TraceKind, open_trace
from cpbcg.planner.traces.text import display

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
    forwards: Iterator[ForwardSizes] | None = None
    """Forward sizes of a server log (bound mode), or None; `batches` then refuses to iterate."""
    read_notes: ReadNotes | None = None
    """Rows the reader skipped and what it decided (request traces; complete after iterating)."""

    @property
    def is_bound(self) -> bool:
        """True when the source gives forward sizes only: every plan from it is a worst-case bound."""
        return self.forwards is not None


def open_source(
    trace: Path | str | None,
    trace_format: TraceFormat | str = "auto",
    scheduler: SchedulerSettings | None = None,
    length_field: str | None = None,
    time_field: str | None = None,
    options: ReadOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchSource:
    """Open `trace` (`-` = stdin; the embedded default when None) as a batch stream.

    `trace_format` `auto` detects the format from the first line; request traces are turned
    into forwards by the scheduler simulation with `scheduler` (defaults when None), which calls
    `progress(requests read so far)` as it reads the trace. `options` carries the reader options
    (`length_field`/`time_field` are shorthands). Raises `TraceError` (`FILE:LINE: ...`).
    """
    if trace is None:
        return BatchSource(iter([synthetic_batches()]), None, None)
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field)
    opened = open_trace(trace, trace_format, options)
    fmt = TraceFormat(opened.format.name)
    if opened.kind is TraceKind.batches:
        return BatchSource(opened.items, fmt, None)
    if opened.kind is TraceKind.forwards:
        return BatchSource(_bound_only(trace), fmt, None, opened.items)
    simulation = Simulation(opened.items, scheduler if scheduler is not None else SchedulerSettings(), progress)
    return BatchSource(iter(simulation), fmt, simulation, read_notes=opened.notes)


def _bound_only(trace: Path | str) -> Iterator[BatchSet]:
    raise TraceError(f"{display(trace)}: an SGLang server log gives forward sizes, not extend lengths: plan it in bound mode (docs/traces.md)")
    yield  # pragma: no cover  (a generator: raises on first use, not on open)


def open_batches(
    trace: Path | str | None,
    trace_format: TraceFormat | str = "auto",
    scheduler: SchedulerSettings | None = None,
    length_field: str | None = None,
    time_field: str | None = None,
    options: ReadOptions | None = None,
) -> Iterator[BatchSet]:
    """Batch stream of `trace`, or of the embedded default workload when `trace` is None.

    The one entry point for batch streams (see `open_source` for the options).
    Raises `TraceError` (`FILE:LINE: ...`) for malformed traces.
    """
    return open_source(trace, trace_format, scheduler, length_field, time_field, options).batches


def describe_source(trace: Path | str | None, bound: bool = False) -> str:
    """One-line description of the source for report headers (`..., bound` for server logs)."""
    if trace is None:
        return EMBEDDED_DEFAULT
    return f"{display(trace)} (SGLang server log: forward sizes only, planned as a worst-case bound)" if bound else display(trace)
