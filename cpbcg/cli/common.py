"""Options shared by several commands, config resolution, consoles and progress bars."""

from __future__ import annotations

import os
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from cpbcg.config import DeploymentConfig, load_config
from cpbcg.planner.capacity import CaptureLayout
from cpbcg.planner.layout import CPStrategy


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def stdout_console() -> Console:
    """Console for the command's main output (a table); plain when not a terminal."""
    width = int(os.environ.get("CPBCG_WIDTH", "0")) or None
    return Console(width=width, soft_wrap=False)


def stderr_console() -> Console:
    """Console for progress, notes and errors."""
    return Console(stderr=True)


CONFIG_HELP = "Deployment config: a YAML file or a preset name (see `cpbcg presets`). Options override it."
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help=CONFIG_HELP, show_default=False)]
CpSizeOpt = Annotated[Optional[int], typer.Option("--cp-size", min=1, help="CP ranks (SGLang --attn-cp-size). [default: 4]", show_default=False)]
StrategyOpt = Annotated[Optional[CPStrategy], typer.Option("--cp-strategy", help="CP split strategy. [default: zigzag]", show_default=False)]
AlignOpt = Annotated[Optional[int], typer.Option("--align-size", min=1, help="Row alignment. [default: 2*cp_size for zigzag, cp_size for interleave]", show_default=False)]
FactorOpt = Annotated[Optional[float], typer.Option("--max-padding-factor", min=1.0, help="Largest bucket/tokens ratio the selector accepts. [default: 2.0]", show_default=False)]
BucketsOpt = Annotated[Optional[str], typer.Option("--buckets", "-b", help="Bucket spec: sglang-default:MAX, sglang-legacy:MAX, a list like 2048,2304, or a YAML/JSON file (also SGLang --cuda-graph-config JSON). [default: sglang-default:8192]", show_default=False)]
CaptureLayoutOpt = Annotated[Optional[CaptureLayout], typer.Option("--capture-layout", help="Dummy batch each bucket is captured from. [default: single_request]", show_default=False)]
MaxContextOpt = Annotated[Optional[int], typer.Option("--max-context-size", min=1, help="Longest dummy request for context_bounded capture (tokens).", show_default=False)]
MaxCaptureReqOpt = Annotated[Optional[int], typer.Option("--max-capture-requests", min=1, help="Request slots of the capture dummy batch.", show_default=False)]
TraceOpt = Annotated[Optional[Path], typer.Option("--trace", "-t", help="Batch trace (JSONL, .gz ok). Omit for the embedded default workload.", show_default=False)]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="table for people, json for machines.")]


def resolve_config(
    config: Optional[str],
    *,
    cp_size: Optional[int] = None,
    cp_strategy: Optional[CPStrategy] = None,
    align_size: Optional[int] = None,
    max_padding_factor: Optional[float] = None,
    buckets: Optional[str] = None,
    capture_layout: Optional[CaptureLayout] = None,
    max_context_size_tokens: Optional[int] = None,
    max_capture_requests: Optional[int] = None,
    **dotted: object,
) -> DeploymentConfig:
    """Load `config` (file, preset or defaults) and apply the command-line overrides."""
    overrides = dict(
        cp_size=cp_size,
        cp_strategy=cp_strategy,
        align_size=align_size,
        max_padding_factor=max_padding_factor,
        buckets=buckets,
        capture_layout=capture_layout,
        max_context_size_tokens=max_context_size_tokens,
        max_capture_requests=max_capture_requests,
    )
    overrides.update(dotted)
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
