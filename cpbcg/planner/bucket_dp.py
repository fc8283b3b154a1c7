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
levels). Two evaluators of `tcost(a, b)`, same answers:

* `_ZoneRows` (used when its table is small, as on every trace tried): O(1) per pair from
  three zones of states. At or below `band_lo[b]` no item with `lo < a` is live at `b`
  (prefix sums over states); above `dead_lo[b]`, the largest `lo` of an item dead at `b`, every
  item from `a` on is live (`gamma[b]` times a weight prefix sum); in between, where dead and
  live items interleave (nested windows: a small forward pushed up by its rows), a table built
  once. On the 1M-forward benchmark the table holds 32k values for 16k candidates.
* `_AnchorRows` (the general fallback): a row's `tcost(a, b)` comes from one anchor `x` with
  known `tcost(x, b)` plus a prefix sum over the items with `lo` between `x` and `a`. Anchors:
  any `x <= band_lo[b]`, `x = b + 1` (zero), or a multiple of `ANCHOR_STEP`, read from a table
  of `tcost(x, b)` for the `b` whose band starts below `x` (about `sum of band lengths /
  ANCHOR_STEP` values).

Integer keys stay exact (int64); the time objective uses float64.

`solve_band`: the general case (time objective, where a padded replay can cost more than
eager, so `tcost` is not Monge): for each `b` the states split into those below the first
item that is still replayable at `b` (one running minimum) and the band above it, scanned for
all layers at once: `O(K * sum of band lengths)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ZONE_TABLE_LIMIT = 1 << 22
"""Largest zone table (values, and item-state pairs to build it) before the anchor evaluator
takes over: about 32 MiB of int64 (`_ZoneRows`)."""
ANCHOR_STEP = 32
"""Spacing of the anchor table's rows (candidates): memory ~ sum(band) / step, extra work per
row ~ step / 2 items."""
INT_INF = np.int64(1) << np.int64(62)
"""Infeasible-state sentinel of the int64 key (keys are checked to stay below 2**61)."""


@dataclass(frozen=True)
class Problem:
    """One layered DP instance (see module doc); all arrays indexed as stated."""

    lo: np.ndarray
    """[N] int64 sorted: first candidate of each item's window."""
    hi: np.ndarray
    """[N] int64: last candidate of each window (>= lo)."""
    weight: np.ndarray
    """[N] int64: forwards of each item."""
    dead: np.ndarray
    """[N] int64 or float64: eager value `e_i` (objective units)."""
    gamma: np.ndarray
    """[m] same dtype as `dead`: graph value per forward of each candidate."""
    lower: np.ndarray
    """[m] int64 nondecreasing: smallest state a transition into `b` may come from (>= 1)."""
    first_ok: np.ndarray
    """[m] bool: whether `b` may be the first bucket."""
    final_floor: int
    """Smallest allowed final state."""
    max_buckets: int
    """Layers K."""

    @property
    def m(self) -> int:
        return len(self.gamma)

    @property
    def inf(self):
        return INT_INF if self.dead.dtype == np.int64 else np.inf


@dataclass(frozen=True)
class Solution:
    """Best list of at most k buckets, for each feasible k."""

    lists: dict[int, np.ndarray]
    """k -> candidate indices, ascending."""
    keys: dict[int, float | int]
    """k -> objective value of that list."""


class _Prefix:
    """Prefix sums over states: `tcost(x, b)` in O(1) when every item with `lo < x` is dead at `b`."""

    def __init__(self, p: Problem):
        m, lo, hi, dtype = p.m, p.lo, p.hi, p.dead.dtype
        self.pos = np.searchsorted(lo, np.arange(m + 1), side="left")  # [m+1] first item with lo >= s
        e_lo = _cumsum0(p.dead)
        self.e_below = e_lo[self.pos]  # [m+1] sum of e over lo < s
        by_hi = np.argsort(hi, kind="stable")
        below_hi = np.searchsorted(hi[by_hi], np.arange(m), side="left")  # [m] items with hi < b
        self.e_dead = _cumsum0(p.dead[by_hi])[below_hi]  # [m] sum of e over hi < b
        self.w_live = _cumsum0(p.weight)[self.pos[1:]] - _cumsum0(p.weight[by_hi])[below_hi]
        self.e_total = e_lo[-1]
        self.band_lo = np.full(m, m, dtype=np.int64)  # lo of the first item (lo order) live at b or later
        if len(lo):
            first = np.searchsorted(np.maximum.accumulate(hi), np.arange(m), side="left")
            has = first < len(lo)
            self.band_lo[has] = lo[first[has]]
        self.dtype = dtype

    def tcost(self, x: np.ndarray, b: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """`tcost(x, b)` for `x <= band_lo[b]` (every item with `lo < x` is dead at `b`)."""
        return self.e_dead[b] - self.e_below[x] + gamma[b] * self.w_live[b]


def _cumsum0(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values) + 1, dtype=values.dtype)
    np.cumsum(values, out=out[1:])
    return out


class _Anchors:
    """`tcost(x, b)` at anchors `x = t * step` for the `b` whose band starts below `x` (the
    others come from `_Prefix`). Memory: about `sum(band length) / step` values."""

    def __init__(self, p: Problem, pre: _Prefix, step: int):
        m = p.m
        self.step = step
        xs = np.arange(step, m, step, dtype=np.int64)
        last = np.searchsorted(pre.band_lo, xs, side="left") - 1  # last b with band_lo[b] < x
        length = np.maximum(last - xs + 1, 0)
        self.offset = np.concatenate([[0], _cumsum0(length)])  # by anchor number t = x // step
        total = int(self.offset[-1])
        self.table = np.zeros(total, dtype=p.dead.dtype)
        if total == 0:
            return
        first, stop = pre.pos[xs], pre.pos[np.minimum(last + 1, m)]
        count = np.maximum(stop - first, 0)
        starts = _cumsum0(count)
        item = np.arange(starts[-1]) - np.repeat(starts[:-1] - first, count)
        base = np.repeat(self.offset[1:-1] - xs, count)  # flat index of (anchor, b) = base + b
        lo, hi = p.lo[item], p.hi[item]
        dies = hi + 1 <= np.repeat(last, count)
        died_at = (base + hi + 1)[dies]
        live = _histogram(base + lo, p.weight[item], total) - _histogram(died_at, p.weight[item][dies], total)
        dead = _histogram(died_at, p.dead[item][dies], total)
        seg_start = self.offset[1:-1]
        b = np.arange(total) - np.repeat(seg_start - xs, length)
        w_live = _segment_cumsum(live, seg_start, length)
        self.table = p.gamma[b] * w_live + _segment_cumsum(dead, seg_start, length)

    def lookup(self, x: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.table[self.offset[x // self.step] + b - x]


def _histogram(index: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """[length] sums of `values` at `index`, as `np.add.at` but much faster: float64 bin counts,
    exact for int64 values split in 31-bit halves (each bin sum stays below 2**53 while no bin
    holds 2**22 values; beyond that, `np.add.at`)."""
    if values.dtype != np.int64:
        return np.bincount(index, weights=values, minlength=length)
    if len(values) >= 1 << 22 and np.bincount(index).max() >= 1 << 22:
        out = np.zeros(length, dtype=np.int64)
        np.add.at(out, index, values)
        return out
    high, low = np.divmod(values, np.int64(1) << 31)
    sums = [np.bincount(index, weights=part.astype(np.float64), minlength=length).astype(np.int64) for part in (high, low)]
    return (sums[0] << 31) + sums[1]


def _segment_cumsum(values: np.ndarray, seg_start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting at each segment (segments tile `values` in order)."""
    total = _cumsum0(values)
    return total[1:] - np.repeat(total[seg_start], length)


class _Monge:
    """Divide and conquer per layer (module doc), over one of two `tcost` evaluators: `_ZoneRows`
    when its table fits in `ZONE_TABLE_LIMIT` values, else `_AnchorRows`."""

    def __init__(self, p: Problem, step: int):
        self.p = p
        self.pre = _Prefix(p)
        self.rows = _ZoneRows.build(p, self.pre, ZONE_TABLE_LIMIT) or _AnchorRows(p, self.pre, step)

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


def _last_argmin(total: np.ndarray, col: np.ndarray, cstart: np.ndarray, ncol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (segments of `total` starting at `cstart[:-1]`): the column of the last minimum and the minimum."""
    best = np.minimum.reduceat(total, cstart[:-1])
    hits = np.flatnonzero(total == np.repeat(best, ncol))
    return col[hits[np.searchsorted(hits, cstart[1:], side="left") - 1]], best


def _columns(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(col, cstart, ncol)`: every row's columns `left..right` laid end to end."""
    ncol = right - left + 1
    cstart = _cumsum0(ncol)
    return np.arange(cstart[-1]) - np.repeat(cstart[:-1] - left, ncol), cstart, ncol


class _ZoneRows:
    """`tcost(a, b)` in O(1) for every admissible pair, in three zones of states per row `b`:

    * `a <= band_lo[b]` (every item with `lo < a` is dead at `b`): `_Prefix.tcost`;
    * `a > dead_lo[b]`, the largest `lo` of an item dead at `b` (every item with `lo` in
      `[a, b]` is live): `gamma[b] * (W(b + 1) - W(a))`, `W(s)` = weight of the items with `lo < s`;
    * in between (items dead and live at `b` interleave in `lo`): a table of `tcost(a, b)` for
      `a` in `(band_lo[b], dead_lo[b]]` at or above `lower[b]`, built once from the items there.

    The table is small on real traces (a dead item above `band_lo` has a window nested inside a
    live one's: a small forward pushed up by its rows); `build` declines when it would exceed
    `limit` values (items times states), and the anchor evaluator takes over.
    """

    def __init__(self, p: Problem, pre: _Prefix, dead_lo: np.ndarray, mix_lo: np.ndarray, length: np.ndarray):
        m = p.m
        self.gamma, self.band_lo, self.e_below, self.mix_lo = p.gamma, pre.band_lo, pre.e_below, mix_lo
        self.w_below = _cumsum0(p.weight)[pre.pos]  # [m+1] W(s)
        self.const = p.gamma * self.w_below[1:]  # [m] gamma[b] * W(b + 1), added after the minimum
        self.zone_a = pre.e_dead + p.gamma * pre.w_live - self.const  # [m] zone A is zone_a[b] - e_below[a]
        self.last_table = np.maximum(pre.band_lo, dead_lo)  # [m] states up to here are in zone A or the table
        offset = _cumsum0(length)
        self.offset = offset[:-1]
        rows = np.flatnonzero(length)
        first = pre.pos[mix_lo[rows]]
        count = pre.pos[dead_lo[rows] + 1] - first
        starts = _cumsum0(count)
        item = np.arange(starts[-1]) - np.repeat(starts[:-1] - first, count)
        b = np.repeat(rows, count)
        value = np.where(p.hi[item] >= b, p.weight[item] * p.gamma[b], p.dead[item])
        suffix = _cumsum0(_histogram(self.offset[b] + p.lo[item] - mix_lo[b], value, int(offset[-1])))
        at = np.repeat(np.arange(m), length)  # [table] row of each entry
        # entry (a, b) = tcost(a, b) - const[b]: the items with lo in [a, dead_lo[b]], then zone B at dead_lo[b] + 1
        self.table = np.append(suffix[np.repeat(offset[1:], length)] - suffix[:-1] - p.gamma[at] * self.w_below[dead_lo[at] + 1], 0)

    @classmethod
    def build(cls, p: Problem, pre: _Prefix, limit: int) -> "_ZoneRows | None":
        by_hi = np.argsort(p.hi, kind="stable")
        dead = np.searchsorted(p.hi[by_hi], np.arange(p.m), side="left")  # [m] items with hi < b
        dead_lo = np.concatenate([[-1], np.maximum.accumulate(p.lo[by_hi])])[dead]  # [m] -1: none
        mix_lo = np.minimum(np.maximum(pre.band_lo + 1, p.lower), p.m)  # band_lo = m: nothing live
        length = np.maximum(dead_lo - mix_lo + 1, 0)
        items = pre.pos[np.maximum(dead_lo, mix_lo - 1) + 1] - pre.pos[mix_lo]
        if int(length.sum()) > limit or int(items.sum()) > limit:
            return None
        return cls(p, pre, dead_lo, mix_lo, length)

    def __call__(self, dp_prev, b, left, right) -> tuple[np.ndarray, np.ndarray]:
        """Largest argmin and min over `a in [left, right]` of `dp_prev[a] + tcost(a, b)`, per row."""
        col, cstart, ncol = _columns(left, right)
        total = dp_prev[col] - np.repeat(self.gamma[b], ncol) * self.w_below[col]  # zone B
        first = np.maximum(np.minimum(right, self.last_table[b]) - left + 1, 0)  # leading columns in A or the table
        if first.any():
            fstart = _cumsum0(first)
            at = np.arange(fstart[-1]) - np.repeat(fstart[:-1] - cstart[:-1], first)
            a, row = col[at], np.repeat(b, first)
            in_a = a <= self.band_lo[row]
            table = self.table[np.where(in_a, -1, self.offset[row] + a - self.mix_lo[row])]
            total[at] = dp_prev[a] + np.where(in_a, self.zone_a[row] - self.e_below[a], table)
        arg, best = _last_argmin(total, col, cstart, ncol)
        return arg, best + self.const[b]


class _AnchorRows:
    """`tcost(a, b)` for any row from one anchor with known cost plus the items in between
    (module doc): the general evaluator, for instances whose zone table (`_ZoneRows`) is too large."""

    def __init__(self, p: Problem, pre: _Prefix, step: int):
        self.p, self.pre, self.step = p, pre, step
        self.anchors = _Anchors(p, pre, step)

    def __call__(self, dp_prev, b, left, right) -> tuple[np.ndarray, np.ndarray]:
        """Largest argmin and min over `a in [left, right]` of `dp_prev[a] + tcost(a, b)`, per row.

        Per row, one anchor `x` with a known `tcost(x, b)` (`_anchor`): `left` itself when it is
        at or below `band_lo[b]`, else the nearer of `max(step * floor(left / step), band_lo[b])`
        and `step * ceil((right + 1) / step)`; the items with `lo` between the anchor and the
        range give `tcost(a, b) - tcost(x, b)` as prefix sums."""
        p, pos, step = self.p, self.pre.pos, self.step
        band = self.pre.band_lo[b]
        x_left = np.maximum((left // step) * step, np.minimum(band, left))
        x_right = np.minimum(-(-(right + 1) // step) * step, b + 1)
        use_left = left - x_left <= x_right - right - 1
        first = pos[np.where(use_left, x_left, left)]
        count = pos[np.where(use_left, right, x_right)] - first
        istart = _cumsum0(count)
        item = np.arange(istart[-1]) - np.repeat(istart[:-1] - first, count)
        value = np.where(p.hi[item] >= np.repeat(b, count), p.weight[item] * np.repeat(p.gamma[b], count), p.dead[item])
        prefix = _cumsum0(value.astype(p.dead.dtype, copy=False))
        col, cstart, ncol = _columns(left, right)
        # tcost(a, b) = anchor - rel(a), rel = prefix at a minus prefix at the row's anchor end:
        # differences of the flat prefix are exact (int64 wraps, the true values fit)
        ref = prefix[np.where(use_left, istart[:-1], istart[1:])]
        rel = prefix[np.repeat(istart[:-1] - first, ncol) + pos[col]] - np.repeat(ref, ncol)
        arg, best = _last_argmin(dp_prev[col] - rel, col, cstart, ncol)
        return arg, best + self.anchor(np.where(use_left, x_left, x_right), b)

    def anchor(self, x: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`tcost(x, b)`: 0 for `x = b + 1`, prefix sums when `x <= band_lo[b]`, else the table."""
        out = np.zeros(len(b), dtype=self.p.dead.dtype)
        inside = x <= b
        easy = inside & (x <= self.pre.band_lo[b])
        out[easy] = self.pre.tcost(x[easy], b[easy], self.p.gamma)
        hard = inside & ~easy
        out[hard] = self.anchors.lookup(x[hard], b[hard])
        return out


def solve_monge(p: Problem, stop=None, step: int | None = None) -> Solution:
    """Exact for Monge instances (module doc). `stop(k, key)` may end the layers early; `step`
    is the anchor spacing (default `ANCHOR_STEP`; any value >= 1 gives the same result)."""
    solver = _Monge(p, step or ANCHOR_STEP)
    dp = solver.first_layer()
    layers, args = [dp], [np.zeros(p.m + 1, np.int32)]
    for _ in range(2, p.max_buckets + 1):
        if stop is not None and _stop(p, layers, stop, solver.pre):
            break
        dp, arg = solver.layer(dp)
        layers.append(dp)
        args.append(arg)
    return _collect(p, layers, args, solver.pre)


def _stop(p: Problem, layers, stop, pre) -> bool:
    tail = pre.e_total - pre.e_below
    total = layers[-1] + tail
    total[: p.final_floor] = p.inf
    return bool(stop(len(layers), total.min()))


def _collect(p: Problem, layers, args, pre) -> Solution:
    tail = pre.e_total - pre.e_below  # [m+1] eager value of the items with lo >= state
    lists, keys = {}, {}
    best_j, best_s, best = -1, -1, None
    for j, dp in enumerate(layers, start=1):
        total = dp + tail
        total[: p.final_floor] = p.inf
        total[0] = p.inf
        s = int(np.argmin(total))
        if total[s] < p.inf and (best is None or total[s] < best):
            best_j, best_s, best = j, s, total[s]
        if best_j >= 0:
            lists[j] = _walk(args, best_j, best_s)
            keys[j] = best.item()
    return Solution(lists, keys)


def _walk(args, j: int, s: int) -> np.ndarray:
    chosen = []
    while s > 0:
        chosen.append(s - 1)
        s, j = int(args[j - 1][s]), j - 1
    return np.asarray(chosen[::-1], dtype=np.int64)


def solve_band(p: Problem) -> Solution:
    """Exact for any instance (module doc); float64 values. With `C(b) = tcost(a, b) + e_below[a]`
    for `a <= band_lo[b]`, a state `a` above `band_lo[b]` adds `sum (e_i - w_i gamma[b])` over the
    items live at `b` with `lo < a` (they are settled before `b` and run eagerly)."""
    pre = _Prefix(p)
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
    return _collect(p, list(dp), [np.zeros(m + 1, np.int32)] + list(arg[1:]), pre)


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
