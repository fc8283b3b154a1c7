"""`cpbcg batches` rendered: the one line said after the batch trace is written (with the simulation note)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Protocol

from cpbcg.atomic import write_atomic
from cpbcg.outputs.console import stderr_console, write_bytes

from cpbcg.planner.words import counted


def written_line(forwards: int, num_lines: int, note: str | None, output: Path | str) -> str:
    """`N prefill forwards → M lines → WHERE`, after the simulation `note` when there is one."""
    where = "stdout" if str(output) == "-" else output
    text = f"{counted(forwards, 'prefill forward')} → {counted(num_lines, 'line')} → {where}"
    return text if note is None else f"{note}\n{text}"


class BatchTraceView(Protocol):
    """What this output reads of the batch trace (`cpbcg.commands.batches.BatchTrace`)."""

    forwards: int
    num_lines: int

    def lines(self) -> Iterator[bytes]: ...
    def note(self) -> str | None: ...


def write(written: BatchTraceView, output: Path) -> None:
    """The batch-trace lines to `output` (atomically; `-`: stdout), then the summary line on stderr."""
    if str(output) == "-":
        write_bytes(written.lines())
    else:
        write_atomic(output, written.lines())
    stderr_console().print(written_line(written.forwards, written.num_lines, written.note(), output), highlight=False, markup=False,
                           soft_wrap=True)
