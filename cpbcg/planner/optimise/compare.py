"""Side-by-side comparison of bucket lists on one batch stream and the Pareto curve of the optimiser.

Every number comes from `evaluate` / `select_buckets`, the code `plan`'s evaluation uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cpbcg.planner.model.bucket_lists import CaptureLists
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.costs.cost import CostModel, evaluation_cost_ms
from cpbcg.planner.document import document
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.evaluate import Evaluation, evaluate_demand
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.optimise.optimiser import OptimalLists
from cpbcg.planner.model.selector import BucketTable

if TYPE_CHECKING:
    from cpbcg.planner.deployment import Deployment
    from cpbcg.planner.optimise.recommend import Recommendation


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
    capture_s: float | None = None
    """Capture seconds of the list (`Recommendation.capture_model`); None if not estimated."""
    graph_mib: float | None = None
    """Graph memory of the list (MiB); None if not estimated."""


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
    capture_s: float | None = None
    """Capture seconds of the list; None if not estimated."""
    graph_mib: float | None = None
    """Graph memory of the list (MiB); None if not estimated."""


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

    def to_dict(self) -> dict[str, object]:
        """The `comparison` section of the plan JSON (`--compare`): each list's figures and evaluation, the Pareto points."""
        return {
            "lists": [{"name": r.name, "modelled_ms": r.modelled_ms, "optimal_same_size_ms": r.optimal_same_size_ms,
                       "capture_s": r.capture_s, "graph_mib": r.graph_mib, **r.evaluation.to_dict()}
                      for r in self.reports],
            "pareto": [document(p) for p in self.points],
        }


def compare_recommendation(rec: "Recommendation", deployment: "Deployment", lists: CaptureLists) -> Comparison:
    """Evaluate the recommendation and the engine's baselines (`lists.baselines`, sized for the chunk)
    on the recommendation's demand, and the Pareto points the optimiser computed."""
    chunk = rec.headroom.chunk_tokens if rec.headroom is not None else rec.optimal.max_tokens
    cp, spec, factor = deployment.cp, deployment.capture, deployment.max_padding_factor
    compared = {"recommended": rec.buckets, **{name: lists.named[name](chunk) for name in lists.baselines}}
    reports = compare_lists(rec.demand, compared, cp, spec, factor, deployment.cost, rec.optimal)
    if rec.capture_model is not None:
        reports = [replace(r, capture_s=est.capture_s, graph_mib=est.graph_mib)
                   for r in reports for est in [rec.capture_model.estimate(r.evaluation.buckets, max(r.evaluation.capacity_rows, default=0))]]
    counts = set(PARETO_COUNTS) | {len(r.evaluation.buckets) for r in reports} | {rec.max_buckets}
    if rec.knee is not None:
        counts.add(rec.knee.max_buckets)
    costs = {t.max_buckets: t for t in rec.trade_off}
    points = [replace(p, capture_s=costs[p.max_buckets].capture_s, graph_mib=costs[p.max_buckets].graph_mib) if p.max_buckets in costs else p
              for p in pareto(rec.optimal, rec.demand, cp, spec, factor, sorted(counts))]
    return Comparison(reports, points)
