"""Options shared by several commands, config resolution, consoles and progress bars."""

from __future__ import annotations

import os
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterator, Mapping, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from cpbcg.config import DeploymentConfig, load_config
from cpbcg.planner.capacity import CaptureLayout
from cpbcg.planner.layout import CPStrategy
from cpbcg.planner.traces import TraceFormat


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


PIPE_WIDTH = 120
"""Table width when stdout is not a terminal (CI logs, files): rich would otherwise use 80."""


def stdout_console() -> Console:
    """Console for the command's main output (a table): `CPBCG_WIDTH` or `COLUMNS` if set, the
    terminal's width, or `PIPE_WIDTH` when not a terminal."""
    width = int(os.environ.get("CPBCG_WIDTH", "0") or 0) or None
    console = Console(width=width, soft_wrap=False)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH, soft_wrap=False)
    return console


def stderr_console() -> Console:
    """Console for progress, notes and reports sent to stderr (same width rule as stdout)."""
    width = int(os.environ.get("CPBCG_WIDTH", "0") or 0) or None
    console = Console(stderr=True, width=width)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=True, width=PIPE_WIDTH)
    return console


CONFIG_HELP = "Deployment config: a YAML file or a preset name (see `cpbcg presets`). Options override it."
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help=CONFIG_HELP, show_default=False)]
CpSizeOpt = Annotated[Optional[int], typer.Option("--cp-size", min=1, help="CP ranks (SGLang --attn-cp-size). [default: 4]", show_default=False)]
StrategyOpt = Annotated[Optional[CPStrategy], typer.Option("--cp-strategy", help="CP split strategy. [default: zigzag]", show_default=False)]
AlignOpt = Annotated[Optional[int], typer.Option("--align-size", min=1, help="Row alignment. [default: 2*cp_size for zigzag, cp_size for interleave]", show_default=False)]
FactorOpt = Annotated[Optional[float], typer.Option("--max-padding-factor", min=1.0, max=100.0, help="Largest bucket/tokens ratio the selector accepts. [default: 2.0]", show_default=False)]
BucketsOpt = Annotated[Optional[str], typer.Option("--buckets", "-b", help="Bucket spec: sglang-default:MAX, sglang-legacy:MAX, a list like 2048,2304, or a YAML/JSON file (also SGLang --cuda-graph-config JSON). [default: sglang-default:8192]", show_default=False)]
CaptureLayoutOpt = Annotated[Optional[CaptureLayout], typer.Option("--capture-layout", help="Dummy batch each bucket is captured from. [default: single_request]", show_default=False)]
MaxContextOpt = Annotated[Optional[int], typer.Option("--max-context-size", min=1, help="Longest dummy request for context_bounded capture (tokens).", show_default=False)]
MaxCaptureReqOpt = Annotated[Optional[int], typer.Option("--max-capture-requests", min=1, help="Request slots of the capture dummy batch.", show_default=False)]
TraceOpt = Annotated[Optional[Path], typer.Option("--trace", "-t", help="Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload.", show_default=False)]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="table for people, json for machines.")]

# Request traces and the scheduler simulation (docs/scheduler.md). Defaults live in
# `cpbcg.config.SchedulerConfig`; `None` means "keep the config's value".
TraceFormatOpt = Annotated[TraceFormat, typer.Option("--trace-format", case_sensitive=False, metavar="FORMAT", help=f"What --trace holds: {', '.join(f.value for f in TraceFormat)} (docs/traces.md); auto detects it from the first line.")]
LengthFieldOpt = Annotated[Optional[str], typer.Option("--length-field", help="Prompt-length field of a generic CSV/JSONL request trace (tokens).", show_default=False)]
TimeFieldOpt = Annotated[Optional[str], typer.Option("--time-field", help="Arrival-time field of a generic request trace: seconds, or wall-clock datetimes. Without it arrivals are Poisson at --rate.", show_default=False)]
ChunkedPrefillOpt = Annotated[Optional[int], typer.Option("--chunked-prefill-size", help="Chunk budget per prefill forward in tokens; -1 disables chunking (SGLang --chunked-prefill-size). [default: 8192]", show_default=False)]
MaxPrefillTokensOpt = Annotated[Optional[int], typer.Option("--max-prefill-tokens", min=1, help="Token budget of one prefill forward (SGLang --max-prefill-tokens). [default: 16384]", show_default=False)]
PrefillMaxRequestsOpt = Annotated[Optional[int], typer.Option("--prefill-max-requests", min=1, help="Most requests in one prefill forward (SGLang --prefill-max-requests). [default: unlimited]", show_default=False)]
MaxRunningRequestsOpt = Annotated[Optional[int], typer.Option("--max-running-requests", min=1, help="Most requests running at once; decode is not simulated, so it caps the requests of one forward. [default: unlimited]", show_default=False)]
PrefixCacheOpt = Annotated[Optional[str], typer.Option("--prefix-cache", help="Prefix cache over hash_ids (512-token blocks): off, unlimited, or a size in tokens (LRU). [default: off]", show_default=False)]
PrefillFixedMsOpt = Annotated[Optional[float], typer.Option("--prefill-fixed-ms", min=0.0, help="Fixed time of one prefill forward (ms). [default: 5.0]", show_default=False)]
PrefillTokensPerSOpt = Annotated[Optional[float], typer.Option("--prefill-tokens-per-s", help="Prefill throughput (tokens/s); a forward of n tokens takes prefill_fixed_ms + n / this. [default: 40000]", show_default=False)]
RateOpt = Annotated[Optional[float], typer.Option("--rate", help="Poisson arrival rate for request traces without timestamps (requests/s). [default: 4.0]", show_default=False)]
TimeScaleOpt = Annotated[Optional[float], typer.Option("--time-scale", help="Divide inter-arrival gaps by this to emulate higher load. [default: 1.0]", show_default=False)]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", min=0, max=2**63 - 1, help="Seed of the synthetic Poisson arrivals. [default: 0]", show_default=False)]


SCHEDULER_OPTIONS = (
    "chunked_prefill_size", "max_prefill_tokens", "prefill_max_requests", "max_running_requests",
    "prefix_cache", "prefill_fixed_ms", "prefill_tokens_per_s", "rate", "time_scale", "seed",
)
"""Command parameters that override `scheduler.*` of the config (names as in SchedulerConfig)."""


def scheduler_overrides(params: Mapping[str, object]) -> dict[str, object]:
    """Dotted `scheduler.*` overrides for `resolve_config(..., **overrides)` from a command's
    parameters (pass `locals()`); None = keep the config's value."""
    return {f"scheduler.{name}": params.get(name) for name in SCHEDULER_OPTIONS}


DEPLOYMENT_OPTIONS = {
    "cp_size": "cp_size", "cp_strategy": "cp_strategy", "align_size": "align_size",
    "max_padding_factor": "max_padding_factor", "buckets": "buckets", "capture_layout": "capture_layout",
    "max_context_size": "max_context_size_tokens", "max_capture_requests": "max_capture_requests",
}
"""Command parameter → top-level config key, for the shared CP and capture options."""


def deployment_overrides(params: Mapping[str, object]) -> dict[str, object]:
    """Top-level config overrides from a command's parameters (pass `locals()`); None = keep."""
    return {key: params.get(name) for name, key in DEPLOYMENT_OPTIONS.items()}


def resolve_config(config: Optional[str], **overrides: object) -> DeploymentConfig:
    """Load `config` (file, preset or defaults) and apply the command-line overrides (config
    keys, dotted for sections: `scheduler.rate`; None values are ignored)."""
    return load_config(config, overrides)


@contextmanager
def progress_bar(description: str, total: Optional[float] = None, enabled: bool = True) -> Iterator:
    """A rich progress bar on stderr; yields `advance(amount)`. Hidden when stderr is no terminal."""
    console = stderr_console()
    if not enabled or not console.is_terminal:
        yield lambda amount=1: None
        return
    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount=1: bar.advance(task, amount)
