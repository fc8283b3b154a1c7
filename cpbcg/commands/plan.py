"""`cpbcg plan`: its options and its use case, returning a typed report (the CLI parses into it and hands the report to an output)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypedDict

from cpbcg.engines.sglang.server import resolved_server
from cpbcg.atomic import STDOUT, check_outputs
from cpbcg.commands.plan_options import PlanOptions, refused
from cpbcg.outputs.console import OutputFormat
from cpbcg.planner.optimise.guarantee import GuaranteeResult
from cpbcg.api import check_decode_flags, decode_guarantee, decode_plan, guarantee, load_config_and_deployment, observe_log, open_trace, plan, server_check, with_manifest_cost
from cpbcg.commands.common import input_files, launch_resolver, load_model_rates, refuse_repeated, trace_paths
from cpbcg.outputs.exports import export_buckets
from cpbcg.errors import ConfigError, ModelError
from cpbcg.inputs import file_identity
from cpbcg.manifest import MANIFEST_KEYS, Manifest, load_manifest
from cpbcg.outputs.notes import HeldNotes, chunk_above_list_notes, graphs_off_plan_notes, ignored_options_warning, launch_label, launch_plan_notes, log_settings_notes, log_summary_notes, rate_notes, read_notes, resolution_notes, server_check_notes
from cpbcg.assembly.sources import BatchSource, TraceInput, detect_input, report_header
from cpbcg.planner.deployment import Deployment
from cpbcg.engines.sglang.startup import resolve_emitted
from cpbcg.engines.sglang.export import RULES
from cpbcg.engines.sglang.server import ResolvedServer
from cpbcg.engines.sglang.observed import LaunchModel, LogObserved, assumed_settings
from cpbcg.planner.optimise.compare import Comparison, compare_recommendation
from cpbcg.assembly.plan import AgainstDefault, PlanPart, PlanResult
from cpbcg.engines.sglang.memory import MemoryPreflight
from cpbcg.planner.optimise.recommend import Recommendation
from cpbcg.engines.sglang.release import HARDWARE_NOTE, SGLANG_VERSION
from cpbcg.planner.traces import ReadOptions
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.planner.traces.text import display
from cpbcg.settings import emit_choices
from cpbcg.assembly.traffic import default_workers

if TYPE_CHECKING:
    from cpbcg.engines.sglang.decode_plan import DecodePlan


def guarantee_request_count(deployment: Deployment, max_requests: int | None) -> int:
    """Requests per forward guarantee mode proves for: `max_requests`, else the scheduler's
    `prefill_max_requests`, else its `max_running_requests`. Raises `ConfigError` when none is set."""
    sched = deployment.scheduler
    requests = max_requests or sched.prefill_max_requests or sched.max_running_requests
    if requests is None:
        raise ConfigError("guarantee mode needs --max-requests (or scheduler.prefill_max_requests in the config)")
    return requests


@dataclass(frozen=True)
class PlanReport:
    """Everything `cpbcg plan` shows: the header, the evaluation, the recommendation (or why there
    is none), the comparison, the simulation summary, the export text, a server log's observed
    section and, over several (trace, load) parts, the per-part traffic report."""

    deployment: Deployment
    header: dict[str, object]
    result: PlanResult
    comparison: Comparison | None
    source: BatchSource
    """The trace planned (the first part's with several; complete: its simulation summary is final)."""
    export: str | None
    """The `emit` export (None without one)."""
    log: LogSettings | None = None
    """What the SGLang server log states (None: not a server log)."""
    logs: tuple[LogObserved, ...] = ()
    """Per SGLang server log planned: its settings and its own observed comparison (per launch, with a total)."""
    traces: int = 1
    """How many traces were planned together (the embedded default workload counts as one)."""
    flags_command: str | None = None
    """The command that writes the verdict's chosen list's SGLang flags (None without a verdict)."""
    memory: MemoryPreflight | None = None
    """The memory pre-flight of the verdict's chosen list (None without a verdict or with prefill graphs off)."""
    decode: "DecodePlan | None" = None
    """Decode graphs on the traffic's decode steps (`cpbcg.api.decode_plan`), None without decode steps."""

    @property
    def parts(self) -> tuple[PlanPart, ...]:
        """The (trace, load) parts planned (`PlanResult.parts`)."""
        return tuple(self.result.parts)


def load_plan_deployment(config: str | None, overrides: Mapping[str, object], manifest_path: str | Path | None,
                         cost_given: bool, note: Callable[[str], None], log: LogSettings | None = None) -> Deployment:
    """The deployment `plan` runs under: the config, an SGLang server log's settings (`log`) and
    the overrides, with a capture manifest's fitted cost model when one is given (`note`
    receives what the log and the fit say)."""
    manifest = None
    if manifest_path is not None:
        manifest = load_manifest(manifest_path)
    _, deployment = load_config_and_deployment(config, overrides, cost_source="command line" if cost_given else None, log=log)
    for line in log_settings_notes(log, overrides, assumed_settings(log, deployment, overrides, MANIFEST_KEYS if manifest else ()), resolved_server(deployment)):
        note(line)
    if manifest is not None:
        fit = manifest.fitted_cost()
        if fit is None:
            note(f"cpbcg: warning: {manifest.path} has no replay timings (a CPU dry run): the cost model keeps its numbers")
        elif fit.note:
            note(f"cpbcg: note: {fit.note}")
        deployment = with_manifest_cost(deployment, manifest)
    return deployment


class CaptureCost(TypedDict, total=False):
    """`RecommendSettings` fields an SGLang log's capture lines measure (`capture_settings`)."""

    graph_mib_per_token: float
    capture_s_per_bucket: float
    capture_source: str


def capture_settings(log: LogSettings | None) -> CaptureCost:
    """`RecommendSettings` fields from an SGLang log's measured capture cost (`capture_s_per_bucket`,
    `graph_mib_per_token`, `capture_source`), {} without capture lines. Graph memory is one
    shared pool that the largest bucket sizes: the log's own measured total (`mem usage` of the
    capture's end line) over the largest captured bucket, so the estimate for the captured list
    is the measurement; without an end line, the largest bucket's `avail_mem` step. A capture of
    another backend than the breakable graphs planned (the piecewise runner, `tc_piecewise`) is
    not used: {} (the estimate stays, and says so)."""
    cost = None if log is None else log.capture
    if log is None or cost is None or not cost.bucket_gb:
        return {}
    if cost.backend not in ("breakable", ""):  # another backend's capture does not scale the breakable graphs planned
        return {}
    largest = max(log.captured or cost.bucket_gb)
    line = cost.total_line or cost.list_line
    where = f"{log.path}:{line}" if line else f"{log.path} (capture progress lines)"
    if cost.total_gb is not None:
        out: CaptureCost = {"graph_mib_per_token": cost.total_gb * 1024 / largest}
    else:
        out = {"graph_mib_per_token": cost.bucket_gb[max(cost.bucket_gb)] * 1024 / max(cost.bucket_gb)}
    if cost.capture_s is not None:
        out["capture_s_per_bucket"] = cost.capture_s / len(log.captured or cost.bucket_gb)
    count = len(log.captured or cost.bucket_gb)
    took = f"{count} buckets in {cost.capture_s:.1f} s, " if cost.capture_s is not None else ""
    memory = (f"{cost.total_gb:.2f} GB in all" if cost.total_gb is not None
              else f"{cost.bucket_gb[max(cost.bucket_gb)]:.2f} GB at {max(cost.bucket_gb)} tokens")
    backend = f"{cost.backend} graphs" if cost.backend else "graphs of a backend the log does not name"
    out["capture_source"] = (f"calibrated from {where} ({backend}, {cost.date or 'undated'}: {took}{memory}, as the log printed them; "
                             "every other count scaled from it)")
    return out


def manifest_capture_settings(manifest: Manifest, deployment: Deployment) -> CaptureCost:
    """`RecommendSettings` fields from a capture manifest's timings (`Manifest.capture_s_per_layer`),
    scaled per layer to the deployment's model; {} for a dry run or a manifest without them.
    Graph memory stays estimated (the proxy's width is not the model's), and the label says so."""
    per_layer = manifest.capture_s_per_layer()
    if per_layer is None:
        return {}
    from cpbcg.planner.costs.published import assumptions

    model, _, assumed = assumptions(deployment.model, deployment.gpu)
    layers = model.num_hidden_layers
    same = "" if manifest.num_hidden_layers in (None, layers) else f"; the manifest was made for {manifest.num_hidden_layers} layers"
    return {"capture_s_per_bucket": per_layer * layers,
            "capture_source": (f"calibrated from {manifest.path} (cpbcg capture of {len(manifest.buckets)} buckets: "
                               f"{per_layer * 1e3:.2f} ms per layer per bucket, scaled to {layers} layers"
                               f"{'; ' + assumed if assumed else ''}{same})")}


def common_log_settings(logs: Sequence[LogSettings]) -> LogSettings | None:
    """The settings several logs plan together under: those every log states with the same value
    (the first log's source named); a setting they differ on is left to the config and said in
    a note (each log's own comparison still uses its own). None without logs."""
    if not logs:
        return None
    if len(logs) == 1:
        return logs[0]
    first, others = logs[0], logs[1:]
    common, notes = [], []
    for s in first.settings:
        theirs = [o.setting(s.key) for o in others]
        if all(t is not None and t.value == s.value for t in theirs):
            common.append(replace(s, origin=f"{s.origin} of {first.path}, the same in all {len(logs)} logs"))
    keys = dict.fromkeys(k for log in logs for k in log.overrides())
    for key in keys:
        if key not in {s.key for s in common}:
            shown = ", ".join(f"{log.path} {_shown(log.overrides().get(key, 'not stated'))}" for log in logs)
            notes.append(f"the logs differ on {key} ({shown}): planned together at the config's value; each log's "
                         "observed comparison uses its own")
    return replace(first, settings=tuple(common), notes=tuple(notes), capture=None, path=", ".join(log.path for log in logs))


def _shown(value: object) -> str:
    return f"{len(value)} buckets" if isinstance(value, list) else str(value)


def plan_report(deployment: Deployment, request: PlanOptions, trace_paths_given: Sequence[TraceInput | str | Path] = (), *,
                trace_format: str = "auto", options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
                note: Callable[[str], None] = lambda text: None, progress: Callable[[int], None] | None = None,
                on_chunk: Callable[[object], object] | None = None, log: LogSettings | None = None,
                resolve_launch: Callable[[LogSettings], LaunchModel] | None = None,
                load_factors: Sequence[float] | None = None, untimed_rates: str | None = None,
                invocation: Sequence[str] | None = None, manifest_path: str | Path | None = None) -> PlanReport:
    """`cpbcg plan` on its traces (paths as `trace_paths` gives them; none: the embedded default
    workload): evaluate the configured list, recommend one (`request`), compare and export.
    Notes for people (ignored options, the simulation, no recommendation) go to `note` as they
    arise. Raises `ModelError` when an export was asked of a recommendation that failed (the
    configured list is never exported in its place)."""
    given = list(trace_paths_given)  # `TraceInput`s (detected once by `plan_command`) or paths
    paths = [Path(str(p)) if isinstance(p, TraceInput) else p for p in given]
    first = paths[0] if paths else None
    detected = given[0].format.name if given and isinstance(given[0], TraceInput) else trace_format
    warning = ignored_options_warning(ignored_flags or [], first, detected, options.length_field if options else None)
    if warning is not None:
        note(warning)
    for finding in resolution_notes(resolved_server(deployment), log) + server_check_notes(server_check(deployment)):
        note(finding)
    settings = request.settings()
    if settings is not None and capture_settings(log):
        settings = replace(settings, **capture_settings(log))
    elif settings is not None and manifest_path is not None:
        settings = replace(settings, **manifest_capture_settings(load_manifest(manifest_path), deployment))
    workers = request.workers if request.workers is not None else default_workers()
    fit_traces = None if request.fit_traces is None else [str(p) for p in request.fit_traces]
    sources = [open_trace(p, deployment, trace_format=trace_format, options=options) for p in given] or [open_trace(None, deployment)]
    against = AgainstDefault(deployment) if settings is None else None  # without a verdict the configured list is judged here
    tapped = against.tap(on_chunk) if against is not None else on_chunk
    result = plan(sources, deployment, settings, on_chunk=tapped, progress=progress,
                  load_factors=None if load_factors is None else list(load_factors), rates=untimed_rates,
                  workers=workers, scheduler=request.scheduler_address, fit_traces=fit_traces, resolve_launch=resolve_launch,
                  launch_capture=capture_settings)
    if against is not None and against.flags(result.evaluation):
        note(f"cpbcg: warning: on this traffic the configured list costs more than SGLang's default list for the chunk: "
             f"{'; '.join(against.flags(result.evaluation))}")
    if result.deployment is not None:  # a log's last launch ran under other settings: the recommendation and export are for it
        deployment = result.deployment
    for line in launch_plan_notes(result.launches, display(first) if first is not None else "-"):
        note(line)
    parts = result.parts
    source = parts[0].source if parts else sources[0]
    for part in parts:
        if len(parts) > 1:
            note(f"{part.label} at {part.load}:")
        for line in read_notes(part.source, ignored_flags or [], part.label):
            note(line)
    if not parts:  # standard input or a server log, planned in place
        for line in read_notes(source, ignored_flags or [], first):
            note(line)
    for line in log_summary_notes(source):
        note(line)
    for line in chunk_above_list_notes(result.evaluation, deployment.scheduler.chunked_prefill_size, source) if len(given) <= 1 else ():
        note(line)
    for line in graphs_off_plan_notes(source, result.launches, display(first) if first is not None else "-") if len(given) == 1 else ():
        note(line)
    for line in rate_notes(parts, untimed_rates is not None):
        note(line)
    rec = result.recommendation
    if result.recommendation_error is not None:
        if request.emit is not None and request.recommend:
            raise ModelError(result.recommendation_error)  # never export the configured list in its place
        note(f"cpbcg: note: {result.recommendation_error}")
    for line in rec.notes if rec is not None else ():
        note(f"cpbcg: {line}" if line.startswith("warning:") else f"cpbcg: note: {line}")
    comparison = compare_recommendation(rec, deployment, RULES.lists) if rec is not None and (request.compare or request.plot is not None) else None
    decode = decode_plan(deployment, sources, parts, recommend=request.recommend)
    for line in decode.notes if decode is not None else ():
        note(f"cpbcg: note: decode graphs: {line}")
    header = {**report_header(deployment, source, paths[0] if len(paths) == 1 else None), **result.launch_header()}
    if len(paths) > 1:
        header["source"] = ", ".join(str(p) for p in paths)
    verdict = rec.verdict if rec is not None else None
    command = None if verdict is None or verdict.deploy == "default" else flags_command(invocation, [str(p) for p in paths], verdict.deployed.num_buckets)
    export = None
    if request.emit is not None:
        exported = rec.buckets if rec is not None else result.evaluation.buckets
        meta = {"source": header["source"], "bound": header["bound"], "cp_size": deployment.cp.cp_size,
                "cp_strategy": deployment.cp.strategy.value, "max_padding_factor": deployment.max_padding_factor,
                "cost_model": deployment.cost.to_dict()}
        decode_list = list(decode.recommended.batch_sizes) if decode is not None and decode.recommended is not None else None
        export = _export(exported, request.emit.value, deployment, meta, note, decode_list)
        if verdict is not None and request.max_buckets is None and request.target_coverage is None and verdict.deploy != "full" \
                and len(exported) != verdict.deployed.num_buckets:
            what = "SGLang's default list" if command is None else f"the knee ({verdict.deployed.num_buckets} buckets): {command}"
            note(f"cpbcg: note: --emit {request.emit.value} wrote the full recommendation ({len(exported)} buckets); the verdict "
                 f"deploys {what}")
    logs: tuple[LogObserved, ...] = ()
    if len(sources) == 1 and sources[0].log_summary is not None:
        logs = (LogObserved(display(first if first is not None else "-"), sources[0].log or LogSettings(), result.observed,
                            sources[0].log_summary),)
    elif len(sources) > 1:  # several logs: each compared in a pass of its own, under its own settings
        logs = tuple(observe_log(s, deployment, resolve_launch) for s in sources if s.log_summary is not None)
        for one in logs:
            for line in log_settings_notes(one.settings, {}):
                note(line.replace("cpbcg: from the log:", f"cpbcg: from {one.path}{launch_label(one.settings, one.summary)}:"))
    memory = None if rec is None or verdict is None else memory_preflight(deployment, rec)
    return PlanReport(deployment, header, result, comparison, source, export, log, logs, len(sources), command, memory, decode)


def memory_preflight(deployment: Deployment, rec: Recommendation) -> MemoryPreflight | None:
    """The verdict's chosen list under 0.5.23's start-up memory rule (`engines.sglang.memory`):
    KV tokens against SGLang's default list and whether capture fits; None with prefill graphs off."""
    from cpbcg.engines.sglang.memory import preflight
    from cpbcg.planner.costs.published import assumptions

    verdict = rec.verdict
    server = resolved_server(deployment)
    if verdict is None or (server is not None and server.prefill_graph_backend.value == "disabled"):
        return None
    model, gpu, assumed = assumptions(deployment.model, deployment.gpu)
    demand = rec.demand
    requests = float((demand.num_requests * demand.counts).sum())
    mean = float((demand.num_tokens * demand.counts).sum()) / requests if requests else 0.0
    chosen = verdict.deployed
    return preflight(model, gpu, tp_size=deployment.tp_size, pp_size=server.pp_size if server is not None else 1,
                     mla=server.use_mla if server is not None else bool(model.kv_lora_rank),
                     activation_tokens=deployment.scheduler.largest_forward_tokens,
                     max_running_requests=deployment.scheduler.max_running_requests, buckets=chosen.num_buckets,
                     default_buckets=verdict.default.num_buckets, graph_mib=chosen.graph_mib,
                     eager_peak_mib=rec.capture_model.eager_peak_mib if rec.capture_model is not None else 0.0,
                     mean_request_tokens=mean, assumed=assumed)


FLAGS_FILE = "sglang-flags.txt"
"""Where the verdict's command writes the chosen list's flags."""
_DROPPED_WITH_VALUE = frozenset({"-k", "--max-buckets", "--emit", "-o", "--output", "-f", "--format", "--target-coverage", "--plot"})
_DROPPED = frozenset({"--compare"})


def flags_command(invocation: Sequence[str] | None, traces: Sequence[str | Path], num_buckets: int) -> str:
    """`cpbcg plan ... -k K --emit sglang -o sglang-flags.txt`: this run's arguments (`invocation`,
    after `plan`; None: the traces alone) without its output, count and target options, asking for
    the list of `num_buckets` buckets (the optimiser's best of that count: the knee or the full list)."""
    if invocation is None:
        kept = [arg for t in traces for arg in ("-t", str(t))]
    else:
        kept, skip = [], False
        for arg in invocation:
            if skip:
                skip = False
                continue
            name = arg.split("=", 1)[0]
            if name in _DROPPED_WITH_VALUE:
                skip = "=" not in arg
                continue
            if name in _DROPPED:
                continue
            kept.append(arg)
    return shlex.join(["cpbcg", "plan", *kept, "-k", str(num_buckets), "--emit", "sglang", "-o", FLAGS_FILE])


def _export(buckets: list[int], emit: str, deployment: Deployment, metadata: dict[str, object], note: Callable[[str], None],
            decode_bs: list[int] | None = None) -> str:
    """`export_buckets` (with the recommended decode list `decode_bs`, when one is), with the note on the hardware SGLang's CP graphs need when server flags are
    exported, unless the resolved server is known to start with CP graphs (B200, non-MLA: nothing to warn of)."""
    text = export_buckets(buckets, emit, deployment, metadata, decode_bs)
    server = resolved_server(deployment)
    if emit in ("sglang", "sglang-json") and server is not None:
        _refuse_what_sglang_refuses(text, emit, server)
    resolved_ok = server is not None and server.cp_graphs
    if emit in ("sglang", "sglang-json") and deployment.cp.cp_size > 1 and not resolved_ok:
        note(f"cpbcg: note: SGLang {SGLANG_VERSION} CP graphs: {HARDWARE_NOTE[deployment.cp.strategy.value]}")
    return text


@dataclass(frozen=True)
class GuaranteeReport:
    """`cpbcg plan --guarantee|--check-guarantee`: the deployment, the proof and the export."""

    deployment: Deployment
    result: GuaranteeResult
    export: str | None
    """The `emit` export of the list (None without one)."""


def plan_command(config: str | None, overrides: Mapping[str, object], request: PlanOptions,
                 traces: Sequence[str | Path] | str | Path | None = None, *,
                 manifest_path: str | Path | None = None, cost_given: bool = False, trace_format: str = "auto",
                 options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
                 note: Callable[[str], None] = lambda text: None, progress: Callable[[int], None] | None = None,
                 on_chunk: Callable[[object], object] | None = None, load_factors: Sequence[float] | None = None,
                 untimed_rates: str | None = None, invocation: Sequence[str] | None = None) -> PlanReport | GuaranteeReport:
    """`cpbcg plan`: the options' combinations checked (`check_usage`), the traces (`trace_paths`: files, globs, directories; the `fit_traces` of
    `request` among them), the deployment (`load_plan_deployment`, under the settings a single
    SGLang server log states), then guarantee mode when `request` asks for it (requests per
    forward from `guarantee_request_count`, tokens from `request.max_tokens` or the chunk), else
    `plan_report` on the traces. `load_factors`: every request trace at each (`--time-scale 0.5,1,2`;
    None: the scheduler's `time_scale`); `untimed_rates`: `auto` simulates a request trace without
    timestamps at the rate picker's rates, None at the scheduler's `rate`. The lines `note` receives are
    held until the traces were read, so that a log's start-up lines say which launch they describe
    when it holds several (`HeldNotes`). `invocation`: the command line after `plan` (the verdict's
    flags command repeats it, `flags_command`; None: the traces alone)."""
    with HeldNotes(note) as held:
        given = [] if traces is None else [traces] if isinstance(traces, (str, Path)) else list(traces)
        check_usage(request, given, manifest_path, config, overrides)
        if request.guarantee and request.check_guarantee:
            raise ConfigError("--guarantee and --check-guarantee exclude each other")
        if request.guarantee or request.check_guarantee:
            _refuse_trace_options(request, bool(given), load_factors is not None)
        expanded = trace_paths(given)
        refuse_repeated(expanded)
        known = {file_identity(p) for p in expanded}
        paths = expanded + [Path(p) for p in dict.fromkeys(request.fit_traces or ()) if file_identity(p) not in known]  # one file by any name, once
        inputs = [detect_input(p, trace_format, options) for p in paths]  # each trace detected once, its start-up output read once
        logs = [one.log for one in inputs]
        log = logs[0] if len(logs) == 1 else common_log_settings([one for one in logs if one is not None]) \
            if logs and all(one is not None for one in logs) else None
        said: list[str] = []
        deployment = load_plan_deployment(config, overrides, manifest_path, cost_given, said.append, log)
        check_decode_flags(deployment)
        deployment, no_graph = _no_prefill_graph(deployment, request, config, overrides, manifest_path, cost_given, log, held)
        for line in said:
            held(line)
        _refuse_emit_for_a_refused_server(None if request.emit is None else request.emit.value, deployment)
        untimed_rates = load_model_rates(config, overrides, untimed_rates)
        if request.guarantee or request.check_guarantee:
            requests = guarantee_request_count(deployment, request.max_requests)
            result = guarantee(deployment, requests, request.max_tokens, recommend_list=request.guarantee,
                               bucket_multiple=request.bucket_multiple)
            export = None
            if request.emit is not None:
                limits = {"max_requests": result.limits.max_requests, "max_tokens": result.limits.max_tokens}
                decode_bs = decode_guarantee(deployment) if request.guarantee else None
                if decode_bs:
                    held(f"cpbcg: note: decode graphs: {len(decode_bs)} sizes {decode_bs[0]}..{decode_bs[-1]} keep every running batch "
                         f"up to --max-running-requests {deployment.scheduler.max_running_requests} in a decode graph (emitted)")
                export = _export(result.buckets, request.emit.value, deployment, {"guarantee": limits}, held, decode_bs)
            return GuaranteeReport(deployment, result, export)
        resolve = launch_resolver(config, overrides) if manifest_path is None and any(one is not None for one in logs) else None
        report = plan_report(deployment, request, inputs, trace_format=trace_format, options=options, ignored_flags=ignored_flags,
                             note=held, progress=progress, on_chunk=on_chunk, log=log, resolve_launch=resolve,
                             load_factors=load_factors, untimed_rates=untimed_rates, invocation=invocation,
                             manifest_path=manifest_path)
        held.label_launches(report.source if report.traces == 1 else None)
        if no_graph is not None:  # the answer first, in the JSON document too
            rest = dict(report.header)
            report.header.clear()
            report.header.update({"no_prefill_graph": no_graph, **rest})
        return report


def _no_prefill_graph(deployment: Deployment, request: PlanOptions, config: str | None, overrides: Mapping[str, object],
                      manifest_path: str | Path | None, cost_given: bool, log: LogSettings | None,
                      note: Callable[[str], None]) -> tuple[Deployment, dict[str, object] | None]:
    """When there is nothing to plan, say so first: a launch given (`--server-args`, a config's `server.args`)
    that 0.5.23 refuses to start is `ConfigError` naming where it was given; a launch 0.5.23 starts without a prefill CUDA graph
    (`ResolvedServer.no_prefill_graph`; a server log's launches are planned as they ran) gets that answer
    as the first note and what would help. CP without CP graphs (`disable_breakable_cudagraph_if_incompatible`):
    the same traffic is planned at cp 1, where 0.5.23 keeps breakable graphs (the returned deployment,
    and the JSON block returned); any other cause, or `--emit`: `ConfigError` (exit 2, nothing written)."""
    server = resolved_server(deployment)
    if server is not None and log is None and server.launch_origin and server.refusals and request.emit is None:  # does not start
        refusal = server.refusals[0]
        raise ConfigError(f"{server.launch_origin}: nothing to plan: SGLang {SGLANG_VERSION} would refuse to start with these flags "
                          f"({refusal.check}: {refusal.message}); fix the launch (cpbcg check-server says what starts)")
    answer = server.no_prefill_graph() if server is not None and log is None else None
    if server is None or answer is None or server.verdict_hinges_on_the_assumed_model:
        return deployment, None
    helps = server.what_would_help()
    if request.emit is not None:
        raise ConfigError(f"--emit {request.emit.value}: nothing written: {answer}; what would help: {'; '.join(helps)}")
    if not server.cp_without_cp_graphs:
        raise ConfigError(f"nothing to plan: {answer}; what would help: {'; '.join(helps)}")
    planned = f"the same traffic at cp 1 (--cp-size 1), where {SGLANG_VERSION} keeps breakable prefill graphs: the plan below"
    note(f"cpbcg: {answer}")
    note(f"cpbcg: what would help: {'; or '.join(helps)}")
    note(f"cpbcg: planned instead: {planned}")
    at_cp1 = load_plan_deployment(config, {**overrides, "cp_size": 1, "tp_size": server.tp_size}, manifest_path, cost_given,
                                  lambda text: None, log)  # the same GPUs (--tp-size kept), attention CP off
    return at_cp1, {"answer": answer, "cause": server.graph_off, "what_would_help": helps, "planned": planned,
                    "cp_size": server.attn_cp_size, "gpu": server.gpu.name}


def _refuse_what_sglang_refuses(text: str, emit: str, server: ResolvedServer) -> None:
    """Nothing emitted that 0.5.23 refuses: the start-up resolution runs on what `--emit` writes
    (`resolve_emitted`); a refusal, or a server that would capture no prefill graph, is `ConfigError`
    (exit 2) before anything is written."""
    try:
        emitted = resolve_emitted(text, server)
    except ValueError as exc:
        raise ConfigError(f"--emit {emit}: nothing written: SGLang {SGLANG_VERSION} would not parse the flags: {exc}") from None
    if emitted.refusals:
        refusal = emitted.refusals[0]
        raise ConfigError(f"--emit {emit}: nothing written: SGLang {SGLANG_VERSION} would refuse to start on {emitted.gpu.name} with the "
                          f"flags written: {refusal.check}: {refusal.message}")
    answer = emitted.no_prefill_graph()
    if answer is not None and not emitted.verdict_hinges_on_the_assumed_model:
        raise ConfigError(f"--emit {emit}: nothing written: with the flags written {answer}")


def _refuse_emit_for_a_refused_server(emit: str | None, deployment: Deployment) -> None:
    """Deploy flags (`--emit sglang|sglang-json`) are never written for a server 0.5.23 refuses
    to start (`ResolvedServer.refusals`). Raises `ConfigError` naming the refusal and what starts."""
    server = resolved_server(deployment)
    if emit not in ("sglang", "sglang-json") or server is None or server.starts:
        return
    refusal = server.refusals[0]
    fix = "--gpu B200 (SM100), or drop --emit" if "SM100" in refusal.message and not server.gpu.is_sm100 else "flags it starts with, or drop --emit"
    raise ConfigError(f"--emit {emit}: nothing written: SGLang {SGLANG_VERSION} would refuse to start on {server.gpu.name} with these "
                      f"flags (give {fix}): {refusal.check}: {refusal.message}")


def check_usage(request: PlanOptions, traces: Sequence[str | Path], manifest_path: str | Path | None,
                config: str | None = None, overrides: Mapping[str, object] = {}) -> None:
    """Option combinations that cannot work, refused before any work (`ConfigError`); the
    outputs checked writable and apart from every input (`check_outputs` on `input_files`: the
    traces, fit traces, manifest, config and the files the settings name)."""
    if request.output is not None and str(request.output) != STDOUT and request.emit is None:
        raise ConfigError(f"-o/--output writes the --emit export; add --emit {emit_choices()}")
    if request.emit is not None and (request.output is None or str(request.output) == STDOUT) and request.output_format is OutputFormat.json:
        raise ConfigError("--emit with --format json needs -o FILE (both would go to stdout)")
    if not request.recommend and (shaping := refused(request, "--no-recommend")):
        raise ConfigError(f"{shaping[0][1].flags[0]} shapes the recommendation; drop --no-recommend")
    if request.plot is not None and request.plot.suffix.lower() != ".png":
        raise ConfigError(f"--plot {request.plot}: the plot is a PNG; give a file name ending in .png")
    output = None if request.output is None or str(request.output) == STDOUT else request.output
    check_outputs({"-o": output, "--plot": request.plot},
                  input_files(config, overrides, trace=list(traces), fit_trace=list(request.fit_traces or ()), manifest=manifest_path))


def _refuse_trace_options(request: PlanOptions, traces_given: bool, load_factors_given: bool) -> None:
    """`ConfigError` naming the options guarantee mode would ignore: it is trace-free (every
    forward within `--max-requests` and `--max-tokens`), so a trace, the recommendation's fit and
    validation settings, the comparison and the plot have nothing to act on."""
    # the fit traces are traces: named with them as --trace
    ignored = ["--trace"] if traces_given or request.fit_traces else []
    ignored += ["/".join(flag.flags[::-1]) for name, flag in refused(request, "--guarantee") if name != "fit_traces"]
    ignored += ["--time-scale"] if load_factors_given else []
    if ignored:
        mode = "--guarantee" if request.guarantee else "--check-guarantee"
        raise ConfigError(f"{mode} is trace-free (every forward of up to --max-requests requests and --max-tokens tokens) "
                          f"and takes no {', '.join(ignored)}; drop {'it' if len(ignored) == 1 else 'them'}, or plan a trace without {mode}")


