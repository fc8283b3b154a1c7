"""`plan`: replay traffic with the configured list and recommend a better one.

One trace streams once (`plan`): every chunk of forwards is laid out, replayed with the
configured list (`Evaluator`), and its demand kept in a `DemandLog` for the recommendation
(bounded memory). Several traces and load factors (`plan_traffic`) are one job each, mapped over
an executor (`traffic.map_jobs`) and merged exactly; the list is fitted to all the fitted jobs
together and every job is reported with both lists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Iterable, Mapping, Sequence

from cpbcg.errors import ModelError
from cpbcg.planner.demand_log import DemandSplit
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.evaluate import Evaluation, evaluate_demand
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.selector import BucketTable
from cpbcg.engines.sglang.export import RULES
from cpbcg.engines.sglang.observed import LaunchModel, ObservedComparison
from cpbcg.planner.bound import bound_demand, rebound_demand
from cpbcg.planner.demand_log import DemandLog
from cpbcg.planner.evaluate import Evaluator
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.engines.sglang.logs.settings import LogSettings
from cpbcg.planner.costs.cost import flags_against_default
from cpbcg.planner.optimise.recommend import Recommendation, RecommendSettings, recommend
from cpbcg.planner.traces.records import ForwardSizes
from cpbcg.assembly.sources import BatchSource
from cpbcg.assembly.traffic import JobOutcome, TrafficJob, map_jobs, preload, run_job, tally


@dataclass(frozen=True)
class PlanPart:
    """One (trace, load) job of a plan, with both lists."""

    label: str
    """The trace as reports name it."""
    load: str
    """The load in words (`x2`, `8 req/s`)."""
    load_factor: float
    """Time scale of the job (1 for a Poisson rate job)."""
    rate_per_s: float | None
    """Poisson rate of a trace without timestamps (requests/s), or None."""
    fit: bool
    """Whether the recommendation was fitted on it."""
    evaluation: Evaluation
    """The configured list on the job's forwards."""
    recommended: Evaluation | None
    """The recommended list on them (None without a recommendation)."""
    source: BatchSource
    """The finished source (format, bound flag, simulation summary)."""
    default: Evaluation | None = None
    """SGLang's default list for the recommendation's chunk on the job's forwards (None without a recommendation)."""
    flags: tuple[str, ...] = ()
    """Where the recommended list costs more padding or modelled time than SGLang's default on this job (`cost.flags_against_default`)."""


@dataclass(frozen=True)
class PlanResult:
    """What `plan` found."""

    evaluation: Evaluation
    """The configured (or given) list replayed on every forward (all jobs merged)."""
    recommendation: Recommendation | None
    """The recommended list; None when not asked for or when none can be made."""
    recommendation_error: str | None = None
    """Why no recommendation could be made (e.g. no forward is CP-active), else None."""
    parts: tuple[PlanPart, ...] = ()
    """Each (trace, load) job, in order; empty for a single stream planned in place."""
    observed: ObservedComparison | None = None
    """An SGLang log's observed vs modelled graph use (`cpbcg.engines.sglang.observed.ObservedComparison`), else None."""
    launches: tuple["LaunchPlan", ...] = ()
    """An SGLang log of several launches: each launch's forwards under its own resolved server
    (`plan_launches`; `evaluation` is their total); empty for one launch or any other trace."""
    deployment: Deployment | None = None
    """The deployment `recommendation` is for when it is not the one the plan was called with
    (a log's last launch ran under other settings than its first), else None."""

    def launch_header(self) -> dict[str, object]:
        """The report header's key on a log of several launches (`launches`), {} otherwise: the
        header's deployment fields (`cp_size` ... `server`) describe the last launch, as the
        recommendation and `--emit` do (`deployment`), while the evaluation (`buckets`,
        `capacity_rows`, `bucket_hits`) is the launches' total over the union of their lists
        (`Evaluation.total`; each launch's own list in `launches[]`). `launch_total`: how many
        launches, which one the header describes (its number, first line and captured list)."""
        if len(self.launches) < 2:
            return {}
        last = self.launches[-1]
        return {"launch_total": {"launches": len(self.launches), "header_launch": last.launch, "header_first_line": last.first_line,
                                 "header_buckets": last.model.table.capture_num_tokens.tolist(), "buckets": "union"}}


@dataclass(frozen=True)
class LaunchPlan:
    """One launch of an SGLang log in the main (modelled) table: its forwards replayed with the
    list, CP layout and padding cap of the server it resolved to."""

    launch: int
    """1-based launch of the log."""
    first_line: int
    """Line the launch begins on (1 for the first)."""
    settings: LogSettings
    """What the launch's start-up output states."""
    model: LaunchModel
    """What it is modelled with (`model.deployment`: its resolved deployment)."""
    evaluation: Evaluation
    """Its forwards under `model`."""
    fitted: bool = False
    """Whether the recommendation was fitted on its forwards (the last launch's only)."""


def plan(
    chunks: Iterable[BatchSet] | Iterable[ForwardSizes],
    deployment: Deployment,
    settings: RecommendSettings | None = RecommendSettings(),
    table: BucketTable | None = None,
    on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None,
) -> PlanResult:
    """Replay `chunks` with `table` (default: the deployment's configured list) and, unless
    `settings` is None, recommend a list for the same forwards. `ForwardSizes` chunks (an SGLang
    server log) are taken at their exact worst case (`bound_demand`): the result is a bound.

    `on_chunk` sees each chunk after it was tallied (progress). Raises `TraceError` from the
    trace, `ConfigError`/`ModelError` from the recommendation."""
    table = deployment.table() if table is None else table
    evaluation, log = tally(chunks, deployment, table, settings is not None, on_chunk)
    if log is None or settings is None:  # the log is kept only for a recommendation
        return PlanResult(evaluation, None)
    return _recommended(evaluation, log.to_split(settings.validate_fraction), deployment, settings, {}, ())


def plan_launches(
    chunks: Iterable[ForwardSizes],
    deployment: Deployment,
    settings: RecommendSettings | None,
    *,
    launch_settings: Callable[[int], LogSettings],
    resolve: Callable[[LogSettings], LaunchModel],
    launch_capture: Callable[[LogSettings], Mapping[str, object]] | None = None,
    on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None,
) -> PlanResult:
    """`plan` of an SGLang log's forwards (`ObservedForwards`, each chunk of one launch), every
    launch under the server it resolved to: the launch that ran the first forward under
    `deployment` (the plan's, built from that launch's settings), each later one under
    `resolve(launch_settings(k))` (its CP layout, list, padding cap and max_seq_len). The result's
    `evaluation` is the launches' total (`Evaluation.total`) and `launches` each one's.

    The recommendation is for the server as it runs now: the last launch (a restart that has served no forward yet
    included: it is fitted on the forwards of the launch before, their worst cases taken under its CP layout),
    under its resolved deployment (`PlanResult.deployment` when that is not `deployment`) and
    fitted on that launch's forwards only: a launch's forwards were formed by its own scheduler
    settings (chunk, page size, request cap) and are bound under its own CP layout, so an earlier
    launch's forwards are not the traffic the last server serves (`launch_capture(settings)`
    gives the last launch's measured capture cost, `RecommendSettings` fields). A log of one
    launch gives exactly `plan(chunks, deployment, settings)`. Raises as `plan`."""
    per: dict[int, tuple[LaunchModel, Evaluator]] = {}
    demand: DemandLog | None = None
    fitted_on = 0  # the launch whose forwards `demand` holds
    for chunk in chunks:
        launch = chunk.launch if isinstance(chunk, ObservedForwards) else 1
        if launch not in per:
            model = (LaunchModel(deployment.table(), deployment.cp, deployment.max_padding_factor, deployment=deployment) if not per
                     else resolve(launch_settings(launch)))
            dep = model.deployment or deployment
            per[launch] = (model, Evaluator(model.table, model.cp, model.max_padding_factor, dep.max_seq_len_tokens))
        if len(chunk.num_tokens) and launch != fitted_on:  # the fit keeps the newest launch's forwards (a restart that has
            demand, fitted_on = (DemandLog() if settings is not None else None), launch  # served none keeps the ones before)
        model, evaluator = per[launch]
        bound = bound_demand(chunk, model.cp)
        evaluator.add_demand(bound)
        if demand is not None:
            demand.add(bound)
        if on_chunk is not None:
            on_chunk(chunk)
    if len(per) <= 1:  # one launch (or none): the plan as before, under `deployment`
        evaluation = next(iter(per.values()))[1].result() if per else Evaluator(
            deployment.table(), deployment.cp, deployment.max_padding_factor, deployment.max_seq_len_tokens).result()
        if settings is None:
            return PlanResult(evaluation, None)
        return _recommended(evaluation, (demand or DemandLog()).to_split(settings.validate_fraction), deployment, settings, {}, ())
    last = max(per)
    launches = tuple(LaunchPlan(k, launch_settings(k).first_line or 1, launch_settings(k), model, evaluator.result(), k == last and settings is not None)
                     for k, (model, evaluator) in sorted(per.items()))
    evaluation = Evaluation.total([one.evaluation for one in launches])
    final = per[last][0].deployment or deployment
    moved = None if final is deployment else final
    if settings is None or demand is None:
        return PlanResult(evaluation, None, launches=launches, deployment=moved)
    if last != fitted_on and per[last][0].cp != per[fitted_on][0].cp:  # the server now runs another CP layout: its forwards'
        demand = demand.rebound(lambda d: rebound_demand(d, per[last][0].cp))  # worst cases under that layout
    if launch_capture is not None:
        measured = {"capture_s_per_bucket": None, "graph_mib_per_token": None, "capture_source": None, **launch_capture(launch_settings(last))}
        settings = replace(settings, **measured)  # type: ignore[arg-type]  # the last launch's measurement, or none
    result = _recommended(evaluation, demand.to_split(settings.validate_fraction), final, settings, {}, ())
    return replace(result, launches=launches, deployment=moved)


def plan_traffic(
    jobs: Sequence[TrafficJob],
    deployment: Deployment,
    settings: RecommendSettings | None = RecommendSettings(),
    table: BucketTable | None = None,
    *,
    workers: int = 1,
    scheduler: str | None = None,
    on_chunk: Callable[[BatchSet | ForwardSizes], object] | None = None,
    progress: Callable[[int], None] | None = None,
) -> PlanResult:
    """Run every job (a trace at a load) on the executor chosen (`traffic.map_jobs`: in process,
    `workers` local processes, or the Dask cluster at `scheduler`), merge them in job order, fit
    one list to the jobs marked `fit` together (each job holds back its own last
    `validate_fraction`), and report every job with both lists. `on_chunk`/`progress` are
    called only when the jobs run in this process. The result does not depend on the executor.

    Raises `TraceError` from a trace, `ConfigError` for an unreachable cluster or bad settings."""
    table = deployment.table() if table is None else table
    held_back = None if settings is None else settings.validate_fraction
    in_process = scheduler is None and (workers <= 1 or len(jobs) <= 1)
    work = partial(run_job, deployment=deployment, table=table, held_back=held_back,
                   on_chunk=on_chunk if in_process else None, progress=progress if in_process else None)
    outcomes: list[JobOutcome] = list(map_jobs(work, list(jobs), workers, scheduler, partial(preload, jobs)))
    evaluation = Evaluation.merge([o.evaluation for o in outcomes])
    parts = tuple(_part(o, None) for o in outcomes)
    if settings is None:
        return PlanResult(evaluation, None, None, parts)
    fitted = [o.split for o in outcomes if o.job.fit and o.split is not None]
    tails = {f"{o.job.label} {o.job.load}": o.split.tail for o in outcomes if o.split is not None and o.split.tail.num_forwards}
    result = _recommended(evaluation, DemandSplit.merge(fitted), deployment, settings, tails if len(outcomes) > 1 else {}, ())
    rec = result.recommendation
    if rec is not None:
        rec_table = BucketTable.build(rec.buckets, deployment.cp, deployment.capture)
        chunk = rec.headroom.chunk_tokens if rec.headroom is not None else rec.optimal.max_tokens
        default_table = BucketTable.build(RULES.lists.default(chunk), deployment.cp, deployment.capture)
        parts = tuple(_part(o, rec_table, deployment, default_table) for o in outcomes)
        loads = len({p.label for p in parts}) < len(parts)  # the load named only where a trace runs at several
        said = tuple(f"on {p.label}{f' at {p.load}' if loads else ''} the recommended list costs more than SGLang's default list "
                     f"there: {'; '.join(p.flags)}" for p in parts if p.flags)
        if said and rec.verdict is not None:  # a list fitted on one load, replayed at another, is judged there too
            rec = replace(rec, verdict=replace(rec.verdict, warnings=rec.verdict.warnings + said))
    return PlanResult(result.evaluation, rec, result.recommendation_error, parts)


class AgainstDefault:
    """SGLang 0.5.23's default list for the chunk (`RULES.lists.default`, as the runner captures
    it) replayed beside a judged list on the same forwards: `tap` wraps a plan's `on_chunk`, so
    the trace streams once; `flags` says where the judged list costs more padding or modelled time
    (`cost.flags_against_default`, with both numbers). Forwards from another process (a Dask or
    multi-process traffic plan) are not seen: `result` is then None."""

    def __init__(self, deployment: Deployment):
        self.deployment = deployment
        try:
            self.table: BucketTable | None = BucketTable.build(RULES.lists.default(deployment.scheduler.largest_forward_tokens),
                                                               deployment.cp, deployment.capture)
        except ModelError:  # no default bucket is capturable here: nothing to compare with
            self.table = None
        self.evaluator = None if self.table is None else Evaluator(self.table, deployment.cp, deployment.max_padding_factor,
                                                                    deployment.max_seq_len_tokens)

    def tap(self, on_chunk: Callable[[BatchSet | ForwardSizes], object] | None) -> Callable[[BatchSet | ForwardSizes], object]:
        """`on_chunk`, also replaying each chunk with the default list."""
        def seen(chunk: BatchSet | ForwardSizes) -> object:
            if self.evaluator is not None:
                if isinstance(chunk, ForwardSizes):
                    self.evaluator.add_demand(bound_demand(chunk, self.deployment.cp))
                else:
                    self.evaluator.add(chunk)
            return on_chunk(chunk) if on_chunk is not None else None
        return seen

    def result(self, judged: Evaluation) -> Evaluation | None:
        """The default list on the forwards `judged` saw (None when it saw others or none)."""
        if self.evaluator is None:
            return None
        ev = self.evaluator.result()
        return ev if ev.batches == judged.batches and ev.batches else None

    def flags(self, judged: Evaluation) -> tuple[str, ...]:
        """Where `judged`'s list costs more than the default on the same forwards (empty: it does not, or no comparison)."""
        default = self.result(judged)
        if default is None or list(default.buckets) == list(judged.buckets):
            return ()
        return flags_against_default(judged, default, self.deployment.cost)


def _recommended(evaluation: Evaluation, split: DemandSplit, deployment: Deployment, settings: RecommendSettings,
                 tails: Mapping[str, Demand], parts: tuple[PlanPart, ...]) -> PlanResult:
    try:
        return PlanResult(evaluation, recommend(split, deployment, settings, tails, engine=RULES), None, parts)
    except ModelError as exc:  # the evaluation stands; say why there is no list to recommend
        return PlanResult(evaluation, None, f"no recommendation: {exc}", parts)


def _part(outcome: JobOutcome, rec_table: BucketTable | None, deployment: Deployment | None = None,
          default_table: BucketTable | None = None) -> PlanPart:
    job = outcome.job
    recommended = default = None
    flags: tuple[str, ...] = ()
    if rec_table is not None and outcome.split is not None and deployment is not None:
        whole = outcome.split.whole()
        recommended = evaluate_demand(whole, rec_table, deployment.cp, deployment.max_padding_factor)
        if default_table is not None:
            default = evaluate_demand(whole, default_table, deployment.cp, deployment.max_padding_factor)
            flags = flags_against_default(recommended, default, deployment.cost)
    return PlanPart(job.label, job.load, job.load_factor, job.rate_per_s, job.fit, outcome.evaluation, recommended, outcome.source,
                    default, flags)
