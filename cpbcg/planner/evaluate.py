"""Evaluate a bucket list on a stream of forwards: coverage, padding, eager reasons, hits.

`plan`, `replay-check`, the recommendation's validation and the comparison tables all call
`Evaluator` / `evaluate` / `evaluate_demand`; the numbers they print are this code's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

import numpy as np

from cpbcg.planner.document import document
from cpbcg.errors import TraceError
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.replay_limits import apply_replay_limits
from cpbcg.planner.model.selector import EAGER_REASONS, BucketTable, Selection

MAX_TOTAL_TOKENS = 2**62
"""Largest count-weighted token total a trace may have (int64 tallies stay exact below it)."""
MAX_EXAMPLES = 5
"""How many example forwards are kept per eager reason and for natural-bucket overflows."""
MAX_EXAMPLE_REQUESTS = 64
"""Longest example kept (requests); longer ones are cut to their first requests (JSON stays small)."""
PIECE_BATCHES = 1 << 14
"""Forwards laid out at once: big enough to amortise numpy calls, small enough that the
temporaries (about a megabyte each) stay in cache; measured with benchmarks/bench_plan.py:
16k-forward pieces 0.15 s per million forwards, 128k 0.20 s, one 1M piece 0.30 s."""


LIST_INDEPENDENT_REASONS = ("not_cp_active", "context_limit", "multimodal_input")
"""Eager reasons no bucket list changes (the coverage ceiling, `Evaluation.ceiling`)."""


@dataclass(frozen=True)
class Evaluation:
    """How a bucket list serves a stream of forwards. Counts honour `count` weights."""

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
    """Eager forwards by reason (every reason present, in `EAGER_REASONS` order)."""
    eager_tokens: dict[str, int]
    """Eager tokens by reason."""
    bucket_hits: dict[int, int]
    """Forwards replayed per bucket (tokens -> forwards; every bucket present)."""
    eager_examples: dict[str, list[list[int]]] = field(default_factory=dict)
    """Up to `MAX_EXAMPLES` `extend_seq_lens` per eager reason, first seen first."""
    overflow_examples: list[list[int]] = field(default_factory=list)
    """Up to `MAX_EXAMPLES` `extend_seq_lens` whose natural bucket overflowed."""
    bucket_note: str | None = None
    """How SGLang 0.5.23 changed the configured list before capturing it (`BucketTable.note`);
    None when it captures the list as given (then absent from `to_dict`)."""

    @property
    def coverage(self) -> float:
        """Fraction of forwards replayed in graphs."""
        return self.graph_batches / self.batches if self.batches else 0.0

    @property
    def token_coverage(self) -> float:
        """Fraction of tokens replayed in graphs."""
        return self.graph_tokens / self.tokens if self.tokens else 0.0

    @property
    def ceiling(self) -> float:
        """Most coverage any list could reach on these forwards: those eager for a reason no list
        changes (`LIST_INDEPENDENT_REASONS`: not CP-active, past the context limit, multimodal) excluded."""
        if not self.batches:
            return 0.0
        return 1.0 - sum(self.eager.get(r, 0) for r in LIST_INDEPENDENT_REASONS) / self.batches

    @property
    def padding_overhead(self) -> float:
        """Padded tokens / real tokens of graph forwards."""
        return self.padded_tokens / self.graph_tokens if self.graph_tokens else 0.0

    @property
    def eager_batches(self) -> int:
        """Forwards run eagerly, all reasons."""
        return sum(self.eager.values())

    @classmethod
    def merge(cls, parts: "list[Evaluation]") -> "Evaluation":
        """One evaluation of several streams replayed with the same list, exactly as if they were
        one stream in the order given (counts add up; examples are the first seen, in order).
        Raises `ValueError` for an empty list or parts of different lists."""
        if not parts or any(p.buckets != parts[0].buckets for p in parts):
            raise ValueError("merge needs one or more evaluations of the same bucket list")
        totals = {name: sum(getattr(p, name) for p in parts) for name in
                  ("batches", "tokens", "graph_batches", "graph_tokens", "padded_tokens", "rescued", "natural_overflow")}
        reasons = list(parts[0].eager)
        return cls(
            buckets=list(parts[0].buckets), capacity_rows=list(parts[0].capacity_rows),
            eager={r: sum(p.eager[r] for p in parts) for r in reasons},
            eager_tokens={r: sum(p.eager_tokens[r] for p in parts) for r in reasons},
            bucket_hits={b: sum(p.bucket_hits[b] for p in parts) for b in parts[0].bucket_hits},
            eager_examples={r: [e for p in parts for e in p.eager_examples.get(r, [])][:MAX_EXAMPLES] for r in reasons},
            overflow_examples=[e for p in parts for e in p.overflow_examples][:MAX_EXAMPLES],
            bucket_note=parts[0].bucket_note,
            **totals,
        )

    @classmethod
    def total(cls, parts: "list[Evaluation]") -> "Evaluation":
        """The sum of several streams each replayed with its own list (the launches of one SGLang
        log, each under the server it resolved): counts add up; `bucket_hits` and `buckets` over
        the union of the lists, `capacity_rows` (C(B)) the last part's where a bucket is in
        several (a bucket's rows differ only between CP layouts); examples the first seen, in
        order. Equal to `merge` when every part has the same list. Raises `ValueError` for none."""
        if not parts:
            raise ValueError("total needs one or more evaluations")
        if all(p.buckets == parts[0].buckets for p in parts):
            return cls.merge(parts)
        rows: dict[int, int] = {}
        for p in parts:
            rows.update(zip(p.buckets, p.capacity_rows))
        buckets = sorted(rows)
        capacity = [rows[b] for b in buckets]
        return cls.merge([replace(p, buckets=buckets, capacity_rows=capacity, bucket_note=None,
                                  bucket_hits={b: p.bucket_hits.get(b, 0) for b in buckets}) for p in parts])

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict: every field (bucket keys as strings) plus `coverage`,
        `token_coverage`, `padding_overhead`."""
        return document(self, values={"bucket_hits": {str(b): h for b, h in self.bucket_hits.items()}},
                        omit=("bucket_note",) if self.bucket_note is None else (),
                        extra={"coverage": self.coverage, "token_coverage": self.token_coverage, "padding_overhead": self.padding_overhead})


class Evaluator:
    """Accumulates an `Evaluation` over chunks of forwards (bounded memory on huge traces)."""

    def __init__(self, table: BucketTable, cp: CPLayout, max_padding_factor: float = 2.0, max_context_tokens: int | None = None):
        """`max_context_tokens`: the longest sequence a graph replays (`Deployment.max_seq_len_tokens`);
        forwards with a longer one run eagerly (`context_limit`, `replay_limits`). Only forwards
        given with their lengths (`add`, `add_demand(..., batches)`) are checked."""
        self.table, self.cp, self.factor = table, cp, max_padding_factor
        self.max_context_tokens = max_context_tokens
        self._hits = np.zeros(len(table.capture_num_tokens), dtype=np.int64)
        self._totals = dict(batches=0, tokens=0, graph_batches=0, graph_tokens=0, padded_tokens=0, rescued=0, natural_overflow=0)
        self._eager = {r.value: 0 for r in EAGER_REASONS}
        self._eager_tokens = {r.value: 0 for r in EAGER_REASONS}
        self._examples: dict[str, list[list[int]]] = {r.value: [] for r in EAGER_REASONS}
        self._overflow_examples: list[list[int]] = []

    def add(self, batches: BatchSet, on_demand: Callable[[Demand], None] | None = None) -> None:
        """Lay out, select and tally a chunk of forwards (in pieces of `PIECE_BATCHES`);
        `on_demand` sees each piece's `Demand` (e.g. to keep it for the optimiser)."""
        for piece in batches.split(PIECE_BATCHES):
            demand = Demand.of(piece, self.cp)
            self.add_demand(demand, piece)
            if on_demand is not None:
                on_demand(demand)

    def add_demand(self, demand: Demand, batches: BatchSet | None = None) -> None:
        """Select and tally `demand`; `batches` (the same forwards) supplies examples."""
        w, n = demand.counts, demand.num_tokens
        # the guard's sum in float64 without BLAS: a float `np.dot` wakes OpenBLAS's threads, which then
        # spin for a while after each chunk (about 1 s of CPU per million forwards, taken from the
        # forked fit beside it on two cores); an integer dot (below) never calls BLAS
        if float(np.multiply(w, n, dtype=np.float64).sum()) + self._totals["tokens"] >= MAX_TOTAL_TOKENS:
            raise TraceError(f"the trace's count-weighted token total exceeds {MAX_TOTAL_TOKENS:.3g}: check the \"count\" fields")
        sel = demand.select(self.table, self.factor)
        if batches is not None:
            sel = apply_replay_limits(sel, batches, demand.active, self.cp.strategy, self.max_context_tokens)
        wn = w * n  # [N] int64 count-weighted tokens
        gw = np.where(sel.graph, w, 0)  # [N] int64 weights of graph forwards (no boolean indexing: cheaper)
        t = self._totals
        t["batches"] += int(w.sum())
        t["tokens"] += int(wn.sum())
        t["graph_batches"] += int(gw.sum())
        t["graph_tokens"] += int(np.dot(gw, n))
        t["padded_tokens"] += int(np.dot(gw, sel.bucket_tokens - n))
        t["rescued"] += int(np.dot(w, sel.rescued))
        t["natural_overflow"] += int(np.dot(w, sel.natural_overflow))
        self._hits += np.bincount(np.maximum(sel.bucket_index, 0), weights=gw, minlength=len(self._hits)).astype(np.int64)
        for reason, count in sel.eager_counts(w).items():
            self._eager[reason.value] += count
        for reason, count in sel.eager_counts(wn).items():
            self._eager_tokens[reason.value] += count
        if batches is not None:
            self._keep_examples(batches, sel)

    def _keep_examples(self, batches: BatchSet, sel: Selection) -> None:
        for reason in EAGER_REASONS:
            _keep(self._examples[reason.value], batches, sel.eager_mask(reason))
        _keep(self._overflow_examples, batches, sel.natural_overflow)

    def result(self) -> Evaluation:
        buckets = self.table.capture_num_tokens.tolist()
        return Evaluation(
            buckets=buckets,
            capacity_rows=self.table.capacity_rows.tolist(),
            eager=dict(self._eager),
            eager_tokens=dict(self._eager_tokens),
            bucket_hits=dict(zip(buckets, self._hits.tolist())),
            eager_examples={k: list(v) for k, v in self._examples.items()},
            overflow_examples=list(self._overflow_examples),
            bucket_note=self.table.note,
            **self._totals,
        )


def _keep(kept: list[list[int]], batches: BatchSet, mask: np.ndarray) -> None:
    """Append the first forwards of `mask` to `kept` until it holds `MAX_EXAMPLES`."""
    if len(kept) < MAX_EXAMPLES:
        for i in np.flatnonzero(mask)[: MAX_EXAMPLES - len(kept)]:
            kept.append(batches.batch(int(i))[:MAX_EXAMPLE_REQUESTS])


def evaluate(
    chunks: Iterable[BatchSet],
    table: BucketTable,
    cp: CPLayout,
    max_padding_factor: float = 2.0,
    on_chunk: Callable[[BatchSet], None] | None = None,
) -> Evaluation:
    """Run every forward of `chunks` through the runtime selector and tally the outcome.

    `on_chunk` is called after each chunk (progress reporting). Raises whatever the chunk
    iterator raises (`TraceError` for malformed traces).
    """
    evaluator = Evaluator(table, cp, max_padding_factor)
    for batches in chunks:
        evaluator.add(batches)
        if on_chunk is not None:
            on_chunk(batches)
    return evaluator.result()


def evaluate_demand(demand: Demand, table: BucketTable, cp: CPLayout, max_padding_factor: float = 2.0) -> Evaluation:
    """`evaluate` for forwards already laid out (no examples: a `Demand` keeps no lengths)."""
    evaluator = Evaluator(table, cp, max_padding_factor)
    evaluator.add_demand(demand)
    return evaluator.result()
