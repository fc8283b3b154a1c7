"""Rules every request stream obeys, whatever its format: arrival times never decrease, and a
trace holds at least one request."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.records import LineNumbers, ReadNotes, RequestChunk, RequestItem
from cpbcg.planner.traces.text import TracePath


def checked_requests(
    path: TracePath, chunks: Iterable[RequestItem], empty_note: str = "", strict: bool = False,
    notes: ReadNotes | None = None,
) -> Iterator[RequestChunk]:
    """The chunks of a reader (`(chunk, line_numbers)` pairs), checked across chunk borders;
    the rows the readers skipped (`SkippedRows`) and their notes are tallied in `notes`.

    Raises `TraceError` naming the first line whose timestamp goes backwards, with `strict` the
    first skipped row (`FIELD: 0 is not a positive integer`), and `FILE:1: empty trace: no
    requests` (plus `empty_note`, and the skipped rows) when nothing was read.
    """
    order = _TimeOrder(path)
    notes = ReadNotes() if notes is None else notes
    seen_any = False
    for chunk, line_nos in chunks:
        if strict and chunk.skipped is not None:
            raise TraceError(located(path, chunk.skipped.first_line, f"{chunk.skipped.field}: 0 is not a positive integer (--strict refuses rows with 0 prompt tokens)"))
        notes.add(chunk)
        order.check(chunk.arrival_s, line_nos)
        if chunk.num_requests:
            seen_any = True
            yield chunk
    if not seen_any:
        skipped = f" ({notes.skipped_rows:,} rows with 0 prompt tokens skipped, first at line {notes.first_skipped_line})" if notes.skipped_rows else ""
        raise TraceError(located(path, 1, "empty trace: no requests" + empty_note + skipped))


class _TimeOrder:
    """Refuses decreasing arrival times, naming the first offending line."""

    def __init__(self, path: TracePath):
        self.path, self.last_s = path, -np.inf

    def check(self, arrival_s: np.ndarray | None, line_nos: LineNumbers) -> None:
        if arrival_s is None or not len(arrival_s):
            return
        previous = np.concatenate([[self.last_s], arrival_s[:-1]])
        bad = np.flatnonzero(arrival_s < previous)
        if len(bad):
            i = int(bad[0])
            raise TraceError(located(self.path, int(line_nos()[i]), "timestamp goes backwards (arrival times must not decrease)"))
        self.last_s = float(arrival_s[-1])
