"""Side-by-side comparison of bucket lists on one batch stream, the Pareto curve of the optimiser,
and the headroom finding (full-chunk batches the largest bucket cannot hold).

Every number comes from `evaluate` / `select_buckets`, the code `plan`'s evaluation uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cpbcg.planner.bucket_lists import BASELINES
from cpbcg.planner.capacity import CaptureSpec
from cpbcg.planner.cost import CostModel, demand_cost_ms, evaluation_cost_ms
from cpbcg.planner.demand import Demand
from cpbcg.planner.evaluate import Evaluation, evaluate_demand
from cpbcg.planner.layout import CPLayout
from cpbcg.planner.optimise import OptimalLists, candidate_grid
from cpbcg.planner.selector import EagerReason, BucketTable

if TYPE_CHECKING:
    from cpbcg.planner.deployment import Deployment
    from cpbcg.planner.recommend import Recommendation


@dataclass(frozen=True)
class ListReport:
    """One bucket list evaluated on the stream."""

    name: str
    """`recommended` or a baseline spec such as `sglang-default:8192`."""
    evaluation: Evaluation
    """Coverage, padding, eager reasons (the `plan` evaluation)."""
    modelled_ms: float
    """Modelled prefill time of the whole stream (ms)."""
    optimal_same_size_ms: float | None
    """Modelled time of the optimiser's best list of the same size (ms); None if not computed."""


def compare_lists(
    demand: Demand, lists: dict[str, list[int]], cp: CPLayout, spec: CaptureSpec, factor: float,
    cost: CostModel, optimal: OptimalLists | None = None,
) -> list[ListReport]:
    """Evaluate each named list (in order) on `demand` (aggregated forwards of a trace)."""
    out = []
    for name, buckets in lists.items():
        table = BucketTable.build(buckets, cp, spec)
        ev = evaluate_demand(demand, table, cp, factor)
        same = None if optimal is None else optimal.cost_ms.get(len(ev.buckets))
        out.append(ListReport(name, ev, evaluation_cost_ms(ev, cost), same))
    return out


@dataclass(frozen=True)
class ParetoPoint:
    """The optimiser's best list with at most `max_buckets` buckets."""

    max_buckets: int
    """Bucket count limit."""
    buckets: list[int]
    """The list (tokens)."""
    modelled_ms: float
    """Its modelled time (ms)."""
    coverage: float
    """Fraction of forwards replayed in graphs."""
    token_coverage: float
    """Fraction of tokens replayed in graphs."""


def pareto(optimal: OptimalLists, demand: Demand, cp: CPLayout, spec: CaptureSpec, factor: float, counts: list[int]) -> list[ParetoPoint]:
    """Pareto points for the count limits `counts` the optimiser computed."""
    points = []
    for k in sorted({c for c in counts if c in optimal.buckets}):
        table = BucketTable.build(optimal.buckets[k], cp, spec)
        graph = demand.select(table, factor).graph
        w, n = demand.counts, demand.num_tokens
        points.append(ParetoPoint(
            k, optimal.buckets[k], optimal.cost_ms[k],
            float(w[graph].sum() / w.sum()), float((w * n)[graph].sum() / (w * n).sum()),
        ))
    return points


@dataclass(frozen=True)
class Headroom:
    """Full-chunk batches that fall back because the largest bucket lacks CP-local headroom."""

    chunk_tokens: int
    """The chunk size `n` of these batches (= the largest bucket)."""
    batches: int
    """How many forwards of `n = chunk_tokens` fall back for lack of local capacity."""
    rows_needed: int
    """Most rows one of them needs."""
    capacity_rows: int
    """`C(chunk_tokens)` of the largest bucket."""
    extra_bucket: int | None
    """Smallest bucket above the chunk that holds them all within the padding factor."""
    extra_capacity_rows: int | None
    """Its capacity."""
    modelled_ms_with_extra: float | None
    """Modelled time of the list plus the extra bucket (ms)."""

    def sentence(self) -> str:
        fix = (
            f"add bucket {self.extra_bucket} (C={self.extra_capacity_rows} rows; allow it with --max-tokens "
            f"{self.extra_bucket} or --include {self.extra_bucket})"
            if self.extra_bucket else "no bucket within the padding factor can hold them"
        )
        return (
            f"{self.batches:,} full-chunk batch{'' if self.batches == 1 else 'es'} (n = {self.chunk_tokens}) "
            f"{'falls' if self.batches == 1 else 'fall'} back to eager: bucket "
            f"{self.chunk_tokens} holds {self.capacity_rows} CP-local rows, they need up to {self.rows_needed}; {fix}."
        )


def headroom_finding(
    demand: Demand, buckets: list[int], cp: CPLayout, spec: CaptureSpec, factor: float, cost: CostModel
) -> Headroom | None:
    """The headroom finding for `buckets` (None when no full-chunk batch falls back for capacity)."""
    table = BucketTable.build(buckets, cp, spec)
    largest = int(table.capture_num_tokens[-1])
    sel = demand.select(table, factor)
    hit = (demand.num_tokens == largest) & sel.eager_mask(EagerReason.local_capacity)
    if not hit.any():
        return None
    need = int(demand.rows[hit].max())
    grid = candidate_grid(cp, spec, int(np.floor(largest * factor)))
    ok = np.flatnonzero((grid.sizes > largest) & (grid.capacity_rows >= need))
    extra = int(grid.sizes[ok[0]]) if ok.size else None
    extra_cap = int(grid.capacity_rows[ok[0]]) if ok.size else None
    with_extra = None
    if extra is not None:
        with_extra = demand_cost_ms(demand, BucketTable.build(buckets + [extra], cp, spec), cost, factor)
    cap = int(table.capacity_rows[-1])
    return Headroom(largest, int(demand.counts[hit].sum()), need, cap, extra, extra_cap, with_extra)


PARETO_COUNTS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
"""Bucket counts of the Pareto curve (plus the recommended and the baselines' sizes)."""
MAX_BASELINE_BUCKETS = 128
"""Baselines longer than this get no 'optimal of the same size' figure (the optimiser stops at 128)."""


@dataclass(frozen=True)
class Comparison:
    """The recommended list beside SGLang's default and peers' lists, and the Pareto curve."""

    reports: list[ListReport]
    """`recommended` first, then each baseline."""
    points: list[ParetoPoint]
    """Best list of at most K buckets, for the counts the optimiser computed."""


def compare_recommendation(rec: "Recommendation", deployment: "Deployment") -> Comparison:
    """Evaluate the recommendation and the baselines (`BASELINES`, sized for the chunk) on the
    recommendation's demand, and the Pareto points the optimiser computed."""
    chunk = rec.headroom.chunk_tokens if rec.headroom is not None else rec.optimal.max_tokens
    cp, spec, factor = deployment.cp, deployment.capture, deployment.max_padding_factor
    lists = {"recommended": rec.buckets, **{name: fn(chunk) for name, fn in BASELINES.items()}}
    reports = compare_lists(rec.demand, lists, cp, spec, factor, deployment.cost, rec.optimal)
    counts = set(PARETO_COUNTS) | {len(r.evaluation.buckets) for r in reports} | {rec.max_buckets}
    return Comparison(reports, pareto(rec.optimal, rec.demand, cp, spec, factor, sorted(counts)))
