"""Exact bucket-list optimiser: the list of at most K buckets with the least modelled prefill time
under the runtime selector (domain §4) and the linear cost model (`cost.py`).

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

DP. With chosen buckets `b_1 < ... < b_k`, batch `i` belongs to the gap `(b_{j-1}, b_j]` that
holds `lo_i`, so `cost = sum_j cost(b_{j-1}, b_j) + eager tail`, with
`cost(a, b) = sum_{a < lo_i <= b} (w_i*(g + t*B_b) if hi_i >= b else E_i)`. Per layer `j`:
`dp_j[b] = E(<=b) + min_a (dp_{j-1}[a] - E(<=a) + S_b(a))`, where `S_b(a)` sums the graph-minus-
eager cost of the batches *active* at `b` (`lo_i <= b <= hi_i`) with `lo_i > a`. For `a` below
the first active `lo` it is constant (a running minimum), so only the band of `a` between the
first active `lo` and `b` is scanned, vectorised over all K layers at once. Because the graph
can cost more than eager, `cost(a, b)` is not Monge, so no SMAWK/divide-and-conquer shortcut is
exact; the band scan is `O(K * sum_b band(b))` (see benchmarks/bench_optimise.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.capacity import CaptureLayout, CaptureSpec, capture_pieces
from cpbcg.planner.cost import CostModel
from cpbcg.planner.evaluate import Demand
from cpbcg.planner.layout import BatchSet, CPLayout, CPStrategy, local_rows


@dataclass(frozen=True)
class CandidateGrid:
    """Bucket sizes the optimiser may choose from, with their capacities."""

    sizes: np.ndarray
    """[M] int64 ascending: capturable bucket sizes (tokens)."""
    capacity_rows: np.ndarray
    """[M] int64 nondecreasing: `C(B)` of each size (rows per rank)."""
    bucket_multiple: int
    """Grid step (tokens); 1 = every size, exact."""
    max_tokens: int
    """Largest size on the grid (pinned buckets may exceed it)."""


def candidate_grid(
    cp: CPLayout, spec: CaptureSpec, max_tokens: int, bucket_multiple: int = 1, pinned: Sequence[int] = ()
) -> CandidateGrid:
    """Multiples of `bucket_multiple` up to `max_tokens`, plus `max_tokens` and `pinned`, keeping
    capturable sizes (`>= 2*cp_size` under zigzag; context-bounded capture possible).

    Raises `ConfigError` for a bad limit, `ModelError` if nothing is capturable or capacity is
    not monotone (impossible for the capture model; see module doc)."""
    if max_tokens < 1 or bucket_multiple < 1:
        raise ConfigError(f"max_tokens and bucket_multiple must be >= 1 (got {max_tokens}, {bucket_multiple})")
    smallest = 2 * cp.cp_size if cp.cp_size > 1 and cp.strategy is CPStrategy.zigzag else 1
    sizes = np.arange(bucket_multiple, max_tokens + 1, bucket_multiple, dtype=np.int64)
    sizes = np.unique(np.concatenate([sizes, [max_tokens], np.asarray(pinned, dtype=np.int64)]))
    sizes = sizes[sizes >= smallest]
    sizes, capacity = _capacities(sizes, cp, spec)
    if sizes.size == 0:
        raise ModelError(f"no bucket size up to {max_tokens} is capturable (cp_size {cp.cp_size})")
    if np.any(np.diff(capacity) < 0):
        at = int(np.flatnonzero(np.diff(capacity) < 0)[0])
        raise ModelError(f"local capacity is not monotone: C({sizes[at]})={capacity[at]} > C({sizes[at + 1]})={capacity[at + 1]}")
    return CandidateGrid(sizes, capacity, bucket_multiple, max_tokens)


def _capacities(sizes: np.ndarray, cp: CPLayout, spec: CaptureSpec) -> tuple[np.ndarray, np.ndarray]:
    if spec.layout is CaptureLayout.single_request:
        single = BatchSet(sizes, np.arange(len(sizes) + 1, dtype=np.int64))
        return sizes, local_rows(single, cp)
    kept, pieces = [], []
    for size in sizes.tolist():
        try:
            pieces.append(capture_pieces(size, cp, spec))
            kept.append(size)
        except ModelError:
            continue
    if not kept:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.asarray(kept, dtype=np.int64), local_rows(BatchSet.from_lists(pieces), cp)


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
    fixed_eager_ms: float
    """Eager time of the batches no grid bucket can ever replay (ms)."""


def batch_windows(demand: Demand, sizes: np.ndarray, capacity: np.ndarray, cost: CostModel, factor: float) -> Windows:
    """Feasible windows of `demand` on sizes/capacity (capacity nondecreasing). The `hi` bound uses
    the selector's own float comparison `B <= n * factor`."""
    n, rows = demand.num_tokens, demand.rows
    lo = np.maximum(np.searchsorted(sizes, n, side="left"), np.searchsorted(capacity, rows, side="left"))
    hi = np.searchsorted(sizes, n * float(factor), side="right") - 1
    ok = demand.active & (lo <= hi) & (lo < len(sizes))
    eager = cost.eager_ms(n) * demand.counts
    return Windows(lo[ok], hi[ok], demand.counts[ok], n[ok], eager[ok], float(eager[~ok].sum()))


def exact_candidates(
    w: Windows, sizes: np.ndarray, cost: CostModel, pinned_index: np.ndarray, eager_penalty_ms: float = 0.0
) -> np.ndarray:
    """Grid indices that provably contain an optimal list (module doc): every `lo`, `hi + 1` of
    batches whose graph can cost more than eager, the pinned buckets, and one size no batch can
    replay in (if any: a list must hold a bucket even when every replay would cost more than
    eager). Sorted, unique."""
    bad = cost.graph_ms(sizes[w.hi]) > cost.eager_ms(w.num_tokens) + eager_penalty_ms
    above = w.hi[bad] + 1
    m = len(sizes)
    covered = np.cumsum(np.bincount(w.lo, minlength=m + 1) - np.bincount(w.hi + 1, minlength=m + 1))[:m]
    idle = np.flatnonzero(covered == 0)[-1:]  # a bucket that replays nothing: a list's cheapest filler
    return np.unique(np.concatenate([w.lo, above[above < m], pinned_index, idle]))


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
    """Sizes on the grid before the exact reduction."""
    bucket_multiple: int
    """Grid step (tokens); > 1 means the result is optimal on that coarser grid only."""
    max_tokens: int
    """Largest bucket allowed (pinned buckets aside)."""
    pinned: list[int] = field(default_factory=list)
    """Buckets every list contains."""

    def best(self, max_buckets: int) -> list[int]:
        """The list for `max_buckets` (or the largest feasible limit below it)."""
        feasible = [k for k in self.buckets if k <= max_buckets]
        if not feasible:
            raise ConfigError(f"no list of at most {max_buckets} buckets holds the {len(self.pinned)} pinned buckets")
        return self.buckets[max(feasible)]


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
) -> OptimalLists:
    """Best bucket lists of at most 1..`max_buckets` buckets for `demand` (aggregate it first).

    Exact over the grid of multiples of `bucket_multiple` up to `max_tokens` (see module doc).
    `objective="time"` minimises modelled time alone, so it may leave a batch eager where its
    graph replay would cost more than eager. `objective="coverage"` (the default) first
    maximises the forwards replayed in graphs, then minimises modelled time among those lists:
    every eager forward is charged a penalty larger than any possible time difference, which
    keeps the DP exact (lexicographic order). `cost_ms` is always the plain modelled time.
    Raises `ConfigError` if `max_buckets < 1` or the pinned buckets alone exceed it or are not
    capturable, `ModelError` from the capture model."""
    if max_buckets < 1:
        raise ConfigError(f"--max-buckets must be >= 1, got {max_buckets}")
    grid = candidate_grid(cp, spec, max_tokens, bucket_multiple, pinned)
    pin_index = np.searchsorted(grid.sizes, np.unique(np.asarray(pinned, dtype=np.int64)))
    if len(pin_index) and not np.array_equal(grid.sizes[np.minimum(pin_index, len(grid.sizes) - 1)], np.unique(pinned)):
        raise ConfigError(f"pinned buckets {sorted(set(pinned))} include a size that cannot be captured")
    if len(pin_index) > max_buckets:
        raise ConfigError(f"{len(pin_index)} pinned buckets exceed --max-buckets {max_buckets}")
    if objective not in ("coverage", "time"):
        raise ConfigError(f"objective must be 'coverage' or 'time', got {objective!r}")
    w = batch_windows(demand, grid.sizes, grid.capacity_rows, cost, max_padding_factor)
    penalty = _coverage_penalty_ms(w, grid.sizes, cost) if objective == "coverage" else 0.0
    cand = exact_candidates(w, grid.sizes, cost, pin_index, penalty)
    w = replace(w, eager_ms=w.eager_ms + penalty * w.weight)
    if cand.size == 0:
        raise ModelError(f"no CP-active batch fits any bucket up to {max_tokens} tokens; nothing to optimise")
    sizes = grid.sizes[cand]
    lo = np.searchsorted(cand, w.lo)  # lo is a candidate itself
    hi = np.searchsorted(sizes, w.num_tokens * float(max_padding_factor), side="right") - 1
    pins = np.searchsorted(cand, pin_index)
    solver = _Solver(lo, hi, w, sizes, cost, pins, max_buckets)
    lists, costs = solver.solve()
    if penalty:  # report the plain modelled time of each list
        costs = {k: _windows_cost_ms(w, lo, hi, idx, sizes, cost, penalty) for k, idx in lists.items()}
    return OptimalLists(
        {k: sizes[idx].tolist() for k, idx in lists.items()},
        {k: c + w.fixed_eager_ms for k, c in costs.items()},
        len(cand), len(grid.sizes), bucket_multiple, max_tokens, sorted({int(p) for p in pinned}),
    )


def _coverage_penalty_ms(w: Windows, sizes: np.ndarray, cost: CostModel) -> float:
    """A per-forward eager penalty above any difference in modelled time between two lists:
    the total time of every batch at its slowest (eager or the largest bucket), plus one."""
    slowest = np.maximum(w.eager_ms, cost.graph_ms(sizes[-1]) * w.weight) if len(sizes) else w.eager_ms
    return 2.0 * float(slowest.sum()) + 1.0


def _windows_cost_ms(w: Windows, lo, hi, chosen: np.ndarray, sizes: np.ndarray, cost: CostModel, penalty: float) -> float:
    """Plain modelled time (ms) of the batches in `w` under the list `chosen` (candidate indices):
    each batch replays in the first chosen bucket at or above `lo` if it is within `hi`."""
    first = np.searchsorted(chosen, lo, side="left")
    at = chosen[np.minimum(first, len(chosen) - 1)]
    graph = (first < len(chosen)) & (at <= hi)
    eager = w.eager_ms - penalty * w.weight
    return float(np.where(graph, cost.graph_ms(sizes[at]) * w.weight, eager).sum())


class _Solver:
    """The layered DP of the module doc over candidate indices 0..m-1; state s = last bucket + 1."""

    def __init__(self, lo, hi, w: Windows, sizes, cost: CostModel, pins, max_buckets: int):
        order = np.argsort(lo, kind="stable")
        self.lo, self.hi = lo[order], hi[order]
        self.weight, self.eager = w.weight[order].astype(np.float64), w.eager_ms[order]
        self.sizes, self.cost, self.k = sizes, cost, max_buckets
        m = len(sizes)
        self.m = m
        self.e_pre = np.zeros(m + 1)
        self.e_pre[1:] = np.cumsum(np.bincount(self.lo, weights=self.eager, minlength=m))
        self.first_active = np.searchsorted(np.maximum.accumulate(self.hi), np.arange(m), side="left")
        self.last_le = np.searchsorted(self.lo, np.arange(m), side="right")
        is_pin = np.zeros(m, dtype=bool)
        is_pin[pins] = True
        self.is_pin = is_pin
        last_pin = np.maximum.accumulate(np.where(is_pin, np.arange(m), -1))
        # floor_state[b]: smallest state a transition into b may come from (no pin skipped)
        self.floor_state = np.concatenate([[0], last_pin[:-1] + 1])
        self.final_floor = int(last_pin[-1] + 1) if m else 0

    def solve(self) -> tuple[dict[int, np.ndarray], dict[int, float]]:
        k, m = self.k, self.m
        dp = np.full((k + 1, m + 1), np.inf)
        dp[0, 0] = 0.0
        arg = np.zeros((k + 1, m + 1), dtype=np.int32)
        g = np.full((k + 1, m + 1), np.inf)  # dp - e_pre, per state
        run_min = np.full((k + 1, m + 1), np.inf)
        run_arg = np.zeros((k + 1, m + 1), dtype=np.int32)
        g[:, 0] = dp[:, 0]
        run_min[:, 0], run_arg[:, 0] = g[:, 0], 0
        rows = np.arange(k)
        for b in range(m):
            band_from, s_band, s_total = self._band(b)
            floor = self.floor_state[b]
            best = np.full(k, np.inf)
            best_arg = np.zeros(k, dtype=np.int64)
            upper = min(band_from - 1, b)
            if upper >= floor:
                best = run_min[:k, upper] + s_total
                best_arg = run_arg[:k, upper].astype(np.int64)
            start = max(band_from, floor)
            if start <= b:
                block = g[:k, start : b + 1] + s_band[start - band_from :]
                pos = np.argmin(block, axis=1)
                val = block[rows, pos]
                take = val < best
                best = np.where(take, val, best)
                best_arg = np.where(take, pos + start, best_arg)
            s = b + 1
            dp[1:, s] = best + self.e_pre[s]
            arg[1:, s] = best_arg
            g[:, s] = dp[:, s] - self.e_pre[s]
            if self.is_pin[b]:
                run_min[:, s], run_arg[:, s] = g[:, s], s
            else:
                prev = run_min[:, s - 1]
                take = g[:, s] < prev
                run_min[:, s] = np.where(take, g[:, s], prev)
                run_arg[:, s] = np.where(take, s, run_arg[:, s - 1])
        return self._lists(dp, arg)

    def _band(self, b: int) -> tuple[int, np.ndarray, float]:
        """First state of the band of `b`, `S_b` over states band_from..b, and `S_b` below it."""
        i0, i1 = int(self.first_active[b]), int(self.last_le[b])
        if i0 >= i1:
            return b + 1, np.zeros(0), 0.0
        active = self.hi[i0:i1] >= b
        lo = self.lo[i0:i1][active]
        delta = self.weight[i0:i1][active] * float(self.cost.graph_ms(self.sizes[b])) - self.eager[i0:i1][active]
        first = int(lo[0])
        binned = np.bincount(lo - first, weights=delta, minlength=b - first + 1)
        suffix = np.cumsum(binned[::-1])[::-1]
        # state s (= last bucket + 1) sees the batches with lo >= s
        return first + 1, suffix[1:], float(suffix[0])

    def _lists(self, dp, arg) -> tuple[dict[int, np.ndarray], dict[int, float]]:
        tail = self.e_pre[-1] - self.e_pre  # eager cost of batches with lo >= state
        total = dp + tail
        total[:, : self.final_floor] = np.inf
        lists, costs = {}, {}
        best_j, best_s, best_cost = -1, -1, np.inf
        for j in range(1, self.k + 1):
            s = int(np.argmin(total[j]))
            if total[j, s] < best_cost:
                best_j, best_s, best_cost = j, s, float(total[j, s])
            if j >= 1 and best_j >= 0:
                lists[j] = self._walk(arg, best_j, best_s)
                costs[j] = best_cost
        return lists, costs

    def _walk(self, arg, j: int, s: int) -> np.ndarray:
        chosen = []
        while s > 0:
            chosen.append(s - 1)
            s, j = int(arg[j, s]), j - 1
        return np.asarray(chosen[::-1], dtype=np.int64)
