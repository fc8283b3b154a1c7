"""The layered DP behind the exact optimiser (`optimise.py`), in two exact solvers.

Problem (candidate indices `0..m-1`, ascending sizes). Item `i` (an aggregated batch) has a
window `[lo_i, hi_i]` of candidates; with chosen buckets `b_1 < ... < b_k` it is replayed in
`succ(lo_i)` (the first chosen bucket `>= lo_i`) when that is `<= hi_i`, at value
`w_i * gamma[b]`, else it costs its eager value `e_i`. A *state* `s` means "the last chosen
bucket is `s - 1`" (`s = 0`: none yet). Choosing bucket `b` after state `a <= b` settles the
items with `lo` in `[a, b]`:

    tcost(a, b) = sum_{a <= lo_i <= b} (w_i * gamma[b] if hi_i >= b else e_i)
    dp_j[b + 1] = min_{lower[b] <= a <= b} dp_{j-1}[a] + tcost(a, b)        (j >= 2)
    dp_1[b + 1] = tcost(0, b)  where first_ok[b]

plus the eager value of the items above the last bucket. `lower` is nondecreasing (required
intervals, pinned buckets and the gap-free rule all bound how far back the previous bucket may
lie), as is the final floor on the last state.

`solve_monge`: when every item's value is nondecreasing in `b` (`w_i * gamma[hi_i] <= e_i`:
always true under the coverage objective's lexicographic key), `tcost` is Monge: for
`a < a'`, `b < b'`, `tcost(a, b') + tcost(a', b) - tcost(a, b) - tcost(a', b')` is the sum,
over the items with `lo` in `[a, a')`, of `value(b') - value(b) >= 0`. Adding `dp_{j-1}[a]`
(a per-column constant, also for infeasible states, which hold an exact sentinel) keeps it
Monge, so the largest minimising `a` is nondecreasing in `b` (also under the monotone `lower`
bound: rows with no admissible column split the recursion at `clip(b)`, which bounds both
sides' optima correctly). Each layer is one divide and conquer over rows, vectorised level by
level (each level evaluates every row's column range at once, O(m) work per level, ~log2(m)
levels; `transition_costs.py` evaluates `tcost` for a whole level at once). Integer keys stay
exact (int64); the time objective uses float64.

`solve_band`: the general case (time objective, where a padded replay can cost more than
eager, so `tcost` is not Monge): for each `b` the states split into those below the first
item that is still replayable at `b` (one running minimum) and the band above it, scanned for
all layers at once: `O(K * sum of band lengths)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from cpbcg.planner.arrays import Int32Array, Int64Array
from cpbcg.planner.optimise import transition_costs
from cpbcg.planner.optimise.transition_costs import AnchorRows, Prefix, Problem, ZoneRows

__all__ = ["Problem", "Solution", "solve_band", "solve_monge"]


StopRule = Callable[[int, "float | int"], bool]
"""`stop(k, key)`: whether to end the layers after `k` buckets whose best objective is `key`."""
FinalRule = Callable[[int], np.ndarray]
"""`final_ok(k)`: [m+1] bool, whether a list of `k` buckets may end in each state (budgets that
depend only on the count and the largest bucket: capture time, graph memory)."""


@dataclass(frozen=True)
class Solution:
    """Best list of at most k buckets, for each feasible k."""

    lists: dict[int, Int64Array]
    """k -> candidate indices, ascending."""
    keys: dict[int, float | int]
    """k -> objective value of that list."""


class _Monge:
    """Divide and conquer per layer (module doc), over one of two `tcost` evaluators: `ZoneRows`
    when its table fits in `ZONE_TABLE_LIMIT` values, else `AnchorRows`."""

    def __init__(self, p: Problem, step: int):
        self.p = p
        self.pre = Prefix(p)
        self.rows = ZoneRows.build(p, self.pre, transition_costs.ZONE_TABLE_LIMIT) or AnchorRows(p, self.pre, step)

    def first_layer(self) -> np.ndarray:
        p, m = self.p, self.p.m
        dp = np.full(m + 1, p.inf, dtype=p.dead.dtype)
        cost = self.pre.tcost(np.zeros(m, np.int64), np.arange(m), p.gamma)
        dp[1:] = np.where(p.first_ok, cost, p.inf)
        return dp

    def layer(self, dp_prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One layer: rows `b` are split level by level; each level evaluates all its rows."""
        p, m, inf = self.p, self.p.m, self.p.inf
        dp = np.full(m + 1, inf, dtype=dp_prev.dtype)
        arg = np.zeros(m + 1, dtype=np.int32)
        r1, r2 = np.zeros(1, np.int64), np.full(1, m - 1, np.int64)
        c1, c2 = np.ones(1, np.int64), np.full(1, m - 1, np.int64)
        while r1.size:
            mid = (r1 + r2) >> 1
            left_col, right_col = np.maximum(c1, p.lower[mid]), np.minimum(c2, mid)
            opt = np.clip(mid, c1, c2)  # where a row has no column: any split point works
            val = np.full(len(mid), inf, dtype=dp.dtype)
            ok = left_col <= right_col
            if ok.any():
                opt[ok], val[ok] = self.rows(dp_prev, mid[ok], left_col[ok], right_col[ok])
            dp[mid + 1], arg[mid + 1] = np.minimum(val, inf), opt
            go_left, go_right = r1 < mid, mid < r2
            r1, r2, c1, c2 = (
                np.concatenate([r1[go_left], mid[go_right] + 1]),
                np.concatenate([mid[go_left] - 1, r2[go_right]]),
                np.concatenate([c1[go_left], opt[go_right]]),
                np.concatenate([opt[go_left], c2[go_right]]),
            )
        return dp, arg


def solve_monge(p: Problem, stop: StopRule | None = None, step: int | None = None, final_ok: FinalRule | None = None) -> Solution:
    """Exact for Monge instances (module doc). `stop(k, key)` may end the layers early; `step`
    is the anchor spacing (default `ANCHOR_STEP`; any value >= 1 gives the same result);
    `final_ok` bounds the last state of a list of each size (exact: every layer's states are
    kept, the bound only filters which end a list)."""
    solver = _Monge(p, step or transition_costs.ANCHOR_STEP)
    dp = solver.first_layer()
    layers, args = [dp], [np.zeros(p.m + 1, np.int32)]
    for _ in range(2, p.max_buckets + 1):
        if stop is not None and _stop(p, layers, stop, solver.pre, final_ok):
            break
        dp, arg = solver.layer(dp)
        layers.append(dp)
        args.append(arg)
    return _collect(p, layers, args, solver.pre, final_ok)


def _stop(p: Problem, layers: list[np.ndarray], stop: StopRule, pre: Prefix, final_ok: FinalRule | None) -> bool:
    tail = pre.e_total - pre.e_below
    total = layers[-1] + tail
    total[: p.final_floor] = p.inf
    if final_ok is not None:
        total[~final_ok(len(layers))] = p.inf
    return bool(stop(len(layers), total.min()))


def _collect(p: Problem, layers: list[np.ndarray], args: list[Int32Array], pre: Prefix, final_ok: FinalRule | None = None) -> Solution:
    tail = pre.e_total - pre.e_below  # [m+1] eager value of the items with lo >= state
    lists: dict[int, Int64Array] = {}
    keys: dict[int, float | int] = {}
    best_j, best_s = -1, -1
    best: float | int | None = None
    for j, dp in enumerate(layers, start=1):
        total = dp + tail
        total[: p.final_floor] = p.inf
        total[0] = p.inf
        if final_ok is not None:
            total[~final_ok(j)] = p.inf
        s = int(np.argmin(total))
        if total[s] < p.inf and (best is None or total[s] < best):
            best_j, best_s, best = j, s, total[s].item()
        if best_j >= 0:
            lists[j] = _walk(args, best_j, best_s)
            assert best is not None  # set with best_j
            keys[j] = best
    return Solution(lists, keys)


def _walk(args: list[Int32Array], j: int, s: int) -> Int64Array:
    chosen: list[int] = []
    while s > 0:
        chosen.append(s - 1)
        s, j = int(args[j - 1][s]), j - 1
    return np.asarray(chosen[::-1], dtype=np.int64)


def solve_band(p: Problem, final_ok: FinalRule | None = None) -> Solution:
    """Exact for any instance (module doc); float64 values. With `C(b) = tcost(a, b) + e_below[a]`
    for `a <= band_lo[b]`, a state `a` above `band_lo[b]` adds `sum (e_i - w_i gamma[b])` over the
    items live at `b` with `lo < a` (they are settled before `b` and run eagerly)."""
    pre = Prefix(p)
    m, k = p.m, p.max_buckets
    dp = np.full((k, m + 1), np.inf)
    arg = np.zeros((k, m + 1), dtype=np.int32)
    dp[0, 1:] = np.where(p.first_ok, pre.tcost(np.zeros(m, np.int64), np.arange(m), p.gamma), np.inf)
    g = dp - pre.e_below  # [k, m+1]
    rows = np.arange(k - 1)
    run = _RunningMin(k - 1)
    for b in range(m if k > 1 else 0):
        start, band_from = max(int(p.lower[b]), 1), int(pre.band_lo[b]) + 1
        if start > b:
            continue
        # states in [start, band_lo[b]] need no correction: one running minimum over them
        best, best_arg = run.over(g[:-1], start, min(band_from - 1, b), rows)
        lo_band = max(band_from, start)
        if lo_band <= b:
            corr = _band(p, b, band_from)
            val, at = _block_min(g[:-1, lo_band : b + 1] + corr[lo_band - band_from :], rows, lo_band)
            take = val <= best
            best, best_arg = np.where(take, val, best), np.where(take, at, best_arg)
        const = pre.e_dead[b] + p.gamma[b] * pre.w_live[b]
        dp[1:, b + 1] = best + const
        arg[1:, b + 1] = best_arg
        g[1:, b + 1] = dp[1:, b + 1] - pre.e_below[b + 1]
    return _collect(p, list(dp), [np.zeros(m + 1, np.int32)] + list(arg[1:]), pre, final_ok)


class _RunningMin:
    """Minimum over the states `[start, end]` of a table, for windows whose ends never decrease:
    extended incrementally, recomputed when the start moves."""

    def __init__(self, k: int):
        self.start, self.end = -1, -1
        self.val, self.arg = np.full(k, np.inf), np.zeros(k, dtype=np.int64)

    def over(self, table: np.ndarray, start: int, end: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if end < start:
            return np.full(len(rows), np.inf), np.zeros(len(rows), dtype=np.int64)
        if start != self.start or end < self.end:
            self.start, self.end = start, start - 1
            self.val, self.arg = np.full(len(rows), np.inf), np.zeros(len(rows), dtype=np.int64)
        if end > self.end:
            val, at = _block_min(table[:, self.end + 1 : end + 1], rows, self.end + 1)
            take = val <= self.val
            self.val, self.arg = np.where(take, val, self.val), np.where(take, at, self.arg)
            self.end = end
        return self.val, self.arg


def _block_min(block: np.ndarray, rows: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: min and an argmin (as a state) of `block` whose column 0 is state `first`."""
    at = np.argmin(block, axis=1)
    return block[rows, at], at + first


def _band(p: Problem, b: int, band_from: int) -> np.ndarray:
    """[b - band_from + 1] correction of states `band_from..b` (see `solve_band`)."""
    band_lo = band_from - 1
    i0, i1 = np.searchsorted(p.lo, band_lo, side="left"), np.searchsorted(p.lo, b - 1, side="right")
    n = b - band_lo
    lo, hi = p.lo[i0:i1], p.hi[i0:i1]
    delta = np.where(hi >= b, p.dead[i0:i1] - p.weight[i0:i1] * p.gamma[b], 0.0)
    return np.cumsum(np.bincount(lo - band_lo, weights=delta, minlength=n)[:n])
