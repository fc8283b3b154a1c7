"""`plan` in one pass: replay a trace with the configured list and recommend a better one.

The trace streams once: every chunk of forwards is laid out, replayed with the configured list
(`Evaluator`), and its demand kept in a `DemandLog` for the recommendation (bounded memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from cpbcg.planner.model.bound import bound_demand
from cpbcg.errors import ModelError
from cpbcg.planner.demand_log import DemandLog
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation, Evaluator
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.optimise.recommend import Recommendation, RecommendSettings, recommend
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.traces.records import ForwardSizes


@dataclass(frozen=True)
class PlanResult:
    """What `plan` found on one trace."""

    evaluation: Evaluation
    """The configured (or given) list replayed on every forward."""
    recommendation: Recommendation | None
    """The recommended list; None when not asked for or when none can be made."""
    recommendation_error: str | None = None
    """Why no recommendation could be made (e.g. no forward is CP-active), else None."""
    observed: Any = None
    """An SGLang log's observed vs modelled graph use (`cpbcg.planner.observed.ObservedComparison`), else None."""


def plan(
    chunks: Iterable[BatchSet] | Iterable[ForwardSizes],
    deployment: Deployment,
    settings: RecommendSettings | None = RecommendSettings(),
    table: BucketTable | None = None,
    on_chunk: Callable[[BatchSet | ForwardSizes], Any] | None = None,
) -> PlanResult:
    """Replay `chunks` with `table` (default: the deployment's configured list) and, unless
    `settings` is None, recommend a list for the same forwards. `ForwardSizes` chunks (an SGLang
    server log) are taken at their exact worst case (`bound_demand`): the result is a bound.

    `on_chunk` sees each chunk after it was tallied (progress). Raises `TraceError` from the
    trace, `ConfigError`/`ModelError` from the recommendation."""
    table = deployment.table() if table is None else table
    evaluator = Evaluator(table, deployment.cp, deployment.max_padding_factor, deployment.max_seq_len_tokens)
    log = DemandLog() if settings is not None else None
    for chunk in chunks:
        if isinstance(chunk, ForwardSizes):
            demand = bound_demand(chunk, deployment.cp)
            evaluator.add_demand(demand)
            if log is not None:
                log.add(demand)
        else:
            evaluator.add(chunk, None if log is None else log.add)
        if on_chunk is not None:
            on_chunk(chunk)
    if log is None:
        return PlanResult(evaluator.result(), None)
    try:
        return PlanResult(evaluator.result(), recommend(log, deployment, settings))
    except ModelError as exc:  # the evaluation stands; say why there is no list to recommend
        return PlanResult(evaluator.result(), None, f"no recommendation: {exc}")
