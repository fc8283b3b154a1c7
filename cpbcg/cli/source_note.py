"""Notes that make a batch source's assumptions visible: the scheduler simulation behind a
request trace (stderr line + JSON summary), and scheduler options that a batch trace ignores.

Commands call these after `open_source` (and, for the simulation, after iterating its batches).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping

import typer

from cpbcg.cli.common import SCHEDULER_OPTIONS

from cpbcg.planner.traces import TraceFormat, detect_format
from cpbcg.planner.sources import BatchSource

FORMAT_LABELS = {"mooncake": "Mooncake", "azure": "Azure", "vidur": "vidur", "csv": "CSV", "jsonl": "JSONL"}
"""How each request-trace format is named in the note."""
REQUEST_ONLY_OPTIONS = ("length_field", "time_field", *SCHEDULER_OPTIONS)
"""Options that only the request-trace readers and the scheduler simulation use (in CLI order)."""


SATURATED_BUSY = 0.95
"""Busy fraction of the simulated prefill above which the note warns that load, not traffic
shape, decides the forwards."""


def simulation_note(source: BatchSource) -> str | None:
    """One or two lines saying what the scheduler simulation assumed and saw, or None when the
    source is not a request trace. Complete once `source.batches` has been iterated."""
    sim = source.simulation
    if sim is None:
        return None
    s, cfg = sim.summary(), sim.cfg
    label = FORMAT_LABELS.get(_value(source.trace_format), str(_value(source.trace_format)))
    arrivals = "no timestamps" if s.synthetic_arrivals else "timestamps"
    if not s.synthetic_arrivals and cfg.time_scale != 1:
        arrivals += f" / time-scale {_num(cfg.time_scale)}"
    chunking = "no chunking" if cfg.chunked_prefill_size == -1 else f"chunked_prefill_size {cfg.chunked_prefill_size}"
    limits = "".join(
        f", {name} {value}"
        for name, value, default in (
            ("max_prefill_tokens", cfg.max_prefill_tokens, 16384),
            ("prefill_max_requests", cfg.prefill_max_requests, None),
            ("max_running_requests", cfg.max_running_requests, None),
        )
        if value != default or (name == "max_prefill_tokens" and cfg.chunked_prefill_size == -1)
    )
    cache = f"prefix cache {_cache(cfg.prefix_cache)}"
    if cfg.prefix_cache != "off":
        cache += f" ({s.cached_tokens:,} of {s.input_tokens:,} prompt tokens cached)"
    text = (
        f"simulated {s.batches:,} prefill forwards from {s.requests:,} requests ({label}, {arrivals}): "
        f"{chunking}{limits}, prefill {_num(cfg.prefill_tokens_per_s)} tok/s + {_num(cfg.prefill_fixed_ms)} ms/forward, "
        f"{cache}; prefill busy {_busy(s):.1%}, at most {s.max_waiting:,} waiting"
    )
    if _busy(s) >= SATURATED_BUSY:
        text += (
            "\nthe simulated prefill is saturated, so most forwards are full chunks: set "
            "--prefill-tokens-per-s and --prefill-fixed-ms to your server's measured prefill speed"
        )
    if s.synthetic_arrivals:
        scale = f" x time-scale {_num(cfg.time_scale)}" if cfg.time_scale != 1 else ""
        text += f"\nPoisson arrivals at {_num(cfg.rate)} req/s{scale} (no arrival times were read: the trace has none or no --time-field was given; --rate, seed {cfg.seed})"
    return text


def simulation_summary(source: BatchSource) -> dict | None:
    """JSON-able summary of the simulation (settings and counts), or None when the source is not
    a request trace. Complete once `source.batches` has been iterated."""
    sim = source.simulation
    if sim is None:
        return None
    s = sim.summary()
    return {
        "trace_format": _value(source.trace_format),
        "arrivals": "poisson" if s.synthetic_arrivals else "timestamps",
        "scheduler": sim.cfg.model_dump(mode="json"),
        **dataclasses.asdict(s),
        "busy_fraction": _busy(s),
    }


def report_simulation(source: BatchSource) -> dict | None:
    """Print `simulation_note` to stderr (if any) and return `simulation_summary`."""
    note = simulation_note(source)
    if note is not None:
        typer.echo(note, err=True)
    return simulation_summary(source)


def ignored_options_note(trace_kind: TraceFormat | str | None, given_options: Mapping[str, object], trace: Path | str | None = None) -> str | None:
    """A one-line warning naming the request-trace options given for a batch stream, or None.

    `trace_kind` is the trace's format as read (`BatchSource.trace_format`; None for the embedded
    default); `given_options` maps option names (`rate`, `prefix_cache`, ... or the dotted
    `scheduler.rate` of `scheduler_overrides`) to their values, None or False meaning not given.
    Other keys (`trace_format`, gate overrides) are ignored.
    """
    kind = _value(trace_kind)
    if kind not in (None, TraceFormat.batches.value):
        return None
    given = {key.rsplit(".", 1)[-1] for key, value in given_options.items() if value is not None and value is not False}
    names = [f"--{name.replace('_', '-')}" for name in REQUEST_ONLY_OPTIONS if name in given]
    if not names:
        return None
    what = f"{trace} is a batch trace" if kind is not None else "the embedded default workload is already a batch stream"
    verb = "applies" if len(names) == 1 else "apply"
    return f"cpbcg: warning: {', '.join(names)} {verb} to request traces only; {what}"


def warn_ignored_options(trace: Path | None, trace_format: TraceFormat | str, given_options: Mapping[str, object]) -> None:
    """Print `ignored_options_note` to stderr for `--trace`/`--trace-format` before the trace is
    read (sniffs the format from the first line when `auto`; bad traces raise `TraceError`)."""
    if not any(value is not None and value is not False and key.rsplit(".", 1)[-1] in REQUEST_ONLY_OPTIONS for key, value in given_options.items()):
        return
    kind: TraceFormat | None = None
    if trace is not None:
        kind = TraceFormat(trace_format)
        if kind is TraceFormat.auto:
            length_field = given_options.get("length_field")
            kind = detect_format(Path(trace), length_field if isinstance(length_field, str) else None)
    note = ignored_options_note(kind, given_options, trace)
    if note is not None:
        typer.echo(note, err=True)


def _value(kind: TraceFormat | str | None) -> str | None:
    return kind.value if isinstance(kind, TraceFormat) else kind


def _busy(s) -> float:
    return s.busy_s / s.simulated_s if s.simulated_s else 0.0


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


def _cache(setting: str | int) -> str:
    return setting if isinstance(setting, str) else f"{setting:,} tokens (LRU)"
