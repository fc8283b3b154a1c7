"""Notes that make a batch source's assumptions visible: the scheduler simulation behind a
request trace (stderr line + JSON summary), and scheduler options that a batch trace ignores.

Commands call these after `open_source` (and, for the simulation, after iterating its batches).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from typing import TYPE_CHECKING

from cpbcg.planner.traces import TraceFormat, detect_format
from cpbcg.planner.traces.registry import BY_NAME
from cpbcg.planner.traces.text import display
from cpbcg.planner.scheduler import backlog_fraction
from cpbcg.planner.traces.sources import BatchSource

if TYPE_CHECKING:
    from cpbcg.cli.options import SchedulerOptions, TraceOptions

FORMAT_LABELS = {name: fmt.label for name, fmt in BY_NAME.items()}
"""How each trace format is named in the note (the registry's labels)."""

BOUND_NOTE = (
    "cpbcg: note: the trace is an SGLang server log: it gives each forward's size and request count, "
    "not its extend lengths, so every forward is taken at the most rows any such forward can need: "
    "the results are a worst-case bound (the real forwards replayed in graphs at least as often)"
)


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
    if s.decode:
        text += "\n" + _decode_note(s, cfg)
    if backlog_fraction(s) >= SATURATED_BUSY:
        text += (
            "\nthe simulated prefill is saturated, so most forwards are full chunks: set "
            "--prefill-tokens-per-s and --prefill-fixed-ms to your server's measured prefill speed"
        )
    if source.read_notes is not None and source.read_notes.lines():
        text += "\n" + "\n".join(source.read_notes.lines())
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
        "scheduler": dataclasses.asdict(sim.cfg),
        **dataclasses.asdict(s),
        "skipped_rows": 0 if source.read_notes is None else source.read_notes.skipped_rows,
        "first_skipped_line": None if source.read_notes is None else source.read_notes.first_skipped_line,
        "busy_fraction": _busy(s),
        "backlog_fraction": backlog_fraction(s),
    }


def report_simulation(source: BatchSource) -> dict | None:
    """Print `simulation_note` (or, for a server log, `bound_note`) to stderr and return
    `simulation_summary`."""
    note = simulation_note(source) or bound_note(source)
    if note is not None:
        typer.echo(note, err=True)
    return simulation_summary(source)


def bound_note(source: BatchSource) -> str | None:
    """The stderr note of a bound source (an SGLang server log), or None."""
    return BOUND_NOTE if source.is_bound else None


def ignored_options_note(trace_kind: TraceFormat | str | None, flags: list[str], trace: Path | str | None = None) -> str | None:
    """A one-line warning naming the request-trace options (`flags`, e.g. `["--rate"]`) given for
    a batch stream, or None. `trace_kind` is the trace's format as read (None for the embedded
    default); a request trace uses them all."""
    kind = _value(trace_kind)
    if kind not in (None, TraceFormat.batches.value, TraceFormat.sglang_log.value) or not flags:
        return None
    what = "the embedded default workload is already a batch stream"
    if kind is not None:
        what = f"{trace} is {'an SGLang server log' if kind == TraceFormat.sglang_log.value else 'a batch trace'}"
    verb = "applies" if len(flags) == 1 else "apply"
    return f"cpbcg: warning: {', '.join(flags)} {verb} to request traces only; {what}"


def request_only_flags(trace: "TraceOptions", scheduler: "SchedulerOptions") -> list[str]:
    """The request-trace options given on the command line, in CLI order."""
    return [flag for flag, value in trace.request_only().items() if value is not None] + scheduler.given_flags()


def warn_ignored_options(trace: "TraceOptions", scheduler: "SchedulerOptions") -> None:
    """Print `ignored_options_note` to stderr before the trace is read (sniffs the format from
    the first line when `auto`; bad traces raise `TraceError`)."""
    flags = request_only_flags(trace, scheduler)
    if not flags:
        return
    kind: TraceFormat | None = None
    first = trace.traces[0] if trace.traces else None  # several traces (plan): the first stands for them
    if first is not None:
        kind = TraceFormat(trace.trace_format)
        if kind is TraceFormat.auto:
            kind = detect_format(Path(first), trace.length_field)
    note = ignored_options_note(kind, flags, None if first is None else display(first))
    if note is not None:
        typer.echo(note, err=True)


def _decode_note(s, cfg) -> str:
    """The decode line: what the decode model assumed and how much it held the server."""
    pool = "unbounded KV" if s.kv_pool_tokens is None else f"KV pool {s.kv_pool_tokens:,} tokens (peak {s.peak_kv_tokens:,})"
    if s.default_output_requests == s.requests:
        outputs = f"output lengths none in the trace, default_output_tokens {cfg.default_output_tokens:,} each"
    else:
        outputs = "output lengths from the trace"
        if s.default_output_requests:
            outputs += f" ({s.default_output_requests:,} at default_output_tokens {cfg.default_output_tokens:,})"
    step = f"{_num(cfg.decode_step_fixed_ms)} ms + {cfg.decode_step_ms_per_request:g} ms/request"
    mixed = f", {s.mixed_decode_tokens:,} decode tokens mixed into prefills" if s.mixed_decode_tokens else ""
    text = (
        f"decode: {outputs}; step {step}; decode busy {_share(s.decode_s, s)} ({_share(s.blocked_decode_s, s)} with requests kept waiting)"
        f"{mixed}; at most {s.max_running:,} running of {cfg.request_slots:,} slots, {pool}; "
        f"admission stopped by KV {s.kv_limited_forwards:,}x, by slots {s.slot_limited_forwards:,}x"
    )
    if s.kv_pool_tokens is not None and s.peak_kv_tokens > s.kv_pool_tokens:
        text += (f"\ncpbcg: warning: requests held {s.peak_kv_tokens:,} KV tokens, more than the {s.kv_pool_tokens:,}-token pool: "
                 f"SGLang would retract requests at {s.retraction_points:,} decode points or never admit the largest "
                 "(not simulated: forwards after the first are approximate); set --max-total-tokens to your server's")
    return text


def _share(seconds: float, s) -> str:
    return f"{seconds / s.simulated_s if s.simulated_s else 0.0:.1%}"


def _value(kind: TraceFormat | str | None) -> str | None:
    return kind.value if isinstance(kind, TraceFormat) else kind


def _busy(s) -> float:
    return s.busy_s / s.simulated_s if s.simulated_s else 0.0


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"


def _cache(setting: str | int) -> str:
    return setting if isinstance(setting, str) else f"{setting:,} tokens (LRU)"
