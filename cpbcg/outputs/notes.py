"""Notes (plain text for people) that make a batch source's assumptions visible: the scheduler
simulation behind a request trace, a server log taken at its worst case, the rates a trace
without timestamps was simulated at, what a server log states or leaves assumed, and scheduler
options that a batch trace ignores. The JSON summary is `cpbcg.outputs.documents.simulation_summary`.

Every note is worded here from typed results (a `BatchSource`, `LogSettings`, `ServerCheck`,
`LoadReached`, ...); the commands hand the lines to their `note` (stderr).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Protocol, Sequence

from cpbcg.planner.traces import TraceFormat
from cpbcg.assembly.registry import detect_format
from cpbcg.assembly.registry import BY_NAME
from cpbcg.planner.traces.text import display
from cpbcg.planner.scheduler import backlog_fraction
from cpbcg.assembly.traffic import UTILISATIONS, load_reached
from cpbcg.engines.sglang.server import ResolvedServer, ServerCheck
from cpbcg.engines.sglang.release import SGLANG_VERSION
from cpbcg.engines.sglang.logs.settings import unreadable_note
from cpbcg.engines.sglang.export import SERVER_SCHEDULER_KEYS
from cpbcg.settings import setting
from cpbcg.assembly.sources import BatchSource
from cpbcg.planner.words import counted

if TYPE_CHECKING:
    from cpbcg.engines.sglang.observed import AssumedSetting
    from cpbcg.assembly.plan import LaunchPlan
    from cpbcg.engines.sglang.logs.settings import LogSettings
    from cpbcg.engines.sglang.logs.log import LogSummary
    from cpbcg.planner.evaluate import Evaluation

BATCHES, SGLANG_LOG = "batches", "sglang-log"
"""Formats that are batch streams already (the scheduler options do not apply)."""
FORMAT_LABELS = {name: fmt.label for name, fmt in BY_NAME.items()}
"""How each trace format is named in the note (the registry's labels)."""

GATES_HINT = "set gates: in the config or --min-coverage, --max-eager, ..."
"""How to configure a replay-check gate (the refusal without gates and the report-only line both say it)."""

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
    kind = _value(source.trace_format)
    label = FORMAT_LABELS.get(kind or "", str(kind))
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
        f"simulated {counted(s.batches, 'prefill forward')} from {counted(s.requests, 'request')} ({label}, {arrivals}): "
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


def source_note(source: BatchSource) -> str | None:
    """The stderr note of a source once read: `simulation_note`, else `bound_note`, else None;
    every line starts `cpbcg: ` (`note:` unless it is already a warning or a note)."""
    text = simulation_note(source) or bound_note(source)
    if text is None:
        return None
    return "\n".join(line if line.startswith("cpbcg: ") else f"cpbcg: note: {line}" for line in text.splitlines())


def bound_note(source: BatchSource) -> str | None:
    """The stderr note of a bound source (an SGLang server log), or None."""
    return BOUND_NOTE if source.is_bound else None


def _server_flags() -> set[str]:
    """The command-line flags (on and off) of `SERVER_SCHEDULER_KEYS`: server settings, not only the simulation's."""
    specs = [setting(key) for key in SERVER_SCHEDULER_KEYS]
    return {str(f) for spec in specs for f in (spec.flag, spec.off_flag) if f}


def ignored_options_note(trace_kind: TraceFormat | str | None, flags: list[str], trace: Path | str | None = None) -> str | None:
    """A one-line warning naming the request-trace options (`flags`, e.g. `["--rate"]`) given for
    a batch stream, or None. `trace_kind` is the trace's format as read (None for the embedded
    default); a request trace uses them all."""
    kind = _value(trace_kind)
    flags = [f for f in flags if f not in _server_flags()]  # they shape every plan: the warning would be false
    if kind == SGLANG_LOG:  # --strict refuses a log's unreadable Prefill batch lines too
        flags = [f for f in flags if f != "--strict"]
    if kind not in (None, BATCHES, SGLANG_LOG) or not flags:
        return None
    what = "the embedded default workload is already a batch stream"
    if kind is not None:
        what = f"{trace} is {'an SGLang server log' if kind == SGLANG_LOG else 'a batch trace'}"
    verb = "applies" if len(flags) == 1 else "apply"
    return f"cpbcg: warning: {', '.join(flags)} {verb} to request traces only; {what}"


def ignored_options_warning(flags: list[str], trace: Path | str | None, trace_format: str = "auto",
                            length_field: str | None = None) -> str | None:
    """`ignored_options_note` before the trace is read: sniffs the format from the first line when
    `auto` (bad traces raise `TraceError`). `flags` are the request-trace options given, in CLI order."""
    if not flags:
        return None
    kind: str | None = None
    if trace is not None:
        kind = TraceFormat(trace_format).value
        if kind == "auto":
            kind = str(detect_format(Path(trace), length_field).value)
    return ignored_options_note(kind, flags, None if trace is None else display(trace))


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


def server_check_notes(check: ServerCheck) -> list[str]:
    """One `cpbcg: warning:` line per finding of `cpbcg.api.server_check`: the server would
    refuse to start, or start without CP graphs, and why."""
    return [f"cpbcg: warning: SGLang {SGLANG_VERSION} would {what} with these flags: {why}" for what, why in check.findings()]


def resolution_notes(server: "ResolvedServer | None", log: "LogSettings | None" = None) -> list[str]:
    """One `cpbcg: note:` line per value SGLang 0.5.23's start-up resolution changed from what
    was given (`page_size 1 -> 64: trtllm_mha takes ...`): the plan uses the changed value. A
    change of a value the log `log` states is said once, on its `from the log` line
    (`log_settings_notes`), not here."""
    if server is None:
        return []
    said = {note for s in (log.settings if log is not None else ()) if (note := _server_change(server, s.key, s.value)) is not None}
    return [f"cpbcg: note: {o}" for o in (*server.overrides, *server.input_notes)] + \
        [f"cpbcg: note: SGLang {SGLANG_VERSION} starts with {note}; planned with that" for note in server.notes if note not in said]


def _server_change(server: "ResolvedServer | None", key: str, value: object) -> str | None:
    """The resolution's note (`page_size 1 -> 64: trtllm_mha takes ...`) on the scheduler setting
    `key` stated as `value`, or None when 0.5.23 starts with the value as stated."""
    name = key.removeprefix("scheduler.")
    if server is None or name == key:
        return None
    return next((note for note in server.notes if note.startswith(f"{name} {value} -> ")), None)


def log_settings_notes(log: "LogSettings | None", overrides: Mapping[str, object], assumed: "Sequence[AssumedSetting]" = (),
                       server: ResolvedServer | None = None) -> list[str]:
    """One stderr line per setting an SGLang server log states or shows: `cpbcg: from the log:
    cp_size 1 (server_args.attn_cp_size, line 3)`, or `..., overridden by the command line`; one
    per setting it does not state (`assumed`: `cpbcg: assumed: cp_size 4 (...; --cp-size sets
    it)`); the version the log prints; then its notes."""
    if log is None:
        return []
    given = {k for k, v in overrides.items() if v is not None}
    out = []
    for s in log.settings:
        value = ",".join(map(str, s.value)) if isinstance(s.value, list) else s.value
        shown = value if len(str(value)) <= 60 else f"{len(s.value)} buckets {s.value[0]}..{s.value[-1]}"
        tail = "; overridden by the command line" if s.key in given else ""
        change = None if tail else _server_change(server, s.key, s.value)
        if change is not None:  # the log states one value and the server it starts runs another: said once, here
            new, why = change.split(" -> ", 1)[1].split(": ", 1)
            out.append(f"cpbcg: from the log: {s.key} {shown} ({s.origin}), but the server {SGLANG_VERSION} starts from it runs "
                       f"{new}, because {why}: planned with {new}")
            continue
        out.append(f"cpbcg: from the log: {s.key} {shown} ({s.origin}{tail})")
    out += [f"cpbcg: assumed: {a.text()}" for a in assumed]
    for key in log.resolved_by_server() if server is not None else ():
        if key not in given:
            value = getattr(server, key.removeprefix("scheduler."))
            out.append(f"cpbcg: from the log: {key} {value.value} (resolved by {SGLANG_VERSION} from the log's settings: {value.source})")
    if log.prefill_graphs is not None:
        out.append(f"cpbcg: from the log: prefill graphs {'on' if log.prefill_graphs else 'off'} ({log.prefill_graphs_origin})")
    if log.version is not None:
        out.append(f"cpbcg: note: the log's SGLang version is {log.version} (line {log.version_line}); cpbcg models {SGLANG_VERSION}")
    out += [f"cpbcg: note: {note}" for note in log.notes]
    return out


def log_summary_notes(source: BatchSource) -> list[str]:
    """The reader's skipped / folded lines of an SGLang server log, after it was read."""
    summary = source.log_summary
    if summary is None:
        return []
    path = display(source.log.path if source.log is not None else "log")
    lines = (summary.skipped_note(path), summary.folded_note(path), summary.launches_note(path))
    out = [f"cpbcg: note: {line}" for line in lines if line is not None]
    launches = getattr(source.forwards, "launches", None)
    first = source.log.overrides() if source.log is not None else {}
    for launch in launches()[1:] if summary.launches > 1 and callable(launches) else []:
        differ = [f"{s.key} {_short(s.value)} ({s.origin})" for s in launch.settings if first.get(s.key) != s.value]
        if differ:
            out.append(f"cpbcg: note: {path}: launch {launch.launch} (line {launch.first_line}) is compared under its own settings: "
                       + "; ".join(differ))
        unreadable = unreadable_note(launch.path, launch.unreadable)
        if unreadable is not None:
            out.append(f"cpbcg: note: launch {launch.launch}: {unreadable}")
    return out


def _short(value: object) -> str:
    return f"{len(value)} buckets {value[0]}..{value[-1]}" if isinstance(value, list) and len(value) > 4 else str(value)


def read_notes(source: BatchSource, flags: list[str], trace: Path | str | None) -> list[str]:
    """The stderr lines of a source once read: its `source_note` (if any), then the
    `unused_request_option_notes` of the request-trace options given (`flags`)."""
    text = source_note(source)
    return ([] if text is None else [text]) + above_chunk_notes(source, trace) + unused_request_option_notes(flags, source, trace)


def chunk_above_list_notes(evaluation: Evaluation, chunked_prefill_size: int, source: BatchSource) -> list[str]:
    """One `cpbcg: warning:` line when a request trace's forwards fell above the largest bucket
    because the list ends below `chunked_prefill_size`: every full chunk then runs eagerly (0.5.23's
    `generate_prefill_cuda_graph_batch_sizes` keeps its grid `<= max_bs` and appends no off-grid
    `max_bs`: chunk 100 -> last bucket 96)."""
    above = evaluation.eager.get("above_largest_bucket", 0)
    if source.simulation is None or not above or not evaluation.buckets or not 0 < evaluation.buckets[-1] < chunked_prefill_size:
        return []
    return [f"cpbcg: warning: {above:,} forwards ({above / max(evaluation.batches, 1):.2%}) are above the largest bucket, "
            f"{evaluation.buckets[-1]:,}, which is below chunked_prefill_size {chunked_prefill_size:,}: every full chunk runs eagerly (SGLang "
            f"{SGLANG_VERSION}'s prefill list keeps its grid up to the chunk and appends no off-grid size); a chunk on the grid, or a "
            f"list that holds {chunked_prefill_size:,} (the recommendation), keeps them in graphs"]


def above_chunk_notes(source: BatchSource, trace: Path | str | None) -> list[str]:
    """One `cpbcg: warning:` line when a batch trace holds forwards above `chunked_prefill_size`
    (`BatchSource.above_chunk`): a server with that chunk never formed them."""
    over = source.above_chunk
    if over is None or not over.forwards:
        return []
    name = "the trace" if trace is None else display(trace)
    return [f"cpbcg: warning: {name}: {over.forwards:,} of {over.total:,} forwards ({over.forwards / max(over.total, 1):.2%}) exceed "
            f"chunked_prefill_size {over.chunked_prefill_size:,} (largest {over.largest:,} tokens): a batch trace states forwards "
            "as the server formed them, and a server with that chunk never forms one above it, so the trace contradicts the "
            "chunk (set --chunked-prefill-size to the server's, or plan the request trace, which the simulation chunks)"]


def unused_request_option_notes(flags: list[str], source: BatchSource, trace: Path | str | None) -> list[str]:
    """One `cpbcg: warning:` line per request-trace option given (`flags`, as `ignored_options_note`
    takes them) that this request trace, once read, gave nothing to act on: `--rate` for a trace
    whose requests carry arrival times (they are used; `--time-scale` changes the load), and
    `--model`/`--log-type` (BurstGPT's row filters) for a trace of another format."""
    simulation = source.simulation
    if simulation is None or not flags:
        return []
    name = "the trace" if trace is None else display(trace)
    out = []
    if "--rate" in flags and not simulation.summary().synthetic_arrivals:
        out.append(f"cpbcg: warning: --rate applies to requests without arrival times; {name} has them, so they are used "
                   "(--time-scale changes the load)")
    filters = [f for f in ("--model", "--log-type") if f in flags]
    if filters and _value(source.trace_format) != TraceFormat.burstgpt.value:
        verb = "filters" if len(filters) == 1 else "filter"
        out.append(f"cpbcg: warning: {', '.join(filters)} {verb} BurstGPT rows only; {name} is "
                   f"{_value(source.trace_format)}, so every row was read")
    return out


def launch_notes(log: "LogSettings", overrides: Mapping[str, object], assumed: "Sequence[AssumedSetting]" = ()) -> list[str]:
    """`log_settings_notes` of one launch a running server was resolved under (`cpbcg watch`),
    and a note when the launch printed no start-up output before its first Prefill batch (the
    buckets and settings are then the config's and the command line's)."""
    notes = log_settings_notes(log, overrides, assumed)
    if not (log.args_line or log.capture_line or log.capture is not None or log.resolved):
        notes.append(f"cpbcg: note: {log.path}: no start-up output (settings dump, capture line) before the first Prefill batch: "
                     "the buckets and settings are the config's and the command line's, assumed to be the server's")
    return notes


class SimulatedLoad(Protocol):
    """A trace simulated at one load (`PlanPart`, or a `batches` run): what `rate_notes` reads."""

    @property
    def label(self) -> str: ...
    @property
    def rate_per_s(self) -> float | None: ...
    @property
    def source(self) -> BatchSource: ...


def rate_notes(parts: Sequence[SimulatedLoad], picked: bool = True) -> list[str]:
    """Which Poisson rates a trace without timestamps was simulated at, where they came from
    (`picked`: the rate picker, `traffic.default_rates`; else `--rate`/`scheduler.rate` times the
    load factors) and the prefill busy fraction each simulation reached; a load that fell short
    of what the picker's prefill-only model gives it (`LoadReached.short`) says so, with what held
    the server. One line per trace."""
    by_trace: dict[str, list[SimulatedLoad]] = {}
    for part in parts:
        if part.rate_per_s is not None:
            by_trace.setdefault(part.label, []).append(part)
    out = []
    for label, mine in by_trace.items():
        shown, short = [], []
        for part in mine:
            reached = load_reached(part.source, part.rate_per_s)
            shown.append(f"{part.rate_per_s:g} ({reached.reached_busy:.1%} busy)" if reached else f"{part.rate_per_s:g}")
            if reached and reached.short:
                short.append((part, reached))
        if picked:
            busy = ", ".join(f"{u:.0%}" for u in UTILISATIONS)
            why = (f"the rate picker's choice: the modelled prefill alone would be busy about {busy} of the time (the mean prompt "
                   "over every request at --prefill-tokens-per-s and --prefill-fixed-ms): its load is unknown and the batch shapes "
                   "follow the load; --rate fixes it")
        else:
            why = "--rate (or scheduler.rate) times each --time-scale factor"
        out.append(f"cpbcg: note: {label} has no arrival times: simulated at Poisson rates {', '.join(shown)} req/s (prefill busy "
                   f"reached), {why}")
        for part, got in short:
            s = part.source.simulation.summary() if part.source.simulation is not None else None
            held = "" if s is None else (f": decode steps took {s.decode_s / s.simulated_s:.1%} of the time"
                                         f"{f' and the KV pool stopped admission {s.kv_limited_forwards:,}x' if s.kv_limited_forwards else ''}"
                                         if s.simulated_s else "")
            out.append(f"cpbcg: note: at {part.rate_per_s:g} req/s the prefill alone would be {min(got.target_busy, 1.0):.0%} busy; the simulation "
                       f"reached {got.reached_busy:.1%}{held}, so that load is what this server can reach, not more")
    return out


def launch_plan_notes(launches: "Sequence[LaunchPlan]", path: str) -> list[str]:
    """What the main table of a log of several launches is (`assembly.plan.plan_launches`): each
    launch's forwards under the server it resolved to, totalled, and the recommendation for the
    last launch's server fitted on that launch's forwards. Empty for one launch."""
    if len(launches) < 2:
        return []

    def one(launch: "LaunchPlan") -> str:
        dep, ev = launch.model.deployment, launch.evaluation
        buckets = launch.model.table.capture_num_tokens.tolist()
        chunk = f", chunk {dep.scheduler.chunked_prefill_size}" if dep is not None else ""
        off = ", prefill graphs off (its list modelled as if on)" if launch.settings.prefill_graphs is False else ""
        return (f"launch {launch.launch} (line {launch.first_line}): {ev.graph_batches:,} of {ev.batches:,} forwards in graphs under "
                f"cp {launch.model.cp.cp_size}, {len(buckets)} buckets {buckets[0]}..{buckets[-1]}{chunk}{off}")
    last = launches[-1]
    out = [f"cpbcg: note: {path}: the main table models each of its {len(launches)} launches under the server it resolved to, "
           f"totalled: " + "; ".join(one(launch) for launch in launches)]
    served = next((launch for launch in reversed(launches) if launch.evaluation.batches), None)
    if last.fitted and not last.evaluation.batches and served is not None:  # a restart that has served no forward yet
        out.append(f"cpbcg: note: {path}: the header, the recommendation and --emit are for the server as it runs now, launch "
                   f"{last.launch} (line {last.first_line}), which has served no forward yet: fitted on launch {served.launch}'s "
                   f"{served.evaluation.batches:,} forwards, their worst cases taken under its CP layout (cp "
                   f"{last.model.cp.cp_size})")
    elif last.fitted:
        out.append(f"cpbcg: note: {path}: the recommendation is for the server as it runs now, launch {last.launch} (line "
                   f"{last.first_line}), fitted on its {last.evaluation.batches:,} forwards only: each launch's forwards were formed by "
                   "its own chunk, page size and request cap and are bound under its own CP layout, so an earlier launch's are "
                   "not the traffic this server serves")
    else:
        out.append(f"cpbcg: note: {path}: the header, the recommendation and --emit describe the server as it runs now, launch "
                   f"{last.launch} (line {last.first_line})")
    return out


def graphs_off_plan_notes(source: BatchSource, launches: "Sequence[LaunchPlan]", path: str) -> list[str]:
    """What the main table of a log is when a launch that ran forwards had prefill graphs off
    (`BatchSource.graphs_off_launches`): the server ran them eagerly, the main table models them
    as if graphs were on (with the launch's list); once, for a log whose launches the main table
    does not list one by one (`launch_plan_notes` says it per launch otherwise)."""
    if len(launches) >= 2:
        return []
    out = []
    for settings, forwards in source.graphs_off_launches:
        which = f" launch {settings.launch} (line {settings.first_line})" if settings.launch > 1 else ""
        out.append(f"cpbcg: note: {path}:{which} prefill graphs were off ({settings.prefill_graphs_origin}): the server ran its "
                   f"{forwards:,} prefill forwards eagerly; the main table models them as if graphs were on (the observed table "
                   "shows what ran)")
    return out


class HeldNotes:
    """A `note` callback that holds its lines until the trace was read (`release`), so that the
    lines a log's start-up output gave (`log_settings_notes`: `cpbcg: from the log: ...`,
    `cpbcg: assumed: ...`) can say which launch they describe once the log turned out to hold
    several: `cpbcg: from the log (launch 1, line 1): ...`. A log of one launch, or any other
    trace, gets its lines unchanged and in the same order. A context manager: lines still held
    when the command fails are released as they were given."""

    def __init__(self, note: Callable[[str], None]):
        self._note = note
        self._held: list[str] | None = []
        self._label = ""

    def __call__(self, text: str) -> None:
        if self._held is None:
            self._note(text)
        else:
            self._held.append(text)

    def __enter__(self) -> "HeldNotes":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def label_launches(self, source: BatchSource | None) -> None:
        """Label the held start-up lines with their launch when `source` (the single trace
        planned, read) is a log of several launches (`launch_label`)."""
        if source is not None:
            self._label = launch_label(source.log, source.log_summary)

    def release(self) -> None:
        """Pass the held lines on (labelled, see `label_launches`); later lines pass straight through."""
        held, self._held = self._held, None
        for text in held or ():
            if self._label:
                for prefix in ("cpbcg: from the log:", "cpbcg: assumed:"):
                    if text.startswith(prefix):
                        text = f"{prefix[:-1]}{self._label}:{text[len(prefix):]}"
            self._note(text)


def launch_label(log: "LogSettings | None", summary: "LogSummary | None") -> str:
    """` (launch 1, line 1)`: which launch a log's start-up lines (`log_settings_notes`, read from
    the launch that runs the first forward, `log`) describe, when the log holds several launches
    (`summary.launches`, known once it was read); "" for a log of one launch."""
    if log is None or summary is None or summary.launches < 2:
        return ""
    return f" (launch {log.launch}, line {log.first_line or 1})"
