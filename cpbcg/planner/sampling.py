"""Seeded samples of trace batches the runtime selector replays in a graph (one sampler).

`replay-check --replay N` replays a uniform sample of graph batches; `cpbcg capture --trace`
replays, per bucket, the batch needing the most local rows plus a uniform sample. Both use
`sample_graph_batches`: one pass over the trace chunks, bottom-k of seeded random keys (so the
sample is uniform, memory stays bounded, and the same seed gives the same batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from cpbcg.planner.arrays import Int64Array, sorted_unique
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable


@dataclass(frozen=True)
class SampledBatch:
    """One trace batch the selector replays in a graph."""

    position: int
    """0-based index of the batch in the trace (over all chunks)."""
    capture_num_tokens: int
    """Bucket `B` (tokens) the selector routes it to."""
    local_rows: int
    """CP-local physical rows per rank the batch needs."""
    extend_seq_lens: tuple[int, ...]
    """Extend tokens per request."""


@dataclass(frozen=True)
class GraphSample:
    """Result of `sample_graph_batches`."""

    batches: tuple[SampledBatch, ...]
    """The sample, in trace order (overall, or per bucket, see `per_bucket`)."""
    heaviest: tuple[SampledBatch, ...]
    """Per bucket (ascending), the first batch needing the most local rows."""

    def for_bucket(self, bucket: int) -> tuple[SampledBatch, ...]:
        """Sampled batches routed to `bucket`, the heaviest first (not repeated)."""
        top = [h for h in self.heaviest if h.capture_num_tokens == bucket]
        rest = [b for b in self.batches if b.capture_num_tokens == bucket and b not in top]
        return tuple(top + rest)


class _BottomK:
    """The `k` items with the smallest keys seen so far (stable for equal keys)."""

    def __init__(self, k: int) -> None:
        self.k, self.keys = k, np.zeros(0)
        self.items: list[SampledBatch] = []

    def offer(self, keys: np.ndarray, items: "_Lazy") -> None:
        best = np.argsort(keys, kind="stable")[: self.k]
        pool_keys = np.concatenate([self.keys, keys[best]])
        pool = self.items + [items[i] for i in best]
        order = np.argsort(pool_keys, kind="stable")[: self.k]
        self.items, self.keys = [pool[j] for j in order], pool_keys[order]


def sample_graph_batches(
    chunks: Iterable[BatchSet], table: BucketTable, cp: CPLayout, max_padding_factor: float, k: int,
    seed: int = 0, *, per_bucket: bool = False,
) -> GraphSample:
    """Up to `k` trace batches the selector replays in a graph (`k` per bucket if `per_bucket`),
    uniformly sampled with seed `seed`, plus the heaviest batch of every bucket used.

    Each chunk draws one uniform key per graph batch (`numpy.random.default_rng(seed)`, chunk
    order); the batches with the `k` smallest keys win. Routing is the runtime selector's
    (`select_buckets`, docs/model.md "Replay selection"). Raises what reading `chunks` raises.
    """
    rng = np.random.default_rng(seed)
    overall = _BottomK(k)
    buckets: dict[int, _BottomK] = {}
    heaviest: dict[int, SampledBatch] = {}
    position = 0
    for batches in chunks:
        demand = Demand.of(batches, cp)
        sel = demand.select(table, max_padding_factor)
        graph = np.flatnonzero(sel.graph)  # [num_graph] int64 indices into the chunk
        keys = rng.random(len(graph))
        bucket_of = table.capture_num_tokens[sel.bucket_index[graph]]  # [num_graph] int64

        def item(j: int) -> SampledBatch:
            i = int(graph[j])
            return SampledBatch(position + i, int(bucket_of[j]), int(demand.rows[i]), tuple(batches.batch(i)))

        if per_bucket:
            for bucket in sorted_unique(bucket_of):
                where = np.flatnonzero(bucket_of == bucket)
                buckets.setdefault(int(bucket), _BottomK(k)).offer(keys[where], _Lazy(item, where))
                top = item(int(where[np.argmax(demand.rows[graph[where]])]))
                if top.capture_num_tokens not in heaviest or top.local_rows > heaviest[top.capture_num_tokens].local_rows:
                    heaviest[top.capture_num_tokens] = top
        else:
            overall.offer(keys, _Lazy(item, np.arange(len(graph))))
        position += batches.num_batches
    kept = [b for s in buckets.values() for b in s.items] if per_bucket else overall.items
    return GraphSample(tuple(sorted(kept, key=lambda b: b.position)),
                       tuple(heaviest[b] for b in sorted(heaviest)))


class _Lazy:
    """`items[i]` built on demand (only the few winners of a chunk become Python objects)."""

    def __init__(self, make: Callable[[int], SampledBatch], where: Int64Array) -> None:
        self.make, self.where = make, where

    def __getitem__(self, i: int) -> SampledBatch:
        return self.make(int(self.where[i]))
