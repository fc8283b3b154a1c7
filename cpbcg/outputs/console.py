"""Where every rendering goes: the `--format` choices and the one writer interface of the outputs:
`echo` (a line of plain text, to stdout or stderr), `write_bytes` (data as it is, e.g. a report
file sent to `-`), `print_json`, and the rich consoles (stdout for the command's output, stderr
for progress and notes). Light: rich only when a console is made; no output writes to a stream
any other way (no typer, no `print`).

One refusal path (`held_stderr`): while a command runs, what it writes to stderr (notes,
warnings) is held until it knows its input is good (`release_stderr`: it writes its answer to
stdout, starts a long run, or returns); a refusal (exit 2) prints its one error line first and
the held notes never (`drop_stderr`)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NoReturn, Optional, TextIO

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


class _HeldStderr:
    """`sys.stderr` while a command runs (`held_stderr`): text written is held, not shown, until
    `release` (then written in order, and later text passes straight through) or `drop`."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.held: list[str] | None = []

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream (click probes `write(b"")` for a binary one)
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.held is None:
            return self.stream.write(text)
        self.held.append(text)
        return len(text)

    def flush(self) -> None:
        if self.held is None:
            self.stream.flush()

    def release(self) -> None:
        held, self.held = self.held, None
        if held:
            self.stream.write("".join(held))
            self.stream.flush()

    def drop(self) -> None:
        self.held = None

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, errors, buffer: the stream's
        return getattr(self.stream, name)


@contextmanager
def held_stderr() -> Iterator[None]:
    """Hold what is written to stderr (notes, warnings) while the block runs (module doc): released
    by `release_stderr` or when the block ends, unless `drop_stderr` dropped it. Nests (the outer
    hold owns the stream)."""
    if isinstance(sys.stderr, _HeldStderr):
        yield
        return
    held = _HeldStderr(sys.stderr)
    sys.stderr = held
    try:
        yield
    finally:
        held.release()
        if sys.stderr is held:
            sys.stderr = held.stream


def release_stderr() -> None:
    """The input is good: show the held stderr lines now, and pass later ones straight through."""
    if isinstance(sys.stderr, _HeldStderr):
        sys.stderr.release()


def drop_stderr() -> None:
    """A refusal: the held stderr lines are never shown (the error line is the first line); later
    lines pass straight through."""
    if isinstance(sys.stderr, _HeldStderr):
        sys.stderr.drop()


def _unheld_stderr() -> TextIO:
    """The stream under a hold: a live progress bar draws there at once (it is transient)."""
    return sys.stderr.stream if isinstance(sys.stderr, _HeldStderr) else sys.stderr


def stdout_console(*, answer: bool = True) -> "Console":
    """Console for the command's main output (a table): `CPBCG_WIDTH` or `COLUMNS` if set, the
    terminal's width, or `PIPE_WIDTH` when not a terminal. `answer` (default): the command has its
    answer, held stderr lines are shown first (`release_stderr`); False for a live view's console."""
    from rich.console import Console

    if answer:
        release_stderr()
    width = env_width()
    console = Console(width=width, soft_wrap=False)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPE_WIDTH, soft_wrap=False)
    return console


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Plain text as it is (no rich markup, no wrapping) to stdout, or stderr with `err` (notes,
    warnings, verdicts), with a newline unless `nl` is False; flushed. Text to stdout is the
    command's answer: held stderr lines are shown first (`release_stderr`)."""
    if not err:
        release_stderr()
    stream = sys.stderr if err else sys.stdout
    stream.write(f"{text}\n" if nl else text)
    stream.flush()


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (where a progress bar shows; elsewhere progress is printed as lines)."""
    return sys.stderr.isatty()


def write_bytes(data: bytes | Iterable[bytes], *, err: bool = False) -> None:
    """Bytes (one block, or lines as an iterable) unchanged to stdout (stderr with `err`), flushed:
    a batch trace or a report file sent to `-`."""
    release_stderr()
    stream = sys.stderr if err else sys.stdout
    if isinstance(data, bytes):
        stream.buffer.write(data)
    else:
        stream.buffer.writelines(data)
    stream.flush()


def print_json(payload: bytes, *, to_stderr: bool = False) -> None:
    """Write a JSON document unchanged to stdout (or stderr): no rich markup, no wrapping, and
    no rich import (JSON output stays light)."""
    release_stderr()
    stream = sys.stderr if to_stderr else sys.stdout
    stream.write(payload.decode())
    stream.flush()


def stderr_console(file: TextIO | None = None) -> "Console":
    """Console for progress, notes and reports sent to stderr (same width rule as stdout); `file`:
    another stream for it (a progress bar's: `_unheld_stderr`)."""
    from rich.console import Console

    width = env_width()
    console = Console(stderr=file is None, file=file, width=width)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=file is None, file=file, width=PIPE_WIDTH)
    return console


@contextmanager
def progress_bar(description: str, total: Optional[float] = None, enabled: bool = True) -> Iterator:
    """A rich progress bar on stderr; yields `advance(amount, description=None)` (a description
    replaces the bar's). Hidden when stderr is no terminal."""
    if not enabled or not sys.stderr.isatty():  # no bar, and no rich import, off a terminal
        yield lambda amount=1, description=None: None
        return
    console = stderr_console(_unheld_stderr())
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
