"""Many prefill forwards as flat arrays (`BatchSet`) and the largest length cpbcg accepts.

The bottom of the model wing: imports nothing of the planner but its array types, so the CP
models (`strategy.py`), the layout (`layout.py`) and the trace readers all build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from cpbcg.errors import TraceError
from cpbcg.planner.arrays import BoolArray, Int64Array

MAX_TOKENS = 2**31 - 1
"""Largest length, count or bucket cpbcg accepts (tokens): far above any real context, and small
enough that no sum over a trace can overflow int64."""


_EVERY_ONCE: Int64Array = np.zeros(0, dtype=np.int64)
"""Marks a `BatchSet` built without counts (`__post_init__` puts a 1 per batch)."""


@dataclass(frozen=True)
class BatchSet:
    """Many prefill batches as flat arrays (ragged, no per-request Python objects).

    Batch `i` is `extend_seq_lens[offsets[i]:offsets[i+1]]` and occurred `counts[i]` times.
    Every batch holds at least one request; every length is >= 1 (the readers enforce it).
    """

    extend_seq_lens: Int64Array
    """[num_requests] int64: extend tokens of every request, batch after batch."""
    offsets: Int64Array
    """[num_batches + 1] int64: start of each batch in `extend_seq_lens`; last = num_requests."""
    counts: Int64Array = field(default_factory=lambda: _EVERY_ONCE)
    """[num_batches] int64: how many times each batch occurred (weights, >= 1); default all 1."""

    def __post_init__(self) -> None:
        if self.counts is _EVERY_ONCE:
            object.__setattr__(self, "counts", np.ones(len(self.offsets) - 1, dtype=np.int64))

    @classmethod
    def from_sizes(cls, extend_seq_lens: Sequence[int] | Int64Array, sizes: Sequence[int] | Int64Array,
                   counts: Sequence[int] | Int64Array | None = None) -> "BatchSet":
        """From flat lengths ([num_requests] int64-like) and requests per batch ([num_batches])."""
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        weights = _EVERY_ONCE if counts is None else np.asarray(counts, dtype=np.int64)
        return cls(np.asarray(extend_seq_lens, dtype=np.int64), offsets, weights)

    @classmethod
    def from_lists(
        cls, batches: Sequence[Sequence[int]], counts: Sequence[int] | None = None
    ) -> "BatchSet":
        """Build from Python lists of extend lengths (convenient for tests and small inputs).

        Raises `TraceError` for an empty batch or a length that is not a positive integer.
        """
        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        if np.any(sizes == 0):
            raise TraceError(f"batch {int(np.argmin(sizes))} has no requests")
        flat = [x for b in batches for x in b]
        if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 1 <= x <= MAX_TOKENS for x in flat):
            raise TraceError(f"extend_seq_lens must be positive integers up to {MAX_TOKENS}")
        return cls.from_sizes(flat, sizes, counts)

    @classmethod
    def concat(cls, parts: Iterable["BatchSet"]) -> "BatchSet":
        """Join several sets in order."""
        parts = list(parts)
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(1, np.int64))
        lens = np.concatenate([p.extend_seq_lens for p in parts])
        shifts = np.cumsum([0] + [len(p.extend_seq_lens) for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, shifts)])
        counts = np.concatenate([p.counts for p in parts])
        return cls(lens, offsets.astype(np.int64), counts)

    @property
    def num_batches(self) -> int:
        return len(self.offsets) - 1

    @cached_property
    def num_requests(self) -> Int64Array:
        """[num_batches] int64: requests per batch."""
        return np.diff(self.offsets)

    @cached_property
    def num_tokens(self) -> Int64Array:
        """[num_batches] int64: `n = sum(extend_seq_lens)` of each batch (tokens)."""
        return self._segment_sum(self.extend_seq_lens)

    def split(self, max_batches: int) -> Iterator["BatchSet"]:
        """Consecutive pieces of at most `max_batches` batches (views, no copy)."""
        for start in range(0, self.num_batches, max_batches):
            stop = min(start + max_batches, self.num_batches)
            edges = self.offsets[start : stop + 1]
            yield BatchSet(self.extend_seq_lens[edges[0] : edges[-1]], edges - edges[0], self.counts[start:stop])

    def batch(self, index: int) -> list[int]:
        """The extend lengths of batch `index` as a Python list."""
        return [int(x) for x in self.extend_seq_lens[self.offsets[index] : self.offsets[index + 1]]]

    def subset(self, mask: BoolArray) -> "BatchSet":
        """The batches where `mask` ([num_batches] bool) is true, in order."""
        sizes = self.num_requests[mask]
        keep = np.repeat(mask, self.num_requests)
        return BatchSet.from_sizes(self.extend_seq_lens[keep], sizes, self.counts[mask])

    def _segment_sum(self, values: Int64Array) -> Int64Array:
        if self.num_batches == 0:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(values, self.offsets[:-1], dtype=np.int64)
