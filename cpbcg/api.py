"""cpbcg's public Python API: what the commands call, for notebooks and other tools.

    import cpbcg
    deployment = cpbcg.load_deployment(cp_size=4)                      # or a YAML file / preset
    result = cpbcg.plan(cpbcg.open_trace("lens.jsonl", deployment), deployment)
    print(result.evaluation.coverage, result.recommendation.buckets)

Every function returns a typed frozen result (`Evaluation`, `PlanResult`, `Recommendation`,
`GuaranteeResult`, `CheckReport`); `cpbcg.outputs.documents` turns them into JSON. Nothing here prints
or imports typer, rich or torch (capture imports torch when called). Errors are `CpbcgError`
subclasses with one-line messages naming the file, line and config key.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from cpbcg.engines.sglang.server import resolved_server
from cpbcg.bucket_files import flags_file_words
from cpbcg.config import SERVER_KEYS, DeploymentConfig, load_config
from cpbcg.errors import CaptureError, ConfigError
from cpbcg.inputs import file_identity
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation
from cpbcg.planner.model.explain import BatchExplanation, explain_batch
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.costs.cost import with_measured
from cpbcg.planner.optimise.guarantee import GuaranteeResult, Limits, check_guarantee, guarantee_buckets
from cpbcg.planner.optimise.recommend import Recommendation, RecommendSettings
from cpbcg.assembly.plan import AgainstDefault, PlanPart, PlanResult, plan as _plan, plan_launches, plan_traffic
from cpbcg.assembly.traffic import TrafficJob, load_jobs, request_profile, simulated_loads, untimed_rates
from cpbcg.engines.sglang.observed import AssumedSetting, LaunchModel, LogObserved, ObservedTally, assumed_settings
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.planner.traces.text import is_stdin
from cpbcg.engines.sglang.server import ServerCheck
from cpbcg.engines.sglang.export import mode_flags
from cpbcg.planner.traces import ForwardSizes, ReadOptions
from cpbcg.engines.sglang.logs.log import LogReader
from cpbcg.assembly.sources import BatchSource, TraceInput, describe_source, detect_input, open_source, report_header
from cpbcg.manifest import MANIFEST_KEYS, Manifest
from cpbcg.settings import CAPTURE_DEFAULT_BUCKETS

if TYPE_CHECKING:
    from cpbcg.engines.sglang.decode_plan import DecodePlan, DecodeServer
    from cpbcg.gates.gates import CheckReport, Gates, ReplayRecord
    from cpbcg.graph_capture.records import CaptureResult
    from cpbcg.watching.options import WatchOptions
    from cpbcg.watching.session import WatchReport, WatchSnapshot

__all__ = [  # the library facade: only what this module defines (result types live with the code that makes them)
    "capture",
    "check",
    "check_decode_flags",
    "decode_graphs",
    "decode_guarantee",
    "decode_loads",
    "decode_plan",
    "evaluate",
    "explain",
    "guarantee",
    "load_config_and_deployment",
    "load_deployment",
    "log_settings",
    "observe_log",
    "open_trace",
    "plan",
    "recommend",
    "server_check",
    "traffic_jobs",
    "watch",
    "with_manifest_cost",
]


def load_config_and_deployment(
    config: str | None = None, overrides: Mapping[str, object] | None = None, manifest: Manifest | None = None,
    cost_source: str | None = None, log: LogSettings | None = None,
) -> tuple[DeploymentConfig, Deployment]:
    """The validated config (file, preset or defaults; dotted `overrides` such as
    `scheduler.rate` win over it; None values are ignored) and its `Deployment`: the one
    conversion from settings to the plain value every later step takes.

    With `manifest` (a loaded `cpbcg.manifest.Manifest`) its buckets, capacities and CP settings
    replace the config's (`Manifest.config_layer`), and giving one of those as an override is a
    `ConfigError`. With `log` (`log_settings` of one launch of an SGLang server log) the server
    the launch states and printed is resolved by 0.5.23's start-up rules as a launch command is
    (`load_config`'s `log`: each value sourced `log line N`), over the config file and under
    `overrides` (the command line wins); its captured list lies over the config's buckets. A
    manifest's keys win over the log's."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    layers: list[tuple[str, dict[str, object]]] = []
    if log is not None and log.settings:
        fixed = set(MANIFEST_KEYS) | {"buckets"} if manifest is not None else set()
        kept = {k: v for k, v in log.overrides().items() if k not in fixed and k not in SERVER_KEYS}  # the resolution takes those
        if kept:
            layers.append((f"the log {log.path}", kept))
    if manifest is not None:
        clashing = [k for k in (*MANIFEST_KEYS, "buckets") if k in overrides]
        if clashing:
            raise ConfigError(f"{manifest.path}: the manifest fixes the buckets and CP settings; drop {', '.join(clashing)}")
        layers.append((str(manifest.path), manifest.config_layer()))
    cfg = load_config(config, overrides, layers=layers, log=log)
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
    runs with: the flags file given as its bucket list (`--buckets FLAGS`, read here at the input
    edge), else the server the deployment was resolved to, else the CP flags `plan --emit sglang`
    writes (`cpbcg.engines.sglang.startup`). Without CP (`cp_size` 1) there is nothing to check.
    Raises `ValueError` for a flags file value 0.5.23 would not parse."""
    from cpbcg.engines.sglang.startup import check_flag_words

    if deployment.cp.cp_size == 1:  # without CP there is nothing to check
        return ServerCheck([], [])
    server, words = resolved_server(deployment), flags_file_words(deployment.bucket_spec)
    if words is not None:
        return check_flag_words(words, server.model if server else None, server.gpu if server else None)
    if server is not None:
        return ServerCheck.of(server)
    return check_flag_words(mode_flags(deployment.cp))


def log_settings(path: str | Path | None, trace_format: str = "auto", options: ReadOptions | None = None) -> LogSettings | None:
    """What an SGLang server log states about its deployment (settings dump or launch flags,
    captured list, capture cost, version), or None when `path` is not a server log (or is stdin).
    Raises `TraceError` for a trace that cannot be read or detected."""
    return None if path is None else detect_input(path, trace_format, options).log


def observe_log(source: BatchSource, deployment: Deployment, resolve: Callable[[LogSettings], LaunchModel] | None = None) -> LogObserved:
    """One SGLang log's own observed comparison (every launch under its own settings), read in a
    pass of its own: what `plan` reports per log when several traces are planned together."""
    fresh = source.spec.open() if source.spec is not None else source
    reader = fresh.forwards
    assert isinstance(reader, LogReader)
    log = fresh.log or LogSettings(path=str(source.spec.path if source.spec else "-"))
    base = resolve(log) if resolve is not None else LaunchModel(deployment.table(), deployment.cp, deployment.max_padding_factor)
    tally = ObservedTally(base.table, base.cp, base.max_padding_factor, log, launch_settings=reader.launch, resolve=resolve, assumed=base.assumed)
    for _ in tally.tap(reader):
        pass
    return LogObserved(log.path, log, tally.result(reader.summary.graph_label), reader.summary)


def open_trace(
    path: TraceInput | str | Path | None = None, deployment: Deployment | None = None, *, trace_format: str = "auto",
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
    (`FILE:LINE: ...`). A `TraceInput` (`detect_input`) is opened as detected."""
    scheduler = deployment.scheduler if deployment is not None else None
    if options is None:
        options = ReadOptions(length_field=length_field, time_field=time_field, output_field=output_field, model=model, log_type=log_type)
    return open_source(path if path is None or isinstance(path, TraceInput) else Path(path), trace_format=trace_format, scheduler=scheduler,
                       options=options, progress=progress)


def _chunks(trace: BatchSource | Iterable[BatchSet]) -> Iterable[BatchSet] | Iterable[ForwardSizes]:
    if isinstance(trace, BatchSource):
        return trace.forwards if trace.forwards is not None else trace.batches  # a bound source: its forward sizes
    return trace


def _batch_chunks(chunks: Iterable[object]) -> Iterator[BatchSet]:
    """`chunks`, each checked to be a `BatchSet` (one check per chunk)."""
    for chunk in chunks:
        if not isinstance(chunk, BatchSet):
            raise TypeError(f"plan: expected opened traces or BatchSet chunks, got {type(chunk).__name__}")
        yield chunk


def _observed_plan(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, settings: RecommendSettings | None,
                   table: BucketTable | None, on_chunk: Callable[[BatchSet | ForwardSizes], object] | None,
                   resolve: Callable[[LogSettings], LaunchModel] | None = None,
                   launch_capture: Callable[[LogSettings], Mapping[str, object]] | None = None) -> PlanResult:
    """`plan`, with an SGLang log's verdicts tallied against the model as the forwards stream past
    (each launch under its own settings with `resolve`, `launch_resolver`, in the comparison and
    in the main table: `plan_launches`)."""
    chunks = _chunks(trace)
    summary = trace.log_summary if isinstance(trace, BatchSource) else None
    if summary is None:
        return _plan(chunks, deployment, settings, table, on_chunk)
    assert isinstance(trace, BatchSource)
    reader = trace.forwards
    first = resolve(trace.log) if resolve is not None and trace.log is not None and table is None else None
    tally = ObservedTally(deployment.table() if table is None else table, deployment.cp, deployment.max_padding_factor, trace.log,
                          launch_settings=reader.launch if isinstance(reader, LogReader) and table is None else None,
                          resolve=resolve if table is None else None, assumed=first.assumed if first is not None else ())
    assert trace.forwards is not None  # a server log is a bound source
    if first is not None and isinstance(reader, LogReader):  # each launch under its own resolved server (`plan_launches`)
        result = plan_launches(tally.tap(trace.forwards), deployment, settings, launch_settings=reader.launch, resolve=resolve,  # type: ignore[arg-type]
                               launch_capture=launch_capture, on_chunk=on_chunk)
    else:
        result = _plan(tally.tap(trace.forwards), deployment, settings, table, on_chunk)
    return replace(result, observed=tally.result(summary.graph_label))


def evaluate(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, table: BucketTable | None = None,
             on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None) -> Evaluation:
    """Replay every forward with the deployment's list (or `table`) through the runtime selector
    (a bound source at its worst case, as `plan`)."""
    return _plan(_chunks(trace), deployment, None, table, on_chunk).evaluation  # plan without a recommendation


def plan(trace: BatchSource | Sequence[BatchSource] | Iterable[BatchSet], deployment: Deployment,
         settings: RecommendSettings | None = RecommendSettings(), table: BucketTable | None = None,
         on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None, *, load_factors: Sequence[float] | None = None,
         rates: Sequence[float] | str | None = None, workers: int = 1, scheduler: str | None = None,
         fit_traces: Sequence[str] | None = None, progress: Callable[[int], None] | None = None,
         resolve_launch: Callable[[LogSettings], LaunchModel] | None = None,
         launch_capture: Callable[[LogSettings], Mapping[str, object]] | None = None) -> PlanResult:
    """Evaluate the configured list and recommend one (`cpbcg plan`).

    `trace`: one opened trace (`open_trace`), several (planned together, each an independent
    server, reported per trace), or an iterable of `BatchSet` chunks (planned in one pass). An
    opened trace is read afresh for every plan and every load, so it can be planned again (a
    request trace from standard input is held; a batch trace from it can be read once).

    `load_factors` (e.g. `[0.5, 1, 2, 4]`, default: the scheduler's `time_scale`): every request
    trace is simulated at each (inter-arrival gaps divided by the factor), the list is fitted to
    all of them together, and `PlanResult.parts` reports each (trace, factor). A request trace
    without timestamps is simulated at Poisson `rates` (requests/s) times each factor instead,
    or with `rates="auto"` at the rates that would keep the modelled prefill `traffic.UTILISATIONS`
    busy (`traffic.default_rates` of its mean prompt over the whole trace); None keeps the
    scheduler's one `rate` (`traffic.untimed_rates`: the one load model of every command). Batch traces and server
    logs have no arrivals: planned once. `fit_traces` (paths as given): fit on these traces
    only, report on all. The jobs run in this process, on `workers` local processes, or on the
    Dask cluster at `scheduler` (`tcp://host:8786`; needs `cpbcg[distributed]`); the result is
    the same. A bound source (`BatchSource.is_bound`) is planned at each forward's exact worst
    case; on an SGLang log whose lines print the graph verdict, `.observed` compares the server's
    verdicts with the model's, launch by launch (each under its own settings with `resolve_launch`,
    `launch_resolver`), and the main evaluation models each launch under its own server too
    (`assembly.plan.plan_launches`: the recommendation is for the last launch, with the capture
    cost `launch_capture` reads from its settings). Raises `TraceError`, `ConfigError` (bad settings, `fit_traces` naming no trace given)."""
    sources = [trace] if isinstance(trace, BatchSource) else _sources_of(trace)
    if sources is None:  # plain chunks: one pass, in place
        assert not isinstance(trace, BatchSource)
        return _plan(_batch_chunks(trace), deployment, settings, table, on_chunk)
    if len(sources) == 1 and sources[0].log_summary is not None and (load_factors is None or len(load_factors) <= 1):
        return _observed_plan(sources[0], deployment, settings, table, on_chunk, resolve_launch, launch_capture)  # a server log: verdicts tallied
    if len(sources) == 1 and sources[0].spec is None:  # standard input: read once, in place
        if load_factors is not None and len(load_factors) > 1:
            raise ConfigError("--time-scale: a trace read from standard input can be simulated once: give one load factor, or a file")
        return _plan(_chunks(sources[0]), deployment, settings, table, on_chunk)
    jobs = traffic_jobs(sources, deployment, load_factors, rates, fit_traces)
    if scheduler is not None:  # Dask workers open files against their own directory: relative paths made absolute here
        jobs = [replace(j, spec=replace(j.spec, path=os.path.abspath(j.spec.path))) if j.spec.path not in (None, "-") else j for j in jobs]
    return plan_traffic(jobs, deployment, settings, table, workers=workers, scheduler=scheduler, on_chunk=on_chunk, progress=progress)


def traffic_jobs(sources: Sequence[BatchSource], deployment: Deployment, load_factors: Sequence[float] | None = None,
                 rates: Sequence[float] | str | None = None, fit_traces: Sequence[str] | None = None) -> list[TrafficJob]:
    """The (trace, load) jobs `plan` runs for `sources` (see `plan`)."""
    if isinstance(rates, str) and rates != "auto":
        raise ConfigError(f"rates: {rates[:20]!r} is neither 'auto' nor a list of rates (requests/s)")
    fit = None if fit_traces is None else {file_identity(p) for p in fit_traces}  # one file by any name
    given = {file_identity(s.spec.path): s.spec.path for s in sources if s.spec is not None and s.spec.path is not None}
    if fit is not None and not fit & set(given) and fit_traces is not None:
        raise ConfigError(f"--fit-trace {', '.join(sorted(map(str, fit_traces)))}: not among the traces given ({', '.join(sorted(given.values())) or 'none'})")
    jobs: list[TrafficJob] = []
    for source in sources:
        if source.spec is None:
            raise ConfigError("a trace read from standard input can be read once: plan it alone, at one load factor")
        spec = source.spec
        label = describe_source(spec.path, bound=source.is_bound)
        fitted = fit is None or file_identity(spec.path or "") in fit
        factors = list(load_factors) if load_factors else [spec.scheduler.time_scale]
        if source.simulation is None:  # no arrivals to scale: one job
            jobs += load_jobs(spec, label, [spec.scheduler.time_scale], None, fitted)
            continue
        jobs += load_jobs(spec, label, factors, untimed_rates(request_profile(spec), spec.scheduler, rates), fitted)
    return jobs


def _sources_of(trace: Sequence[BatchSource] | Iterable[BatchSet]) -> list[BatchSource] | None:
    """The opened traces `plan` was given (a non-empty list or tuple of them), or None for plain chunks."""
    if isinstance(trace, (list, tuple)) and trace and all(isinstance(t, BatchSource) for t in trace):
        return [t for t in trace if isinstance(t, BatchSource)]
    return None


def recommend(trace: BatchSource | Iterable[BatchSet], deployment: Deployment, settings: RecommendSettings = RecommendSettings()) -> Recommendation:
    """Only the recommendation of `plan`."""
    result = plan(trace, deployment, settings)
    assert result.recommendation is not None
    return result.recommendation


def guarantee(deployment: Deployment, max_requests: int, max_tokens: int | None = None, *, recommend_list: bool = True,
              bucket_multiple: int = 1) -> GuaranteeResult:
    """The fewest buckets that replay every CP-active forward of at most `max_requests` requests
    and `max_tokens` tokens (default: the chunk), or with `recommend_list=False` the proof that
    the deployment's configured list does."""
    limits = Limits(max_requests, max_tokens or deployment.scheduler.largest_forward_tokens)
    cp, spec, factor = deployment.cp, deployment.capture, deployment.max_padding_factor
    buckets = guarantee_buckets(limits, cp, spec, factor, bucket_multiple) if recommend_list else deployment.table().capture_num_tokens.tolist()
    source = "given (--max-tokens)" if max_tokens else deployment.largest_forward_source()
    return GuaranteeResult(limits, buckets, check_guarantee(buckets, limits, cp, spec, factor), recommend_list, source)


def check(trace: TraceInput | str | Path | None, deployment: Deployment, gates: Gates, *, manifest: Manifest | None = None, replay: int = 0,
          trace_format: str = "auto", options: ReadOptions | None = None, progress: Callable[[int], None] | None = None,
          on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None, rates: str | None = "auto",
          resolve_launch: Callable[[LogSettings], LaunchModel] | None = None) -> tuple[CheckReport, BatchSource]:
    """Evaluate a trace as `plan` does, check the gates, and with `replay > 0` replay that many
    sampled graph forwards through freshly captured graphs (torch). Returns the report and the
    opened source (its simulation summary is complete unless the report has `parts`). A request
    trace without timestamps is simulated at the rates `plan` simulates it at (`rates`, as
    `plan` takes them: `auto` the rate picker's, None the scheduler's `rate`), its parts in the
    report. A bound source (server log) is checked at its worst case (header `bound` True); it
    has no extend lengths to replay (`ConfigError`). A `TraceInput` is opened as detected."""
    from cpbcg.gates.gates import CheckReport, check_gates, replay_gate, sample_graph_batches, what_the_server_did

    trace_path = Path(str(trace)) if isinstance(trace, TraceInput) else trace
    table = manifest.table() if manifest is not None else deployment.table()
    source = open_trace(trace, deployment, trace_format=trace_format, options=options, progress=progress)
    if replay and source.is_bound:
        raise ConfigError(f"{describe_source(trace_path)}: an SGLang server log gives forward sizes, not extend lengths: nothing to replay through graphs")
    several = simulated_loads(source, rates) > 1
    against = AgainstDefault(deployment)
    tapped = against.tap(on_chunk)
    planned = (plan([source], deployment, None, table, tapped, rates=rates, progress=progress) if several
               else _observed_plan(source, deployment, None, table if manifest is not None else None, tapped,
                                   None if manifest is not None else resolve_launch))
    ev = planned.evaluation
    header = {**report_header(planned.deployment or deployment, source, trace_path), **planned.launch_header()}  # a log's last launch (`PlanResult.launch_header`)
    if manifest is not None:
        header["manifest"] = str(manifest.path)
    parts = tuple(planned.parts) if several else ()
    decode = decode_plan(planned.deployment or deployment, [source], parts, recommend=False)
    results = check_gates(ev, gates, planned.observed, decode) + what_the_server_did(gates, planned.observed)  # a log: what the server did too
    replays: tuple[ReplayRecord, ...] = ()
    if replay:
        sampled = sample_graph_batches(open_trace(trace, deployment, trace_format=trace_format, options=options).batches, table, deployment.cp,
                                       deployment.max_padding_factor, replay)
        replays = _replay(sampled, deployment)
        results += (replay_gate(replays),)
    return CheckReport(header, ev, results, replays, planned.observed, parts=parts, launches=planned.launches,
                       default_evaluation=against.result(ev), against_default=against.flags(ev), decode=decode), source


def _replay(batches: list[list[int]], deployment: Deployment) -> tuple[ReplayRecord, ...]:
    try:
        from cpbcg.graph_capture.run import replay_batches
    except ImportError as exc:
        raise CaptureError(f"replay needs the capture extra and torch (pip install 'cpbcg[capture]'): {exc}") from exc
    from cpbcg.gates.gates import ReplayRecord

    return tuple(ReplayRecord.of(record) for record in replay_batches(batches, deployment))


def capture(config: str | None = None, overrides: Mapping[str, object] | None = None, *, preset: str = "tiny", layers: int = 2,
            dtype: str | None = None, seed: int = 0, trace: str | Path | None = None, samples: int = 2, dry_run: bool = False,
            on_start: Callable[[int], None] | None = None, on_step: Callable[[str, int], None] | None = None,
            on_phase: Callable[[str, int], None] | None = None) -> CaptureResult:
    """Capture and verify breakable CUDA graphs per bucket of the deployment that `config` and
    `overrides` describe (`load_config_and_deployment`; buckets default to
    `CAPTURE_DEFAULT_BUCKETS` when neither names any), with the capture-only options (model
    preset, proxy layers, dtype, seed, trace samples). `on_start(buckets)` is called once the
    list is known, `on_step(phase, bucket)` after each capture and verification, `on_phase(phase,
    bucket)` as each phase begins (`sampling`, `setup`, then `capture` / `verify` per bucket; the
    result's `wall` and each bucket's `wall` say where the time went). Needs torch; a CPU dry run without CUDA.
    Returns a `CaptureResult` (`cpbcg.outputs.documents.manifest_document` turns it into the manifest).
    Raises `ConfigError`, `TraceError`, `ModelError`, `CaptureError` (also when torch is missing)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    cfg, deployment = load_config_and_deployment(config, given)
    if "buckets" not in cfg.model_fields_set:
        cfg, deployment = load_config_and_deployment(config, {**given, "buckets": CAPTURE_DEFAULT_BUCKETS})
    try:
        from cpbcg.graph_capture import CaptureSettings, run_capture
        settings = CaptureSettings(deployment, preset=preset, num_layers=layers, dtype=dtype, seed=seed,
                                   trace=None if trace is None else Path(trace), samples=samples, dry_run=dry_run)
        if on_start is not None:
            on_start(len(settings.buckets))
        return run_capture(settings, on_step, on_phase)
    except ImportError as exc:
        raise CaptureError(f"cpbcg capture needs torch ({exc}); install it with: pip install 'cpbcg[capture]'") from exc


def explain(extend_seq_lens: list[int], deployment: Deployment) -> BatchExplanation:
    """One batch through the CP split and the replay selector: blocks and tokens per rank, rows,
    the bucket the runtime would replay it in or why it runs eagerly."""
    return explain_batch(extend_seq_lens, deployment.cp, deployment.table(), deployment.max_padding_factor)


def watch(logs: Sequence[str], config: str | None, overrides: Mapping[str, object], options: WatchOptions, *,
          max_eager: list[str] | None = None, metrics_urls: Sequence[str] = (), serve_metrics: str | None = None,
          baseline_trace: str | Path | None = None, on_snapshot: Callable[[WatchSnapshot], None] | None = None,
          note: Callable[[str], None] = lambda text: None,
          launch_notes: Callable[[LogSettings, Mapping[str, object], Sequence[AssumedSetting]], Sequence[str]] | None = None,
          instances: Sequence[str] = (), from_end: bool = False, since: str | None = None) -> WatchReport:
    """`cpbcg watch`: follow running servers' logs (`-`: standard input) and judge their prefill
    graphs over the run and rolling windows (`cpbcg.watching.session`). Each server runs under the
    config, its log's start-up settings and `overrides` (the layers `plan` reads a log with), and
    is gated by the config's `gates:`, `overrides` and `max_eager`. `instances`: each log's replica
    (the metrics' `instance` label; default `cpbcg.watching.options.default_instance()`);
    `from_end` / `since`: judge only what is written after the start, or from a time on. Called from
    the main thread, SIGTERM and SIGINT end the run with its report (`stopped_by` `terminated`,
    `interrupted`); the previous handlers are restored after. `baseline_trace`: the trace
    the list was planned on (any format `plan` reads), for drift. `launch_notes(log, overrides,
    assumed)`: the lines `note` receives as each launch is resolved (what its log states and what
    is assumed; the CLI's are `cpbcg.outputs.notes.launch_notes`). Raises `ConfigError`, `TraceError`."""
    from cpbcg.gates.gates import max_eager_overrides
    from cpbcg.planner.arrays import FloatArray
    from cpbcg.assembly.window import size_histogram
    from cpbcg.watching.run import watch_logs
    from cpbcg.watching.session import Resolved

    overrides = {**overrides, **max_eager_overrides(max_eager or [])}
    if baseline_trace is not None and not is_stdin(baseline_trace) and not Path(baseline_trace).is_file():
        raise ConfigError(f"--baseline-trace {str(baseline_trace)[:200]}: no such file")  # said before following, not at the first update

    def resolve(log: LogSettings) -> Resolved:
        cfg, deployment = load_config_and_deployment(config, overrides, log=log)
        assumed = assumed_settings(log, deployment, overrides)
        notes = tuple(launch_notes(log, overrides, assumed)) if launch_notes is not None else ()
        return Resolved(deployment, cfg.gates.to_gates(), deployment.table(), notes, assumed)

    def baseline(server: Resolved) -> "FloatArray | None":
        if baseline_trace is None:
            return None
        source = open_trace(baseline_trace, server.deployment)  # a request trace is simulated under the server's settings
        hist = None
        buckets = server.table.capture_num_tokens.tolist()
        for chunk in source.forwards if source.forwards is not None else source.batches:
            part = size_histogram(chunk.num_tokens, chunk.counts, buckets)
            hist = part if hist is None else hist + part
        return hist

    return watch_logs(logs, resolve, options, metrics_urls=metrics_urls, serve_metrics=serve_metrics,
                      baseline=baseline if baseline_trace is not None else None, on_snapshot=on_snapshot, note=note,
                      baseline_trace_is_stdin=baseline_trace is not None and is_stdin(baseline_trace), instances=instances,
                      from_end=from_end, since=since)


def decode_plan(deployment: Deployment, sources: Sequence[BatchSource], parts: Sequence["PlanPart"] = (),
                recommend: bool = True) -> "DecodePlan | None":
    """The decode graphs of the deployment's server (SGLang 0.5.23: `cpbcg.engines.sglang.decode`)
    on the decode steps of the traffic planned: every decode step of the scheduler simulation of
    each (trace, load) part (`PlanPart`s; else the sources' own simulations), or the `Decode batch`
    lines of a server log (a 1-in-`decode_log_interval` sample, with their verdicts compared).
    None when the traffic has no decode steps to judge (batch traces, decode not simulated, a log
    without `Decode batch` lines). `recommend` False: the server's list only. Raises `ConfigError`
    for decode flags 0.5.23 would refuse."""
    from cpbcg.engines.sglang.decode_plan import cost_of, decode_server_of, log_decode_plan, plan_decode
    from cpbcg.planner.decode_steps import DecodeSteps

    try:
        server, notes = decode_server_of(deployment)
    except ValueError as exc:
        raise ConfigError(f"decode graphs: {exc}") from None
    cost = cost_of(deployment)
    slots = deployment.scheduler.request_slots
    labelled: list[tuple[str, DecodeSteps]] = []
    for part in parts:
        sim = part.source.simulation
        if sim is not None and sim.summary().decode:
            labelled.append((f"{part.label} {part.load}", sim.summary().decode_batches))
    if not labelled:
        for one in sources:
            if one.simulation is not None and one.simulation.summary().decode:
                labelled.append((str(one.spec.path) if one.spec is not None else "-", one.simulation.summary().decode_batches))
    if labelled:
        steps = DecodeSteps.merge(s for _, s in labelled)
        plan = plan_decode(steps, "scheduler simulation: every decode step", server, cost, slots,
                           parts=tuple(labelled) if len(labelled) > 1 else (), recommend=recommend)
    else:
        logs = [one for one in sources if one.log_summary is not None and one.log_summary.decode.lines]
        if not logs:
            return None
        summary = logs[0].log_summary
        assert summary is not None
        plan = log_decode_plan(summary.decode, logs[0].log, server, cost, slots, recommend=recommend)
        if len(logs) > 1:
            notes = (*notes, f"decode steps from the first of {len(logs)} logs only ({logs[0].log.path if logs[0].log else '-'})")
    return replace(plan, notes=(*plan.notes, *notes))


def decode_graphs(deployment: Deployment) -> "tuple[DecodeServer | None, tuple[str, ...]]":
    """The decode graphs the deployment's server captures (SGLang 0.5.23: the list, `max_bs` and
    its rule, the capture filter's alignment and drops) and notes on what was assumed; (None,
    (why,)) for decode flags 0.5.23 would refuse."""
    from cpbcg.engines.sglang.decode_plan import decode_server_of

    try:
        return decode_server_of(deployment)
    except ValueError as exc:
        return None, (f"decode graphs: {exc}",)


def decode_loads(trace: TraceInput | str | Path, deployment: Deployment, load_factors: Sequence[float],
                 max_bs: Mapping[str, int]) -> list[dict[str, object]]:
    """The decode fall-off with its feedback (`cpbcg.engines.sglang.decode_plan.decode_loads`): a
    request trace simulated at each load factor with each decode `max_bs` (`{"label": max_bs}`) in
    the loop, one row per (load, label). Raises `ConfigError` for a trace that is not a request
    trace, `TraceError` from the trace."""
    from cpbcg.engines.sglang.decode_plan import decode_loads as loads

    source = open_trace(trace, deployment)
    if source.spec is None or source.simulation is None:
        raise ConfigError(f"{describe_source(Path(str(trace)))}: decode loads need a request trace from a file (the scheduler simulation)")
    return loads(source.spec.scheduler, load_factors, max_bs, source.spec.simulated)


def decode_guarantee(deployment: Deployment) -> list[int] | None:
    """`plan --guarantee`'s decode list: every running batch up to `--max-running-requests` in a
    decode graph (`cpbcg.engines.sglang.decode_plan.guarantee_decode_list`); None without
    `--max-running-requests`. Raises `ConfigError` for decode flags 0.5.23 would refuse."""
    from cpbcg.engines.sglang.decode_plan import guarantee_decode_list

    try:
        return guarantee_decode_list(deployment)
    except ValueError as exc:
        raise ConfigError(f"decode graphs: {exc}") from None


def check_decode_flags(deployment: Deployment) -> None:
    """Refuse, before any work, decode graph flags SGLang 0.5.23 would refuse (`--cuda-graph-bs-decode 0`,
    a size that is not a number, a list nothing of which survives the capture filter): `ConfigError`."""
    server, notes = decode_graphs(deployment)
    if server is None:
        raise ConfigError(f"--server-args: {notes[0]}")
