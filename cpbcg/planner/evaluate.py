"""Evaluate a bucket list on a stream of batches: coverage, padding, eager reasons, hits.

`plan` (evaluation mode) and `replay-check` both call `evaluate`; the numbers they print are
the same code's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from cpbcg.errors import TraceError
from cpbcg.planner.layout import BatchSet, CPLayout, cp_active, local_rows
from cpbcg.planner.selector import EAGER_REASONS, GRAPH, BucketTable, select_buckets

MAX_TOTAL_TOKENS = 2**62
"""Largest count-weighted token total a trace may have (int64 tallies stay exact below it)."""
MAX_EXAMPLES = 5
PIECE_BATCHES = 1 << 14
"""Batches laid out at once: big enough to amortise numpy calls, small enough that the
temporaries (about a megabyte each) stay in cache; measured with benchmarks/bench_plan.py:
16k-batch pieces 0.15 s per million batches, 128k 0.20 s, one 1M piece 0.30 s."""
"""How many example batches are kept per eager reason and for natural-bucket overflows."""


@dataclass(frozen=True)
class Demand:
    """What each batch asks of the selector, per batch (weights in `counts`)."""

    num_tokens: np.ndarray
    """[N] int64: tokens `n` per batch."""
    rows: np.ndarray
    """[N] int64: CP-local physical rows per rank."""
    active: np.ndarray
    """[N] bool: CP-active (eligible for graphs)."""
    num_requests: np.ndarray
    """[N] int64: requests per batch."""
    counts: np.ndarray
    """[N] int64: occurrences of each batch."""

    @classmethod
    def of(cls, batches: BatchSet, cp: CPLayout) -> "Demand":
        """Layout every batch of `batches` under `cp` (vectorised; see `cpbcg.planner.layout`)."""
        return cls(
            batches.num_tokens, local_rows(batches, cp), cp_active(batches, cp), batches.num_requests, batches.counts
        )

    def aggregate(self) -> "Demand":
        """Merge batches with equal `(num_tokens, rows, active)`; counts add up, `num_requests`
        keeps the largest. The selector's outcome depends on nothing else."""
        key = np.stack([self.num_tokens, self.rows, self.active.astype(np.int64)], axis=1)
        uniq, inverse = np.unique(key, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        counts = np.bincount(inverse, weights=self.counts, minlength=len(uniq)).astype(np.int64)
        requests = np.zeros(len(uniq), dtype=np.int64)
        np.maximum.at(requests, inverse, self.num_requests)
        return Demand(uniq[:, 0], uniq[:, 1], uniq[:, 2].astype(bool), requests, counts)


@dataclass(frozen=True)
class Evaluation:
    """How a bucket list serves a batch stream. Batch and token counts honour `count` weights."""

    buckets: list[int]
    """Captured buckets (tokens), ascending."""
    capacity_rows: list[int]
    """Local capacity `C(B)` of each bucket (rows per rank)."""
    batches: int
    """Prefill forwards in the trace."""
    tokens: int
    """Extend tokens in the trace."""
    graph_batches: int
    """Forwards replayed from a graph."""
    graph_tokens: int
    """Real (unpadded) tokens of the graph forwards."""
    padded_tokens: int
    """Padding tokens added by graph replays (`sum(B - n)`)."""
    rescued: int
    """Graph forwards whose natural bucket lacked capacity and a larger bucket fitted."""
    natural_overflow: int
    """Forwards whose natural bucket lacked capacity (crashed before the runtime's bucket search)."""
    eager: dict[str, int]
    """Eager forwards by reason (all four reasons present)."""
    eager_tokens: dict[str, int]
    """Eager tokens by reason."""
    bucket_hits: dict[str, int]
    """Forwards replayed per bucket (bucket as a string; every bucket present)."""
    eager_examples: dict[str, list[list[int]]] = field(default_factory=dict)
    """Up to `MAX_EXAMPLES` `extend_seq_lens` per eager reason, first seen first."""
    overflow_examples: list[list[int]] = field(default_factory=list)
    """Up to `MAX_EXAMPLES` `extend_seq_lens` whose natural bucket overflowed."""

    @property
    def coverage(self) -> float:
        """Fraction of forwards replayed in graphs."""
        return self.graph_batches / self.batches if self.batches else 0.0

    @property
    def token_coverage(self) -> float:
        """Fraction of tokens replayed in graphs."""
        return self.graph_tokens / self.tokens if self.tokens else 0.0

    @property
    def padding_overhead(self) -> float:
        """Padded tokens / real tokens of graph forwards."""
        return self.padded_tokens / self.graph_tokens if self.graph_tokens else 0.0

    def to_dict(self) -> dict:
        """JSON-ready dict: every field plus `coverage`, `token_coverage`, `padding_overhead`."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out.update(
            coverage=self.coverage, token_coverage=self.token_coverage, padding_overhead=self.padding_overhead
        )
        return out


class Evaluator:
    """Accumulates an `Evaluation` over batch chunks (bounded memory on huge traces)."""

    def __init__(self, table: BucketTable, cp: CPLayout, max_padding_factor: float = 2.0):
        self.table, self.cp, self.factor = table, cp, max_padding_factor
        k = len(table.capture_num_tokens)
        self._hits = np.zeros(k, dtype=np.int64)
        self._padded = 0
        self._totals = dict(batches=0, tokens=0, graph_batches=0, graph_tokens=0, rescued=0, natural_overflow=0)
        self._eager = np.zeros(len(EAGER_REASONS), dtype=np.int64)
        self._eager_tokens = np.zeros(len(EAGER_REASONS), dtype=np.int64)
        self._examples: dict[str, list[list[int]]] = {r.value: [] for r in EAGER_REASONS}
        self._overflow_examples: list[list[int]] = []

    def add(self, batches: BatchSet) -> None:
        """Layout, select and tally a chunk of batches (in pieces of `PIECE_BATCHES`)."""
        for piece in batches.split(PIECE_BATCHES):
            self._add_piece(piece)

    def _add_piece(self, batches: BatchSet) -> None:
        demand = Demand.of(batches, self.cp)
        sel = select_buckets(demand.num_tokens, demand.rows, demand.active, self.table, self.factor)
        w, n = demand.counts, demand.num_tokens
        if float(np.dot(w.astype(np.float64), n)) + self._totals["tokens"] >= MAX_TOTAL_TOKENS:
            raise TraceError(
                f"the trace's count-weighted token total exceeds {MAX_TOTAL_TOKENS:.3g}: check the \"count\" fields"
            )
        graph = sel.reason_code == GRAPH
        t = self._totals
        t["batches"] += int(w.sum())
        t["tokens"] += int((w * n).sum())
        t["graph_batches"] += int(w[graph].sum())
        t["graph_tokens"] += int((w * n)[graph].sum())
        t["rescued"] += int(w[sel.rescued].sum())
        t["natural_overflow"] += int(w[sel.natural_overflow].sum())
        idx = sel.bucket_index[graph]
        self._hits += np.bincount(idx, weights=w[graph], minlength=len(self._hits)).astype(np.int64)
        self._padded += int((w[graph] * (self.table.capture_num_tokens[idx] - n[graph])).sum())
        codes = sel.reason_code.astype(np.int64)
        self._eager += np.bincount(codes, weights=w, minlength=len(EAGER_REASONS) + 1)[1:].astype(np.int64)
        self._eager_tokens += np.bincount(codes, weights=w * n, minlength=len(EAGER_REASONS) + 1)[1:].astype(np.int64)
        self._keep_examples(batches, sel)

    def _keep_examples(self, batches: BatchSet, sel) -> None:
        for code, reason in enumerate(EAGER_REASONS, start=1):
            kept = self._examples[reason.value]
            if len(kept) < MAX_EXAMPLES:
                for i in np.flatnonzero(sel.reason_code == code)[: MAX_EXAMPLES - len(kept)]:
                    kept.append(batches.batch(int(i)))
        if len(self._overflow_examples) < MAX_EXAMPLES:
            for i in np.flatnonzero(sel.natural_overflow)[: MAX_EXAMPLES - len(self._overflow_examples)]:
                self._overflow_examples.append(batches.batch(int(i)))

    def result(self) -> Evaluation:
        names = [r.value for r in EAGER_REASONS]
        buckets = self.table.capture_num_tokens.tolist()
        return Evaluation(
            buckets=buckets,
            capacity_rows=self.table.capacity_rows.tolist(),
            padded_tokens=self._padded,
            eager=dict(zip(names, self._eager.tolist())),
            eager_tokens=dict(zip(names, self._eager_tokens.tolist())),
            bucket_hits={str(b): h for b, h in zip(buckets, self._hits.tolist())},
            eager_examples=self._examples,
            overflow_examples=self._overflow_examples,
            **self._totals,
        )


def evaluate(
    chunks: Iterable[BatchSet],
    table: BucketTable,
    cp: CPLayout,
    max_padding_factor: float = 2.0,
    on_chunk: Callable[[BatchSet], None] | None = None,
) -> Evaluation:
    """Run every batch of `chunks` through the runtime selector and tally the outcome.

    `on_chunk` is called after each chunk (progress reporting). Raises whatever the chunk
    iterator raises (`TraceError` for malformed traces).
    """
    evaluator = Evaluator(table, cp, max_padding_factor)
    for batches in chunks:
        evaluator.add(batches)
        if on_chunk is not None:
            on_chunk(batches)
    return evaluator.result()
