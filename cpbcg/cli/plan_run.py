"""The body of `cpbcg plan` (imported when the command runs, so `cpbcg --help` stays light):
options -> library calls -> rendering and exports."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import typer

from cpbcg import api
from cpbcg.atomic import STDOUT, OutputGroup, check_outputs, write_atomic
from cpbcg.cli.common import OutputFormat, print_json, stderr_console, stdout_console
from cpbcg.cli.log_report import capture_settings, observed_document, observed_renderable, print_log_settings, print_log_summary
from cpbcg.cli.options import CostOptions, DeploymentOptions, SchedulerOptions, TraceOptions
from cpbcg.cli.source_note import report_simulation, simulation_summary, warn_ignored_options
from cpbcg.cli.trace_progress import TraceProgress
from cpbcg.documents import as_dict, dumps, plan_document, traffic_document
from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.model.bucket_spec import parse_positive_list
from cpbcg.planner.optimise.compare import compare_recommendation
from cpbcg.planner.deployment import Deployment
from cpbcg.cli.server_note import echo_server_check
from cpbcg.planner.export import export_buckets
from cpbcg.planner.sglang_release import HARDWARE_NOTE, SGLANG_VERSION
from cpbcg.planner.optimise.recommend import RecommendSettings
from cpbcg.planner.traffic import UTILISATIONS, default_workers

PARETO_MAX_BUCKETS = 128
"""With --compare or --plot the optimiser also finds the best list of every count up to this."""


@dataclass(frozen=True)
class PlanRequest:
    """`plan`'s own options (the shared groups come separately)."""

    output_format: OutputFormat
    recommend: bool
    max_buckets: Optional[int]
    target_coverage: Optional[float]
    objective: str
    max_tokens: Optional[int]
    bucket_multiple: int
    include: Optional[str]
    max_requests: Optional[int]
    headroom: bool
    allow_gaps: bool
    validate_fraction: float
    compare: bool
    guarantee: bool
    check_guarantee: bool
    emit: Optional[str]
    output: Optional[Path]
    plot: Optional[Path]
    jobs: Optional[int] = None
    scheduler: Optional[str] = None
    fit_traces: Optional[list[Path]] = None
    min_bucket: Optional[int] = None


def run(req: PlanRequest, deployment: DeploymentOptions, trace: TraceOptions, scheduler: SchedulerOptions, cost: CostOptions) -> None:
    if req.output is not None and str(req.output) == STDOUT:
        req = replace(req, output=None)
    _check_usage(req, trace, cost)
    manifest = _load_manifest(cost.manifest)
    overrides = {**deployment.overrides(), **scheduler.overrides(several_loads=True), **cost.overrides()}
    cost_source = "command line" if cost.given else None
    paths = api.trace_paths([*(trace.traces or []), *[p for p in (req.fit_traces or []) if p not in (trace.traces or [])]])
    log = api.log_settings(paths[0], **trace.reader_options()) if len(paths) == 1 else None
    cfg, dep = api.load_config_and_deployment(deployment.config, overrides, cost_source=cost_source, log=log)
    print_log_settings(log, overrides)
    if manifest is not None:
        fit = manifest.fitted_cost()
        if fit is None:
            typer.echo(f"cpbcg: warning: {manifest.path} has no replay timings (a CPU dry run): the cost model keeps its numbers", err=True)
        elif fit.note:
            typer.echo(f"cpbcg: note: {fit.note}", err=True)
        dep = api.with_manifest_cost(dep, manifest)
    if req.guarantee or req.check_guarantee:
        _guarantee(req, cfg, dep)
        return
    warn_ignored_options(replace(trace, traces=paths), scheduler)
    echo_server_check(api.server_check(dep))
    settings = _settings(req) if req.recommend else None
    if settings is not None and capture_settings(log):
        settings = replace(settings, **capture_settings(log))
    factors = scheduler.load_factors()
    untimed = "auto" if scheduler.rate is None and factors is None else None
    workers = req.jobs if req.jobs is not None else default_workers()
    with TraceProgress() as bar:
        sources = [api.open_trace(p, dep, **trace.reader_options()) for p in paths] or [api.open_trace(None, dep)]
        result = api.plan(sources, dep, settings, on_chunk=bar.forwards, progress=bar.requests, load_factors=factors,
                          rates=untimed, workers=workers, scheduler=req.scheduler,
                          fit_traces=None if req.fit_traces is None else [str(p) for p in req.fit_traces])
    parts = result.parts
    source = parts[0].source if parts else sources[0]
    for part in parts:
        if len(parts) > 1:
            typer.echo(f"{part.label} at {part.load}:", err=True)
        report_simulation(part.source)
    if not parts:  # standard input or a server log, planned in place
        report_simulation(source)
    print_log_summary(source)
    simulation = simulation_summary(source)
    _rate_note(parts)
    rec = result.recommendation
    if result.recommendation_error is not None:
        if req.emit is not None and req.recommend:
            raise ModelError(result.recommendation_error)  # never export the configured list in its place
        typer.echo(f"cpbcg: note: {result.recommendation_error}", err=True)
    for note in rec.notes if rec is not None else ():
        typer.echo(f"cpbcg: {note}" if note.startswith("warning:") else f"cpbcg: note: {note}", err=True)
    comparison = compare_recommendation(rec, dep) if rec is not None and (req.compare or req.plot) else None
    header = api.report_header(dep, source, paths[0] if len(paths) == 1 else None)
    if len(paths) > 1:
        header["source"] = ", ".join(str(p) for p in paths)
    exported = rec.buckets if rec is not None else result.evaluation.buckets
    meta = {"source": header["source"], "bound": header["bound"], "cp_size": dep.cp.cp_size, "cp_strategy": dep.cp.strategy.value,
            "max_padding_factor": dep.max_padding_factor, "cost_model": dep.cost.to_dict()}
    with OutputGroup() as outputs:  # the plot and the export: both written, or neither
        if req.plot is not None and comparison is not None:
            from cpbcg.cli.plot import plot_png

            outputs.write(req.plot, plot_png(rec, comparison))
        _emit(req, exported, dep, meta, outputs)
    if req.plot is not None and comparison is not None:
        typer.echo(f"wrote {req.plot}", err=True)
    if req.emit is not None and req.output is not None and str(req.output) != STDOUT:
        stderr_console().print(f"wrote {req.output}", highlight=False)
    if req.emit is not None and req.output is None:
        return  # the export is the stdout document
    if req.output_format is OutputFormat.json:  # rich is imported only for tables
        compared = None
        if comparison is not None:
            from cpbcg.cli.render_recommend import comparison_document

            compared = comparison_document(comparison)
        doc = plan_document(header, result.evaluation, rec, simulation, compared, recommendation_error=result.recommendation_error)
        observed = observed_document(result.observed, log)
        if observed is not None:
            doc["observed"] = observed
        if len(parts) > 1:
            doc["traffic"] = traffic_document(parts)
        print_json(dumps(doc))
        return
    from cpbcg.cli.render import evaluation_tables
    from cpbcg.cli.render_recommend import comparison_table, pareto_table, recommendation_renderable

    console = stdout_console()
    console.print(evaluation_tables(result.evaluation, header))
    observed_view = observed_renderable(result.observed, log)
    if observed_view is not None:
        console.print(observed_view)
    if rec is not None:
        console.print(recommendation_renderable(result.evaluation, rec))
    if len(parts) > 1:
        from cpbcg.cli.render_recommend import traffic_table

        console.print(traffic_table(parts))
    if rec is not None:
        if comparison is not None:
            console.print(comparison_table(comparison, rec))
            console.print(pareto_table(comparison.points, rec.objective))


def _rate_note(parts) -> None:
    """Say which Poisson rates a trace without timestamps was planned at, and why."""
    rates = {}
    for part in parts:
        if part.rate_per_s is not None:
            rates.setdefault(part.label, []).append(part.rate_per_s)
    for label, values in rates.items():
        shown = ", ".join(f"{r:g}" for r in values)
        busy = ", ".join(f"{u:.0%}" for u in UTILISATIONS)
        typer.echo(f"cpbcg: note: {label} has no arrival times: planned at Poisson rates {shown} req/s, which keep the modelled "
                   f"prefill busy about {busy} of the time (its first requests' mean prompt length at --prefill-tokens-per-s and "
                   "--prefill-fixed-ms): its load is unknown and the batch shapes follow the load; --rate or --time-scale fixes it", err=True)


def _check_usage(req: PlanRequest, trace: TraceOptions, cost: CostOptions) -> None:
    """Option combinations that cannot work, refused before any work."""
    if req.guarantee and req.check_guarantee:
        raise ConfigError("--guarantee and --check-guarantee exclude each other")
    if req.output is not None and req.emit is None:  # (`-o -` was turned into None: stdout)
        raise ConfigError("-o/--output writes the --emit export; add --emit sglang|sglang-json|yaml|json")
    if req.emit is not None and req.output is None and req.output_format is OutputFormat.json:
        raise ConfigError("--emit with --format json needs -o FILE (both would go to stdout)")
    if not req.recommend:
        for given, flag in ((req.max_buckets, "--max-buckets"), (req.target_coverage, "--target-coverage"),
                            (req.include, "--include"), (req.plot, "--plot"), (req.compare or None, "--compare")):
            if given is not None:
                raise ConfigError(f"{flag} shapes the recommendation; drop --no-recommend")
    if req.plot is not None and req.plot.suffix.lower() != ".png":
        raise ConfigError(f"--plot {req.plot}: the plot is a PNG; give a file name ending in .png")
    check_outputs({"-o": req.output, "--plot": req.plot}, {**{"--trace" if i == 0 else f"--trace {t}": t for i, t in enumerate(trace.traces or [])}, "--manifest": cost.manifest})


def _load_manifest(path: Optional[Path]):
    if path is None:
        return None
    from cpbcg.manifest import load_manifest

    return load_manifest(path)


def _settings(req: PlanRequest) -> RecommendSettings:
    include = tuple(parse_positive_list(req.include, "include")) if req.include else ()
    return RecommendSettings(
        max_buckets=req.max_buckets, target_coverage=req.target_coverage, objective=req.objective,
        max_bucket_tokens=req.max_tokens, bucket_multiple=req.bucket_multiple, include=include,
        headroom=req.headroom, max_requests=req.max_requests, allow_gaps=req.allow_gaps,
        validate_fraction=req.validate_fraction, min_bucket=req.min_bucket, pareto_max_buckets=PARETO_MAX_BUCKETS if (req.compare or req.plot) else 0,
    )


def _guarantee(req: PlanRequest, cfg, dep: Deployment) -> None:
    sched = cfg.scheduler
    requests = req.max_requests or sched.prefill_max_requests or sched.max_running_requests
    if requests is None:
        raise ConfigError("guarantee mode needs --max-requests (or scheduler.prefill_max_requests in the config)")
    result = api.guarantee(dep, requests, req.max_tokens, recommend_list=req.guarantee, bucket_multiple=req.bucket_multiple)
    _emit(req, result.buckets, dep, {"guarantee": {"max_requests": result.limits.max_requests, "max_tokens": result.limits.max_tokens}})
    if req.emit is None or req.output is not None:
        if req.output_format is OutputFormat.json:
            doc = {**dep.header("guarantee (no trace)"), **as_dict(result.limits), "buckets": result.buckets, **as_dict(result.check)}
            print_json(dumps(doc))
        else:
            from cpbcg.cli.render_recommend import guarantee_renderable

            stdout_console().print(guarantee_renderable(result, dep.cp.cp_size, dep.cp.strategy.value, dep.max_padding_factor))
    if not result.check.ok:
        raise typer.Exit(1)


def _emit(req: PlanRequest, buckets: list[int], dep: Deployment, metadata: dict, outputs: OutputGroup | None = None) -> None:
    """The `--emit` export: to `-o` (with the command's other `outputs`, or atomically alone), or to stdout."""
    if req.emit is None:
        return
    text = export_buckets(buckets, req.emit, dep, metadata)
    if req.emit in ("sglang", "sglang-json") and dep.cp.cp_size > 1:
        typer.echo(f"cpbcg: note: SGLang {SGLANG_VERSION} CP graphs: {HARDWARE_NOTE[dep.cp.strategy.value]}", err=True)
    if req.output is not None and str(req.output) != STDOUT:
        if outputs is not None:
            outputs.write(req.output, text)
            return
        write_atomic(req.output, text)
        stderr_console().print(f"wrote {req.output}", highlight=False)
    else:
        console = stdout_console()
        console.file.write(text)
        console.file.flush()
