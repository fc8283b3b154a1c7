"""`cpbcg batches`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from cpbcg.atomic import check_outputs
from cpbcg.commands.batches_options import BatchesOptions
from cpbcg.errors import ConfigError
from cpbcg.api import load_config_and_deployment, traffic_jobs
from cpbcg.commands.common import input_files, load_model_rates
from cpbcg.outputs.notes import ignored_options_note, rate_notes, source_note
from cpbcg.planner.choices import Fold
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.traces import ReadOptions
from cpbcg.assembly.sources import BatchSource, open_source
from cpbcg.planner.traces.writer import batch_trace_lines, fold_batches
from cpbcg.assembly.traffic import simulated_loads


@dataclass
class BatchTrace:
    """The forwards of a trace as batch-trace lines (`cpbcg batches`): iterate `lines()` once;
    then `forwards` and `num_lines` are the totals and `note()` the simulation note. A request
    trace without timestamps is simulated at every rate `plan` simulates it at (`loads`, one
    after the other in the file), so `plan` of the file written replays what `plan` of the trace does."""

    source: BatchSource
    """The opened trace."""
    fold: str
    """How identical forwards are merged: consecutive, all or none."""
    on_chunk: Callable[[object], object] | None = None
    """Called with each chunk of forwards read (a progress bar)."""
    forwards: int = 0
    """Prefill forwards written so far."""
    num_lines: int = 0
    """Lines written so far."""
    loads: tuple[BatchesLoad, ...] = ()
    """The Poisson loads of a trace without timestamps simulated at several rates, in order; empty
    when `source` is simulated once."""
    picked: bool = True
    """Whether the rates of `loads` are the rate picker's (else `--rate` times the load factors)."""

    def lines(self) -> Iterator[bytes]:
        """`{"extend_seq_lens": [...], "count": k}` lines, identical batches folded into `count`."""
        for line in batch_trace_lines(fold_batches(self._counted(), Fold(self.fold))):
            self.num_lines += 1
            yield line

    def _counted(self) -> Iterator[BatchSet]:
        for source in [load.source for load in self.loads] or [self.source]:
            for chunk in source.batches:
                self.forwards += int(chunk.counts.sum())
                if self.on_chunk is not None:
                    self.on_chunk(chunk)
                yield chunk

    warning: str | None = None
    """Request-trace options given for a batch stream, which it ignores (None: none)."""

    def note(self) -> str | None:
        """The simulation note once `lines()` has been read (None for a batch stream)."""
        if not self.loads:
            return source_note(self.source) if self.source.simulation is not None else None
        lines = []
        for load in self.loads:
            lines += [f"{load.label} at {load.rate_per_s:.4g} req/s:", source_note(load.source) or ""]
        return "\n".join([line for line in lines if line] + rate_notes(self.loads, self.picked))


def batch_trace(path: str | Path, deployment: Deployment, *, fold: str = "consecutive", trace_format: str = "auto",
                options: ReadOptions | None = None, progress: Callable[[int], None] | None = None,
                on_chunk: Callable[[object], object] | None = None, rates: str | None = "auto") -> BatchTrace:
    """The prefill forwards the server would run for a trace (the scheduler simulation with
    `deployment.scheduler`, docs/scheduler.md), as a batch trace to write; a request trace
    without timestamps at the rates `plan` simulates it at (`rates` as `plan` takes them).
    Raises `TraceError`."""
    source = open_source(Path(path), scheduler=deployment.scheduler, progress=progress, trace_format=trace_format, options=options)
    if simulated_loads(source, rates) < 2:
        return BatchTrace(source, fold, on_chunk)
    assert source.spec is not None
    jobs = traffic_jobs([source], deployment, None, rates)
    loads = tuple(BatchesLoad(job.label, job.rate_per_s, job.spec.open(progress)) for job in jobs)
    return BatchTrace(source, fold, on_chunk, loads=loads, picked=rates is not None)


def run(request: BatchesOptions, path: str | Path | None, overrides: Mapping[str, object], *,
        trace_format: str = "auto", options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
        progress: Callable[[int], None] | None = None, on_chunk: Callable[[object], object] | None = None) -> BatchTrace:
    """`cpbcg batches` with its options: a trace is needed, the output is checked before any
    work (`check_outputs`), then `batches`. Raises `ConfigError`, `TraceError`."""
    if path is None:
        raise ConfigError("batches needs --trace (a request trace to simulate, or a batch trace to re-fold)")
    check_outputs({"-o": request.output}, input_files(request.config, overrides, trace=path))
    return batches(path, request.config, overrides, fold=request.fold.value, trace_format=trace_format, options=options,
                   ignored_flags=ignored_flags, progress=progress, on_chunk=on_chunk)


def batches(path: str | Path, config: str | None = None, overrides: Mapping[str, object] | None = None, *,
            fold: str = "consecutive", trace_format: str = "auto", options: ReadOptions | None = None,
            ignored_flags: list[str] | None = None, progress: Callable[[int], None] | None = None,
            on_chunk: Callable[[object], object] | None = None) -> BatchTrace:
    """`cpbcg batches`: `batch_trace` under the deployment of `config` and dotted scheduler
    `overrides`, a trace without timestamps at the rates `plan` would simulate (`load_model_rates`);
    `warning` names the `ignored_flags` a batch stream ignores. Raises `ConfigError`, `TraceError`."""
    _, deployment = load_config_and_deployment(config, overrides)
    written = batch_trace(path, deployment, fold=fold, trace_format=trace_format, options=options, progress=progress, on_chunk=on_chunk,
                          rates=load_model_rates(config, overrides or {}, "auto"))
    written.warning = ignored_options_note(written.source.trace_format, ignored_flags or [], path)
    return written


@dataclass(frozen=True)
class BatchesLoad:
    """One load of `cpbcg batches` (a `cpbcg.outputs.notes.SimulatedLoad`)."""

    label: str
    rate_per_s: float | None
    source: BatchSource


