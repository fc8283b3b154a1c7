"""`cpbcg batches` rendered: the one line said after the batch trace is written (with the simulation note)."""

from __future__ import annotations

from pathlib import Path

from cpbcg.planner.words import counted


def written_line(forwards: int, num_lines: int, note: str | None, output: Path | str) -> str:
    """`N prefill forwards → M lines → WHERE`, after the simulation `note` when there is one."""
    where = "stdout" if str(output) == "-" else output
    text = f"{counted(forwards, 'prefill forward')} → {counted(num_lines, 'line')} → {where}"
    return text if note is None else f"{note}\n{text}"
