"""Options shared by several commands, config resolution, consoles and progress bars."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterator, Optional

from typing import TYPE_CHECKING

import typer

from cpbcg.cli.app import env_width
from cpbcg.planner.choices import TRACE_FORMAT_NAMES, CaptureLayout, CPStrategy, trace_format_name

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


PIPE_WIDTH = 120
"""Table width when stdout is not a terminal (CI logs, files): rich would otherwise use 80."""


def stdout_console() -> "Console":
    """Console for the command's main output (a table): `CPBCG_WIDTH` or `COLUMNS` if set, the
    terminal's width, or `PIPE_WIDTH` when not a terminal."""
    from rich.console import Console

    width = env_width()
    console = Console(width=width, soft_wrap=False)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH, soft_wrap=False)
    return console


def print_json(payload: bytes, *, to_stderr: bool = False) -> None:
    """Write a JSON document unchanged to stdout (or stderr): no rich markup, no wrapping, and
    no rich import (JSON output stays light)."""
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write(payload.decode())
    stream.flush()


def stderr_console() -> "Console":
    """Console for progress, notes and reports sent to stderr (same width rule as stdout)."""
    from rich.console import Console

    width = env_width()
    console = Console(stderr=True, width=width)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=True, width=PIPE_WIDTH)
    return console


CONFIG_HELP = "Deployment config: a YAML file or a preset name (see `cpbcg presets`). Options override it."
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help=CONFIG_HELP, show_default=False)]
CpSizeOpt = Annotated[Optional[int], typer.Option("--cp-size", min=1, max=1024, help="CP ranks (SGLang --attn-cp-size). [default: 4]", show_default=False)]
StrategyOpt = Annotated[Optional[CPStrategy], typer.Option("--cp-strategy", help="CP split strategy. [default: zigzag]", show_default=False)]
AlignOpt = Annotated[Optional[int], typer.Option("--align-size", min=1, max=4194304, help="Row alignment. [default: 2*cp_size for zigzag, cp_size for interleave]", show_default=False)]
FactorOpt = Annotated[Optional[float], typer.Option("--max-padding-factor", min=1.0, max=100.0, help="Largest bucket/tokens ratio the selector accepts. [default: 2.0]", show_default=False)]
BucketsOpt = Annotated[Optional[str], typer.Option("--buckets", "-b", help="Bucket spec: sglang-default:MAX, sglang-legacy:MAX, a list like 2048,2304, or a YAML/JSON file (also SGLang --cuda-graph-config JSON). [default: sglang-default:CHUNK, SGLang's default for the --chunked-prefill-size in force]", show_default=False)]
CaptureLayoutOpt = Annotated[Optional[CaptureLayout], typer.Option("--capture-layout", help="Dummy batch each bucket is captured from. [default: single_request]", show_default=False)]
MaxContextOpt = Annotated[Optional[int], typer.Option("--max-context-size", min=1, max=2**31 - 1, help="Longest dummy request for context_bounded capture (tokens).", show_default=False)]
MaxCaptureReqOpt = Annotated[Optional[int], typer.Option("--max-capture-requests", min=1, max=4194304, help="Request slots of the capture dummy batch.", show_default=False)]
TraceOpt = Annotated[Optional[Path], typer.Option("--trace", "-t", help="Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload.", show_default=False)]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="table for people, json for machines.")]

# Request traces and the scheduler simulation (docs/scheduler.md). Defaults live in
# `cpbcg.config.SchedulerConfig`; `None` means "keep the config's value".
TraceFormatOpt = Annotated[str, typer.Option("--trace-format", metavar="FORMAT", parser=trace_format_name, help=f"What --trace holds: auto (detect it from the first line), {', '.join(TRACE_FORMAT_NAMES)} (docs/traces.md lists every format).")]
LengthFieldOpt = Annotated[Optional[str], typer.Option("--length-field", help="Prompt-length field of a generic CSV/JSONL request trace (tokens).", show_default=False)]
TimeFieldOpt = Annotated[Optional[str], typer.Option("--time-field", help="Arrival-time field of a generic request trace: seconds, or wall-clock datetimes. Without it arrivals are Poisson at --rate.", show_default=False)]
ChunkedPrefillOpt = Annotated[Optional[int], typer.Option("--chunked-prefill-size", min=-1, max=2**31 - 1, help="Chunk budget per prefill forward in tokens; -1 disables chunking (SGLang --chunked-prefill-size). [default: 8192]", show_default=False)]
MaxPrefillTokensOpt = Annotated[Optional[int], typer.Option("--max-prefill-tokens", min=1, max=2**31 - 1, help="Token budget of one prefill forward (SGLang --max-prefill-tokens). [default: 16384]", show_default=False)]
PrefillMaxRequestsOpt = Annotated[Optional[int], typer.Option("--prefill-max-requests", min=1, max=2**31 - 1, help="Most requests in one prefill forward (SGLang --prefill-max-requests). [default: unlimited]", show_default=False)]
MaxRunningRequestsOpt = Annotated[Optional[int], typer.Option("--max-running-requests", min=1, max=2**31 - 1, help="Request slots: requests decoding plus those of the forward being formed (with --no-decode it caps the requests of one forward). [default: min(max_total_tokens // 2, 4096) with decode, unlimited without]", show_default=False)]
PrefixCacheOpt = Annotated[Optional[str], typer.Option("--prefix-cache", help="Prefix cache over hash_ids (512-token blocks): off, unlimited, or a size in tokens (LRU). [default: off]", show_default=False)]
PrefillFixedMsOpt = Annotated[Optional[float], typer.Option("--prefill-fixed-ms", min=0.0, max=1e6, help="Fixed time of one prefill forward (ms). [default: 5.0]", show_default=False)]
PrefillTokensPerSOpt = Annotated[Optional[float], typer.Option("--prefill-tokens-per-s", min=1.0, max=1e12, help="Prefill throughput (tokens/s); a forward of n tokens takes prefill_fixed_ms + n / this. [default: 40000]", show_default=False)]
RateOpt = Annotated[Optional[float], typer.Option("--rate", min=1e-9, max=1e9, help="Poisson arrival rate for request traces without timestamps (requests/s). [default: 4.0]", show_default=False)]
TimeScaleOpt = Annotated[Optional[str], typer.Option("--time-scale", help="Divide inter-arrival gaps by this to emulate higher load; plan takes a list of load factors, e.g. 0.5,1,2,4: every factor is simulated and the list is fitted to all of them together. [default: 1.0]", show_default=False)]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", min=0, max=2**63 - 1, help="Seed of the synthetic Poisson arrivals. [default: 0]", show_default=False)]
DecodeOpt = Annotated[Optional[bool], typer.Option("--decode/--no-decode", help="Simulate decode (request slots, KV pool, decode steps between prefills); --no-decode keeps the prefill-only model. [default: decode]", show_default=False)]
PageSizeOpt = Annotated[Optional[int], typer.Option("--page-size", min=1, max=1 << 20, help="KV page size in tokens; charges are page-rounded and chunks cut to a page boundary (SGLang --page-size). [default: 1]", show_default=False)]
MaxTotalTokensOpt = Annotated[Optional[int], typer.Option("--max-total-tokens", min=1, max=2**62, help="KV pool in tokens, with decode (SGLang --max-total-tokens). [default: 1048576]", show_default=False)]
MixedChunkOpt = Annotated[Optional[bool], typer.Option("--enable-mixed-chunk/--no-mixed-chunk", help="Run the decode tokens of running requests inside prefill forwards (SGLang --enable-mixed-chunk). [default: off]", show_default=False)]
DefaultOutputOpt = Annotated[Optional[int], typer.Option("--default-output-tokens", min=1, max=1 << 31, help="Output length for requests whose trace has none (tokens). [default: 256]", show_default=False)]
DecodeFixedMsOpt = Annotated[Optional[float], typer.Option("--decode-fixed-ms", min=0.0, max=1e6, help="Fixed time of one decode step (ms). [default: --prefill-fixed-ms]", show_default=False)]
DecodeMsPerRequestOpt = Annotated[Optional[float], typer.Option("--decode-ms-per-request", min=0.0, max=1e6, help="Decode time per running request per step (ms). [default: 1000 / --prefill-tokens-per-s]", show_default=False)]


@contextmanager
def progress_bar(description: str, total: Optional[float] = None, enabled: bool = True) -> Iterator:
    """A rich progress bar on stderr; yields `advance(amount)`. Hidden when stderr is no terminal."""
    if not enabled or not sys.stderr.isatty():  # no bar, and no rich import, off a terminal
        yield lambda amount=1: None
        return
    console = stderr_console()
    if not console.is_terminal:  # FORCE_COLOR fakes a terminal; TERM=dumb and the like are none
        yield lambda amount=1: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda amount=1: bar.advance(task, amount)
