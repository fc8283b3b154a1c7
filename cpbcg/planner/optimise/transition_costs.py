"""Transition costs of the optimiser's layered DP (`dp.py`), a level of rows at a time.

`Problem` is one DP instance: items (aggregated forwards) with candidate windows `[lo, hi]`,
and `tcost(a, b) = sum_{a <= lo_i <= b} (w_i * gamma[b] if hi_i >= b else e_i)`, the value of
the items settled when bucket `b` follows state `a` (module doc of `dp`). The divide and
conquer asks, for many rows `b` at once, for the largest minimising `a` in `[left, right]` of
`dp_prev[a] + tcost(a, b)`, and the minimum. Two evaluators answer it, with the same results:

* `ZoneRows` (used when its table is small, as on every trace tried): O(1) per pair from three
  zones of states. At or below `band_lo[b]` no item with `lo < a` is live at `b` (prefix sums
  over states, `Prefix`); above `dead_lo[b]`, the largest `lo` of an item dead at `b`, every
  item from `a` on is live (`gamma[b]` times a weight prefix sum); in between, where dead and
  live items interleave in `lo` (nested windows: a small forward pushed up by its rows), a
  table built once. On the 1M-forward benchmark trace the table holds 32k values for 16k
  candidates; on the four shared real traces, at most 5.
* `AnchorRows` (the general fallback, past `ZONE_TABLE_LIMIT`): a row's `tcost(a, b)` comes from
  one anchor `x` with known `tcost(x, b)` plus a prefix sum over the items with `lo` between
  `x` and `a`. Anchors: any `x <= band_lo[b]`, `x = b + 1` (zero), or a multiple of
  `ANCHOR_STEP`, read from a table of `tcost(x, b)` for the `b` whose band starts below `x`
  (about `sum of band lengths / ANCHOR_STEP` values).

Integer keys stay exact (int64: differences of prefix sums wrap, the true values fit); the
time objective uses float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpbcg.planner.arrays import Int64Array

ZONE_TABLE_LIMIT = 1 << 22
"""Largest zone table (values, and item-state pairs to build it) before the anchor evaluator
takes over: about 32 MiB of int64 (`ZoneRows`)."""
ANCHOR_STEP = 32
"""Spacing of the anchor table's rows (candidates): memory ~ sum(band) / step, extra work per
row ~ step / 2 items."""
INT_INF: np.int64 = np.int64(1 << 62)
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
    def inf(self) -> np.int64 | float:
        """The unreachable value in `dead`'s dtype (`INT_INF` for int64 keys, else `inf`)."""
        return INT_INF if self.dead.dtype == np.int64 else np.inf


class Prefix:
    """Prefix sums over states: `tcost(x, b)` in O(1) when every item with `lo < x` is dead at `b`."""

    def __init__(self, p: Problem):
        m, lo, hi, dtype = p.m, p.lo, p.hi, p.dead.dtype
        self.pos = np.searchsorted(lo, np.arange(m + 1), side="left")  # [m+1] first item with lo >= s
        e_lo = cumsum0(p.dead)
        self.e_below = e_lo[self.pos]  # [m+1] sum of e over lo < s
        self.by_hi = np.argsort(hi, kind="stable")  # [N] items in hi order
        self.num_dead = np.searchsorted(hi[self.by_hi], np.arange(m), side="left")  # [m] items with hi < b
        self.e_dead = cumsum0(p.dead[self.by_hi])[self.num_dead]  # [m] sum of e over hi < b
        self.w_below = cumsum0(p.weight)[self.pos]  # [m+1] sum of w over lo < s
        self.w_live = self.w_below[1:] - cumsum0(p.weight[self.by_hi])[self.num_dead]
        self.e_total = e_lo[-1]
        self.band_lo = np.full(m, m, dtype=np.int64)  # lo of the first item (lo order) live at b or later
        if len(lo):
            first = np.searchsorted(np.maximum.accumulate(hi), np.arange(m), side="left")
            has = first < len(lo)
            self.band_lo[has] = lo[first[has]]
        self.dtype = dtype

    def tcost(self, x: np.ndarray, b: np.ndarray, gamma: np.ndarray) -> np.ndarray:
        """`tcost(x, b)` for `x <= band_lo[b]` (every item with `lo < x` is dead at `b`)."""
        cost: np.ndarray = self.e_dead[b] - self.e_below[x] + gamma[b] * self.w_live[b]
        return cost


def cumsum0(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values) + 1, dtype=values.dtype)
    np.cumsum(values, out=out[1:])
    return out


class Anchors:
    """`tcost(x, b)` at anchors `x = t * step` for the `b` whose band starts below `x` (the
    others come from `Prefix`). Memory: about `sum(band length) / step` values."""

    def __init__(self, p: Problem, pre: Prefix, step: int):
        m = p.m
        self.step = step
        xs = np.arange(step, m, step, dtype=np.int64)
        last = np.searchsorted(pre.band_lo, xs, side="left") - 1  # last b with band_lo[b] < x
        length = np.maximum(last - xs + 1, 0)
        self.offset = np.concatenate([[0], cumsum0(length)])  # by anchor number t = x // step
        total = int(self.offset[-1])
        self.table = np.zeros(total, dtype=p.dead.dtype)
        if total == 0:
            return
        first, stop = pre.pos[xs], pre.pos[np.minimum(last + 1, m)]
        count = np.maximum(stop - first, 0)
        starts = cumsum0(count)
        item = np.arange(starts[-1]) - np.repeat(starts[:-1] - first, count)
        base = np.repeat(self.offset[1:-1] - xs, count)  # flat index of (anchor, b) = base + b
        lo, hi = p.lo[item], p.hi[item]
        dies = hi + 1 <= np.repeat(last, count)
        died_at = (base + hi + 1)[dies]
        live = histogram(base + lo, p.weight[item], total) - histogram(died_at, p.weight[item][dies], total)
        dead = histogram(died_at, p.dead[item][dies], total)
        seg_start = self.offset[1:-1]
        b = np.arange(total) - np.repeat(seg_start - xs, length)
        w_live = _segment_cumsum(live, seg_start, length)
        self.table = p.gamma[b] * w_live + _segment_cumsum(dead, seg_start, length)

    def lookup(self, x: np.ndarray, b: np.ndarray) -> np.ndarray:
        cost: np.ndarray = self.table[self.offset[x // self.step] + b - x]
        return cost


def histogram(index: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
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
    total = cumsum0(values)
    sums: np.ndarray = total[1:] - np.repeat(total[seg_start], length)
    return sums


def last_argmin(total: np.ndarray, col: np.ndarray, cstart: np.ndarray, ncol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (segments of `total` starting at `cstart[:-1]`): the column of the last minimum and the minimum."""
    best = np.minimum.reduceat(total, cstart[:-1])
    hits = np.flatnonzero(total == np.repeat(best, ncol))
    return col[hits[np.searchsorted(hits, cstart[1:], side="left") - 1]], best


def _columns(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(col, cstart, ncol)`: every row's columns `left..right` laid end to end."""
    ncol = right - left + 1
    cstart = cumsum0(ncol)
    return np.arange(cstart[-1]) - np.repeat(cstart[:-1] - left, ncol), cstart, ncol


class ZoneRows:
    """`tcost(a, b)` in O(1) for every admissible pair, in three zones of states per row `b`:

    * `a <= band_lo[b]` (every item with `lo < a` is dead at `b`): `Prefix.tcost`;
    * `a > dead_lo[b]`, the largest `lo` of an item dead at `b` (every item with `lo` in
      `[a, b]` is live): `gamma[b] * (W(b + 1) - W(a))`, `W(s)` = weight of the items with `lo < s`;
    * in between (items dead and live at `b` interleave in `lo`): a table of `tcost(a, b)` for
      `a` in `(band_lo[b], dead_lo[b]]` at or above `lower[b]`, built once from the items there.

    The table is small on real traces (a dead item above `band_lo` has a window nested inside a
    live one's: a small forward pushed up by its rows); `build` declines when it would exceed
    `limit` values (items times states), and the anchor evaluator takes over.
    """

    def __init__(self, p: Problem, pre: Prefix, dead_lo: np.ndarray, mix_lo: np.ndarray, length: np.ndarray):
        m = p.m
        self.gamma, self.band_lo, self.e_below, self.mix_lo = p.gamma, pre.band_lo, pre.e_below, mix_lo
        self.w_below = pre.w_below  # [m+1] W(s)
        self.const = p.gamma * self.w_below[1:]  # [m] gamma[b] * W(b + 1), added after the minimum
        self.zone_a = pre.e_dead + p.gamma * pre.w_live - self.const  # [m] zone A is zone_a[b] - e_below[a]
        self.last_table = np.maximum(pre.band_lo, dead_lo)  # [m] states up to here are in zone A or the table
        offset = cumsum0(length)
        self.offset = offset[:-1]
        rows = np.flatnonzero(length)
        first = pre.pos[mix_lo[rows]]
        count = pre.pos[dead_lo[rows] + 1] - first
        starts = cumsum0(count)
        item = np.arange(starts[-1]) - np.repeat(starts[:-1] - first, count)
        b = np.repeat(rows, count)
        value = np.where(p.hi[item] >= b, p.weight[item] * p.gamma[b], p.dead[item])
        suffix = cumsum0(histogram(self.offset[b] + p.lo[item] - mix_lo[b], value, int(offset[-1])))
        at = np.repeat(np.arange(m), length)  # [table] row of each entry
        # entry (a, b) = tcost(a, b) - const[b]: the items with lo in [a, dead_lo[b]], then zone B at dead_lo[b] + 1
        self.table = np.append(suffix[np.repeat(offset[1:], length)] - suffix[:-1] - p.gamma[at] * self.w_below[dead_lo[at] + 1], 0)

    @classmethod
    def build(cls, p: Problem, pre: Prefix, limit: int) -> "ZoneRows | None":
        dead_lo = np.concatenate([[-1], np.maximum.accumulate(p.lo[pre.by_hi])])[pre.num_dead]  # [m] -1: none
        mix_lo = np.minimum(np.maximum(pre.band_lo + 1, p.lower), p.m)  # band_lo = m: nothing live
        length = np.maximum(dead_lo - mix_lo + 1, 0)
        items = pre.pos[np.maximum(dead_lo, mix_lo - 1) + 1] - pre.pos[mix_lo]
        if int(length.sum()) > limit or int(items.sum()) > limit:
            return None
        return cls(p, pre, dead_lo, mix_lo, length)

    def __call__(self, dp_prev: np.ndarray, b: Int64Array, left: Int64Array, right: Int64Array) -> tuple[Int64Array, np.ndarray]:
        """Largest argmin and min over `a in [left, right]` of `dp_prev[a] + tcost(a, b)`, per row."""
        col, cstart, ncol = _columns(left, right)
        total = dp_prev[col] - np.repeat(self.gamma[b], ncol) * self.w_below[col]  # zone B
        first = np.maximum(np.minimum(right, self.last_table[b]) - left + 1, 0)  # leading columns in A or the table
        if first.any():
            fstart = cumsum0(first)
            at = np.arange(fstart[-1]) - np.repeat(fstart[:-1] - cstart[:-1], first)
            a, row = col[at], np.repeat(b, first)
            in_a = a <= self.band_lo[row]
            table = self.table[np.where(in_a, -1, self.offset[row] + a - self.mix_lo[row])]
            total[at] = dp_prev[a] + np.where(in_a, self.zone_a[row] - self.e_below[a], table)
        arg, best = last_argmin(total, col, cstart, ncol)
        return arg, best + self.const[b]


class AnchorRows:
    """`tcost(a, b)` for any row from one anchor with known cost plus the items in between
    (module doc): the general evaluator, for instances whose zone table (`ZoneRows`) is too large."""

    def __init__(self, p: Problem, pre: Prefix, step: int):
        self.p, self.pre, self.step = p, pre, step
        self.anchors = Anchors(p, pre, step)

    def __call__(self, dp_prev: np.ndarray, b: Int64Array, left: Int64Array, right: Int64Array) -> tuple[Int64Array, np.ndarray]:
        """Largest argmin and min over `a in [left, right]` of `dp_prev[a] + tcost(a, b)`, per row.

        Per row, one anchor `x` with a known `tcost(x, b)` (`anchor`): `left` itself when it is
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
        istart = cumsum0(count)
        item = np.arange(istart[-1]) - np.repeat(istart[:-1] - first, count)
        value = np.where(p.hi[item] >= np.repeat(b, count), p.weight[item] * np.repeat(p.gamma[b], count), p.dead[item])
        prefix = cumsum0(value.astype(p.dead.dtype, copy=False))
        col, cstart, ncol = _columns(left, right)
        # tcost(a, b) = anchor - rel(a), rel = prefix at a minus prefix at the row's anchor end:
        # differences of the flat prefix are exact (int64 wraps, the true values fit)
        ref = prefix[np.where(use_left, istart[:-1], istart[1:])]
        rel = prefix[np.repeat(istart[:-1] - first, ncol) + pos[col]] - np.repeat(ref, ncol)
        arg, best = last_argmin(dp_prev[col] - rel, col, cstart, ncol)
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
