"""cpbcg's public Python API: what the commands call, for notebooks and other tools.

    import cpbcg
    deployment = cpbcg.load_deployment(cp_size=4)                      # or a YAML file / preset
    result = cpbcg.plan(cpbcg.open_trace("lens.jsonl", deployment), deployment)
    print(result.evaluation.coverage, result.recommendation.buckets)

Every function returns a typed frozen result (`Evaluation`, `PlanResult`, `Recommendation`,
`GuaranteeResult`, `CheckReport`); `cpbcg.documents` turns them into JSON. Nothing here prints
or imports typer, rich or torch (capture imports torch when called). Errors are `CpbcgError`
subclasses with one-line messages naming the file, line and config key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping

from cpbcg.check.gates import (
    CheckReport, Gates, ReplayRecord, check_gates, count_of, parse_max_eager, replay_gate, sample_graph_batches,
)
from cpbcg.check.reports import append_step_summary, github_annotations, junit_xml, report_json, step_summary_markdown, write_report
from cpbcg.check.summary import cell, pct, summary_rows
from cpbcg.bucket_files import flags_file_words
from cpbcg.config import DeploymentConfig, load_config, preset_names
from cpbcg.errors import CaptureError, ConfigError, ModelError
from cpbcg.manifest import MANIFEST_KEYS, Manifest, load_manifest
from cpbcg.notes import ignored_options_note, ignored_options_warning, server_check_notes, source_note
from cpbcg.planner.choices import Fold
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.export import export_buckets
from cpbcg.planner.model.bucket_spec import parse_positive_list
from cpbcg.planner.model.explain import BatchExplanation, explain_batch
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.optimise.compare import Comparison, ParetoPoint, compare_recommendation
from cpbcg.planner.optimise.cost import with_measured
from cpbcg.planner.optimise.guarantee import GuaranteeCheck, Limits, check_guarantee, guarantee_buckets
from cpbcg.planner.optimise.recommend import Recommendation, RecommendSettings, default_chunk_tokens
from cpbcg.planner.plan import PlanResult, plan as _plan
from cpbcg.planner.sglang_release import HARDWARE_NOTE, SGLANG_VERSION, ServerCheck, deployment_server_check
from cpbcg.planner.traces import ForwardSizes, ReadOptions
from cpbcg.planner.traces.sources import BatchSource, describe_source, open_source
from cpbcg.planner.traces.writer import batch_trace_lines, fold_batches
from cpbcg.settings import CAPTURE_DEFAULT_BUCKETS

if TYPE_CHECKING:
    from cpbcg.capture.records import CaptureResult

__all__ = [  # what the commands (and notebooks) use; the result types are re-exported for annotations
    "BatchExplanation", "BatchSource", "BatchTrace", "CaptureResult", "CheckReport", "Comparison", "Deployment", "Evaluation",
    "Gates", "GuaranteeReport", "GuaranteeResult", "Layout", "Manifest", "ParetoPoint", "PlanReport", "PlanRequest",
    "PlanResult", "ReadOptions", "Recommendation", "RecommendSettings", "ReplayRecord", "ServerCheck", "append_step_summary", "batch_trace",
    "batches", "capture", "cell", "check", "check_trace", "count_of", "evaluate", "explain", "github_annotations", "guarantee",
    "guarantee_request_count", "ignored_options_note", "ignored_options_warning", "junit_xml", "layout",
    "load_config_and_deployment", "load_deployment", "load_manifest", "load_plan_deployment", "max_eager_overrides",
    "open_trace", "parse_max_eager", "pct", "plan", "plan_command", "plan_report", "preset_table", "recommend", "report_header", "server_check",
    "report_json", "step_summary_markdown", "summary_rows", "write_report",
]

PARETO_MAX_BUCKETS = 128
"""With a comparison or a plot the optimiser also finds the best list of every count up to this."""


def load_config_and_deployment(
    config: str | None = None, overrides: Mapping[str, object] | None = None, manifest: Manifest | None = None,
    cost_source: str | None = None,
) -> tuple[DeploymentConfig, Deployment]:
    """The validated config (file, preset or defaults; dotted `overrides` such as
    `scheduler.rate` win over it; None values are ignored) and its `Deployment`: the one
    conversion from settings to the plain value every later step takes.

    With `manifest` (a loaded `cpbcg.manifest.Manifest`) its buckets, capacities and CP settings
    replace the config's (`Manifest.config_layer`), and giving one of those as an override is a `ConfigError`."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    layers: list[tuple[str, dict[str, object]]] = []
    if manifest is not None:
        fixed = [k for k in (*MANIFEST_KEYS, "buckets") if k in overrides]
        if fixed:
            raise ConfigError(f"{manifest.path}: the manifest fixes the buckets and CP settings; drop {', '.join(fixed)}")
        layers.append((str(manifest.path), manifest.config_layer()))
    cfg = load_config(config, overrides, layers=layers)
    deployment = cfg.to_deployment(cost_source)
    return cfg, deployment if manifest is None else with_manifest_cost(deployment, manifest)


def with_manifest_cost(deployment: Deployment, manifest: Manifest) -> Deployment:
    """`deployment` with the cost model fitted to a capture manifest's replay and eager timings,
    scaled to the real model's layer count (`Manifest.fitted_cost`); unchanged where it measured none."""
    fitted, eager = manifest.fitted_cost_ms(), manifest.eager_fixed_ms()
    return replace(deployment, cost=with_measured(deployment.cost, fitted, eager, f"manifest {manifest.path}"))


def load_deployment(config: str | None = None, **overrides: object) -> Deployment:
    """A `Deployment` from a YAML file or preset (None = defaults) and config-key overrides
    (`cp_size=4`, `buckets="sglang-default:8192"`; scheduler keys as `scheduler={"rate": 8}`).
    Raises `ConfigError` naming the key."""
    flat: dict[str, object] = {}
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return load_config_and_deployment(config, flat)[1]


def server_check(deployment: Deployment) -> ServerCheck:
    """SGLang 0.5.23's start-up checks and `supports_prefill_cp_bcg` on the flags the deployment
    runs with (`cpbcg.planner.sglang_release.deployment_server_check`): the flags file given as
    its bucket list, read here at the input edge, else the flags `plan --emit sglang` writes."""
    return deployment_server_check(deployment, flags_file_words(deployment.bucket_spec))


def open_trace(
    path: str | Path | None = None, deployment: Deployment | None = None, *, trace_format: str = "auto",
    length_field: str | None = None, time_field: str | None = None, options: ReadOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchSource:
    """Prefill forwards of a trace, lazily (iterate `.batches` once): a batch trace as written,
    a request trace through the scheduler simulation with `deployment.scheduler` (calling
    `progress(requests read so far)` as it reads); None = the embedded default workload; `-` =
    stdin. An SGLang server log gives forward sizes only (`.is_bound`, `.forwards`): `plan`,
    `evaluate` and `check` take it at its worst case. `options` (a `ReadOptions`: generic fields,
    BurstGPT filters) wins over `length_field`/`time_field`. Raises `TraceError` (`FILE:LINE: ...`)."""
    scheduler = deployment.scheduler if deployment is not None else None
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field)
    return open_source(None if path is None else Path(path), trace_format=trace_format, scheduler=scheduler,
                       options=options, progress=progress)


def _chunks(trace: BatchSource | Iterable[BatchSet]) -> Iterable[BatchSet] | Iterable[ForwardSizes]:
    if isinstance(trace, BatchSource):
        return trace.forwards if trace.is_bound else trace.batches  # type: ignore[return-value]
    return trace


def report_header(deployment: Deployment, trace: BatchSource | str | Path | None, path: str | Path | None = None) -> dict[str, object]:
    """The report header (`Deployment.header`) of a trace: its source line and `bound`, True
    when the trace gives forward sizes only and every number is a worst-case bound."""
    bound = isinstance(trace, BatchSource) and trace.is_bound
    source = path if isinstance(trace, BatchSource) else trace
    return {**deployment.header(describe_source(source, bound=bound)), "bound": bound}


def evaluate(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, table: BucketTable | None = None,
             on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None) -> Evaluation:
    """Replay every forward with the deployment's list (or `table`) through the runtime selector
    (a bound source at its worst case, as `plan`)."""
    return _plan(_chunks(trace), deployment, None, table, on_chunk).evaluation  # plan without a recommendation


def plan(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, settings: RecommendSettings | None = RecommendSettings(),
         table: BucketTable | None = None, on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None) -> PlanResult:
    """Evaluate the configured list and recommend one, in one pass (`cpbcg plan`); a bound
    source (`BatchSource.is_bound`) is planned at each forward's exact worst case. On Linux
    with two or more CPUs the held-out validation fit runs in a forked child process
    (`CPBCG_JOBS=1` in the environment keeps one process; same answer)."""
    return _plan(_chunks(trace), deployment, settings, table, on_chunk)


def recommend(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, settings: RecommendSettings = RecommendSettings()) -> Recommendation:
    """Only the recommendation of `plan`."""
    result = plan(trace, deployment, settings)
    assert result.recommendation is not None
    return result.recommendation


@dataclass(frozen=True)
class GuaranteeResult:
    """A trace-free guarantee: every CP-active forward within `limits` replays in `buckets`."""

    limits: Limits
    """Most requests and tokens per forward."""
    buckets: list[int]
    """The list proved (or found)."""
    check: GuaranteeCheck
    """The proof, or the smallest forward that falls back."""
    recommended: bool
    """True: `buckets` is the fewest-bucket list found; False: the configured list was checked."""


def guarantee(deployment: Deployment, max_requests: int, max_tokens: int | None = None, *, recommend_list: bool = True,
              bucket_multiple: int = 1) -> GuaranteeResult:
    """The fewest buckets that replay every CP-active forward of at most `max_requests` requests
    and `max_tokens` tokens (default: the chunk), or with `recommend_list=False` the proof that
    the deployment's configured list does."""
    limits = Limits(max_requests, max_tokens or default_chunk_tokens(deployment))
    cp, spec, factor = deployment.cp, deployment.capture, deployment.max_padding_factor
    buckets = guarantee_buckets(limits, cp, spec, factor, bucket_multiple) if recommend_list else deployment.table().capture_num_tokens.tolist()
    return GuaranteeResult(limits, buckets, check_guarantee(buckets, limits, cp, spec, factor), recommend_list)


def check(trace_path: str | Path | None, deployment: Deployment, gates: Gates, *, manifest: Manifest | None = None, replay: int = 0,
          trace_format: str = "auto", options: ReadOptions | None = None, progress: Callable[[int], None] | None = None,
          on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None) -> tuple[CheckReport, BatchSource]:
    """Evaluate a trace as `plan` does, check the gates, and with `replay > 0` replay that many
    sampled graph forwards through freshly captured graphs (torch). Returns the report and the
    opened source (its simulation summary is complete). A bound source (server log) is checked
    at its worst case (header `bound` True); it has no extend lengths to replay (`ConfigError`)."""
    table = manifest.table() if manifest is not None else deployment.table()
    source = open_trace(trace_path, deployment, trace_format=trace_format, options=options, progress=progress)
    if replay and source.is_bound:
        raise ConfigError(f"{describe_source(trace_path)}: an SGLang server log gives forward sizes, not extend lengths: nothing to replay through graphs")
    ev = evaluate(source, deployment, table, on_chunk)
    header = report_header(deployment, source, trace_path)
    if manifest is not None:
        header["manifest"] = str(manifest.path)
    results = check_gates(ev, gates)
    replays: tuple[ReplayRecord, ...] = ()
    if replay:
        sampled = sample_graph_batches(open_trace(trace_path, deployment, trace_format=trace_format, options=options).batches, table, deployment.cp,
                                       deployment.max_padding_factor, replay)
        replays = _replay(sampled, deployment)
        results += (replay_gate(replays),)
    return CheckReport(header, ev, results, replays), source


def _replay(batches: list[list[int]], deployment: Deployment) -> tuple[ReplayRecord, ...]:
    try:
        from cpbcg.capture.run import replay_batches
    except ImportError as exc:
        raise CaptureError(f"replay needs the capture extra and torch (pip install 'cpbcg[capture]'): {exc}") from exc
    return tuple(ReplayRecord.of(record) for record in replay_batches(batches, deployment))


def capture(config: str | None = None, overrides: Mapping[str, object] | None = None, *, preset: str = "tiny", layers: int = 2,
            dtype: str | None = None, seed: int = 0, trace: str | Path | None = None, samples: int = 2, dry_run: bool = False,
            on_start: Callable[[int], None] | None = None, on_step: Callable[[str, int], None] | None = None) -> CaptureResult:
    """Capture and verify breakable CUDA graphs per bucket of the deployment that `config` and
    `overrides` describe (`load_config_and_deployment`; buckets default to
    `CAPTURE_DEFAULT_BUCKETS` when neither names any), with the capture-only options (model
    preset, proxy layers, dtype, seed, trace samples). `on_start(buckets)` is called once the
    list is known, `on_step(phase, bucket)` after each capture and verification. Needs torch; a CPU dry run without CUDA.
    Returns a `CaptureResult` (`cpbcg.documents.manifest_document` turns it into the manifest).
    Raises `ConfigError`, `TraceError`, `ModelError`, `CaptureError` (also when torch is missing)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    cfg, deployment = load_config_and_deployment(config, given)
    if "buckets" not in cfg.model_fields_set:
        cfg, deployment = load_config_and_deployment(config, {**given, "buckets": CAPTURE_DEFAULT_BUCKETS})
    try:
        from cpbcg.capture import CaptureSettings, run_capture
        settings = CaptureSettings(deployment, preset=preset, num_layers=layers, dtype=dtype, seed=seed,
                                   trace=None if trace is None else Path(trace), samples=samples, dry_run=dry_run)
        if on_start is not None:
            on_start(len(settings.buckets))
        return run_capture(settings, on_step)
    except ImportError as exc:
        raise CaptureError(f"cpbcg capture needs torch ({exc}); install it with: pip install 'cpbcg[capture]'") from exc


def explain(extend_seq_lens: list[int], deployment: Deployment) -> BatchExplanation:
    """One batch through the CP split and the replay selector: blocks and tokens per rank, rows,
    the bucket the runtime would replay it in or why it runs eagerly."""
    return explain_batch(extend_seq_lens, deployment.cp, deployment.table(), deployment.max_padding_factor)


@dataclass(frozen=True)
class Layout:
    """`cpbcg layout`: one batch explained under a deployment."""

    deployment: Deployment
    explanation: BatchExplanation


def layout(extend_seq_lens: list[int], config: str | None = None, overrides: Mapping[str, object] | None = None) -> Layout:
    """`explain` under the deployment of `config` and dotted `overrides` (`cpbcg layout`).
    Raises `ConfigError`, `ModelError`."""
    _, deployment = load_config_and_deployment(config, overrides)
    return Layout(deployment, explain(extend_seq_lens, deployment))


@dataclass
class BatchTrace:
    """The forwards of a trace as batch-trace lines (`cpbcg batches`): iterate `lines()` once;
    then `forwards` and `num_lines` are the totals and `note()` the simulation note."""

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

    def lines(self) -> Iterator[bytes]:
        """`{"extend_seq_lens": [...], "count": k}` lines, identical batches folded into `count`."""
        for line in batch_trace_lines(fold_batches(self._counted(), Fold(self.fold))):
            self.num_lines += 1
            yield line

    def _counted(self) -> Iterator[BatchSet]:
        for chunk in self.source.batches:
            self.forwards += int(chunk.counts.sum())
            if self.on_chunk is not None:
                self.on_chunk(chunk)
            yield chunk

    warning: str | None = None
    """Request-trace options given for a batch stream, which it ignores (None: none)."""

    def note(self) -> str | None:
        """The simulation note once `lines()` has been read (None for a batch stream)."""
        return source_note(self.source) if self.source.simulation is not None else None


def batch_trace(path: str | Path, deployment: Deployment, *, fold: str = "consecutive", trace_format: str = "auto",
                options: ReadOptions | None = None, progress: Callable[[int], None] | None = None,
                on_chunk: Callable[[object], object] | None = None) -> BatchTrace:
    """The prefill forwards the server would run for a trace (the scheduler simulation with
    `deployment.scheduler`, docs/scheduler.md), as a batch trace to write. Raises `TraceError`."""
    source = open_source(Path(path), scheduler=deployment.scheduler, progress=progress, trace_format=trace_format, options=options)
    return BatchTrace(source, fold, on_chunk)


def batches(path: str | Path, config: str | None = None, overrides: Mapping[str, object] | None = None, *,
            fold: str = "consecutive", trace_format: str = "auto", options: ReadOptions | None = None,
            ignored_flags: list[str] | None = None, progress: Callable[[int], None] | None = None,
            on_chunk: Callable[[object], object] | None = None) -> BatchTrace:
    """`cpbcg batches`: `batch_trace` under the deployment of `config` and dotted scheduler
    `overrides`; `warning` names the `ignored_flags` a batch stream ignores. Raises `ConfigError`, `TraceError`."""
    _, deployment = load_config_and_deployment(config, overrides)
    written = batch_trace(path, deployment, fold=fold, trace_format=trace_format, options=options, progress=progress, on_chunk=on_chunk)
    written.warning = ignored_options_note(written.source.trace_format, ignored_flags or [], path)
    return written


def guarantee_request_count(deployment: Deployment, max_requests: int | None) -> int:
    """Requests per forward guarantee mode proves for: `max_requests`, else the scheduler's
    `prefill_max_requests`, else its `max_running_requests`. Raises `ConfigError` when none is set."""
    sched = deployment.scheduler
    requests = max_requests or sched.prefill_max_requests or sched.max_running_requests
    if requests is None:
        raise ConfigError("guarantee mode needs --max-requests (or scheduler.prefill_max_requests in the config)")
    return requests


@dataclass(frozen=True)
class PlanRequest:
    """What `plan_report` does besides evaluating: the recommendation's settings and the outputs."""

    recommend: bool = True
    """False: only evaluate the configured list."""
    max_buckets: int | None = None
    target_coverage: float | None = None
    objective: str = "coverage"
    max_tokens: int | None = None
    bucket_multiple: int = 1
    include: str | None = None
    """Buckets every recommended list must contain, as written (`8192,4096`)."""
    max_requests: int | None = None
    headroom: bool = True
    allow_gaps: bool = False
    validate_fraction: float = 0.3
    compare: bool = False
    """Also compare with the baseline lists (and the Pareto curve)."""
    guarantee: bool = False
    """Trace-free: the fewest buckets that replay every CP-active forward within the limits."""
    check_guarantee: bool = False
    """Trace-free: prove that the configured list does (or name the smallest forward that falls back)."""
    plot: bool = False
    """A plot will be drawn: the comparison is needed."""
    emit: str | None = None
    """Export format of the recommended (or, without a recommendation, the configured) list."""

    def settings(self) -> RecommendSettings | None:
        """The `RecommendSettings` these options give (None without a recommendation)."""
        if not self.recommend:
            return None
        include = tuple(parse_positive_list(self.include, "include")) if self.include else ()
        return RecommendSettings(
            max_buckets=self.max_buckets, target_coverage=self.target_coverage, objective=self.objective,
            max_bucket_tokens=self.max_tokens, bucket_multiple=self.bucket_multiple, include=include,
            headroom=self.headroom, max_requests=self.max_requests, allow_gaps=self.allow_gaps,
            validate_fraction=self.validate_fraction, pareto_max_buckets=PARETO_MAX_BUCKETS if (self.compare or self.plot) else 0,
        )


@dataclass(frozen=True)
class PlanReport:
    """Everything `cpbcg plan` shows: the header, the evaluation, the recommendation (or why there
    is none), the comparison, the simulation summary and the export text."""

    deployment: Deployment
    header: dict[str, object]
    result: PlanResult
    comparison: Comparison | None
    simulation: dict[str, object] | None
    export: str | None
    """The `emit` export (None without one)."""


def load_plan_deployment(config: str | None, overrides: Mapping[str, object], manifest_path: str | Path | None,
                         cost_given: bool, note: Callable[[str], None]) -> Deployment:
    """The deployment `plan` runs under: the config and overrides, with a capture manifest's
    fitted cost model when one is given (`note` receives what the fit says)."""
    manifest = load_manifest(manifest_path) if manifest_path is not None else None
    _, deployment = load_config_and_deployment(config, overrides, cost_source="command line" if cost_given else None)
    if manifest is not None:
        fit = manifest.fitted_cost()
        if fit is None:
            note(f"cpbcg: warning: {manifest.path} has no replay timings (a CPU dry run): the cost model keeps its numbers")
        elif fit.note:
            note(f"cpbcg: note: {fit.note}")
        deployment = with_manifest_cost(deployment, manifest)
    return deployment


def plan_report(deployment: Deployment, request: PlanRequest, trace_path: str | Path | None = None, *,
                trace_format: str = "auto", options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
                note: Callable[[str], None] = lambda text: None, progress: Callable[[int], None] | None = None,
                on_chunk: Callable[[object], object] | None = None) -> PlanReport:
    """`cpbcg plan` on a trace: evaluate the configured list, recommend one (`request`), compare
    and export. Notes for people (ignored options, the simulation, no recommendation) go to
    `note` as they arise. Raises `ModelError` when an export was asked of a recommendation that
    failed (the configured list is never exported in its place)."""
    warning = ignored_options_warning(ignored_flags or [], trace_path, trace_format, options.length_field if options else None)
    if warning is not None:
        note(warning)
    for finding in server_check_notes(server_check(deployment)):
        note(finding)
    source = open_trace(trace_path, deployment, trace_format=trace_format, options=options, progress=progress)
    result = plan(source, deployment, request.settings(), on_chunk=on_chunk)
    from cpbcg.documents import simulation_summary

    text = source_note(source)
    if text is not None:
        note(text)
    rec = result.recommendation
    if result.recommendation_error is not None:
        if request.emit is not None and request.recommend:
            raise ModelError(result.recommendation_error)
        note(f"cpbcg: note: {result.recommendation_error}")
    comparison = compare_recommendation(rec, deployment) if rec is not None and (request.compare or request.plot) else None
    header = report_header(deployment, source, trace_path)
    export = None
    if request.emit is not None:
        exported = rec.buckets if rec is not None else result.evaluation.buckets
        meta = {"source": header["source"], "bound": header["bound"], "cp_size": deployment.cp.cp_size,
                "cp_strategy": deployment.cp.strategy.value, "max_padding_factor": deployment.max_padding_factor,
                "cost_model": deployment.cost.to_dict()}
        export = _export(exported, request.emit, deployment, meta, note)
    return PlanReport(deployment, header, result, comparison, simulation_summary(source), export)


def _export(buckets: list[int], emit: str, deployment: Deployment, metadata: dict[str, object], note: Callable[[str], None]) -> str:
    """`export_buckets`, with the note on the hardware SGLang's CP graphs need when server flags are exported."""
    text = export_buckets(buckets, emit, deployment, metadata)
    if emit in ("sglang", "sglang-json") and deployment.cp.cp_size > 1:
        note(f"cpbcg: note: SGLang {SGLANG_VERSION} CP graphs: {HARDWARE_NOTE[deployment.cp.strategy.value]}")
    return text


@dataclass(frozen=True)
class GuaranteeReport:
    """`cpbcg plan --guarantee|--check-guarantee`: the deployment, the proof and the export."""

    deployment: Deployment
    result: GuaranteeResult
    export: str | None
    """The `emit` export of the list (None without one)."""


def plan_command(config: str | None, overrides: Mapping[str, object], request: PlanRequest, trace_path: str | Path | None = None, *,
                 manifest_path: str | Path | None = None, cost_given: bool = False, trace_format: str = "auto",
                 options: ReadOptions | None = None, ignored_flags: list[str] | None = None,
                 note: Callable[[str], None] = lambda text: None, progress: Callable[[int], None] | None = None,
                 on_chunk: Callable[[object], object] | None = None) -> PlanReport | GuaranteeReport:
    """`cpbcg plan`: the deployment (`load_plan_deployment`), then guarantee mode when `request`
    asks for it (requests per forward from `guarantee_request_count`, tokens from
    `request.max_tokens` or the chunk), else `plan_report` on the trace."""
    if request.guarantee and request.check_guarantee:
        raise ConfigError("--guarantee and --check-guarantee exclude each other")
    deployment = load_plan_deployment(config, overrides, manifest_path, cost_given, note)
    if request.guarantee or request.check_guarantee:
        requests = guarantee_request_count(deployment, request.max_requests)
        result = guarantee(deployment, requests, request.max_tokens, recommend_list=request.guarantee,
                           bucket_multiple=request.bucket_multiple)
        export = None
        if request.emit is not None:
            limits = {"max_requests": result.limits.max_requests, "max_tokens": result.limits.max_tokens}
            export = _export(result.buckets, request.emit, deployment, {"guarantee": limits}, note)
        return GuaranteeReport(deployment, result, export)
    return plan_report(deployment, request, trace_path, trace_format=trace_format, options=options, ignored_flags=ignored_flags,
                       note=note, progress=progress, on_chunk=on_chunk)


def check_trace(config: str | None, overrides: Mapping[str, object], manifest_path: str | Path | None, trace_path: str | Path | None, *,
                max_eager: list[str] | None = None, replay: int = 0, trace_format: str = "auto", options: ReadOptions | None = None,
                ignored_flags: list[str] | None = None, note: Callable[[str], None] = lambda text: None,
                progress: Callable[[int], None] | None = None, on_chunk: Callable[[object], object] | None = None) -> CheckReport:
    """`cpbcg replay-check`: the deployment (a capture manifest's buckets and CP settings win),
    the trace evaluated, the gates of the config and `overrides` checked, `replay` forwards
    replayed through fresh graphs. `max_eager` (`REASON=N` texts) merge into the config's
    `gates.max_eager`. Notes for people go to `note`."""
    overrides = {**overrides, **max_eager_overrides(max_eager or [])}
    manifest = load_manifest(manifest_path) if manifest_path is not None else None
    if manifest is not None and manifest.dry_run:
        note(f"cpbcg: warning: {manifest_path} is a CPU dry run: no CUDA graph was captured, so its capacities come from the model")
    cfg, deployment = load_config_and_deployment(config, overrides, manifest=manifest)
    warning = ignored_options_warning(ignored_flags or [], trace_path, trace_format, options.length_field if options else None)
    if warning is not None:
        note(warning)
    for finding in server_check_notes(server_check(deployment)):
        note(finding)
    report, source = check(trace_path, deployment, cfg.gates.to_gates(), manifest=manifest, replay=replay,
                           trace_format=trace_format, options=options, progress=progress, on_chunk=on_chunk)
    text = source_note(source)
    if text is not None:
        note(text)
    return report


def max_eager_overrides(max_eager: list[str]) -> dict[str, int]:
    """Dotted config overrides of `--max-eager REASON=N` options (merged into the config's `gates.max_eager`).
    Raises `ConfigError` for an unknown reason or a bad count."""
    return {f"gates.max_eager.{reason}": n for reason, n in parse_max_eager(max_eager).items()}


def preset_table() -> list[tuple[str, int, str, int, str]]:
    """The shipped deployment presets: name, cp_size, strategy, chunked_prefill_size, buckets."""
    rows = []
    for name in preset_names():
        cfg = load_config(name)
        rows.append((name, cfg.cp_size, cfg.cp_strategy.value, cfg.scheduler.chunked_prefill_size, str(cfg.buckets)))
    return rows
