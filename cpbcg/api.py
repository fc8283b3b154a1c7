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

import glob
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from cpbcg.check.gates import CheckReport, Gates, ReplayRecord, check_gates, replay_gate, sample_graph_batches
from cpbcg.config import DeploymentConfig, load_config
from cpbcg.errors import CaptureError, ConfigError, TraceError
from cpbcg.planner.optimise.cost import with_measured
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.optimise.guarantee import GuaranteeCheck, Limits, check_guarantee, guarantee_buckets
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.plan import PlanResult, plan as _plan, plan_traffic
from cpbcg.planner.traffic import TrafficJob, default_rates, first_requests, load_jobs
from cpbcg.planner.optimise.recommend import Recommendation, RecommendSettings, default_chunk_tokens
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.sglang_release import ServerCheck, deployment_server_check
from cpbcg.planner.observed import ObservedTally
from cpbcg.planner.traces.sources import BatchSource, describe_source, open_source
from cpbcg.planner.traces import ForwardSizes, ReadOptions, detect
from cpbcg.planner.traces.registry import format_info
from cpbcg.planner.traces.sglang_settings import LogSettings, read_log_settings
from cpbcg.planner.traces.text import is_stdin

MANIFEST_KEYS = ("cp_size", "cp_strategy", "align_size", "capture_layout", "max_context_size_tokens", "max_capture_requests")
"""Config keys a capture manifest fixes (besides the buckets and, when recorded, the padding factor)."""


def load_config_and_deployment(
    config: str | None = None, overrides: Mapping[str, Any] | None = None, manifest: Any = None, cost_source: str | None = None,
    log: LogSettings | None = None,
) -> tuple[DeploymentConfig, Deployment]:
    """The validated config (file, preset or defaults; dotted `overrides` such as
    `scheduler.rate` win over it; None values are ignored) and its `Deployment`.

    With `manifest` (a loaded `cpbcg.manifest.Manifest`) its buckets, capacities and CP settings
    replace the config's, and giving one of those as an override is a `ConfigError`. With `log`
    (`log_settings` of an SGLang server log) the settings the log states lie over the config
    file and under `overrides` (the command line wins); a manifest's keys win over the log's."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    layers: list[tuple[str, dict[str, Any]]] = []
    if log is not None and log.settings:
        fixed = set(MANIFEST_KEYS) | {"buckets"} if manifest is not None else set()
        layers.append((f"the log {log.path}", {k: v for k, v in log.overrides().items() if k not in fixed}))
    if manifest is not None:
        fixed = [k for k in (*MANIFEST_KEYS, "buckets") if k in overrides]
        if fixed:
            raise ConfigError(f"{manifest.path}: the manifest fixes the buckets and CP settings; drop {', '.join(fixed)}")
        base: dict[str, Any] = {key: manifest.data.get(key) for key in MANIFEST_KEYS}
        base["buckets"] = manifest.table().capture_num_tokens.tolist()
        if manifest.data.get("max_padding_factor") is not None:
            base["max_padding_factor"] = manifest.data["max_padding_factor"]
        layers.append((str(manifest.path), base))
    cfg = load_config(config, overrides, layers=layers)
    deployment = cfg.to_deployment(cost_source)
    return cfg, deployment if manifest is None else with_manifest_cost(deployment, manifest)


def with_manifest_cost(deployment: Deployment, manifest: Any) -> Deployment:
    """`deployment` with the cost model fitted to a capture manifest's replay and eager timings,
    scaled to the real model's layer count (`Manifest.fitted_cost`); unchanged where it measured none."""
    fitted, eager = manifest.fitted_cost_ms(), manifest.eager_fixed_ms()
    return replace(deployment, cost=with_measured(deployment.cost, fitted, eager, f"manifest {manifest.path}"))


def load_deployment(config: str | None = None, **overrides: Any) -> Deployment:
    """A `Deployment` from a YAML file or preset (None = defaults) and config-key overrides
    (`cp_size=4`, `buckets="sglang-default:8192"`; scheduler keys as `scheduler={"rate": 8}`).
    Raises `ConfigError` naming the key."""
    flat: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return load_config_and_deployment(config, flat)[1]


def server_check(deployment: Deployment) -> ServerCheck:
    """SGLang 0.5.23's start-up checks and `supports_prefill_cp_bcg` on the flags the deployment
    runs with (`cpbcg.planner.sglang_release.deployment_server_check`)."""
    return deployment_server_check(deployment)


def log_settings(path: str | Path | None, trace_format: str = "auto", options: ReadOptions | None = None) -> LogSettings | None:
    """What an SGLang server log states about its deployment (settings dump or launch flags,
    captured list, capture cost, version), or None when `path` is not a server log (or is stdin).
    Raises `TraceError` for a trace that cannot be read or detected."""
    if path is None or is_stdin(path):
        return None
    fmt = format_info(trace_format) or detect(Path(path), options or ReadOptions())
    return read_log_settings(Path(path)) if fmt.name in ("sglang-log", "sglang-requests") else None


def open_trace(
    path: str | Path | None = None, deployment: Deployment | None = None, *, trace_format: str = "auto",
    length_field: str | None = None, time_field: str | None = None, output_field: str | None = None,
    model: str | None = None, log_type: str | None = None, options: ReadOptions | None = None,
    progress: Callable[[int], None] | None = None,
) -> BatchSource:
    """Prefill forwards of a trace, lazily: a batch trace as written, a request trace through the
    scheduler simulation with `deployment.scheduler` (calling `progress(requests read so far)` as
    it reads); None = the embedded default workload; `-` = stdin. An SGLang server log gives
    forward sizes only (`.is_bound`, `.forwards`): `plan`, `evaluate` and `check` take it at its
    worst case. The reading options are the CLI's: `length_field`, `time_field`, `output_field`
    (generic CSV/JSONL fields), `model`, `log_type` (BurstGPT filters); `options` (a
    `ReadOptions`) replaces them all. `plan` reads the file afresh each time, so the same object
    can be planned again (one read from stdin can be read once). Raises `TraceError`
    (`FILE:LINE: ...`)."""
    scheduler = deployment.scheduler if deployment is not None else None
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field, output_field=output_field, model=model, log_type=log_type)
    return open_source(None if path is None else Path(path), trace_format=trace_format, scheduler=scheduler,
                       options=options, progress=progress)


def _chunks(trace: BatchSource | Iterable[BatchSet]) -> Iterable[BatchSet] | Iterable[ForwardSizes]:
    if isinstance(trace, BatchSource):
        return trace.forwards if trace.is_bound else trace.batches  # type: ignore[return-value]
    return trace


def report_header(deployment: Deployment, trace: BatchSource | str | Path | None, path: str | Path | None = None) -> dict[str, Any]:
    """The report header (`Deployment.header`) of a trace: its source line and `bound`, True
    when the trace gives forward sizes only and every number is a worst-case bound."""
    bound = isinstance(trace, BatchSource) and trace.is_bound
    source = path if isinstance(trace, BatchSource) else trace
    return {**deployment.header(describe_source(source, bound=bound)), "bound": bound}


def _observed_plan(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, settings: RecommendSettings | None,
                   table: BucketTable | None, on_chunk: Callable[[BatchSet], Any] | None) -> PlanResult:
    """`plan`, with an SGLang log's verdicts tallied against the model as the forwards stream past."""
    chunks = _chunks(trace)
    summary = trace.log_summary if isinstance(trace, BatchSource) else None
    if summary is None:
        return _plan(chunks, deployment, settings, table, on_chunk)
    assert isinstance(trace, BatchSource)
    tally = ObservedTally(deployment.table() if table is None else table, deployment.cp, deployment.max_padding_factor, trace.log)
    result = _plan(tally.tap(chunks), deployment, settings, table, on_chunk)
    return replace(result, observed=tally.result(summary.graph_label))


def evaluate(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, table: BucketTable | None = None,
             on_chunk: Callable[[BatchSet], Any] | None = None) -> Evaluation:
    """Replay every forward with the deployment's list (or `table`) through the runtime selector
    (a bound source at its worst case, as `plan`)."""
    return _plan(_chunks(trace), deployment, None, table, on_chunk).evaluation  # plan without a recommendation


def plan(trace: BatchSource | Sequence[BatchSource] | Iterable[BatchSet], deployment: Deployment,
         settings: RecommendSettings | None = RecommendSettings(), table: BucketTable | None = None,
         on_chunk: Callable[[BatchSet], Any] | None = None, *, load_factors: Sequence[float] | None = None,
         rates: Sequence[float] | str | None = None, workers: int = 1, scheduler: str | None = None,
         fit_traces: Sequence[str] | None = None, progress: Callable[[int], None] | None = None) -> PlanResult:
    """Evaluate the configured list and recommend one (`cpbcg plan`).

    `trace`: one opened trace (`open_trace`), several (planned together, each an independent
    server, reported per trace), or an iterable of `BatchSet` chunks (planned in one pass). An
    opened trace is read afresh for every plan and every load, so it can be planned again; one
    read from standard input can be read once.

    `load_factors` (e.g. `[0.5, 1, 2, 4]`, default: the scheduler's `time_scale`): every request
    trace is simulated at each (inter-arrival gaps divided by the factor), the list is fitted to
    all of them together, and `PlanResult.parts` reports each (trace, factor). A request trace
    without timestamps is simulated at Poisson `rates` (requests/s) instead, or with
    `rates="auto"` at the rates that keep the modelled prefill `traffic.UTILISATIONS` busy
    (`traffic.default_rates`); None keeps the scheduler's one `rate`. Batch traces and server
    logs have no arrivals: planned once. `fit_traces` (paths as given): fit on these traces
    only, report on all. The jobs run in this process, on `workers` local processes, or on the
    Dask cluster at `scheduler` (`tcp://host:8786`; needs `cpbcg[distributed]`); the result is
    the same. A bound source (`BatchSource.is_bound`) is planned at each forward's exact worst
    case; on an SGLang log whose lines print the graph verdict, `.observed` compares the server's
    verdicts with the model's. Raises `TraceError`, `ConfigError` (bad settings, `fit_traces` naming no trace given)."""
    sources = [trace] if isinstance(trace, BatchSource) else list(trace) if _all_sources(trace) else None
    if sources is None:  # plain chunks: one pass, in place
        return _plan(trace, deployment, settings, table, on_chunk)  # type: ignore[arg-type]
    if len(sources) == 1 and sources[0].log_summary is not None and (load_factors is None or len(load_factors) <= 1):
        return _observed_plan(sources[0], deployment, settings, table, on_chunk)  # a server log: verdicts tallied
    if len(sources) == 1 and sources[0].spec is None:  # standard input: read once, in place
        if load_factors is not None and len(load_factors) > 1:
            raise ConfigError("--time-scale: a trace read from standard input can be simulated once: give one load factor, or a file")
        return _plan(_chunks(sources[0]), deployment, settings, table, on_chunk)
    jobs = traffic_jobs(sources, deployment, load_factors, rates, fit_traces)
    return plan_traffic(jobs, deployment, settings, table, workers=workers, scheduler=scheduler, on_chunk=on_chunk, progress=progress)


def traffic_jobs(sources: Sequence[BatchSource], deployment: Deployment, load_factors: Sequence[float] | None = None,
                 rates: Sequence[float] | str | None = None, fit_traces: Sequence[str] | None = None) -> list[TrafficJob]:
    """The (trace, load) jobs `plan` runs for `sources` (see `plan`)."""
    fit = None if fit_traces is None else {str(Path(p)) for p in fit_traces}
    given = {str(Path(s.spec.path)) for s in sources if s.spec is not None and s.spec.path is not None}
    if fit is not None and not fit & given:
        raise ConfigError(f"--fit-trace {', '.join(sorted(fit))}: not among the traces given ({', '.join(sorted(given)) or 'none'})")
    jobs: list[TrafficJob] = []
    for source in sources:
        if source.spec is None:
            raise ConfigError("a trace read from standard input can be read once: plan it alone, at one load factor")
        spec = source.spec
        label = describe_source(spec.path, bound=source.is_bound)
        fitted = fit is None or str(Path(spec.path or "")) in fit
        factors = list(load_factors) if load_factors else [spec.scheduler.time_scale]
        if source.simulation is None:  # no arrivals to scale: one job
            jobs += load_jobs(spec, label, [spec.scheduler.time_scale], None, fitted)
            continue
        job_rates = None
        if rates is not None:
            first = first_requests(spec)
            if first is not None and first.arrival_s is None:
                job_rates = default_rates(float(first.input_tokens.mean()), spec.scheduler) if rates == "auto" else list(rates)  # type: ignore[arg-type]
        jobs += load_jobs(spec, label, factors, job_rates, fitted)
    return jobs


def trace_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Trace files from paths as given: a directory stands for its files (not hidden, sorted by
    name), a glob (`day-*.csv`) that names no file for the files it matches (sorted), `-` for
    standard input. Raises `TraceError` for a directory or glob with no file."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        try:
            is_dir, exists = path.is_dir(), path.exists()
        except OSError:  # e.g. a name too long: the reader reports it
            is_dir, exists = False, True
        if is_dir:
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                raise TraceError(f"{given}: a directory without trace files")
            out += files
        elif str(given) != "-" and not exists and any(c in str(given) for c in "*?["):
            files = sorted(Path(p) for p in glob.glob(str(given)) if Path(p).is_file())
            if not files:
                raise TraceError(f"{given}: no file matches this pattern")
            out += files
        else:
            out.append(path)
    return out


def _all_sources(trace: Any) -> bool:
    return isinstance(trace, (list, tuple)) and bool(trace) and all(isinstance(t, BatchSource) for t in trace)


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


def check(trace_path: str | Path | None, deployment: Deployment, gates: Gates, *, manifest: Any = None, replay: int = 0,
          trace_options: Mapping[str, Any] | None = None, on_chunk: Callable[[BatchSet], Any] | None = None,
          config: Any = None) -> tuple[CheckReport, BatchSource]:
    """Evaluate a trace as `plan` does, check the gates, and with `replay > 0` replay that many
    sampled graph forwards through freshly captured graphs (torch). Returns the report and the
    opened source (its simulation summary is complete). A bound source (server log) is checked
    at its worst case (header `bound` True); it has no extend lengths to replay (`ConfigError`)."""
    options = dict(trace_options or {})
    table = manifest.table() if manifest is not None else deployment.table()
    source = open_trace(trace_path, deployment, **options)
    if replay and source.is_bound:
        raise ConfigError(f"{describe_source(trace_path)}: an SGLang server log gives forward sizes, not extend lengths: nothing to replay through graphs")
    planned = _observed_plan(source, deployment, None, table, on_chunk)
    ev = planned.evaluation
    header = report_header(deployment, source, trace_path)
    if manifest is not None:
        header["manifest"] = str(manifest.path)
    results = check_gates(ev, gates, planned.observed)
    replays: tuple[ReplayRecord, ...] = ()
    if replay:
        options.pop("progress", None)
        sampled = sample_graph_batches(open_trace(trace_path, deployment, **options).batches, table, deployment.cp,
                                       deployment.max_padding_factor, replay)
        replays = _replay(sampled, config)
        results += (replay_gate(replays),)
    return CheckReport(header, ev, results, replays, planned.observed), source


def _replay(batches: list[list[int]], config: Any) -> tuple[ReplayRecord, ...]:
    try:
        from cpbcg.capture.run import replay_batches
    except ImportError as exc:
        raise CaptureError(f"replay needs the capture extra and torch (pip install 'cpbcg[capture]'): {exc}") from exc
    return tuple(ReplayRecord.of(record) for record in replay_batches(batches, config))


def capture(settings: Any, on_step: Callable[[str, int], None] | None = None) -> Any:
    """Capture and verify breakable CUDA graphs per bucket (`cpbcg.capture.run_capture`; needs
    torch, CPU dry run without CUDA). `settings` is a `cpbcg.capture.CaptureSettings`; returns a
    `CaptureResult`, which `cpbcg.manifest.manifest_document` turns into the manifest."""
    try:
        from cpbcg.capture import run_capture
    except ImportError as exc:
        raise CaptureError(f"capture needs the capture extra and torch (pip install 'cpbcg[capture]'): {exc}") from exc
    return run_capture(settings, on_step)
