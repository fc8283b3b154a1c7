"""Where batch streams come from: a trace file (batch or request trace) or the embedded default.

Every source yields `BatchSet` chunks, so `plan`, `layout`, `batches` and `replay-check` work on
any of them. The trace readers (`cpbcg.planner.traces`) detect and read the format; request
traces then go through the scheduler simulation (`scheduler.py`). Server logs give forward
sizes only (`ForwardSizes`, a bound): they are in `BatchSource.forwards`, not in `batches`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from cpbcg.errors import TraceError
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.assembly.embedded import synthetic_batches
from cpbcg.planner.traces.records import ReadNotes, RequestChunk
from cpbcg.planner.traces import ForwardSizes, ReadOptions, TraceFormat, TraceKind, open_trace
from cpbcg.planner.traces.sglang_log import LogReader, LogSummary
from cpbcg.planner.traces.sglang_settings import LogSettings, read_log_settings
from cpbcg.planner.traces.text import display

EMBEDDED_DEFAULT = "embedded default (seeded synthetic chat workload, 20,000 forwards)"


@dataclass(frozen=True)
class TraceSpec:
    """How to open a trace (again): picklable, what a worker process gets."""

    path: str | None
    """Trace file; None = the embedded default workload."""
    trace_format: str = "auto"
    """Format name (`auto` detects)."""
    options: ReadOptions = ReadOptions()
    """Reader options (generic fields, BurstGPT filters)."""
    scheduler: SchedulerSettings = SchedulerSettings()
    """Scheduler simulation settings for a request trace."""
    requests: tuple[RequestChunk, ...] | None = None
    """The requests of a request trace read from standard input (`path` `-`), held: it can be read
    once, and is simulated at as many loads as a file (`trace_format` is then the format read)."""
    notes: ReadNotes | None = None
    """What reading the held `requests` decided (rows skipped, notes), else None."""

    def open(self, progress: Callable[[int], None] | None = None) -> "BatchSource":
        """A fresh `BatchSource` of the trace. Raises `TraceError`."""
        if self.requests is not None:
            simulation = Simulation(iter(self.requests), self.scheduler, progress)
            return BatchSource(iter(simulation), TraceFormat(self.trace_format), simulation, spec=self, read_notes=self.notes)
        return open_source(self.path, self.trace_format, self.scheduler, options=self.options, progress=progress)


@dataclass(frozen=True)
class BatchSource:
    """An opened batch stream and, for request traces, the simulation producing it."""

    batches: Iterator[BatchSet]
    """The forwards, in chunks (lazy: reading happens while iterating)."""
    trace_format: TraceFormat | None
    """Format of the trace as read (never `auto`); None for the embedded default."""
    simulation: Simulation | None
    """The scheduler simulation for request traces (its `summary()` is complete after iterating)."""
    forwards: Iterable[ForwardSizes] | None = None
    """Forward sizes of a server log (bound mode), or None; `batches` then refuses to iterate."""
    log: LogSettings | None = None
    """What an SGLang server log says about its deployment (`read_log_settings`), else None."""
    spec: "TraceSpec | None" = None
    """How to open the same trace again (a plan reads it afresh each time, once per load
    factor); None for a batch trace or server log on standard input, which can be read once (a
    request trace on standard input is held in `spec.requests`)."""
    read_notes: ReadNotes | None = None
    """Rows the reader skipped and what it decided (request traces; complete after iterating)."""

    @property
    def log_summary(self) -> LogSummary | None:
        """What reading a server log kept, folded and skipped (complete after iterating), else None."""
        return self.forwards.summary if isinstance(self.forwards, LogReader) else None

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
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field)
    scheduler = scheduler if scheduler is not None else SchedulerSettings()
    spec = None if trace is not None and str(trace) == "-" else TraceSpec(
        None if trace is None else str(trace), getattr(trace_format, "value", str(trace_format)), options, scheduler)
    if trace is None:
        return BatchSource(iter([synthetic_batches()]), None, None, spec=spec)
    opened = open_trace(trace, trace_format, options)
    fmt = TraceFormat(opened.format.name)
    if opened.kind is TraceKind.batches:
        return BatchSource(opened.batch_chunks(), fmt, None, spec=spec)
    if opened.kind is TraceKind.forwards:
        if isinstance(opened.items, LogReader):
            return BatchSource(_bound_only(trace), fmt, None, opened.items, read_log_settings(trace), spec=spec)
        return BatchSource(_bound_only(trace), fmt, None, opened.forward_chunks(), None, spec=spec)
    if spec is None:  # standard input: its requests held (four numbers each), so it plans like a file
        held = TraceSpec("-", fmt.value, options, scheduler, tuple(opened.request_chunks()), opened.notes)
        return held.open(progress)
    simulation = Simulation(opened.request_chunks(), scheduler, progress)
    return BatchSource(iter(simulation), fmt, simulation, spec=spec, read_notes=opened.notes)


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
