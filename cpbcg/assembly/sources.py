"""Where batch streams come from: a trace file (batch or request trace) or the embedded default.

A trace is detected once, at the input edge (`detect_input`: its format and, for an SGLang log,
the settings its start-up output states), and the detected `TraceInput` is what every later
step opens: no step detects or reads the start-up output again, and re-opening a trace (once
per load factor) reuses the detected format.

Every source yields `BatchSet` chunks, so `plan`, `layout`, `batches` and `replay-check` work on
any of them. The trace readers (`cpbcg.planner.traces`) detect and read the format; request
traces then go through the scheduler simulation (`scheduler.py`). Server logs give forward
sizes only (`ForwardSizes`, a bound): they are in `BatchSource.forwards`, not in `batches`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.scheduler.summary import SimulationSummary
from cpbcg.assembly.embedded import synthetic_batches
from cpbcg.planner.traces.records import ReadNotes, RequestChunk
from cpbcg.planner.traces import ForwardSizes, ReadOptions, TraceFormat, TraceKind
from cpbcg.assembly.registry import open_trace
from cpbcg.planner.traces.base import TraceFormatInfo
from cpbcg.assembly.registry import detect, format_info
from cpbcg.engines.sglang.logs.log import LogReader, LogSummary
from cpbcg.engines.sglang.logs.settings import LogSettings, read_log_settings
from cpbcg.planner.traces.text import TracePath, display, is_stdin, trace_path
from cpbcg.engines.sglang.server import deployment_header

EMBEDDED_DEFAULT = "embedded default (seeded synthetic chat workload, 20,000 forwards)"

LOG_FORMATS = ("sglang-log", "sglang-requests")
"""Formats whose start-up output states the server's settings (`read_log_settings`)."""


@dataclass(frozen=True)
class TraceInput:
    """A trace as given, detected once: the file, its format and what a server log states."""

    path: TracePath
    """The trace file, or standard input (`STDIN_PATH`)."""
    format: TraceFormatInfo
    """The format given or detected (never `auto`)."""
    log: LogSettings | None = None
    """What an SGLang server log (or request log) states about its deployment, read once from its
    start-up output; None for any other format."""

    def __str__(self) -> str:
        """The path as given (`-` for standard input)."""
        return "-" if is_stdin(self.path) else str(self.path)


def detect_input(path: Path | str, trace_format: TraceFormat | str = "auto", options: ReadOptions | None = None) -> TraceInput:
    """`path` (`-` = standard input) with its format (`trace_format`, or detected from the first
    line when `auto`) and, for an SGLang log, the settings its start-up output states: the one
    detection and the one start-up read of a trace's use. Raises `TraceError` for a trace that
    cannot be read or detected, or an unknown format name."""
    where = trace_path(path)
    fmt = format_info(trace_format) or detect(where, options or ReadOptions())
    return TraceInput(where, fmt, read_log_settings(where) if fmt.name in LOG_FORMATS else None)


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

    def simulated(self, scheduler: SchedulerSettings) -> SimulationSummary:
        """The request trace simulated whole under `scheduler` instead of this spec's settings: the
        simulation's summary. Raises `ConfigError` for a trace that is not a request trace (no
        simulation), `TraceError` from the trace."""
        opened = replace(self, scheduler=scheduler).open()
        for _ in opened.batches:
            pass
        if opened.simulation is None:
            raise ConfigError(f"{describe_source(self.path)}: a simulation needs a request trace")
        return opened.simulation.summary()


@dataclass
class AboveChunk:
    """A batch trace's forwards with more tokens than `chunked_prefill_size` (complete after
    iterating): a batch trace states forwards as the server formed them, and a server with that
    chunk never forms one above it (0.5.23's `PrefillAdder` caps a forward's extend tokens at the
    chunk), so each contradicts the chunk the plan states. Chunking off (-1) bounds nothing here."""

    chunked_prefill_size: int
    forwards: int = 0
    """Forwards (weighted by their counts) above the chunk."""
    total: int = 0
    """Forwards read."""
    largest: int = 0
    """The largest forward read (tokens)."""

    def count(self, chunks: Iterator[BatchSet]) -> Iterator[BatchSet]:
        for chunk in chunks:
            tokens = chunk.num_tokens
            self.total += int(chunk.counts.sum())
            if len(tokens):
                self.largest = max(self.largest, int(tokens.max()))
            if self.chunked_prefill_size > 0:
                self.forwards += int(chunk.counts[tokens > self.chunked_prefill_size].sum())
            yield chunk


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
    above_chunk: AboveChunk | None = None
    """A batch trace's forwards above `chunked_prefill_size` (complete after iterating), else None."""

    @property
    def log_summary(self) -> LogSummary | None:
        """What reading a server log kept, folded and skipped (complete after iterating), else None."""
        return self.forwards.summary if isinstance(self.forwards, LogReader) else None

    @property
    def graphs_off_launches(self) -> tuple[tuple[LogSettings, int], ...]:
        """An SGLang server log's launches that ran prefill forwards with prefill graphs off (the
        launch's resolved state, `LogSettings.prefill_graphs` False: `--disable-cuda-graph`,
        `--disable-piecewise-cuda-graph`, pipeline parallelism, ...), each with its forward count,
        in launch order; complete after iterating, empty for any other trace. Such a launch ran
        every prefill forward eagerly: the model, which replays them with the launch's list, shows
        them as if graphs were on."""
        reader = self.forwards
        if not isinstance(reader, LogReader):
            return ()
        ran = sorted((k, n) for k, n in reader.summary.launch_forwards.items() if n)
        return tuple((reader.launch(k), n) for k, n in ran if reader.launch(k).prefill_graphs is False)

    @property
    def is_bound(self) -> bool:
        """True when the source gives forward sizes only: every plan from it is a worst-case bound."""
        return self.forwards is not None


def open_source(
    trace: TraceInput | Path | str | None,
    trace_format: TraceFormat | str = "auto",
    scheduler: SchedulerSettings | None = None,
    length_field: str | None = None,
    time_field: str | None = None,
    options: ReadOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchSource:
    """Open `trace` (`-` = stdin; the embedded default when None) as a batch stream.

    `trace_format` `auto` detects the format from the first line (a `TraceInput` carries the
    format and log settings detected at the input edge: nothing is detected or read again); request traces are turned
    into forwards by the scheduler simulation with `scheduler` (defaults when None), which calls
    `progress(requests read so far)` as it reads the trace. `options` carries the reader options
    (`length_field`/`time_field` are shorthands). Raises `TraceError` (`FILE:LINE: ...`).
    """
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field)
    scheduler = scheduler if scheduler is not None else SchedulerSettings()
    if trace is None:
        return BatchSource(iter([synthetic_batches()]), None, None, spec=TraceSpec(None, "auto", options, scheduler))
    if not isinstance(trace, TraceInput):  # detected here: its start-up output read only if it is a server log (below)
        where = trace_path(trace)
        trace = TraceInput(where, format_info(trace_format) or detect(where, options))
    spec = None if is_stdin(trace.path) else TraceSpec(str(trace.path), trace.format.name, options, scheduler)
    opened = open_trace(trace.path, trace.format.name, options)
    fmt = TraceFormat(opened.format.name)
    if opened.kind is TraceKind.batches:
        over = AboveChunk(scheduler.chunked_prefill_size)
        return BatchSource(over.count(opened.batch_chunks()), fmt, None, spec=spec, above_chunk=over)
    if opened.kind is TraceKind.forwards:
        if isinstance(opened.items, LogReader):
            return BatchSource(_bound_only(trace.path), fmt, None, opened.items,
                               trace.log if trace.log is not None else read_log_settings(trace.path), spec=spec)
        return BatchSource(_bound_only(trace.path), fmt, None, opened.forward_chunks(), None, spec=spec)
    if spec is None:  # standard input: its requests held (four numbers each), so it plans like a file
        held = TraceSpec("-", fmt.value, options, scheduler, tuple(opened.request_chunks()), opened.notes)
        return held.open(progress)
    simulation = Simulation(opened.request_chunks(), scheduler, progress)
    return BatchSource(iter(simulation), fmt, simulation, spec=spec, read_notes=opened.notes)


def _bound_only(trace: TracePath | str) -> Iterator[BatchSet]:
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


def report_header(deployment: Deployment, trace: BatchSource | str | Path | None, path: str | Path | None = None) -> dict[str, object]:
    """The report header (`Deployment.header`) of a trace (an opened source, whose `path` names
    it, or a path): its source line and `bound`, True when the trace gives forward sizes only
    and every number is a worst-case bound."""
    bound = isinstance(trace, BatchSource) and trace.is_bound
    source = path if isinstance(trace, BatchSource) else trace
    return {**deployment_header(deployment, describe_source(source, bound=bound)), "bound": bound}
