"""The body of `cpbcg plan` (imported when the command runs, so `cpbcg --help` stays light):
options -> library calls -> rendering and exports."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import typer

from cpbcg.commands import plan as plan_use_case
from cpbcg.atomic import STDOUT, OutputGroup, check_outputs, write_atomic
from cpbcg.cli.common import OutputFormat, print_json, stderr_console, stdout_console
from cpbcg.outputs.log_tables import observed_renderable
from cpbcg.cli.options import CostOptions, DeploymentOptions, SchedulerOptions, TraceOptions, request_only_flags
from cpbcg.cli.trace_progress import TraceProgress
from cpbcg.documents import comparison_document, dumps, guarantee_document, plan_document, traffic_document
from cpbcg.errors import ConfigError, ExitCode


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
    max_capture_s: Optional[float] = None
    max_graph_mib: Optional[float] = None


def run(req: PlanRequest, deployment: DeploymentOptions, trace: TraceOptions, scheduler: SchedulerOptions, cost: CostOptions) -> None:
    if req.output is not None and str(req.output) == STDOUT:
        req = replace(req, output=None)
    _check_usage(req, trace, cost)
    factors = scheduler.load_factors()
    request = plan_use_case.PlanRequest(
        recommend=req.recommend, max_buckets=req.max_buckets, target_coverage=req.target_coverage, objective=req.objective,
        max_tokens=req.max_tokens, bucket_multiple=req.bucket_multiple, include=req.include, max_requests=req.max_requests,
        headroom=req.headroom, allow_gaps=req.allow_gaps, validate_fraction=req.validate_fraction, compare=req.compare,
        guarantee=req.guarantee, check_guarantee=req.check_guarantee, plot=req.plot is not None, emit=req.emit,
        min_bucket=req.min_bucket, load_factors=None if factors is None else tuple(factors),
        untimed_rates="auto" if scheduler.rate is None else None, workers=req.jobs, scheduler=req.scheduler,
        fit_traces=None if req.fit_traces is None else tuple(str(p) for p in req.fit_traces),
        max_capture_s=req.max_capture_s, max_graph_mib=req.max_graph_mib,
    )
    overrides = {**deployment.overrides(), **scheduler.overrides(several_loads=True), **cost.overrides()}
    with TraceProgress() as bar:
        report = plan_use_case.plan_command(deployment.config, overrides, request, trace.traces, manifest_path=cost.manifest, cost_given=cost.given,
                                  **trace.reader_options(), ignored_flags=request_only_flags(trace, scheduler),
                                  note=lambda text: typer.echo(text, err=True), progress=bar.requests, on_chunk=bar.forwards)
    if isinstance(report, plan_use_case.GuaranteeReport):
        _guarantee(req, report)
        return
    result, rec, comparison, parts = report.result, report.result.recommendation, report.comparison, report.parts
    with OutputGroup() as outputs:  # the plot and the export: both written, or neither
        if req.plot is not None and rec is not None and comparison is not None:
            from cpbcg.outputs.plot import plot_png

            outputs.write(req.plot, plot_png(rec, comparison))
        _emit(req, report.export, outputs)
    if req.plot is not None and rec is not None and comparison is not None:
        typer.echo(f"wrote {req.plot}", err=True)
    if report.export is not None and req.output is not None:
        stderr_console().print(f"wrote {req.output}", highlight=False)
    if req.emit is not None and req.output is None:
        return  # the export is the stdout document
    if req.output_format is OutputFormat.json:  # rich is imported only for tables
        compared = None if comparison is None else comparison_document(comparison)
        doc = plan_document(report.header, result.evaluation, rec, report.simulation, compared,
                            recommendation_error=result.recommendation_error)
        if report.observed is not None:
            doc["observed"] = report.observed
        if len(parts) > 1:
            doc["traffic"] = traffic_document(parts)
        print_json(dumps(doc))
        return
    from cpbcg.outputs.tables import evaluation_tables, summed_header
    from cpbcg.outputs.recommend_tables import comparison_table, pareto_table, recommendation_renderable

    console = stdout_console()
    console.print(evaluation_tables(result.evaluation, summed_header(report.header, parts)))
    observed_view = observed_renderable(result.observed, report.log, report.logs)
    if observed_view is not None:
        console.print(observed_view)
    if rec is not None:
        console.print(recommendation_renderable(result.evaluation, rec))
    if len(parts) > 1:
        from cpbcg.outputs.recommend_tables import traffic_table

        console.print(traffic_table(parts))
    if rec is not None:
        if comparison is not None:
            console.print(comparison_table(comparison, rec))
            console.print(pareto_table(comparison.points, rec.objective))


def _check_usage(req: PlanRequest, trace: TraceOptions, cost: CostOptions) -> None:
    """Option combinations that cannot work, refused before any work."""
    if req.output is not None and req.emit is None:  # (`-o -` was turned into None: stdout)
        raise ConfigError("-o/--output writes the --emit export; add --emit sglang|sglang-json|yaml|json")
    if req.emit is not None and req.output is None and req.output_format is OutputFormat.json:
        raise ConfigError("--emit with --format json needs -o FILE (both would go to stdout)")
    if not req.recommend:
        for given, flag in ((req.max_buckets, "--max-buckets"), (req.target_coverage, "--target-coverage"),
                            (req.include, "--include"), (req.plot, "--plot"), (req.compare or None, "--compare"),
                            (req.max_capture_s, "--max-capture-seconds"), (req.max_graph_mib, "--max-graph-memory")):
            if given is not None:
                raise ConfigError(f"{flag} shapes the recommendation; drop --no-recommend")
    if req.plot is not None and req.plot.suffix.lower() != ".png":
        raise ConfigError(f"--plot {req.plot}: the plot is a PNG; give a file name ending in .png")
    check_outputs({"-o": req.output, "--plot": req.plot}, {**{"--trace" if i == 0 else f"--trace {t}": t for i, t in enumerate(trace.traces or [])}, "--manifest": cost.manifest})


def _guarantee(req: PlanRequest, report: "plan_use_case.GuaranteeReport") -> None:
    dep, result = report.deployment, report.result
    _emit(req, report.export)
    if req.emit is None or req.output is not None:
        if req.output_format is OutputFormat.json:
            print_json(dumps(guarantee_document(dep, result)))
        else:
            from cpbcg.outputs.recommend_tables import guarantee_renderable

            stdout_console().print(guarantee_renderable(result, dep.cp.cp_size, dep.cp.strategy.value, dep.max_padding_factor))
    if not result.check.ok:
        raise typer.Exit(ExitCode.GATE_FAILED)


def _emit(req: PlanRequest, text: Optional[str], outputs: OutputGroup | None = None) -> None:
    """The `--emit` export: to `-o` (with the command's other `outputs`, or atomically alone), or to stdout."""
    if text is None:
        return
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
