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
from cpbcg.settings import TRACE_FORMAT_NAMES, trace_format_name

if TYPE_CHECKING:
    from rich.console import Console


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


def input_path(text: str) -> Path:
    """Typer `parser=` for input file options (`--trace`, `--fit-trace`): the path, refusing an
    empty or blank name (an unset shell variable, `-t "$TRACE"`), which `Path("")` would read as
    `.`, the current directory, and plan every file in it."""
    if not text.strip():
        raise typer.BadParameter("an empty path (an unset shell variable?): give a file, a directory, a glob or - for standard input")
    return Path(text)


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
TraceOpt = Annotated[Optional[Path], typer.Option("--trace", "-t", help="Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload.", show_default=False)]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="table for people, json for machines.")]

# How a trace is read. The deployment, scheduler and cost options are derived from
# `cpbcg.settings` (`cpbcg.cli.options.option`); `None` means "keep the config's value".
TraceFormatOpt = Annotated[str, typer.Option("--trace-format", metavar="FORMAT", parser=trace_format_name, help=f"What --trace holds: auto (detect it from the first line), {', '.join(TRACE_FORMAT_NAMES)} (docs/traces.md lists every format).")]
LengthFieldOpt = Annotated[Optional[str], typer.Option("--length-field", help="Prompt-length field of a generic CSV/JSONL request trace (tokens).", show_default=False)]
TimeFieldOpt = Annotated[Optional[str], typer.Option("--time-field", help="Arrival-time field of a generic request trace: seconds, or wall-clock datetimes. Without it arrivals are Poisson at --rate.", show_default=False)]


@contextmanager
def progress_bar(description: str, total: Optional[float] = None, enabled: bool = True) -> Iterator:
    """A rich progress bar on stderr; yields `advance(amount, description=None)` (a description
    replaces the bar's). Hidden when stderr is no terminal."""
    if not enabled or not sys.stderr.isatty():  # no bar, and no rich import, off a terminal
        yield lambda amount=1, description=None: None
        return
    console = stderr_console()
    if not console.is_terminal:  # FORCE_COLOR fakes a terminal; TERM=dumb and the like are none
        yield lambda amount=1, description=None: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed:,.0f}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(amount: float = 1, description: str | None = None) -> None:
            bar.update(task, advance=amount, description=description)

        yield advance
