"""`plan` in one pass: replay a trace with the configured list and recommend a better one.

The trace streams once: every chunk of forwards is laid out, replayed with the configured list
(`Evaluator`), and its demand kept in a `DemandLog` for the recommendation (bounded memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from cpbcg.planner.demand_log import DemandLog
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation, Evaluator
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.recommend import Recommendation, RecommendSettings, recommend
from cpbcg.planner.selector import BucketTable


@dataclass(frozen=True)
class PlanResult:
    """What `plan` found on one trace."""

    evaluation: Evaluation
    """The configured (or given) list replayed on every forward."""
    recommendation: Recommendation | None
    """The recommended list; None when not asked for."""


def plan(
    chunks: Iterable[BatchSet],
    deployment: Deployment,
    settings: RecommendSettings | None = RecommendSettings(),
    table: BucketTable | None = None,
    on_chunk: Callable[[BatchSet], Any] | None = None,
) -> PlanResult:
    """Replay `chunks` with `table` (default: the deployment's configured list) and, unless
    `settings` is None, recommend a list for the same forwards.

    `on_chunk` sees each chunk after it was tallied (progress). Raises `TraceError` from the
    trace, `ConfigError`/`ModelError` from the recommendation."""
    table = deployment.table() if table is None else table
    evaluator = Evaluator(table, deployment.cp, deployment.max_padding_factor)
    log = DemandLog() if settings is not None else None
    for batches in chunks:
        evaluator.add(batches, None if log is None else log.add)
        if on_chunk is not None:
            on_chunk(batches)
    recommendation = None if log is None else recommend(log, deployment, settings)
    return PlanResult(evaluator.result(), recommendation)
