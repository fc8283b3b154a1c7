"""`cpbcg plan`: evaluate a bucket list on a batch stream."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import (
    AlignOpt, BucketsOpt, CaptureLayoutOpt, ConfigOpt, CpSizeOpt, FactorOpt, FormatOpt,
    MaxCaptureReqOpt, MaxContextOpt, OutputFormat, StrategyOpt, TraceOpt, progress_bar,
    resolve_config, stdout_console,
)
from cpbcg.cli.render import deployment_header, evaluation_json, evaluation_tables, print_json
from cpbcg.config import DeploymentConfig
from cpbcg.planner.buckets import parse_bucket_spec
from cpbcg.planner.evaluate import Evaluation, evaluate
from cpbcg.planner.selector import BucketTable
from cpbcg.planner.sources import describe_source, open_batches


def bucket_table(cfg: DeploymentConfig) -> BucketTable:
    """Captured buckets of the config with capacities from the capture model."""
    return BucketTable.build(parse_bucket_spec(cfg.buckets), cfg.cp_layout, cfg.capture_spec)


def run_evaluation(cfg: DeploymentConfig, trace: Optional[Path], table: BucketTable) -> Evaluation:
    """Evaluate `table` on the batch stream of `trace` (or the embedded default), with progress."""
    with progress_bar("replaying batches") as advance:
        return evaluate(open_batches(trace), table, cfg.cp_layout, cfg.max_padding_factor, lambda b: advance(b.num_batches))


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
    output_format: FormatOpt = OutputFormat.table,
) -> None:
    """Replay a batch trace through the runtime's bucket selector and report how a bucket list
    serves it: coverage, padding, eager batches by reason, rescued batches, hits per bucket.

    Without `--trace` it runs on the embedded default workload (a seeded synthetic chat
    stream), so you see a result at once.

    Example: `cpbcg plan --trace lens.jsonl --cp-size 4 --buckets sglang-default:8192`
    """
    cfg = resolve_config(
        config, cp_size=cp_size, cp_strategy=cp_strategy, align_size=align_size,
        max_padding_factor=max_padding_factor, buckets=buckets, capture_layout=capture_layout,
        max_context_size_tokens=max_context_size, max_capture_requests=max_capture_requests,
    )
    ev = run_evaluation(cfg, trace, bucket_table(cfg))
    header = deployment_header(cfg, describe_source(trace))
    console = stdout_console()
    if output_format is OutputFormat.json:
        print_json(console, evaluation_json(ev, header))
    else:
        console.print(evaluation_tables(ev, header))
