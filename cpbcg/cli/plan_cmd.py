"""`cpbcg plan`: evaluate a bucket list on a batch stream."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cpbcg.atomic import STDOUT
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import (
    AlignOpt, BucketsOpt, CaptureLayoutOpt, ConfigOpt, CpSizeOpt, FactorOpt, FormatOpt,
    MaxCaptureReqOpt, MaxContextOpt, OutputFormat, StrategyOpt, TraceOpt, progress_bar,
    deployment_overrides, resolve_config, stdout_console,
)
from cpbcg.cli.common import (  # request traces and the scheduler simulation
    ChunkedPrefillOpt, LengthFieldOpt, MaxPrefillTokensOpt, MaxRunningRequestsOpt, PrefillFixedMsOpt,
    PrefillMaxRequestsOpt, PrefillTokensPerSOpt, PrefixCacheOpt, RateOpt, SeedOpt, TimeFieldOpt,
    TimeScaleOpt, TraceFormatOpt, scheduler_overrides,
)
from cpbcg.cli.recommend import (  # optimiser, guarantee mode, exports, plot
    BucketMultipleOpt, CheckGuaranteeOpt, EagerFixedOpt, EmitOpt, GraphFixedOpt, GuaranteeOpt, IncludeOpt,
    ManifestOpt, MaxBucketsOpt, MaxRequestsOpt, MaxTokensOpt, Objective, ObjectiveOpt, OutputOpt, PlotOpt,
    RecommendOptions, TokenMsOpt,
    cost_overrides, emit, run_modes,
)
from cpbcg.cli.render import deployment_header, evaluation_json, evaluation_tables, print_json
from cpbcg.cli.source_note import report_simulation, warn_ignored_options
from cpbcg.config import DeploymentConfig
from cpbcg.errors import ConfigError
from cpbcg.planner.buckets import parse_bucket_spec
from cpbcg.planner.evaluate import Evaluation, evaluate
from cpbcg.planner.traces import TraceFormat
from cpbcg.planner.selector import BucketTable
from cpbcg.planner.sources import describe_source, open_source


def bucket_table(cfg: DeploymentConfig) -> BucketTable:
    """Captured buckets of the config with capacities from the capture model."""
    return BucketTable.build(parse_bucket_spec(cfg.buckets), cfg.cp_layout, cfg.capture_spec)


def run_evaluation(
    cfg: DeploymentConfig, trace: Optional[Path], table: BucketTable, simulation: Optional[dict] = None, **trace_options
) -> Evaluation:
    """Evaluate `table` on the batch stream of `trace` (or the embedded default), with progress.

    `trace_options` (`trace_format`, `length_field`, `time_field`) go to `open_source`;
    request traces are turned into forwards with `cfg.scheduler`, the simulation's assumptions
    are printed to stderr, and its summary is put into `simulation` when given.
    """
    with progress_bar("replaying batches") as advance:
        source = open_source(trace, scheduler=cfg.scheduler, **trace_options)
        ev = evaluate(source.batches, table, cfg.cp_layout, cfg.max_padding_factor, lambda b: advance(b.num_batches))
    summary = report_simulation(source)
    if simulation is not None and summary is not None:
        simulation.update(summary)
    return ev


@app.command()
@error_boundary
def plan(
    trace: TraceOpt = None,
    config: ConfigOpt = None,
    cp_size: CpSizeOpt = None,
    cp_strategy: StrategyOpt = None,
    align_size: AlignOpt = None,
    max_padding_factor: FactorOpt = None,
    buckets: BucketsOpt = None,
    capture_layout: CaptureLayoutOpt = None,
    max_context_size: MaxContextOpt = None,
    max_capture_requests: MaxCaptureReqOpt = None,
    trace_format: TraceFormatOpt = TraceFormat.auto,
    length_field: LengthFieldOpt = None,
    time_field: TimeFieldOpt = None,
    chunked_prefill_size: ChunkedPrefillOpt = None,
    max_prefill_tokens: MaxPrefillTokensOpt = None,
    prefill_max_requests: PrefillMaxRequestsOpt = None,
    max_running_requests: MaxRunningRequestsOpt = None,
    prefix_cache: PrefixCacheOpt = None,
    prefill_fixed_ms: PrefillFixedMsOpt = None,
    prefill_tokens_per_s: PrefillTokensPerSOpt = None,
    rate: RateOpt = None,
    time_scale: TimeScaleOpt = None,
    seed: SeedOpt = None,
    output_format: FormatOpt = OutputFormat.table,
    # recommendation modes (cpbcg/cli/recommend.py)
    max_buckets: MaxBucketsOpt = None,
    objective: ObjectiveOpt = Objective.coverage,
    max_tokens: MaxTokensOpt = None,
    bucket_multiple: BucketMultipleOpt = 1,
    include: IncludeOpt = None,
    graph_fixed_ms: GraphFixedOpt = None,
    eager_fixed_ms: EagerFixedOpt = None,
    token_ms: TokenMsOpt = None,
    manifest: ManifestOpt = None,
    guarantee: GuaranteeOpt = False,
    check_guarantee: CheckGuaranteeOpt = False,
    max_requests: MaxRequestsOpt = None,
    emit_format: EmitOpt = None,
    output: OutputOpt = None,
    plot_path: PlotOpt = None,
) -> None:
    """Replay a batch trace through the runtime's bucket selector and report how a bucket list
    serves it: coverage, padding, eager batches by reason, rescued batches, hits per bucket.

    Without `--trace` it runs on the embedded default workload (a seeded synthetic chat
    stream), so you see a result at once. Request traces (Mooncake, Azure, vidur, generic
    CSV/JSONL) are first turned into prefill forwards by the scheduler simulation
    (docs/scheduler.md; the scheduler options below).

    Example: `cpbcg plan --trace lens.jsonl --cp-size 4 --buckets sglang-default:8192`
    """
    sched = scheduler_overrides(locals())
    cfg = resolve_config(
        config, **deployment_overrides(locals()),
        **sched,
        **cost_overrides(graph_fixed_ms, eager_fixed_ms, token_ms),
    )
    trace_options = dict(trace_format=trace_format, length_field=length_field, time_field=time_field)
    warn_ignored_options(trace, trace_format, {**sched, **trace_options})
    if output is not None and str(output) == STDOUT:
        output = None
    if emit_format is not None and output is None and output_format is OutputFormat.json:
        raise ConfigError("--emit with --format json needs -o FILE (both would go to stdout)")
    rec_opts = RecommendOptions(
        max_buckets, max_tokens, bucket_multiple, include, manifest,
        any(v is not None for v in (graph_fixed_ms, eager_fixed_ms, token_ms)),
        guarantee, check_guarantee, max_requests, emit_format, output, plot_path, objective,
    )
    code = run_modes(cfg, trace, trace_options, rec_opts, output_format is OutputFormat.json)
    if code is not None:
        raise typer.Exit(code)
    simulation: dict = {}
    ev = run_evaluation(cfg, trace, bucket_table(cfg), simulation, **trace_options)
    header = deployment_header(cfg, describe_source(trace))
    if simulation:
        header["simulation"] = simulation
    console = stdout_console()
    if emit_format is not None:  # export the evaluated list
        emit(ev.buckets, emit_format, cfg, {"source": header["source"]}, output, console)
        if output is None:
            return
    if output_format is OutputFormat.json:
        print_json(console, evaluation_json(ev, header))
    else:
        console.print(evaluation_tables(ev, header))
