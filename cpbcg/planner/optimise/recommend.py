"""The recommendation: which buckets to capture for a trace, checked out of sample, ready to deploy.

`recommend(log, deployment, settings)` takes the demand of a whole trace (`DemandLog`, kept while
the trace streamed) and answers:

* the best list of `max_buckets` buckets (default: as many capturable buckets as the configured
  list) by the exact optimiser (`optimise.py`), or with `target_coverage` the fewest buckets that
  reach it;
* with **headroom** (default): candidates may exceed the chunk size up to `max_padding_factor`,
  and the list must serve a full chunk of up to `max_requests` requests by its exact worst case
  (`guarantee.worst_rows`), not only the chunks the trace happened to hold;
* **validated**: fitted on the first `1 - validate_fraction` of the forwards in trace order and
  replayed on the rest; the final list is fitted on the whole trace;
* and the SGLang flags that deploy it under the settings the plan assumed.

The held-out fit and the final fit share nothing: on Linux with two or more usable CPUs the
first runs in a forked child process beside the second (`background.py`; `CPBCG_JOBS=1` keeps
one process). The answer is the same either way.

Every number comes from `evaluate_demand`, the code `plan` and `replay-check` use.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Mapping, TypedDict

import numpy as np

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.background import Background
from cpbcg.planner.optimise.capture_cost import CaptureEstimate, CaptureModel, capture_model, measured_capture_model
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS
from cpbcg.planner.model.capacity import CaptureSpec, local_capacity, minimum_capture_tokens
from cpbcg.planner.model.layout import BatchSet, local_rows
from cpbcg.planner.costs.cost import CostModel, demand_cost_ms, flags_against_default
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.demand_log import DemandLog, DemandSplit
from cpbcg.planner.deployment import Deployment, EngineRules
from cpbcg.planner.document import document
from cpbcg.planner.evaluate import LIST_INDEPENDENT_REASONS, Evaluation, evaluate_demand
from cpbcg.planner.optimise.guarantee import headroom_required
from cpbcg.planner.optimise.optimiser import Budget, OptimalLists, fewest_for_coverage, optimise
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.optimise.verdict import ListFigures, Verdict, choose, list_figures
from cpbcg.planner.words import counted

MAX_DEFAULT_BUCKETS = 512
"""The default bucket count (the configured list's) stops where `--max-buckets` does (the
optimiser's time and memory grow with the count); a cut is said in a note."""
MIN_MEANINGFUL_FORWARDS = 1000
"""Below this many forwards the recommendation warns that it follows too few shapes."""
VALIDATION_TOLERANCE = 0.02
"""Most the held-back fraction may differ from the one asked for; a trace too small to cut
that close gets no out-of-sample check (and a note) instead of a silently larger hold-back."""
OUT_OF_SAMPLE_DROP = 0.005
"""Coverage lost out of sample (fraction of forwards) above which the recommendation warns."""
KNEE_TOLERANCE = 0.02
"""The suggested knee: the fewest buckets whose modelled time is within this fraction of the
least modelled time of any list of at most the recommendation's count limit."""
KNEE_RULE = f"the fewest buckets within {KNEE_TOLERANCE:.0%} of the least modelled time of any list up to the recommendation's count limit"


@dataclass(frozen=True)
class RecommendSettings:
    """What to optimise for (every field has a default that answers the usual question)."""

    max_buckets: int | None = None
    """Most buckets in the list; None = as many capturable buckets as the configured list, at
    most `MAX_DEFAULT_BUCKETS`."""
    target_coverage: float | None = None
    """Instead of `max_buckets`: the fewest buckets (up to `max_buckets`) whose list replays at
    least this fraction of forwards in graphs."""
    objective: str = "coverage"
    """`coverage` (most forwards in graphs, then least modelled time) or `time`."""
    max_bucket_tokens: int | None = None
    """The chunk: the largest forward the list must serve (tokens); None = the scheduler's
    `chunked_prefill_size` (or `max_prefill_tokens` without chunking)."""
    bucket_multiple: int = 1
    """Candidate sizes are multiples of this (tokens); 1 = exact."""
    include: tuple[int, ...] = ()
    """Buckets every list must contain (tokens)."""
    headroom: bool = True
    """Let buckets exceed the chunk (up to `max_padding_factor`) so full chunks of up to
    `max_requests` requests replay by their exact worst case."""
    max_requests: int | None = None
    """Requests in the worst full chunk; None = the most requests any forward of the trace held."""
    allow_gaps: bool = False
    """Allow sizes between buckets that no bucket serves within the padding factor."""
    validate_fraction: float = 0.3
    """Last fraction of forwards held back for validation (0 disables)."""
    min_bucket: int | None = None
    """Floor of small buckets: the list serves every CP-active size from this many tokens up
    within the padding factor (gap-free lists), whether or not the trace held it. None = the
    smallest capturable size (`2*cp_size` zigzag, `cp_size` interleave; no floor without CP);
    0 = no floor (the list starts where the trace's forwards do)."""
    pareto_max_buckets: int = 0
    """Also compute the best list of every count up to this (comparisons, Pareto curve)."""
    capture_s_per_bucket: float | None = None
    """Measured capture seconds per bucket (a manifest); None = the cited estimate."""
    graph_mib_per_token: float | None = None
    """Measured graph-pool MiB per token of the largest bucket (a manifest); None = cited."""
    capture_source: str | None = None
    """Where the two measured figures come from."""
    max_capture_s: float | None = None
    """Capture budget: most seconds to capture the list (an exact constraint of the optimiser); None: none."""
    max_graph_mib: float | None = None
    """Graph-memory budget: most MiB of graph memory (pool plus per-graph term; an exact constraint); None: none."""

    def __post_init__(self) -> None:
        if self.objective not in ("coverage", "time"):
            raise ConfigError(f"objective: must be coverage or time, got {self.objective!r}")
        if not 0 <= self.validate_fraction < 1:
            raise ConfigError(f"validate_fraction: must be in [0, 1), got {self.validate_fraction}")
        if self.min_bucket is not None and self.min_bucket < 0:
            raise ConfigError(f"min_bucket: must be >= 0, got {self.min_bucket}")
        if self.target_coverage is not None and not 0 < self.target_coverage <= 1:
            raise ConfigError(f"target_coverage: must be in (0, 1], got {self.target_coverage}")
        for name in ("max_capture_s", "max_graph_mib"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ConfigError(f"{name}: must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class Validation:
    """The recommendation fitted on the head of the trace, replayed on the tail."""

    fit_fraction: float
    """Fraction of the trace's prefill forwards (trace order; a batch line with a count kept whole) the list was fitted on."""
    buckets: list[int]
    """The list fitted on that head (tokens)."""
    in_sample: Evaluation
    """The head replayed with it."""
    evaluation: Evaluation
    """The held-back tail replayed with it (out of sample)."""
    by_part: dict[str, Evaluation] = field(default_factory=dict)
    """The same list on each named held-back part (e.g. every load factor's tail)."""

    @property
    def coverage_drop(self) -> float:
        """In-sample minus out-of-sample coverage (fraction of forwards)."""
        return self.in_sample.coverage - self.evaluation.coverage

    @property
    def list_drop(self) -> float:
        """The part of `coverage_drop` the list loses: coverage as a share of each part's ceiling
        (forwards some list could replay), in sample minus out of sample, in forwards of the tail."""
        head, tail = self.in_sample.ceiling, self.evaluation.ceiling
        if head <= 0 or tail <= 0:
            return 0.0
        return (self.in_sample.coverage / head - self.evaluation.coverage / tail) * tail

    def warning(self) -> str | None:
        """A plain sentence when out-of-sample coverage is much worse than in-sample, else None;
        the forwards no list can replay (not CP-active, too long a context) are told apart from
        what the list loses."""
        if self.coverage_drop <= OUT_OF_SAMPLE_DROP:
            return None
        said = (f"out of sample the list replays {self.evaluation.coverage:.2%} of forwards in graphs against "
                f"{self.in_sample.coverage:.2%} in sample")
        ceiling = (f"no list can replay {1 - self.evaluation.ceiling:.2%} of the held-back forwards against "
                   f"{1 - self.in_sample.ceiling:.2%} of the fitted ones (not CP-active or past the context limit)")
        if self.list_drop <= OUT_OF_SAMPLE_DROP:
            return f"{said}, and the list is not the cause: {ceiling}"
        return (f"{said}: of the {self.coverage_drop:.2%} lost, {self.list_drop:.2%} are forwards the list misses, the rest "
                f"traffic no list serves ({ceiling}); plan on a longer or newer trace")


@dataclass(frozen=True)
class Headroom:
    """The full chunk the list was required to serve (headroom mode)."""

    chunk_tokens: int
    """Forward size of a full chunk (tokens)."""
    max_requests: int
    """Requests in the worst case considered."""
    worst_rows: int
    """CP-local rows that worst case needs."""
    chunk_capacity_rows: int
    """`C(chunk_tokens)`: what a bucket of exactly the chunk holds."""


@dataclass(frozen=True)
class Recommendation:
    """The recommended list and everything that qualifies it."""

    buckets: list[int]
    """Buckets to capture (tokens, ascending)."""
    max_buckets: int
    """Bucket count limit it was optimised for."""
    objective: str
    """`coverage` or `time`."""
    evaluation: Evaluation
    """The whole trace replayed with `buckets`."""
    modelled_ms: float
    """Modelled prefill time of the trace with `buckets` (ms)."""
    configured_modelled_ms: float
    """Modelled prefill time with the configured list (ms)."""
    cost: CostModel
    """The cost model (its `source` says where the numbers came from)."""
    validation: Validation | None
    """Out-of-sample check; None when disabled or the trace is too short."""
    headroom: Headroom | None
    """The full chunk the list serves by its worst case; None without headroom."""
    deploy: str
    """SGLang server flags that deploy the list under the settings the plan assumed."""
    optimal: OptimalLists = field(repr=False)
    """The optimiser's best list for every count up to `max_buckets` (Pareto, comparisons)."""
    capture: CaptureEstimate = field(default=None)  # type: ignore[assignment]
    """Estimated capture time and graph memory of `buckets` (see `capture_cost`)."""
    configured_capture: CaptureEstimate = field(default=None)  # type: ignore[assignment]
    """The same estimate for the configured list."""
    demand: Demand = field(default=None, repr=False)  # type: ignore[assignment]
    """The whole trace's forwards, aggregated (comparisons, plots)."""
    target_coverage: float | None = None
    """The coverage target, when the fewest buckets reaching it were asked for."""
    headroom_note: str | None = None
    """Why headroom was asked for but not applied (no bucket within the padding factor fits)."""
    floor_tokens: int | None = None
    """The smallest forward size the list serves whether or not the trace held it (tokens); None: no floor."""
    notes: tuple[str, ...] = ()
    """Plain sentences qualifying the list (a small trace, a skipped check, what the floor costs)."""
    configured_evaluation: Evaluation | None = None
    """The configured list on the same forwards as `evaluation` (the fitted traces' forwards)."""
    capture_model: CaptureModel | None = field(default=None, repr=False)
    """The capture cost model the estimates and budgets use."""
    trade_off: tuple["TradeOff", ...] = ()
    """Per bucket count the optimiser computed: coverage, modelled time, capture seconds and graph MiB."""
    knee: "TradeOff | None" = None
    """The suggested knee (`KNEE_RULE`) among `trade_off`; None without one."""
    budget: Budget | None = None
    """The capture budgets the list was fitted within (None: none)."""
    verdict: Verdict | None = None
    """The answer against SGLang's default list on the same forwards (`verdict.Verdict`)."""

    @property
    def ceiling(self) -> float:
        """Most coverage any list reaches on these forwards (`OptimalLists.ceiling`)."""
        return self.optimal.ceiling

    def to_dict(self) -> dict[str, object]:
        """The recommendation: list, evaluation (same fields as the top level), validation, deploy flags
        (`plan --format json`'s `recommendation`)."""
        validation = None
        if self.validation is not None:
            v = self.validation
            validation = {
                "fit_fraction": v.fit_fraction, "buckets": v.buckets, "in_sample": v.in_sample.to_dict(),
                "evaluation": v.evaluation.to_dict(), "warning": v.warning(),
                "by_part": {name: ev.to_dict() for name, ev in v.by_part.items()},
            }
        return {
            "buckets": self.buckets,
            "num_buckets": len(self.buckets),
            "max_buckets": self.max_buckets,
            "objective": self.objective,
            "target_coverage": self.target_coverage,
            "evaluation": self.evaluation.to_dict(),
            "modelled_ms": self.modelled_ms,
            "configured_modelled_ms": self.configured_modelled_ms,
            "cost_model": self.cost.to_dict(),
            "headroom": None if self.headroom is None else document(self.headroom),
            "headroom_note": self.headroom_note,
            "validation": validation,
            "capture_estimate": document(self.capture, extra={"net_mib": self.capture.net_mib}),
            "configured_capture_estimate": document(self.configured_capture, extra={"net_mib": self.configured_capture.net_mib}),
            "configured_evaluation": None if self.configured_evaluation is None else self.configured_evaluation.to_dict(),
            "coverage_ceiling": self.ceiling,
            "trade_off": [document(t) for t in self.trade_off],
            "knee": None if self.knee is None else document(self.knee, extra={"rule": KNEE_RULE}),
            "budget": None if self.budget is None else {"max_capture_s": self.budget.max_capture_s, "max_graph_mib": self.budget.max_graph_mib},
            "deploy": self.deploy,
            "exact": self.optimal.bucket_multiple == 1,
            "bucket_multiple": self.optimal.bucket_multiple,
            "num_candidates": self.optimal.num_candidates,
            "floor_tokens": self.floor_tokens,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class TradeOff:
    """The optimiser's best list of at most `max_buckets` buckets and what it costs."""

    max_buckets: int
    """Bucket count limit."""
    num_buckets: int
    """Buckets in the list."""
    coverage: float
    """Fraction of forwards replayed in graphs."""
    modelled_ms: float
    """Modelled prefill time of the forwards (ms)."""
    capture_s: float
    """Capture seconds (estimate or measured, `Recommendation.capture`)."""
    graph_mib: float
    """Graph memory (MiB)."""
    largest_bucket: int
    """Largest bucket (tokens)."""


def recommend(log: DemandLog | DemandSplit, deployment: Deployment, settings: RecommendSettings = RecommendSettings(),
              held_back: Mapping[str, Demand] | None = None, *, engine: EngineRules) -> Recommendation:
    """The recommendation for the forwards in `log` (see the module doc): a `DemandLog` of one
    trace, or a `DemandSplit` already cut (several traces and load factors merged). `held_back`
    names further held-back parts (e.g. each load factor's tail) the validation list is also
    replayed on (`Validation.by_part`). `engine`: the release the notes name and the flags that
    deploy the list (`cpbcg.engines.sglang.export.RULES` for SGLang 0.5.23).

    Raises `ConfigError` for settings that exclude each other or an empty trace, `ModelError`
    when no list can be built under the capture model."""
    split = log.to_split(settings.validate_fraction) if isinstance(log, DemandLog) else log
    if split.num_lines == 0:
        raise ConfigError("the trace has no prefill forwards to optimise for")
    configured = len(deployment.table().capture_num_tokens)
    max_buckets = settings.max_buckets or min(configured, MAX_DEFAULT_BUCKETS)
    chunk = settings.max_bucket_tokens or deployment.scheduler.largest_forward_tokens
    notes: list[str] = []
    if settings.max_buckets is None and configured > MAX_DEFAULT_BUCKETS:
        notes.append(f"bucket count capped: the default (the configured list's {configured:,} buckets) is cut to {MAX_DEFAULT_BUCKETS}, "
                     f"the most -k/--max-buckets allows (the optimiser's time and memory grow with the count); "
                     "give -k/--max-buckets for fewer")
    if chunk > MAX_BUCKET_TOKENS:  # the candidate grid grows with the chunk: never past the largest bucket a list may hold
        notes.append(f"the chunk of {chunk:,} tokens is above the largest bucket a list may hold ({MAX_BUCKET_TOKENS:,}): "
                     f"the list is planned for forwards up to {MAX_BUCKET_TOKENS:,} tokens; larger ones run eagerly")
        chunk = MAX_BUCKET_TOKENS
    notes += _include_notes(deployment, settings, engine.release)
    notes += _grid_notes(deployment, settings, engine.release)
    notes += _graphs_off_notes(deployment)
    requests = settings.max_requests or max(split.max_requests, 1)
    if settings.bucket_multiple > chunk:
        raise ConfigError(f"bucket_multiple: {settings.bucket_multiple} is above the chunk of {chunk} tokens: no bucket below it could be a candidate")
    headroom, headroom_note = _headroom(deployment, chunk, requests) if settings.headroom else (None, None)
    floor = _floor(deployment, settings, chunk)
    whole = split.whole()
    notes += _size_notes(split, settings)
    validate = settings.validate_fraction > 0 and split.head.num_forwards > 0 and split.tail.num_forwards > 0
    if validate and abs((1.0 - split.fit_fraction) - settings.validate_fraction) > VALIDATION_TOLERANCE:
        notes.append(f"no out-of-sample check: {counted(split.num_lines, 'forward')} cannot hold back {settings.validate_fraction:.0%} "
                     f"(the nearest cut holds back {1.0 - split.fit_fraction:.0%})")
        validate = False
    if floor is not None and not _floor_fits(whole, deployment, settings, max_buckets, chunk, headroom, floor):
        notes.append(f"no floor: {counted(max_buckets, 'bucket')} cannot serve every size from {floor[0]:,} tokens up to the chunk within the "
                     "padding factor; raise --max-buckets, or set --min-bucket higher")
        floor = None
    fit_args = (deployment, settings, max_buckets, chunk, headroom, floor)
    # the out-of-sample fit shares nothing with the final one: on a second core when there is one
    with Background(_fit_buckets, split.head, *fit_args) if validate else nullcontext() as held_out:
        buckets, optimal = _fit(whole, *fit_args)
        evaluation = evaluate_demand(whole, BucketTable.build(buckets, deployment.cp, deployment.capture), deployment.cp, deployment.max_padding_factor)
        validation = _validation(split, held_out.result(), deployment, held_back or {}) if held_out is not None else None
    if floor is not None:
        notes.append(_floor_note(floor, buckets, whole))
    table = deployment.table()
    cm = _capture_model(deployment, settings, chunk)
    modelled = _cost(whole, buckets, deployment)
    configured_ms = demand_cost_ms(whole, table, deployment.cost, deployment.max_padding_factor)
    trade_off = _trade_off(optimal, cm, deployment)
    default_table = BucketTable.build(engine.lists.default(chunk), deployment.cp, deployment.capture)
    default = evaluate_demand(whole, default_table, deployment.cp, deployment.max_padding_factor)
    flags = flags_against_default(evaluation, default, deployment.cost)
    if flags:
        notes.append(f"warning: on the fitted forwards the list costs more than SGLang's default list for the chunk: {'; '.join(flags)}")
    if settings.target_coverage is not None:
        notes += _target_notes(settings.target_coverage, buckets, modelled, configured_ms, optimal, len(table.capture_num_tokens))
    capture = _estimate(buckets, cm, deployment)
    configured_capture = _estimate(table.capture_num_tokens.tolist(), cm, deployment)  # what SGLang captures, not what was given
    configured_evaluation = evaluate_demand(whole, table, deployment.cp, deployment.max_padding_factor)
    knee = _knee(trade_off, max_buckets)
    budget = _budget(deployment, settings, chunk)
    verdict = _verdict(whole, deployment, optimal, knee, cm, (evaluation, modelled, capture),
                       (configured_evaluation, configured_ms, configured_capture), (default_table, default), budget, max_buckets,
                       settings, validation, split.tail if validation is not None else None)
    return Recommendation(
        buckets=buckets, max_buckets=max_buckets, objective=settings.objective, evaluation=evaluation,
        modelled_ms=modelled, configured_modelled_ms=configured_ms,
        cost=deployment.cost, validation=validation, headroom=headroom,
        capture=capture, configured_capture=configured_capture,
        deploy=engine.deploy_flags(buckets, deployment, chunk if chunk != deployment.scheduler.largest_forward_tokens else None),
        optimal=optimal, demand=whole, target_coverage=settings.target_coverage, headroom_note=headroom_note,
        floor_tokens=None if floor is None else floor[0], notes=tuple(notes),
        configured_evaluation=configured_evaluation,
        capture_model=cm, trade_off=trade_off, knee=knee, budget=budget, verdict=verdict,
    )


_Figures = tuple[Evaluation, float, CaptureEstimate]
"""A list's evaluation, modelled time (ms) and capture estimate."""


def _verdict(whole: Demand, deployment: Deployment, optimal: OptimalLists, knee: "TradeOff | None", cm: CaptureModel,
             full: _Figures, configured: _Figures, default: tuple[BucketTable, Evaluation], budget: Budget | None,
             max_buckets: int, settings: RecommendSettings, validation: Validation | None, tail: Demand | None) -> Verdict:
    """The verdict (`verdict.Verdict`) from the recommendation's results: SGLang's default list
    for the chunk, the knee and the full list on the same forwards, which to deploy, the budgets."""
    cost = deployment.cost
    default_table, default_ev = default
    default_buckets = default_table.capture_num_tokens.tolist()
    default_fig = list_figures("default", default_ev, demand_cost_ms(whole, default_table, cost, deployment.max_padding_factor),
                               _estimate(default_buckets, cm, deployment))
    full_fig = list_figures("recommended", *full)
    knee_fig, knee_ev = None, None
    # -k/--max-buckets given: the verdict judges the list asked for (no knee below it), so the
    # flags command (`-k` of the deployed list) repeats the same advice
    if knee is not None and settings.max_buckets is None and knee.num_buckets < len(full[0].buckets):
        knee_list = optimal.buckets[knee.max_buckets]
        knee_table = BucketTable.build(knee_list, deployment.cp, deployment.capture)
        knee_ev = evaluate_demand(whole, knee_table, deployment.cp, deployment.max_padding_factor)
        knee_fig = list_figures("knee", knee_ev, knee.modelled_ms, _estimate(knee_list, cm, deployment))
    configured_fig = None
    if configured[0].buckets != default_buckets:
        configured_fig = list_figures("configured", *configured)
    deploy, reason = choose(knee_fig, full_fig, default_fig, KNEE_TOLERANCE)
    warnings = []
    # the knee too, when it is the list to deploy: its saving has a price
    judged = ((configured_fig, configured[0]), (knee_fig if deploy == "knee" else None, knee_ev), (full_fig, full[0]))
    for fig, ev in judged:
        if fig is None or ev is None:
            continue
        said = flags_against_default(ev, default_ev, cost)
        if said:
            warnings.append(f"the {fig.name} list of {counted(fig.num_buckets, 'bucket')} costs more than SGLang's default list of "
                            f"{default_fig.num_buckets} here: {'; '.join(said)}")
    if settings.target_coverage is not None:
        reached = validation.evaluation.coverage if validation is not None else full_fig.coverage
        where = "out of sample (the held-back forwards)" if validation is not None else "on the trace"
        theirs = default_fig.coverage if tail is None else evaluate_demand(tail, default_table, deployment.cp, deployment.max_padding_factor).coverage
        if reached < settings.target_coverage:
            warnings.append(f"the target of {settings.target_coverage:.2%} of forwards in graphs is missed {where}: "
                            f"{reached:.2%} (SGLang's default list there: {theirs:.2%})")
    beyond = {r: n for r in LIST_INDEPENDENT_REASONS if (n := default_ev.eager.get(r, 0))}
    return Verdict(forwards=whole.num_forwards, ceiling=optimal.ceiling, beyond_ceiling=beyond, default=default_fig, full=full_fig, knee=knee_fig,
                   configured=configured_fig, deploy=deploy, deploy_reason=reason,
                   budgets=_budget_sentences(budget, default_fig, max_buckets), warnings=tuple(warnings),
                   capture_source=cm.source, capture_range=cm.range_factor, cost_source=cost.source)


def _budget_sentences(budget: Budget | None, default: ListFigures, max_buckets: int) -> tuple[str, ...]:
    """Each budget given and whether it binds: the capture budget binds when fewer than the count
    limit's buckets fit it, the memory budget when SGLang's default list does not fit it."""
    if budget is None:
        return ()
    out = []
    if budget.max_capture_s is not None:
        fits = budget.max_buckets(max_buckets)
        binds = fits < max_buckets
        out.append(f"--max-capture-seconds {budget.max_capture_s:g} {'binds' if binds else 'does not bind'}: at most "
                   f"{counted(fits, 'bucket')} fit it (the count limit is {max_buckets}; SGLang's default list of {default.num_buckets} takes "
                   f"{default.capture_s:,.0f} s)")
    if budget.max_graph_mib is not None:
        binds = default.graph_mib > budget.max_graph_mib
        out.append(f"--max-graph-memory {budget.max_graph_mib:g} MiB {'binds' if binds else 'does not bind'}: SGLang's default "
                   f"list holds {default.graph_mib:,.0f} MiB")
    return tuple(out)


def _floor(deployment: Deployment, settings: RecommendSettings, chunk: int) -> tuple[int, int] | None:
    """The smallest forward the list must serve, `(tokens, rows)`: `min_bucket` (default: the
    smallest capturable size, `minimum_capture_tokens`) as one request, or None when disabled
    (`min_bucket = 0`) or not below the chunk. With gap-free lists every size from it up to the
    chunk then has a bucket within the padding factor, whether or not the trace held it."""
    if settings.min_bucket == 0 or settings.allow_gaps:  # the floor is the gap-free rule carried down to it
        return None
    tokens = max(settings.min_bucket or 1, minimum_capture_tokens(deployment.cp))
    if tokens >= chunk or deployment.cp.cp_size == 1 and settings.min_bucket is None:
        return None
    rows = int(local_rows(BatchSet.from_lists([[tokens]]), deployment.cp)[0])
    return tokens, rows


def _floor_fits(demand: Demand, deployment: Deployment, settings: RecommendSettings, max_buckets: int, chunk: int,
                headroom: Headroom | None, floor: tuple[int, int]) -> bool:
    """Whether some list of at most `max_buckets` buckets serves the floor (and the rest)."""
    try:
        _fit(demand.subset(slice(0, 0)), deployment, replace(settings, target_coverage=None), max_buckets, chunk, headroom, floor)
    except ConfigError:
        return False
    return True


def _floor_note(floor: tuple[int, int], buckets: list[int], demand: Demand) -> str:
    """What the floor of small buckets costs: the buckets below the trace's smallest CP-active
    forward, there only for sizes the trace did not hold."""
    active = demand.num_tokens[demand.active]
    smallest = int(active.min()) if active.size else None
    below = sum(1 for b in buckets if smallest is not None and b < smallest)
    seen = f"the trace's smallest CP-active forward has {smallest:,} tokens" if smallest is not None else "the trace has no CP-active forward"
    return (f"floor: every CP-active size from {floor[0]:,} tokens up has a bucket within the padding factor (--min-bucket); "
            f"{seen}: the floor costs {below} of the {counted(len(buckets), 'bucket')}")


def _include_notes(deployment: Deployment, settings: RecommendSettings, release: str) -> list[str]:
    """What the runner makes of the `include` buckets: each rounded up as SGLang 0.5.23 captures
    it (`StrategyModel.round_buckets`), said; the list pins the rounded sizes."""
    rounded = deployment.cp.model.round_buckets(list(settings.include)).tolist() if settings.include else []
    changed = sorted({(a, b) for a, b in zip(settings.include, rounded) if a != b})
    if not changed:
        return []
    multiple = deployment.cp.model.bucket_multiple_tokens
    return [f"include: {release} captures a bucket rounded up to a multiple of {multiple}: "
            f"{', '.join(f'{a} -> {b}' for a, b in changed)}; the list pins the rounded size{'s' if len(changed) > 1 else ''}"]


def _grid_notes(deployment: Deployment, settings: RecommendSettings, release: str) -> list[str]:
    """The grid `--bucket-multiple M` really searches (`grid.candidate_grid`): multiples of M,
    each rounded up as SGLang 0.5.23 captures it (`StrategyModel.round_buckets`), so a size is a
    multiple of M only when M is a multiple of the capture alignment; plus the chunk, pins and the
    headroom's top. The list is optimal on that grid only."""
    step = settings.bucket_multiple
    if step == 1:
        return []
    align = deployment.cp.model.bucket_multiple_tokens
    extras = "plus the chunk, any headroom bucket above it and any --include, each rounded the same way"
    if step % align == 0:
        return [f"grid: the list is optimal among multiples of {step} tokens only ({extras}); --bucket-multiple 1 searches every size"]
    first = int(deployment.cp.model.round_buckets([step])[0])
    both = step * align // math.gcd(step, align)
    return [f"grid: the list is optimal only among multiples of {step} tokens rounded up to a multiple of {align} "
            f"({release} captures every bucket rounded up to a multiple of attn_cp_size {align}: {step} -> {first}), "
            f"so its sizes need not be multiples of {step} ({extras}); --bucket-multiple {both} keeps them multiples of both, "
            "--bucket-multiple 1 searches every size"]


def _graphs_off_notes(deployment: Deployment) -> list[str]:
    """A server whose prefill CUDA graphs are off (`ResolvedServer.prefill_graph_backend`, e.g. a
    log's `disable_cuda_graph=True`) replays no list: the recommendation only helps with them on,
    and the flags `--emit sglang` writes do not turn them on."""
    backend = deployment.server.prefill_graph_backend if deployment.server is not None else None
    if backend is None or backend.value != "disabled":
        return []
    fix = f"; drop {backend.rule} from the launch" if backend.rule.startswith("--") else ""
    return [f"graphs off: the server runs with prefill CUDA graphs disabled ({backend.rule}, {backend.source}): the recommended list "
            f"and the flags --emit sglang writes only help a server with them on (the flags do not turn them on){fix}"]


def _size_notes(split: DemandSplit, settings: RecommendSettings) -> list[str]:
    """A warning when the trace is too small for its recommendation to mean much: fewer than
    `MIN_MEANINGFUL_FORWARDS` forwards, `count` weights included (a line of a batch trace may
    stand for many forwards; the line count is said when it differs)."""
    forwards = split.head.num_forwards + split.tail.num_forwards
    if forwards >= MIN_MEANINGFUL_FORWARDS:
        return []
    lines = f" in {counted(split.num_lines, 'trace line')}" if split.num_lines != forwards else ""
    return [f"warning: only {counted(forwards, 'prefill forward')}{lines} (fewer than {MIN_MEANINGFUL_FORWARDS:,}): the recommended list "
            "follows these few shapes; plan on a longer trace, or several (--trace A --trace B), before deploying it"]


def _capture_model(deployment: Deployment, settings: RecommendSettings, chunk: int) -> CaptureModel:
    """The capture cost model: the published fit for the deployment's model at the server's TP, with
    what a log or manifest measured replacing its terms (`settings.capture_*`)."""
    try:
        chunk_rows = int(local_capacity([chunk], deployment.cp, deployment.capture)[0])
    except ModelError:  # a chunk no capture layout holds: its eager peak is not removed by any list
        chunk_rows = 0
    estimate = capture_model(deployment.model, deployment.gpu, deployment.tp_size, chunk, chunk_rows, deployment.attn_dp_size)
    scale = None
    if settings.graph_mib_per_token is not None and estimate.mib_per_graph_row > 0:
        # MoE: the measured memory (the largest captured bucket's tokens x the log's MiB per token) scales the
        # estimate of the list it measured, so the caches of every graph keep following the list's rows
        try:
            captured = deployment.table().capture_num_tokens.tolist()
        except ModelError:
            captured = []
        est = _estimate(captured, estimate, deployment).graph_mib if captured else 0.0
        if est > 0:
            scale = settings.graph_mib_per_token * max(captured) / est
    return measured_capture_model(estimate, settings.capture_s_per_bucket, settings.graph_mib_per_token,
                                  settings.capture_source or "measured", scale)


def _budget(deployment: Deployment, settings: RecommendSettings, chunk: int) -> Budget | None:
    if settings.max_capture_s is None and settings.max_graph_mib is None:
        return None
    return Budget(_capture_model(deployment, settings, chunk), settings.max_capture_s, settings.max_graph_mib)


def _largest_rows(buckets: list[int], deployment: Deployment) -> list[int]:
    """CP-local capacity of each list's largest bucket, by `local_capacity` (0 for an empty list)."""
    return [int(c) for c in local_capacity(buckets, deployment.cp, deployment.capture)] if buckets else []


def _estimate(buckets: list[int], cm: CaptureModel, deployment: Deployment) -> CaptureEstimate:
    top = max(buckets, default=0)
    try:
        rows = _largest_rows([top], deployment)[0] if buckets else 0
    except ModelError:
        rows = top
    return cm.estimate(buckets, rows)


def _trade_off(optimal: OptimalLists, cm: CaptureModel, deployment: Deployment) -> tuple[TradeOff, ...]:
    """Per count limit the optimiser computed: the best list's coverage, modelled time and capture cost."""
    ks = sorted(optimal.buckets)
    tops = [max(optimal.buckets[k]) for k in ks]
    rows = _largest_rows(tops, deployment)
    out = []
    for k, top, r in zip(ks, tops, rows):
        lst = optimal.buckets[k]
        est = cm.estimate(lst, r)
        out.append(TradeOff(k, len(lst), optimal.coverage(k), optimal.cost_ms[k], est.capture_s, est.graph_mib, top))
    return tuple(out)


def _knee(points: tuple[TradeOff, ...], max_buckets: int) -> TradeOff | None:
    """`KNEE_RULE` over the `points` of at most `max_buckets` buckets (None when there are none):
    the same with or without the longer Pareto curve of `--compare`."""
    points = tuple(p for p in points if p.max_buckets <= max_buckets)
    if not points:
        return None
    best = min(p.modelled_ms for p in points)
    return min((p for p in points if p.modelled_ms <= best * (1 + KNEE_TOLERANCE)), key=lambda p: (p.num_buckets, p.modelled_ms))


def _target_notes(target: float, buckets: list[int], modelled_ms: float, configured_ms: float, optimal: OptimalLists,
                  configured_count: int) -> list[str]:
    """What a coverage target costs: a ceiling below it (forwards no list replays), and a list
    slower in modelled time than the configured one (never silent)."""
    out = []
    if target > optimal.ceiling:
        out.append(f"warning: no list of any size reaches {target:.2%}: {1 - optimal.ceiling:.2%} of the forwards cannot be "
                   f"replayed by any list (not CP-active, or no capturable bucket within the padding factor); the ceiling is "
                   f"{optimal.ceiling:.2%}")
    if configured_ms > 0 and modelled_ms > configured_ms:
        out.append(f"warning: the {counted(len(buckets), 'bucket')} reaching the target cost {modelled_ms / configured_ms - 1:+.2%} "
                   f"modelled prefill time over the configured list of {configured_count}: fewer graphs, more padding or eager "
                   "forwards; ask --max-buckets (no target) for the least time, or a higher target")
    return out


def _headroom(deployment: Deployment, chunk: int, requests: int) -> tuple[Headroom | None, str | None]:
    """The full chunk the list must serve, or `(None, why not)` when no bucket within the padding
    factor could hold it (the list then ends at the chunk, as without headroom)."""
    required = headroom_required(chunk, requests, deployment.cp)
    if not required:
        return None, f"no headroom: a full chunk of {chunk} tokens is not CP-active under cp_size {deployment.cp.cp_size}"
    rows = required[0][1]
    top = min(int(np.floor(chunk * deployment.max_padding_factor)), max(chunk, MAX_BUCKET_TOKENS))
    try:
        capacity, top_capacity = (int(c) for c in local_capacity([chunk, top], deployment.cp, deployment.capture))
    except ModelError as exc:
        return None, f"no headroom: {exc}"
    if top_capacity < rows:
        return None, (f"no headroom: a full {chunk}-token chunk of {counted(requests, 'request')} needs {counted(rows, 'row')} and no bucket "
                      f"up to max_padding_factor x {chunk} = {top} holds them")
    return Headroom(chunk, requests, rows, capacity), None


class _ListOptions(TypedDict):
    """The options `_fit` hands to `optimise` and `fewest_for_coverage` alike (their keywords)."""

    spec: CaptureSpec
    max_padding_factor: float
    bucket_multiple: int
    pinned: list[int]
    max_bucket_tokens: int
    allow_gaps: bool
    required: list[tuple[int, int]]


def _fit(demand: Demand, deployment: Deployment, settings: RecommendSettings, max_buckets: int, chunk: int,
         headroom: Headroom | None, floor: tuple[int, int] | None = None) -> tuple[list[int], OptimalLists]:
    """The list for `demand` (best of `max_buckets`, or the fewest reaching the coverage target)
    and the optimiser's best lists; the headroom chunk is a required forward."""
    factor = deployment.max_padding_factor
    top = min(int(np.floor(chunk * factor)), max(chunk, MAX_BUCKET_TOKENS)) if headroom is not None else chunk
    if settings.include and max(settings.include) > top:
        raise ConfigError(f"include: bucket {max(settings.include)} is above the largest candidate {top} (max_padding_factor x the chunk {chunk})")
    common: _ListOptions = {
        "spec": deployment.capture, "max_padding_factor": factor, "bucket_multiple": settings.bucket_multiple,
        "pinned": sorted(set(settings.include)), "max_bucket_tokens": top, "allow_gaps": settings.allow_gaps,
        "required": ([] if headroom is None else [(headroom.chunk_tokens, headroom.worst_rows)]) + ([] if floor is None else [floor]),
    }
    budget = _budget(deployment, settings, chunk)
    if settings.target_coverage is not None:
        fewest = fewest_for_coverage(demand, deployment.cp, deployment.cost, settings.target_coverage, chunk,
                                     max_buckets=max_buckets, budget=budget, **common)
        return fewest.buckets, fewest.optimal
    k_top = max(max_buckets, settings.pareto_max_buckets)
    optimal = optimise(demand, deployment.cp, deployment.cost, k_top, chunk, objective=settings.objective, budget=budget, **common)
    return optimal.best(max_buckets), optimal


def _cost(demand: Demand, buckets: list[int], deployment: Deployment) -> float:
    table = BucketTable.build(buckets, deployment.cp, deployment.capture)
    return demand_cost_ms(demand, table, deployment.cost, deployment.max_padding_factor)


def _fit_buckets(demand: Demand, deployment: Deployment, settings: RecommendSettings, max_buckets: int, chunk: int,
                 headroom: Headroom | None, floor: tuple[int, int] | None) -> list[int]:
    return _fit(demand, deployment, settings, max_buckets, chunk, headroom, floor)[0]


def _validation(split: DemandSplit, buckets: list[int], deployment: Deployment, held_back: Mapping[str, Demand]) -> Validation:
    """The list fitted on the head (`split.head`), replayed on the head, the held-back tail and
    each named held-back part."""
    table = BucketTable.build(buckets, deployment.cp, deployment.capture)
    cp, factor = deployment.cp, deployment.max_padding_factor
    by_part = {name: evaluate_demand(part, table, cp, factor) for name, part in held_back.items()}
    return Validation(split.fit_fraction, buckets, evaluate_demand(split.head, table, cp, factor),
                      evaluate_demand(split.tail, table, cp, factor), by_part)
