"""Where every rendering goes: the `--format` choices and the one writer interface of the outputs:
`echo` (a line of plain text, to stdout or stderr), `write_bytes` (data as it is, e.g. a report
file sent to `-`), `print_json`, and the rich consoles (stdout for the command's output, stderr
for progress and notes). Light: rich only when a console is made; no output writes to a stream
any other way (no typer, no `print`)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Iterable, Iterator, NoReturn, Optional

if TYPE_CHECKING:
    from rich.console import Console


MAX_WIDTH = 10_000
"""Widest table `CPBCG_WIDTH` may ask for (columns; `cpbcg.cli.app.ENV_INTS` checks it at start-up)."""


class OutputFormat(str, Enum):
    """`--format`: every way a command's report is shown on stdout; each output dispatches on it
    exhaustively (`assert_never`), so a new format is this line plus its arm in each output."""

    table = "table"
    json = "json"


def env_width() -> int | None:
    """`CPBCG_WIDTH` as a table width in columns, or None when unset or 0 (bad values were
    dropped by `sanitize_environment`; this re-checks, so it never raises)."""
    text = os.environ.get("CPBCG_WIDTH", "").strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        return None
    width = int(text)
    return width if 0 < width <= MAX_WIDTH else None


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


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Plain text as it is (no rich markup, no wrapping) to stdout, or stderr with `err` (notes,
    warnings, verdicts), with a newline unless `nl` is False; flushed."""
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n" if nl else text)
    stream.flush()


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (where a progress bar shows; elsewhere progress is printed as lines)."""
    return sys.stderr.isatty()


def write_bytes(data: bytes | Iterable[bytes], *, err: bool = False) -> None:
    """Bytes (one block, or lines as an iterable) unchanged to stdout (stderr with `err`), flushed:
    a batch trace or a report file sent to `-`."""
    stream = sys.stderr if err else sys.stdout
    if isinstance(data, bytes):
        stream.buffer.write(data)
    else:
        stream.buffer.writelines(data)
    stream.flush()


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


def assert_never(value: NoReturn) -> NoReturn:
    """`typing.assert_never` (Python 3.11) for 3.10: mypy rejects a call that a value can still
    reach, so a format without its arm fails the type check; at run time it is a bug."""
    raise AssertionError(f"unhandled output format: {value!r}")
