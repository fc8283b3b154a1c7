"""Explain one batch: the blocks each rank holds, its rows, and which bucket replays it and why."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet, CPLayout, local_tokens, worst_case_rows
from cpbcg.planner.model.selector import BucketTable


@dataclass(frozen=True)
class BatchExplanation:
    """Everything `cpbcg layout` shows about one batch."""

    extend_seq_lens: list[int]
    """The batch's extend lengths (tokens)."""
    num_tokens: int
    """`n`, total extend tokens."""
    cp_active: bool
    """Whether the batch runs under CP."""
    block_tokens: list[list[int]]
    """[num_requests][2*cp_size] zigzag block sizes (empty lists for interleave or cp 1)."""
    rank_blocks: list[list[int]]
    """[cp_size][2] the zigzag block indices each rank owns (`[r, 2*cp_size-1-r]`; empty when not zigzag)."""
    rank_local_tokens: list[int]
    """[cp_size] logical tokens per rank."""
    local_rows: int
    """Physical rows per rank (aligned maximum)."""
    worst_case_rows: int
    """Worst-case rows for any batch of this many tokens and requests (docs/model.md "Layout")."""
    natural_bucket: int | None
    """Smallest bucket >= n, if any."""
    natural_capacity_rows: int | None
    """`C(natural bucket)`."""
    bucket: int | None
    """Bucket that replays the batch, or None if eager."""
    capacity_rows: int | None
    """`C(bucket)`."""
    eager_reason: str | None
    """Why the batch runs eagerly, or None."""
    rescued: bool
    """Natural bucket lacked capacity; a larger one fitted."""
    bucket_note: str | None = None
    """How SGLang 0.5.23 changed the configured list before capturing it (`BucketTable.note`)."""


def explain_batch(extend_seq_lens: list[int], cp: CPLayout, table: BucketTable, max_padding_factor: float) -> BatchExplanation:
    """Lay out one batch and run it through the selector. Raises `TraceError` for bad lengths."""
    batches = BatchSet.from_lists([extend_seq_lens])
    n = int(batches.num_tokens[0])
    demand = Demand.of(batches, cp)
    rows, active = demand.rows, demand.active
    sel = demand.select(table, max_padding_factor)
    buckets, caps = table.capture_num_tokens, table.capacity_rows
    natural = int(np.searchsorted(buckets, n))
    has_natural = natural < len(buckets)
    chosen = int(sel.bucket_index[0])
    blocks = [cp.model.blocks(x) for x in extend_seq_lens]
    owners = cp.model.blocks(n)
    return BatchExplanation(
        extend_seq_lens=list(extend_seq_lens),
        num_tokens=n,
        cp_active=bool(active[0]),
        block_tokens=[list(b.block_tokens) for b in blocks if b is not None],
        rank_blocks=[list(pair) for pair in owners.rank_blocks] if owners is not None else [],
        rank_local_tokens=local_tokens(batches, cp)[0].tolist(),
        local_rows=int(rows[0]),
        worst_case_rows=int(worst_case_rows(n, len(extend_seq_lens), cp)),
        natural_bucket=int(buckets[natural]) if has_natural else None,
        natural_capacity_rows=int(caps[natural]) if has_natural else None,
        bucket=int(buckets[chosen]) if chosen >= 0 else None,
        capacity_rows=int(caps[chosen]) if chosen >= 0 else None,
        eager_reason=None if (reason := sel.reason_of(0)) is None else reason.value,
        rescued=bool(sel.rescued[0]),
        bucket_note=table.note,
    )
