"""What each prefill forward asks of the replay selector: tokens, CP-local rows, CP eligibility.

`Demand.of` lays out a chunk of forwards under a `CPLayout` (the rules of
`cpbcg.planner.model.strategy`); `Demand.select` runs them through the runtime's replay selector. Every
caller that needs "lay out, then select" goes through these two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable, Selection, select_buckets


@dataclass(frozen=True)
class Demand:
    """What each batch asks of the selector, per batch (weights in `counts`)."""

    num_tokens: Int64Array
    """[N] int64: tokens `n` per batch."""
    rows: Int64Array
    """[N] int64: CP-local physical rows per rank."""
    active: BoolArray
    """[N] bool: CP-active (eligible for graphs)."""
    num_requests: Int64Array
    """[N] int64: requests per batch."""
    counts: Int64Array
    """[N] int64: occurrences of each batch."""

    @classmethod
    def of(cls, batches: BatchSet, cp: CPLayout) -> "Demand":
        """Layout every batch of `batches` under `cp` (vectorised; see `cpbcg.planner.model.layout`)."""
        return cls(
            batches.num_tokens, cp.model.rows(batches), cp.model.active(batches), batches.num_requests, batches.counts
        )

    def aggregate(self) -> "Demand":
        """Merge forwards with equal `(num_tokens, rows, active)`; counts add up, `num_requests`
        keeps the largest. The selector's outcome depends on nothing else. Sorted by key."""
        if len(self.num_tokens) == 0:
            return self
        row_bits = max(int(self.rows.max()).bit_length(), 1)
        if int(self.num_tokens.max()).bit_length() + row_bits < 63:
            # one int64 key (tokens, rows, active) in as few bits as the values need: fewer radix digits
            key = (self.num_tokens << (row_bits + 1)) | (self.rows << 1) | self.active.astype(np.int64)
            order = _radix_order(key)
            key = key[order]
            starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
            uniq = key[starts]
            tokens, rows, active = uniq >> (row_bits + 1), (uniq >> 1) & ((1 << row_bits) - 1), (uniq & 1).astype(bool)
            counts = np.add.reduceat(self.counts[order], starts)
            requests = np.maximum.reduceat(self.num_requests[order], starts)
            return Demand(tokens, rows, active, requests, counts)
        stacked = np.stack([self.num_tokens, self.rows, self.active.astype(np.int64)], axis=1)
        uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.zeros(len(uniq), dtype=np.int64)
        np.add.at(counts, inverse, self.counts)
        requests = np.zeros(len(uniq), dtype=np.int64)
        np.maximum.at(requests, inverse, self.num_requests)
        return Demand(uniq[:, 0], uniq[:, 1], uniq[:, 2].astype(bool), requests, counts)

    @property
    def num_forwards(self) -> int:
        """Forwards, `count` weights included."""
        return int(self.counts.sum())

    def select(self, table: BucketTable, max_padding_factor: float = 2.0) -> Selection:
        """The runtime selector's outcome for every forward (see `select_buckets`)."""
        return select_buckets(self.num_tokens, self.rows, self.active, table, max_padding_factor)

    def subset(self, mask: BoolArray | slice) -> "Demand":
        """The forwards where `mask` ([N] bool) holds, or in `mask` when it is a slice (views)."""
        return Demand(self.num_tokens[mask], self.rows[mask], self.active[mask], self.num_requests[mask], self.counts[mask])

    @classmethod
    def concat(cls, parts: "list[Demand]") -> "Demand":
        """One demand of all `parts`, in order."""
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty.astype(bool), empty, empty)
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in ("num_tokens", "rows", "active", "num_requests", "counts")))


def _radix_order(key: Int64Array) -> Int64Array:
    """[N] int64 permutation that sorts `key` ([N] int64, >= 0): least significant digit first
    over 16-bit digits, each a stable argsort of uint16 values (numpy sorts those by radix, in
    linear time: several times faster than a comparison sort of the int64 keys). Only as many
    digits as the largest key has."""
    order = np.argsort(key.astype(np.uint16), kind="stable")  # the cast keeps the low 16 bits
    for shift in range(16, int(key.max()).bit_length(), 16):
        order = order[np.argsort((key[order] >> shift).astype(np.uint16), kind="stable")]
    return order
