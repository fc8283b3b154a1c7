"""Options shared by several commands, config resolution, consoles and progress bars."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator, Optional

from typing import TYPE_CHECKING

import typer

from cpbcg.atomic import input_path  # noqa: F401  (--trace)

from cpbcg.outputs.console import OutputFormat, print_json, stderr_console, stdout_console  # noqa: F401  (the commands' consoles)
from cpbcg.settings import CONFIG_HELP, TRACE_FORMAT_NAMES, trace_format_name

if TYPE_CHECKING:
    pass


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
