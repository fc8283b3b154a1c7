"""Exact bucket-list optimiser: the list of at most K buckets with the least modelled prefill time
under the runtime selector (docs/model.md "Replay selection") and the linear cost model (`cost.py`).

Model. A batch `i` (tokens `n_i`, rows `R_i`, weight `w_i`) is replayed by the smallest chosen
bucket in its feasible set `F_i = {B : n_i <= B <= factor*n_i, C(B) >= R_i}` (the runtime scans
from the natural bucket and takes the first with capacity), else it runs eagerly. Capacity
`C(B)` is nondecreasing over capturable sizes for both capture layouts (single request: adding
a token adds it to exactly one rank; context-bounded: the last piece grows, or a new piece of
`>= 2*cp_size` tokens is added; sizes whose capture is impossible are left out), so `F_i` is an
interval `[lo_i, hi_i]` of the candidate grid, and batch `i` is served by `succ(lo_i)`, the
first chosen bucket `>= lo_i`, when that is `<= hi_i`. A violated monotonicity raises.

Candidates (why the result is exact). Take an optimal list and a chosen bucket `b` with
predecessor `p`. Lowering `b` inside `(p, b]` keeps every other batch's bucket, lowers the
cost of the batches it serves, and changes *which* batches it serves only when it crosses a
`lo_i` (batch `i` would leave it) or a `hi_j + 1` (batch `j`, eager so far, would now be
replayed). The second only hurts when `j`'s graph can cost more than eager, i.e. when
`graph_fixed + t*hi_j > eager_fixed + t*n_j`. So lowering `b` to the largest point of
`P = {lo_i} ∪ {hi_j + 1 : j such a batch} ∪ pinned` in `(p, b]` never costs more, and some
optimal list lies in `P`. The DP below searches all lists over `P` exactly.

Required forwards, pins and gaps. `required` forwards (e.g. a full chunk of many requests at
its exact worst-case rows, `guarantee.headroom_required`) must each be replayed: the list must
hold a bucket in each one's window, so a lowered bucket also stops at their `lo` (added to
`P`). A pinned bucket is a required window of one size. Gap-free lists (the default): for
consecutive buckets `p < b` with `p` below the chunk size (`max_tokens`), `b <= factor*(p + 1)`
(the selector's own float comparison), so every forward size from the smallest bucket to the
chunk has a bucket within the padding factor; the largest bucket is `>= max_tokens`. Lowering
`b` must then keep `b`'s successor `q` within reach, so the lowest admissible `b` is
`G(q)`, the smallest grid size with `factor*(G(q) + 1) >= q` (or the chunk size): `P` is
closed under `G`. Every constraint bounds the previous bucket from below by a nondecreasing
function of the next one, which keeps the DP exact.

DP and objectives (`dp.py`). With chosen buckets `b_1 < ... < b_k`, batch `i` is settled
by the bucket that closes the gap holding `lo_i`, so the cost is a sum over consecutive pairs,
a layered DP (layer = bucket count). Objective `coverage` is exact in integers: modelled time is
`graph_fixed*G + eager_fixed*E + token_ms*X` with `G + E` fixed and `X` = graph bucket tokens +
eager tokens (an integer), so "most graph forwards, then least time" is the lexicographic
order of `(E, X)` (`token_ms > 0`; with `token_ms = 0` every such list ties on time), encoded
as the int64 key `E*M + X`, `M > max X`. Its per-batch cost rises with the bucket, so the DP is
Monge and each layer is a divide and conquer (`dp.solve_monge`). Objective `time` uses
float milliseconds; it is Monge only when no replay can cost more than eager, else the band
scan `dp.solve_band` (`O(K * sum of band lengths)`) runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.arrays import Int64Array, sorted_unique
from cpbcg.planner.optimise import dp
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.optimise.capture_cost import CaptureModel
from cpbcg.planner.costs.cost import CostModel
from cpbcg.planner.model.demand import Demand
from cpbcg.planner.optimise.grid import DENSE_GRID_LIMIT, CandidateGrid, candidate_grid, dense_grid_size, sparse_grid
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.model.selector import replay_window_hi, replay_windows
from cpbcg.planner.words import counted

__all__ = ["Budget", "CandidateGrid", "FewestBuckets", "OptimalLists", "candidate_grid", "fewest_for_coverage", "optimise"]

OBJECTIVES = ("coverage", "time")
_KEY_LIMIT = 1 << 61
"""Largest int64 coverage key (the DP adds one more key and a sentinel of 2**62)."""


@dataclass(frozen=True)
class Budget:
    """Capture budgets every list must keep within (exact constraints of the DP: both depend only
    on the bucket count and the largest bucket, `CaptureModel.within`)."""

    model: CaptureModel
    """Capture time and graph memory of a list (`capture_cost.CaptureModel`)."""
    max_capture_s: float | None = None
    """Most capture seconds (None: no budget)."""
    max_graph_mib: float | None = None
    """Most graph memory (MiB; the pool plus the per-graph term, before the eager peak it removes; None: no budget)."""

    def max_buckets(self, limit: int) -> int:
        """The most buckets (up to `limit`) whose capture keeps within `max_capture_s` (0 when none does)."""
        if self.max_capture_s is None:
            return limit
        k = np.arange(limit + 1)
        fits = np.asarray(self.model.capture_s(k)) <= self.max_capture_s
        return int(k[fits].max()) if fits[1:].any() else 0

    def describe(self) -> str:
        said = [f"--max-capture-seconds {self.max_capture_s:g}" if self.max_capture_s is not None else "",
                f"--max-graph-memory {self.max_graph_mib:g}" if self.max_graph_mib is not None else ""]
        return " and ".join(x for x in said if x)


@dataclass(frozen=True)
class Windows:
    """Each graph-eligible batch's feasible bucket interval on a grid, and its costs."""

    lo: np.ndarray
    """[N] int64: first grid index with size >= n and capacity >= rows."""
    hi: np.ndarray
    """[N] int64: last grid index with size <= factor*n (hi >= lo)."""
    weight: np.ndarray
    """[N] int64: batch counts."""
    num_tokens: np.ndarray
    """[N] int64: n."""
    eager_ms: np.ndarray
    """[N] float64: weight * eager time (ms)."""
    unservable_eager_ms: float
    """Eager time of the batches no grid bucket can ever replay (ms)."""


def batch_windows(demand: Demand, sizes: np.ndarray, capacity: np.ndarray, cost: CostModel, factor: float) -> Windows:
    """Feasible windows of `demand` on sizes/capacity (capacity nondecreasing)."""
    n = demand.num_tokens
    lo, hi = replay_windows(n, demand.rows, sizes, capacity, factor)
    ok = demand.active & (lo <= hi) & (lo < len(sizes))
    eager = cost.eager_ms(n) * demand.counts
    return Windows(lo[ok], hi[ok], demand.counts[ok], n[ok], eager[ok], float(eager[~ok].sum()))


@dataclass(frozen=True)
class OptimalLists:
    """The best list for every bucket count up to the requested maximum."""

    buckets: dict[int, list[int]]
    """Count limit k → best list of at most k buckets (tokens, ascending); only feasible k."""
    cost_ms: dict[int, float]
    """Count limit k → modelled time of that list over the demand (ms)."""
    num_candidates: int
    """Candidate sizes the DP searched (`P` in the module doc)."""
    grid_size: int
    """Sizes on the grid before the exact reduction (above `DENSE_GRID_LIMIT` the sparse grid's:
    the sizes where the answer can change, `grid.sparse_grid`)."""
    bucket_multiple: int
    """Grid step (tokens); > 1 means the result is optimal on that coarser grid only."""
    max_tokens: int
    """Chunk size: the largest forward the lists are planned for (tokens)."""
    pinned: list[int] = field(default_factory=list)
    """Buckets every list contains."""
    graph_forwards: dict[int, int] = field(default_factory=dict)
    """Count limit k → forwards of the demand that list replays in graphs (count-weighted)."""
    forwards: int = 0
    """Forwards in the demand (count-weighted), CP-active or not."""
    max_bucket_tokens: int = 0
    """Largest bucket the grid allowed (tokens; `>= max_tokens` with headroom)."""
    gap_free: bool = False
    """Whether every list obeys the gap-free rule (module doc)."""
    servable_forwards: int = 0
    """Forwards some list could replay (CP-active, with a capturable bucket in their window):
    the coverage ceiling of any list, `servable_forwards / forwards`."""
    budget: Budget | None = None
    """The capture budgets the lists keep within (None: none)."""

    @property
    def ceiling(self) -> float:
        """Most coverage any list of any size reaches (forwards no list can replay, e.g. not
        CP-active, excluded)."""
        return self.servable_forwards / self.forwards if self.forwards else 0.0

    def best(self, max_buckets: int) -> list[int]:
        """The list for `max_buckets` (or the largest feasible limit below it). Raises
        `ConfigError` when no feasible list has at most `max_buckets` buckets."""
        feasible = [k for k in self.buckets if k <= max_buckets]
        if not feasible:
            if self.budget is not None and self.budget.describe():
                raise ConfigError(
                    f"{self.budget.describe()}: no list of at most {counted(max_buckets, 'bucket')} keeps within it and holds the "
                    f"{counted(len(self.pinned), 'pinned bucket')} and the required forwards (the full chunk with headroom, the floor "
                    "of small buckets): raise the budget, or lower the largest bucket needed (--no-headroom, --max-tokens, --min-bucket 0)"
                )
            raise ConfigError(
                f"max_buckets: no list of at most {counted(max_buckets, 'bucket')} holds the {counted(len(self.pinned), 'pinned bucket')} "
                "and the required forwards"
            )
        return self.buckets[max(feasible)]

    def coverage(self, max_buckets: int) -> float:
        """Fraction of forwards the list for `max_buckets` replays in graphs."""
        feasible = [k for k in self.buckets if k <= max_buckets]
        return self.graph_forwards[max(feasible)] / self.forwards if feasible and self.forwards else 0.0


@dataclass(frozen=True)
class FewestBuckets:
    """The fewest buckets that reach a coverage target (`fewest_for_coverage`)."""

    buckets: list[int]
    """The list (tokens, ascending): the best (coverage objective) list of `num_buckets` buckets."""
    num_buckets: int
    """Its length (the fewest that reach the target, or `max_buckets` when none does)."""
    coverage: float
    """Its fraction of forwards replayed in graphs."""
    target_coverage: float
    """The target asked for."""
    reached: bool
    """Whether `coverage >= target_coverage`."""
    optimal: OptimalLists
    """The best lists for 1..num_buckets buckets."""


def optimise(
    demand: Demand,
    cp: CPLayout,
    cost: CostModel,
    max_buckets: int,
    max_tokens: int,
    *,
    spec: CaptureSpec = CaptureSpec(),
    max_padding_factor: float = 2.0,
    bucket_multiple: int = 1,
    pinned: Sequence[int] = (),
    objective: str = "coverage",
    max_bucket_tokens: int | None = None,
    required: Sequence[tuple[int, int]] = (),
    allow_gaps: bool = False,
    budget: Budget | None = None,
) -> OptimalLists:
    """Best bucket lists of at most 1..`max_buckets` buckets for `demand` (aggregate it first).

    Exact over the grid of multiples of `bucket_multiple` up to `max_bucket_tokens` (default
    `max_tokens`, the chunk size; pass e.g. `floor(max_padding_factor * max_tokens)` to allow
    headroom buckets above the chunk). `objective="coverage"` (default): most forwards replayed
    in graphs, then least modelled time (exact lexicographic order, module doc);
    `objective="time"`: least modelled time alone (it may leave a batch eager where its padded
    replay would cost more). `required`: `(num_tokens, rows)` forwards every list must replay
    (e.g. `guarantee.headroom_required`); they are constraints, not demand. `allow_gaps=False`
    (default): gap-free lists (module doc). `budget`: capture budgets (exact: a list of k
    buckets may end only in a largest bucket within them). `cost_ms` is always the plain modelled time.

    Raises `ConfigError` for `max_buckets < 1`, an unknown objective, pinned buckets that exceed
    `max_buckets` or cannot be captured, `max_bucket_tokens < max_tokens`; `ModelError` when a
    required forward fits no bucket, nothing is replayable, or from the capture model."""
    return _optimise(demand, cp, cost, max_buckets, max_tokens, spec, max_padding_factor, bucket_multiple,
                     pinned, objective, max_bucket_tokens, required, allow_gaps, None, budget)


def fewest_for_coverage(
    demand: Demand,
    cp: CPLayout,
    cost: CostModel,
    target_coverage: float,
    max_tokens: int,
    *,
    max_buckets: int = 512,
    spec: CaptureSpec = CaptureSpec(),
    max_padding_factor: float = 2.0,
    bucket_multiple: int = 1,
    pinned: Sequence[int] = (),
    max_bucket_tokens: int | None = None,
    required: Sequence[tuple[int, int]] = (),
    allow_gaps: bool = False,
    budget: Budget | None = None,
) -> FewestBuckets:
    """The fewest buckets whose best list (coverage objective, same options as `optimise`)
    replays at least `target_coverage` of the forwards (count-weighted, as `Evaluation.coverage`).
    Exact: the DP's layer k holds the most coverage any list of k buckets reaches, so the first
    layer that reaches the target is the answer; the layers stop there. When no list of at most
    `max_buckets` reaches it, the best one is returned with `reached=False`.
    Raises `ConfigError` unless `0 < target_coverage <= 1`, when no list of any size is feasible
    (e.g. `budget` below the largest bucket the required forwards need), else as `optimise`."""
    if not 0 < target_coverage <= 1:
        raise ConfigError(f"target_coverage: must be in (0, 1], got {target_coverage!r}")
    need = int(np.ceil(target_coverage * int(demand.counts.sum()) - 1e-9))
    lists = _optimise(demand, cp, cost, max_buckets, max_tokens, spec, max_padding_factor, bucket_multiple,
                      pinned, "coverage", max_bucket_tokens, required, allow_gaps, need, budget)
    reached = [k for k in sorted(lists.buckets) if lists.graph_forwards[k] >= need]
    if not lists.buckets:  # no feasible list at all (e.g. a budget below the largest needed bucket)
        lists.best(max_buckets)  # raises its ConfigError
    k = reached[0] if reached else max(lists.buckets)
    best = lists.buckets[k]
    return FewestBuckets(best, len(best), lists.coverage(k), target_coverage, bool(reached), lists)


@dataclass(frozen=True)
class _Constraints:
    """Required windows and the gap rule on the grid."""

    lo: np.ndarray
    """[R] int64 grid index: required windows (pins included)."""
    hi: np.ndarray
    chunk: int
    """Grid index of the smallest size >= max_tokens."""
    gap_free: bool


def _optimise(demand: Demand, cp: CPLayout, cost: CostModel, max_buckets: int, max_tokens: int, spec: CaptureSpec,
              factor: float, bucket_multiple: int, pinned: Sequence[int], objective: str, max_bucket_tokens: int | None,
              required: Sequence[tuple[int, int]], allow_gaps: bool, need_graph: int | None, budget: Budget | None = None) -> OptimalLists:
    if max_buckets < 1:
        raise ConfigError(f"max_buckets: must be >= 1, got {max_buckets}")
    if budget is not None and budget.max_buckets(max_buckets) < 1:
        raise ConfigError(f"--max-capture-seconds {budget.max_capture_s:g}: below one bucket's capture "
                          f"({float(budget.model.capture_s(1)):.1f} s; {budget.model.source})")
    layer_cap = max_buckets if budget is None else budget.max_buckets(max_buckets)
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective: must be 'coverage' or 'time', got {objective!r}")
    top = max_tokens if max_bucket_tokens is None else int(max_bucket_tokens)
    if top < max_tokens:
        raise ConfigError(f"max_bucket_tokens: must be >= max_tokens {max_tokens}, got {top}")
    pins = sorted(set(cp.model.round_buckets(list(pinned)).tolist()))  # as SGLang captures them
    if dense_grid_size(top, bucket_multiple) <= DENSE_GRID_LIMIT:
        grid = candidate_grid(cp, spec, top, bucket_multiple, pins + [max_tokens])
    else:  # the same candidates without a size per token up to the limit
        req = np.asarray(list(required), dtype=np.int64).reshape(-1, 2)
        grid = sparse_grid(cp, spec, top, bucket_multiple, pins + [max_tokens],
                           np.concatenate([demand.num_tokens, req[:, 0]]), np.concatenate([demand.rows, req[:, 1]]),
                           factor, max_tokens, not allow_gaps)
    pin_index = np.searchsorted(grid.sizes, np.asarray(pins, dtype=np.int64))
    if pins and not np.array_equal(grid.sizes[np.minimum(pin_index, len(grid.sizes) - 1)], pins):
        least = cp.model.min_capture_tokens
        below = [p for p in pins if p < least]
        why = f"{', '.join(map(str, below))} (as captured) below {cp.model.min_capture_rule}={least}, which the CP capture drops" if below else \
            "a size the capture model cannot build"
        raise ConfigError(f"pinned buckets {pins}: {why}")
    if len(pins) > max_buckets:
        raise ConfigError(f"max_buckets: {counted(len(pins), 'pinned bucket')} exceed max_buckets {max_buckets}")
    w = batch_windows(demand, grid.sizes, grid.capacity_rows, cost, factor)
    rules = _constraints(grid, required, pin_index, max_tokens, factor, allow_gaps)
    cand = _candidates(w, grid, cost, rules, factor, objective, budget is not None)
    # a list never holds more buckets than there are candidates: no DP layer beyond that count
    problem, m_key = _problem(w, grid, cand, rules, cost, factor, objective, min(layer_cap, len(cand)))
    final_ok: dp.FinalRule | None = None
    if budget is not None:
        cand_sizes, cand_rows = grid.sizes[cand], grid.capacity_rows[cand]

        def final_ok(k: int) -> np.ndarray:  # state s ends in candidate s - 1; state 0 holds no bucket
            return np.concatenate([[False], budget.model.within(k, cand_sizes, cand_rows, budget.max_capture_s, budget.max_graph_mib)])
    stop: dp.StopRule | None = None
    if need_graph is not None and m_key is not None:
        total_w, key_m, need = int(w.weight.sum()), m_key, need_graph
        stop = lambda k, key: total_w - int(key) // key_m >= need  # noqa: E731
    monge = problem.dead.dtype == np.int64 or bool(np.all(problem.weight * problem.gamma[problem.hi] <= problem.dead))
    solution = dp.solve_monge(problem, stop, final_ok=final_ok) if monge else dp.solve_band(problem, final_ok)
    sizes = grid.sizes[cand]
    lists = {k: sizes[idx].tolist() for k, idx in solution.lists.items()}
    graph: dict[int, int] = {}
    times: dict[int, float] = {}
    for k, chosen in lists.items():
        graph[k], times[k] = _list_outcome(w, grid, chosen, cost)
    if lists and stop is None:  # limits above the candidate count: the same list as the largest feasible one
        top_k = max(lists)
        for k in range(top_k + 1, max_buckets + 1) if top_k == min(len(cand), layer_cap) else ():
            lists[k], graph[k], times[k] = lists[top_k], graph[top_k], times[top_k]
    forwards = int(demand.counts.sum())
    return OptimalLists(
        lists, {k: t + w.unservable_eager_ms for k, t in times.items()}, len(cand), len(grid.sizes),
        bucket_multiple, max_tokens, pins, graph, forwards, top, not allow_gaps, int(w.weight.sum()), budget,
    )


def _constraints(grid: CandidateGrid, required: Sequence[tuple[int, int]], pin_index: Int64Array, max_tokens: int,
                 factor: float, allow_gaps: bool) -> _Constraints:
    req = np.asarray(list(required), dtype=np.int64).reshape(-1, 2)
    if req.size and (np.any(req[:, 0] < 1) or np.any(req[:, 1] < 0)):
        raise ConfigError("required: each forward is (num_tokens >= 1, rows >= 0)")
    lo, hi = replay_windows(req[:, 0], req[:, 1], grid.sizes, grid.capacity_rows, factor)
    bad = np.flatnonzero((lo > hi) | (lo >= len(grid.sizes)))
    if bad.size:
        at = int(bad[0])
        n, rows = req[at]
        if lo[at] >= len(grid.sizes):  # no candidate has room: the grid stops too low
            raise ModelError(f"required forward of {n} tokens ({rows} CP-local rows) fits no capturable bucket up to "
                             f"{int(grid.sizes[-1])} tokens: raise --max-tokens (max_bucket_tokens)")
        # the first candidate with room is past the padding limit: the grid is too coarse there
        raise ModelError(f"required forward of {n} tokens ({rows} CP-local rows) fits no bucket within max_padding_factor {factor:g}: "
                         f"the smallest candidate with room is {int(grid.sizes[lo[at]])}; give a finer --bucket-multiple "
                         f"(now {grid.bucket_multiple}), a higher --min-bucket or a larger --max-padding-factor")
    chunk = int(np.searchsorted(grid.sizes, max_tokens, side="left"))
    if not allow_gaps and chunk >= len(grid.sizes):
        raise ModelError(f"no capturable bucket >= max_tokens {max_tokens}: a gap-free list cannot reach the chunk size")
    pin_index = np.asarray(pin_index, dtype=np.int64)
    return _Constraints(np.concatenate([lo, pin_index]), np.concatenate([hi, pin_index]), chunk, not allow_gaps)


def _candidates(w: Windows, grid: CandidateGrid, cost: CostModel, rules: _Constraints, factor: float, objective: str,
                budgeted: bool = False) -> np.ndarray:
    """Grid indices that provably contain an optimal list (module doc): every `lo` (batches and
    required windows), `hi + 1` of batches whose graph can cost more than eager (time objective
    only: under coverage a replay is never worse), the chunk size, one size no batch can replay
    in (a list must hold a bucket even when every replay would cost more than eager), and, for
    gap-free lists, the closure under `G`. With a budget also the smallest such size: a budget
    bounds the largest bucket, and a largest bucket that replays nothing is either dropped or,
    alone, the cheapest that replays nothing. Sorted, unique."""
    sizes, m = grid.sizes, len(grid.sizes)
    parts = [w.lo, rules.lo, [min(rules.chunk, m - 1)]]
    if objective == "time":
        bad = cost.graph_ms(sizes[w.hi]) > cost.eager_ms(w.num_tokens)
        above = w.hi[bad] + 1
        parts.append(above[above < m])
    covered = np.cumsum(np.bincount(w.lo, minlength=m + 1) - np.bincount(w.hi + 1, minlength=m + 1))[:m]
    uncovered = np.flatnonzero(covered == 0)
    parts.append(uncovered[-1:])
    if budgeted:
        parts.append(uncovered[:1])
    cand = sorted_unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))
    if rules.gap_free:
        reach = (sizes + 1) * float(factor)  # [M] largest bucket the next one may be
        lowest = np.searchsorted(reach, sizes, side="left")  # [M] G: lowest admissible predecessor
        chosen = np.zeros(m, dtype=bool)
        chosen[cand] = True
        frontier = cand
        while frontier.size:  # each step touches only the new candidates (a factor of 1 chains every size)
            low = sorted_unique(lowest[frontier])
            low = low[(low < rules.chunk) & ~chosen[low]]
            chosen[low] = True
            frontier = low
        cand = np.flatnonzero(chosen)
    return cand


def _problem(w: Windows, grid: CandidateGrid, cand: Int64Array, rules: _Constraints, cost: CostModel, factor: float,
             objective: str, max_buckets: int) -> tuple[dp.Problem, int | None]:
    """The `dp.Problem` on the candidates, and the key's `M` (coverage) or None."""
    sizes = grid.sizes[cand]
    m = len(cand)
    order = np.argsort(w.lo, kind="stable")
    lo = np.searchsorted(cand, w.lo[order])  # every lo is a candidate
    hi = replay_window_hi(sizes, w.num_tokens[order], factor)
    weight, n = w.weight[order], w.num_tokens[order]
    if objective == "coverage":
        key_m = int((weight * sizes[hi]).sum()) + 1
        m_key: int | None = key_m
        if (int(weight.sum()) + 1) * key_m < _KEY_LIMIT:
            dead, gamma = weight * key_m + weight * n, sizes.astype(np.int64)
        else:  # too large for exact int64 keys: the same order in float64 (ties may round)
            dead, gamma, m_key = (weight * float(key_m) + weight * n).astype(np.float64), sizes.astype(np.float64), None
    else:
        m_key = None
        dead, gamma = w.eager_ms[order], np.asarray(cost.graph_ms(sizes), dtype=np.float64)
    r_lo = np.searchsorted(cand, rules.lo)
    r_hi = np.searchsorted(cand, rules.hi, side="right") - 1
    floor = np.zeros(m + 1, dtype=np.int64)  # transition into b needs state > lo of a window ending before b
    np.maximum.at(floor, r_hi + 1, r_lo + 1)
    floor = np.maximum.accumulate(floor)[:m]
    lower = np.maximum(floor, 1)
    final_floor = int(r_lo.max()) + 1 if r_lo.size else 1
    if rules.gap_free:
        chunk = int(np.searchsorted(cand, rules.chunk))
        reach = (sizes + 1) * float(factor)
        lower = np.maximum(lower, 1 + np.minimum(chunk, np.searchsorted(reach, sizes, side="left")))
        final_floor = max(final_floor, chunk + 1)
    problem = dp.Problem(lo, hi, weight, dead, gamma, lower, floor == 0, final_floor, max_buckets)
    return problem, m_key


def _list_outcome(w: Windows, grid: CandidateGrid, chosen: list[int], cost: CostModel) -> tuple[int, float]:
    """(graph forwards, modelled ms) of the windowed batches under `chosen` (bucket sizes)."""
    idx = np.searchsorted(grid.sizes, np.asarray(chosen, dtype=np.int64))
    first = np.searchsorted(idx, w.lo, side="left")
    at = idx[np.minimum(first, len(idx) - 1)]
    graph = (first < len(idx)) & (at <= w.hi)
    ms = np.where(graph, cost.graph_ms(grid.sizes[at]) * w.weight, w.eager_ms)
    return int(w.weight[graph].sum()), float(ms.sum())
