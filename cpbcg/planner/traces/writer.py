"""Write forwards as a batch trace: one `{"extend_seq_lens": [...], "count": k}` line each,
identical forwards folded into `count` (`cpbcg batches`). The inverse of `traces/batches.py`."""

from __future__ import annotations

from typing import Iterable, Iterator

import orjson

from cpbcg.planner.choices import Fold
from cpbcg.planner.model.batches import BatchSet


def fold_batches(chunks: Iterable[BatchSet], fold: Fold) -> Iterator[tuple[tuple[int, ...], int]]:
    """`(extend_seq_lens, count)` per output line: identical forwards merged per `fold`
    (`consecutive` streams; `all` keeps one entry per distinct forward, first-seen order)."""
    if fold is Fold.all:
        merged: dict[tuple[int, ...], int] = {}
        for lens, count in _each_batch(chunks):
            merged[lens] = merged.get(lens, 0) + count
        yield from merged.items()
        return
    previous, total = None, 0
    for lens, count in _each_batch(chunks):
        if fold is Fold.consecutive and lens == previous:
            total += count
            continue
        if previous is not None:
            yield previous, total
        previous, total = lens, count
    if previous is not None:
        yield previous, total


def batch_trace_lines(folded: Iterable[tuple[tuple[int, ...], int]]) -> Iterator[bytes]:
    """The JSONL lines of folded forwards (`count` only when not 1)."""
    for lens, count in folded:
        record: dict[str, list[int] | int] = {"extend_seq_lens": list(lens)}
        if count != 1:
            record["count"] = count
        yield orjson.dumps(record) + b"\n"


def _each_batch(chunks: Iterable[BatchSet]) -> Iterator[tuple[tuple[int, ...], int]]:
    for chunk in chunks:
        flat, offsets, counts = chunk.extend_seq_lens.tolist(), chunk.offsets.tolist(), chunk.counts.tolist()
        for i, count in enumerate(counts):
            yield tuple(flat[offsets[i] : offsets[i + 1]]), count
