"""The optimiser's candidate grid: capturable bucket sizes and their local capacity `C(B)`.

Sizes are multiples of a step up to a limit (plus explicit extras), prepared as SGLang 0.5.23's
runner prepares a configured list (rounded up to a multiple of `cp_size`, unique, `>=
min_capture_tokens`: `StrategyModel.capture_grid`), so every size the optimiser can emit is one
SGLang captures as given; then those the capture layout can capture (`StrategyModel.capacity_rows`:
under the context-bounded layout no piece shorter than `2*cp_size` and no more pieces than
`max_capture_requests`). `C(B)` is nondecreasing over the kept sizes (see `optimise.py`); a
violation raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.arrays import sorted_unique
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.model.layout import CPLayout


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
    """Multiples of `bucket_multiple` up to `max_tokens`, plus `max_tokens` and `pinned`, as
    SGLang prepares them (rounded up to multiples of `cp_size`: the grid may reach past
    `max_tokens` by less than `cp_size`), keeping capturable sizes (`capacity.capture_pieces`).

    Raises `ConfigError` for a bad limit, `ModelError` if nothing is capturable or capacity is
    not monotone (impossible for the capture model; see module doc)."""
    if max_tokens < 1 or bucket_multiple < 1:
        raise ConfigError(f"max_tokens and bucket_multiple must be >= 1 (got {max_tokens}, {bucket_multiple})")
    sizes = np.arange(bucket_multiple, max_tokens + 1, bucket_multiple, dtype=np.int64)
    sizes = cp.model.capture_grid(np.concatenate([sizes, [max_tokens], np.asarray(pinned, dtype=np.int64)]))
    ok, capacity = cp.model.capacity_rows(sizes, spec)
    sizes, capacity = sizes[ok], capacity[ok]
    if sizes.size == 0:
        raise ModelError(f"no bucket size up to {max_tokens} is capturable (cp_size {cp.cp_size})")
    if np.any(np.diff(capacity) < 0):
        at = int(np.flatnonzero(np.diff(capacity) < 0)[0])
        raise ModelError(f"local capacity is not monotone: C({sizes[at]})={capacity[at]} > C({sizes[at + 1]})={capacity[at + 1]}")
    return CandidateGrid(sizes, capacity, bucket_multiple, max_tokens)


DENSE_GRID_LIMIT = 1 << 16
"""Largest grid (sizes, before rounding) the optimiser builds densely; above it the grid is
built sparse (`sparse_grid`), so memory and time follow the trace's distinct forwards, not the
chunk."""

_NONE = -1


def dense_grid_size(max_tokens: int, bucket_multiple: int = 1) -> int:
    """Sizes `candidate_grid` would hold before rounding and filtering (an upper bound)."""
    return max_tokens // max(bucket_multiple, 1) + 1


class SizeLattice:
    """The sizes of `candidate_grid(cp, spec, top, bucket_multiple, extras)` without building
    them: `succ`/`pred` (vectorised, int64, `-1` where none) walk them in O(1) per query, plus
    a short walk over uncapturable sizes (`StrategyModel.capture_tokens_limit`).

    The grid is the multiples `k * bucket_multiple <= top` rounded up as the runner rounds
    (`StrategyModel.round_buckets`), the rounded extras, the sizes `>= min_capture_tokens`, and
    of those the capturable ones (`StrategyModel.capacity_rows`)."""

    def __init__(self, cp: CPLayout, spec: CaptureSpec, top: int, bucket_multiple: int, extras: Sequence[int]):
        model = cp.model
        self.model, self.spec = model, spec
        self.align = model.bucket_multiple_tokens
        self.min_tokens = model.min_capture_tokens
        self.step, self.k_max = bucket_multiple, top // bucket_multiple
        rounded = model.capture_grid(np.asarray([*extras, top], dtype=np.int64))  # as `candidate_grid` adds its limit
        ok, _ = model.capacity_rows(rounded, spec)
        self.extras = rounded[ok]
        limit = model.capture_tokens_limit(spec)
        self.limit = int(limit) if limit is not None else int(max(model.round_buckets([max(top, 1)])[0], self.extras.max(initial=0)))
        self.walk = 2 * model.min_request_tokens + 4
        """Most steps over uncapturable sizes one query may take (they come in short runs)."""

    def _ok(self, sizes: np.ndarray) -> np.ndarray:
        return self.model.capacity_rows(sizes, self.spec)[0]

    def _succ_raw(self, x: np.ndarray) -> np.ndarray:
        """Smallest prepared size >= x before the capturable filter (`_NONE` when none)."""
        a, step = self.align, self.step
        x = np.maximum(x, self.min_tokens)
        first = a * ((x + a - 1) // a - 1) + 1  # the smallest raw size the runner rounds up to >= x
        k = np.maximum(1, (first + step - 1) // step)
        lattice = np.where(k <= self.k_max, self.model.round_buckets(np.minimum(k, self.k_max) * step), _NONE)
        at = np.searchsorted(self.extras, x, side="left")
        extra = np.full(len(x), _NONE, dtype=np.int64)
        if len(self.extras):
            extra = np.where(at < len(self.extras), self.extras[np.minimum(at, len(self.extras) - 1)], _NONE)
        both = np.where(lattice < 0, extra, np.where(extra < 0, lattice, np.minimum(lattice, extra)))
        return np.where(both > self.limit, _NONE, both)

    def _pred_raw(self, x: np.ndarray) -> np.ndarray:
        """Largest prepared size < x before the capturable filter (`_NONE` when none)."""
        a, step = self.align, self.step
        x = np.minimum(x, self.limit + 1)
        k = np.minimum(self.k_max, (a * ((x - 1) // a)) // step)
        value = self.model.round_buckets(np.maximum(k, 1) * step)
        lattice = np.where((k >= 1) & (value >= self.min_tokens), value, _NONE)
        at = np.searchsorted(self.extras, x, side="left") - 1
        extra = self.extras[np.maximum(at, 0)] if len(self.extras) else np.full(len(x), _NONE)
        return np.maximum(lattice, np.where(at >= 0, extra, _NONE))

    def succ(self, x: ArrayLike) -> np.ndarray:
        """[N] int64: the smallest grid size `>= x` ([N] int64), `-1` where none."""
        return self._walk(np.asarray(x, dtype=np.int64), up=True)

    def pred(self, x: ArrayLike) -> np.ndarray:
        """[N] int64: the largest grid size `< x` ([N] int64), `-1` where none."""
        return self._walk(np.asarray(x, dtype=np.int64), up=False)

    def _walk(self, x: np.ndarray, up: bool) -> np.ndarray:
        out = np.full(len(x), _NONE, dtype=np.int64)
        todo, at = np.arange(len(x)), x.copy()
        for _ in range(self.walk):
            if not todo.size:
                return out
            y = self._succ_raw(at) if up else self._pred_raw(at)
            found = y >= 0
            good = np.zeros(len(y), dtype=bool)
            good[found] = self._ok(y[found])
            out[todo[good]] = y[good]
            again = found & ~good
            todo, at = todo[again], (y[again] + 1 if up else y[again])
        if todo.size:  # impossible: uncapturable sizes below the limit come in short runs
            raise ModelError(f"the candidate grid could not step past size {int(at[0])} (capture layout {self.spec})")
        return out

    def largest(self) -> int:
        """The largest grid size (`-1` when the grid is empty)."""
        return int(self.pred(np.asarray([self.limit + 1]))[0])

    def capacity(self, sizes: np.ndarray) -> np.ndarray:
        """[N] int64 `C(B)` of grid sizes."""
        return self.model.capacity_rows(np.asarray(sizes, dtype=np.int64), self.spec)[1]

    def first_fit(self, num_tokens: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """[N] int64: the smallest grid size `>= num_tokens` with `C(B) >= rows` (`-1` where
        none); `C` is nondecreasing over the grid, so a binary search over `[n, largest]`."""
        num_tokens, rows = np.asarray(num_tokens, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        out = self.succ(num_tokens)
        top = self.largest()
        have = out >= 0
        short = np.zeros(len(out), dtype=bool)
        short[have] = self.capacity(out[have]) < rows[have]
        out[short] = _NONE
        if top < 0:
            return out
        search = np.flatnonzero(short & (self.capacity(np.asarray([top]))[0] >= rows))
        lo, hi = num_tokens[search], np.full(len(search), top, dtype=np.int64)  # P(lo) false, P(hi) true
        while search.size and np.any(hi - lo > 1):
            mid = (lo + hi) // 2
            fits = self.capacity(self.succ(mid)) >= rows[search]
            lo, hi = np.where(fits, lo, mid), np.where(fits, mid, hi)
        out[search] = self.succ(hi)
        return out

    def lowest_predecessor(self, sizes: np.ndarray, factor: float) -> np.ndarray:
        """[N] int64: `G(q)`, the smallest grid size `s` with `factor*(s + 1) >= q` (the
        selector's float comparison, as `optimiser._candidates`), `-1` where none."""
        q = np.asarray(sizes, dtype=np.int64)
        f = float(factor)
        s = np.maximum(np.ceil(q / f).astype(np.int64) - 1, 0)
        for _ in range(4):  # the float guess is off by at most one or two
            s = np.where((s + 1) * f < q, s + 1, s)
            s = np.where((s >= 1) & (s * f >= q), s - 1, s)
        return self.succ(s)


def sparse_grid(
    cp: CPLayout, spec: CaptureSpec, max_tokens: int, bucket_multiple: int, extras: Sequence[int],
    num_tokens: np.ndarray, rows: np.ndarray, factor: float, chunk_tokens: int, gap_free: bool,
) -> CandidateGrid:
    """The sizes of `candidate_grid(cp, spec, max_tokens, bucket_multiple, extras)` at which the
    optimiser's answer can change, for windows `(num_tokens, rows)` ([N] int64: the demand's
    forwards and the required ones): each window's `lo` (first fit), the size below it, its `hi`
    (last size within `factor*n`) and the size above it, the extras, the first size `>=
    chunk_tokens`, the largest size and, for gap-free lists, the closure of all of them under
    `G` (`SizeLattice.lowest_predecessor`, below the chunk size). `optimiser._optimise` on this
    grid picks the same candidates, windows and costs as on the dense grid (docs/optimiser.md
    "Sparse grid"); its size follows the distinct windows, not `max_tokens`.

    Raises `ModelError` as `candidate_grid`."""
    if max_tokens < 1 or bucket_multiple < 1:
        raise ConfigError(f"max_tokens and bucket_multiple must be >= 1 (got {max_tokens}, {bucket_multiple})")
    lattice = SizeLattice(cp, spec, max_tokens, bucket_multiple, extras)
    top = lattice.largest()
    if top < 0:
        raise ModelError(f"no bucket size up to {max_tokens} is capturable (cp_size {cp.cp_size})")
    n = np.asarray(num_tokens, dtype=np.int64)
    keep = n >= 1
    n, r = n[keep], np.maximum(np.asarray(rows, dtype=np.int64)[keep], 0)
    lo = lattice.first_fit(n, r)
    hi = lattice.pred(np.floor(n * float(factor)).astype(np.int64) + 1)
    parts = [lo, lattice.pred(np.maximum(lo, 0)), hi, lattice.succ(hi + 1), lattice.extras,
             lattice.succ(np.asarray([chunk_tokens, 0])), np.asarray([top])]
    points = sorted_unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))
    points = points[points >= 0]
    chunk = int(lattice.succ(np.asarray([chunk_tokens]))[0])
    if gap_free and chunk >= 0:
        frontier = points
        while frontier.size:
            low = lattice.lowest_predecessor(frontier, factor)
            low = sorted_unique(low[(low >= 0) & (low < chunk)])
            frontier = np.setdiff1d(low, points, assume_unique=True)
            points = sorted_unique(np.concatenate([points, frontier]))
    capacity = lattice.capacity(points)
    if np.any(np.diff(capacity) < 0):
        at = int(np.flatnonzero(np.diff(capacity) < 0)[0])
        raise ModelError(f"local capacity is not monotone: C({points[at]})={capacity[at]} > C({points[at + 1]})={capacity[at + 1]}")
    return CandidateGrid(points, capacity, bucket_multiple, max_tokens)
