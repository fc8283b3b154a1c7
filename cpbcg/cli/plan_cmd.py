"""`cpbcg plan`: replay a trace with the configured bucket list and recommend the list to capture.

parse (options -> Deployment, RecommendSettings) -> call (`cpbcg.api.plan` / `guarantee`) ->
render (tables on stdout, notes on stderr, or JSON) -> export (`--emit`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cpbcg.atomic import output_path
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat, input_path
from cpbcg.cli.options import CostOptions, DeploymentOptions, SchedulerOptions, TraceOptions, finite_option, with_options
from cpbcg.settings import EmitFormat, Objective


NoRecommendOpt = Annotated[bool, typer.Option("--no-recommend", help="Only evaluate the configured list (no recommendation).")]
MaxBucketsOpt = Annotated[Optional[int], typer.Option("--max-buckets", "-k", min=1, max=512, help="Buckets in the recommended list. [default: as many capturable buckets as the configured list]", show_default=False)]


def coverage_fraction(text: str) -> float:
    """`--target-coverage`: a fraction in (0, 1] (0 asks for no list at all); `ValueError` otherwise."""
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"{text[:20]!r} is not in the range 0<x<=1")
    return value


TargetCoverageOpt = Annotated[Optional[float], typer.Option("--target-coverage", parser=coverage_fraction, metavar="FRACTION", help="Recommend the fewest buckets (up to --max-buckets) that replay at least this fraction of forwards in graphs, e.g. 0.99: capture time and graph memory grow with the count.  [0<x<=1]", show_default=False)]
ObjectiveOpt = Annotated[Objective, typer.Option("--objective", help="coverage = most forwards in graphs first, then least modelled time; time = least modelled time alone.")]
MaxTokensOpt = Annotated[Optional[int], typer.Option("--max-tokens", min=1, max=1 << 22, help="The largest forward the list must serve (tokens), for the recommendation and guarantee mode. [default: scheduler.chunked_prefill_size]", show_default=False)]
BucketMultipleOpt = Annotated[int, typer.Option("--bucket-multiple", min=1, max=131072, help="Candidate bucket sizes are multiples of this (coarser = faster, optimal on that grid only; 1 = exact).")]
IncludeOpt = Annotated[Optional[str], typer.Option("--include", help="Buckets every recommended list must contain, e.g. 8192,4096.", show_default=False)]
MaxRequestsOpt = Annotated[Optional[int], typer.Option("--max-requests", min=1, max=1024, help="Requests in the worst-case full chunk the list must serve (headroom), and in guarantee mode the most requests per forward. [default: the most any forward of the trace held; guarantee: scheduler.prefill_max_requests]", show_default=False)]
NoHeadroomOpt = Annotated[bool, typer.Option("--no-headroom", help="Keep every bucket at or below the chunk size (full chunks of several requests may then run eagerly).")]
AllowGapsOpt = Annotated[bool, typer.Option("--allow-gaps", help="Allow forward sizes between buckets that no bucket serves within max_padding_factor.")]
ValidateOpt = Annotated[float, finite_option("--validate-fraction", min=0.0, max=0.9, help="Hold back this last fraction of the forwards (trace order): fit on the rest, replay it out of sample. 0 disables.")]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Also compare with SGLang's default, powers of two, vLLM-, TensorRT-LLM-style and uniform lists, and print the Pareto curve.")]
GuaranteeOpt = Annotated[bool, typer.Option("--guarantee", help="Trace-free: the fewest buckets that replay every CP-active forward of <= --max-requests requests and <= --max-tokens tokens.")]
CheckGuaranteeOpt = Annotated[bool, typer.Option("--check-guarantee", help="Prove that --buckets replay every such forward, or name the smallest that falls back (exit 1).")]
EmitOpt = Annotated[Optional[EmitFormat], typer.Option("--emit", help="Export the recommended list (the configured one with --no-recommend): sglang (server flags with the CP and scheduler flags), sglang-json (--cuda-graph-config), yaml|json (bucket file for --buckets). On stdout, or -o.", show_default=False)]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", parser=output_path, help="Write the --emit export to this file (atomically); - for stdout.", show_default=False)]
JobsOpt = Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, max=1024, help="Worker processes for several traces or load factors (each trace at each load is one job). [default: all cores]", show_default=False)]
SchedulerAddressOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Run the jobs on this Dask distributed cluster (tcp://host:8786) instead of local processes; needs pip install 'cpbcg[distributed]'. Same result.", show_default=False)]
FitTraceOpt = Annotated[Optional[list[Path]], typer.Option("--fit-trace", parser=input_path, help="Fit the recommendation on this trace only (repeatable; it must be among the --trace files, or is added to them) and report the list on every trace given.", show_default=False)]
MinBucketOpt = Annotated[Optional[int], typer.Option("--min-bucket", min=0, max=1 << 22, help="Floor of small buckets: the recommended list serves every CP-active size from this many tokens up within max_padding_factor, whether or not the trace held it; 0 = no floor. [default: the smallest capturable size, 2*cp_size zigzag, cp_size interleave]", show_default=False)]
MaxCaptureOpt = Annotated[Optional[float], finite_option("--max-capture-seconds", min=0.001, max=1e7, metavar="SECONDS", help="Capture budget: the recommended list (and every list of the Pareto curve) captures within this many seconds per server start, an exact constraint of the optimiser; the capture time is the estimate for the model (docs/costs.md) or what a server log measured.", show_default=False)]
MaxGraphMemoryOpt = Annotated[Optional[float], finite_option("--max-graph-memory", min=0.001, max=1e9, metavar="MIB", help="Graph-memory budget (MiB per GPU: the shared pool the largest bucket's CP-local rows size, plus each graph's own), an exact constraint of the optimiser (docs/costs.md).", show_default=False)]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", parser=output_path, help="Write a PNG: Pareto curve (buckets vs modelled time, coverage) and the forward-size distribution with the recommended buckets.", show_default=False)]


@app.command()
@error_boundary
@with_options(deployment=DeploymentOptions, trace=TraceOptions, scheduler=SchedulerOptions, cost=CostOptions)
def plan(
    output_format: FormatOpt = OutputFormat.table,
    no_recommend: NoRecommendOpt = False,
    max_buckets: MaxBucketsOpt = None,
    target_coverage: TargetCoverageOpt = None,
    objective: ObjectiveOpt = Objective.coverage,
    max_tokens: MaxTokensOpt = None,
    bucket_multiple: BucketMultipleOpt = 1,
    include: IncludeOpt = None,
    max_requests: MaxRequestsOpt = None,
    no_headroom: NoHeadroomOpt = False,
    allow_gaps: AllowGapsOpt = False,
    validate_fraction: ValidateOpt = 0.3,
    compare: CompareOpt = False,
    guarantee: GuaranteeOpt = False,
    check_guarantee: CheckGuaranteeOpt = False,
    emit_format: EmitOpt = None,
    output: OutputOpt = None,
    plot_path: PlotOpt = None,
    jobs: JobsOpt = None,
    scheduler_address: SchedulerAddressOpt = None,
    fit_trace: FitTraceOpt = None,
    min_bucket: MinBucketOpt = None,
    max_capture_seconds: MaxCaptureOpt = None,
    max_graph_memory: MaxGraphMemoryOpt = None,
    *,
    deployment: DeploymentOptions,
    trace: TraceOptions,
    scheduler: SchedulerOptions,
    cost: CostOptions,
) -> None:
    """Replay a trace through the runtime's bucket selector, report how the configured list
    serves it (coverage, padding, eager forwards by reason, rescued forwards, hits per bucket),
    and recommend the list to capture: validated out of sample, with the flags to deploy it.

    Without `--trace` it runs on the embedded default workload (a seeded synthetic chat
    stream). Request traces (Mooncake, Azure, vidur, generic CSV/JSONL) are first turned into
    prefill forwards by the scheduler simulation (docs/scheduler.md).

    Several traces (`--trace A --trace B`, a glob, a directory) and load factors
    (`--time-scale 0.5,1,2,4`) plan together: each trace at each load is simulated (in
    parallel, `--jobs`, or on a Dask cluster, `--scheduler`), the list is fitted to all of them,
    and each is reported with the configured and the recommended list.

    Example: `cpbcg plan --trace lens.jsonl --cp-size 4 --emit sglang -o flags.txt`
    """
    from cpbcg.cli import plan_run

    plan_run.run(
        plan_run.PlanRequest(
            output_format=output_format, recommend=not no_recommend, max_buckets=max_buckets, target_coverage=target_coverage,
            objective=objective.value, max_tokens=max_tokens, bucket_multiple=bucket_multiple, include=include,
            max_requests=max_requests, headroom=not no_headroom, allow_gaps=allow_gaps, validate_fraction=validate_fraction,
            compare=compare, guarantee=guarantee, check_guarantee=check_guarantee,
            emit=None if emit_format is None else emit_format.value, output=output, plot=plot_path,
            jobs=jobs, scheduler=scheduler_address, fit_traces=fit_trace, min_bucket=min_bucket,
            max_capture_s=max_capture_seconds, max_graph_mib=max_graph_memory,
        ),
        deployment, trace, scheduler, cost,
    )
