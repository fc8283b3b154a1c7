"""Guarantee mode (trace-free): buckets that replay *every* CP-active batch within limits.

A CP-active batch of `n` tokens in `k` requests needs at most
`worst_case_rows(n, k) = align_up(floor(n/cp + k*(1 - 1/cp)), align)` rows (domain §2; rows grow
with `k`, and zigzag needs every request `>= 2*cp_size`, so `k <= min(max_requests, n // (2*cp))`).
Every such batch replays iff, for every `n`, some bucket `B` with `n <= B <= factor*n` has
`C(B) >= worst rows(n)`: the selector then finds the first bucket with enough capacity inside the
window. That is an interval `[lo(n), hi(n)]` per `n` (capacity is monotone), and the fewest
buckets hitting every interval is the classic greedy: walk `n` upwards and, when the interval is
not hit yet, pick its right end. Buckets may exceed `max_tokens` (up to `factor*max_tokens`):
full-chunk batches need CP-local headroom above the chunk size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from cpbcg.errors import ModelError
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.optimise.grid import candidate_grid
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy, align_up, local_rows, worst_case_rows
from cpbcg.planner.model.selector import BucketTable, select_buckets


@dataclass(frozen=True)
class Limits:
    """What the deployment admits into one prefill forward."""

    max_requests: int
    """Most requests in one forward (SGLang --prefill-max-requests)."""
    max_tokens: int
    """Most tokens in one forward (the chunk size)."""


@functools.lru_cache(maxsize=4)
def worst_rows(limits: Limits, cp: CPLayout) -> tuple[np.ndarray, np.ndarray]:
    """`(num_tokens [N] int64, rows [N] int64)`: every CP-active batch size and the most rows any
    batch of that size needs (exact for zigzag via `_zigzag_worst_tokens`, else the §2 formula).
    Cached (guarantee and check ask for the same limits); the arrays are read-only."""
    n, rows = _worst_rows(limits, cp)
    n.flags.writeable = rows.flags.writeable = False
    return n, rows


def _worst_rows(limits: Limits, cp: CPLayout) -> tuple[np.ndarray, np.ndarray]:
    smallest = cp.min_request_tokens if cp.cp_size > 1 else 1
    if cp.cp_size > 1 and cp.strategy is CPStrategy.interleave:
        smallest = cp.cp_size
    n = np.arange(smallest, limits.max_tokens + 1, dtype=np.int64)
    if cp.cp_size == 1 or cp.strategy is CPStrategy.interleave:
        return n, np.asarray(worst_case_rows(n, np.ones_like(n), cp), dtype=np.int64)
    k_top = min(limits.max_requests, limits.max_tokens // (2 * cp.cp_size))
    if cp.cp_size * max(k_top, 1) * 2 * cp.cp_size > EXACT_DP_STEPS:  # very wide CP: the §2 bound (>= the truth)
        return n, np.asarray(worst_case_rows(n, np.minimum(limits.max_requests, n // (2 * cp.cp_size)), cp), dtype=np.int64)
    tokens = _zigzag_worst_tokens(n, limits.max_requests, cp.cp_size)
    return n, np.asarray(align_up(tokens, cp.align_rows), dtype=np.int64)


EXACT_DP_STEPS = 1 << 20
"""Most numpy steps (`cp_size * requests * 2*cp_size`) the exact zigzag worst case may take; above
it (cp 64 with 128 requests, cp 1,000 at all) the §2 upper bound stands in: never below the truth,
so headroom and guarantees stay safe, and at most `align` rows above it."""
_NONE = -(1 << 30)
"""Marks an unreachable residue sum in the DP tables."""


def _zigzag_worst_tokens(n: np.ndarray, max_requests: int, cp_size: int) -> np.ndarray:
    """[N] most logical tokens one rank can hold for a zigzag batch of `n` tokens (n ascending).

    A request `L = seg*base + m` (`base >= 1`) gives rank `r` `2*base + h_r(m)` tokens with
    `h_r(m) = [r < m] + [seg-1-r < m]`, so `k` requests with residues summing to `S` and bases
    summing to `u = (n - S) / seg >= k` give `2u + H`, `H = sum h_r(m)`. A DP over (requests,
    `S`) gives the largest `H` (`Q[k, S]`: at most `k` requests, `k >= 1`); then for each `n` the
    answer is the best rank and `u` with `S = n - seg*u`, `1 <= u`, `k = min(max_requests, u)`.
    For `u >= max_requests` that is a running maximum over `S`; below it only
    `n / (2*seg - 1) <= u` can reach `S` (each residue is `< seg`), a short range per `n`.
    Tighter than the §2 bound: n=8100, 32 requests, cp 4 needs at most 2048 rows, the bound
    says 2056. Time: O(cp * (k_top * seg * s_top + k_top**2 * seg)), a second or two for
    1024 requests."""
    seg = 2 * cp_size
    if not n.size:
        return np.zeros(0, dtype=np.int64)
    k_top = int(min(max_requests, int(n.max()) // seg))
    best = np.full(len(n), _NONE, dtype=np.int64)
    for rank in range(cp_size):
        h = np.array([(rank < m) + (seg - 1 - rank < m) for m in range(seg)], dtype=np.int64)
        q = _most_extra_tokens(h, k_top, seg)
        np.maximum(best, _best_over_bases(q, n, max_requests, seg), out=best)
    return best


def _most_extra_tokens(h: np.ndarray, k_top: int, seg: int) -> np.ndarray:
    """[k_top + 1, S] int32: most `H` with 1..k requests whose residues sum to exactly `S`."""
    s_top = k_top * (seg - 1)
    table = np.full((k_top + 1, s_top + 1), _NONE, dtype=np.int32)
    table[0, 0] = 0
    for c in range(1, k_top + 1):
        width = c * (seg - 1) + 1  # residue sums c requests can reach
        row, prev = table[c, :width], table[c - 1]
        for m in range(seg):
            np.maximum(row[m:], prev[: width - m] + h[m], out=row[m:])
    table[0, 0] = _NONE  # a batch holds at least one request
    np.maximum.accumulate(table, axis=0, out=table)
    return table


def _best_over_bases(q: np.ndarray, n: np.ndarray, max_requests: int, seg: int) -> np.ndarray:
    """[N] max over `u >= 1` of `2u + q[min(max_requests, u), n - seg*u]` (see caller)."""
    k_top, width = q.shape[0] - 1, q.shape[1]
    out = np.full(len(n), _NONE, dtype=np.int64)
    if max_requests <= k_top:  # u >= max_requests: q's last row, a running max over S per residue
        last = q[max_requests].astype(np.int64)
        j = np.arange(width) // seg
        for res in range(seg):
            col = last[res::seg] - 2 * j[res::seg]  # value - 2q for S = res + seg*j
            run = np.maximum.accumulate(col)
            mine = np.flatnonzero(n % seg == res)
            top_j = (n[mine] - res) // seg - max_requests  # S <= n - seg*max_requests
            ok = top_j >= 0
            top_j = np.minimum(top_j, len(run) - 1)
            value = 2 * ((n[mine] - res) // seg) + run[np.maximum(top_j, 0)]
            out[mine[ok]] = np.maximum(out[mine[ok]], value[ok])
    # 1 <= u < max_requests (and u <= k_top): S = n - seg*u must be <= u*(seg-1)
    u_low = np.maximum(-(-n // (2 * seg - 1)), 1)
    u_high = np.minimum(np.minimum(n // seg, max_requests - 1), k_top)
    count = np.maximum(u_high - u_low + 1, 0)
    if count.sum():
        starts = np.zeros(len(n) + 1, dtype=np.int64)
        np.cumsum(count, out=starts[1:])
        u = np.arange(starts[-1]) - np.repeat(starts[:-1] - u_low, count)
        s = np.repeat(n, count) - seg * u
        fits = s < width
        value = np.where(fits, 2 * u + q[u, np.minimum(s, width - 1)], _NONE)
        has = count > 0
        out[has] = np.maximum(out[has], np.maximum.reduceat(value, starts[:-1][has]))
    return out


def headroom_required(max_tokens: int, max_requests: int, cp: CPLayout) -> list[tuple[int, int]]:
    """`[(max_tokens, rows)]`: a full chunk of at most `max_requests` requests at its exact
    worst-case rows, for `optimise(..., required=...)` (with `max_bucket_tokens` above the chunk:
    at cp 4 a full 8192-token chunk of 32 requests needs 2,072 rows, bucket 8192 holds 2,048).
    Empty when no CP-active forward of `max_tokens` tokens exists."""
    if cp.cp_size > 1 and cp.strategy is CPStrategy.zigzag and max_tokens < 2 * cp.cp_size:
        return []
    n, rows = worst_rows(Limits(max_requests, max_tokens), cp)
    return [(int(n[-1]), int(rows[-1]))] if n.size and n[-1] == max_tokens else []


@dataclass(frozen=True)
class GuaranteeCheck:
    """Whether a bucket list replays every CP-active batch within the limits."""

    ok: bool
    """True when every batch replays in a graph within the padding factor."""
    failing_tokens: int | None
    """Smallest `n` some batch of which would fall back (None when ok)."""
    failing_rows: int | None
    """Worst-case rows of that `n`."""
    reason: str | None
    """Eager reason for that worst-case batch."""
    witness: list[int] | None
    """A concrete `extend_seq_lens` of `n` tokens that falls back, if one was found."""
    failing_sizes: int
    """How many batch sizes `n` have a falling-back worst case."""


def guarantee_buckets(
    limits: Limits, cp: CPLayout, spec: CaptureSpec = CaptureSpec(), max_padding_factor: float = 2.0,
    bucket_multiple: int = 1,
) -> list[int]:
    """Fewest buckets (ascending) so that every CP-active batch within `limits` replays (module doc).

    Raises `ModelError` when some batch size has no bucket at all that could hold its worst case."""
    n, rows = worst_rows(limits, cp)
    top = int(np.floor(limits.max_tokens * max_padding_factor))
    grid = candidate_grid(cp, spec, top, bucket_multiple)
    sizes, cap = grid.sizes, grid.capacity_rows
    lo = np.maximum(np.searchsorted(sizes, n, side="left"), np.searchsorted(cap, rows, side="left"))
    hi = np.searchsorted(sizes, n * float(max_padding_factor), side="right") - 1
    impossible = np.flatnonzero(lo > hi)
    if impossible.size:
        i = int(impossible[0])
        raise ModelError(
            f"no bucket can replay every batch of {n[i]} tokens: worst case needs {rows[i]} rows "
            f"within {max_padding_factor:g}x (try bucket_multiple 1 or a larger max_padding_factor)"
        )
    chosen: list[int] = []
    last = -1
    for lo_i, hi_i in zip(lo.tolist(), hi.tolist()):  # hi is nondecreasing in n
        if last < lo_i:
            last = hi_i
            chosen.append(hi_i)
    return sizes[chosen].tolist()


def check_guarantee(
    buckets: list[int], limits: Limits, cp: CPLayout, spec: CaptureSpec = CaptureSpec(),
    max_padding_factor: float = 2.0,
) -> GuaranteeCheck:
    """Prove that `buckets` replay every CP-active batch within `limits`, or name the smallest
    batch size whose worst case falls back, with a concrete witness batch when one is found."""
    table = BucketTable.build(buckets, cp, spec)
    n, rows = worst_rows(limits, cp)
    sel = select_buckets(n, rows, np.ones(len(n), dtype=bool), table, max_padding_factor)
    failing = np.flatnonzero(~sel.graph)
    if failing.size == 0:
        return GuaranteeCheck(True, None, None, None, None, 0)
    i = int(failing[0])
    reason = sel.reason_of(i).value
    witness = _witness(int(n[i]), limits, cp, table, max_padding_factor)
    return GuaranteeCheck(False, int(n[i]), int(rows[i]), reason, witness, int(failing.size))


def _witness(num_tokens: int, limits: Limits, cp: CPLayout, table: BucketTable, factor: float) -> list[int] | None:
    """A batch of `num_tokens` that falls back: requests of `2*cp+1` tokens (one extra token on
    rank 0 each) plus one remainder request; tries every request count, most first."""
    short = cp.min_request_tokens if cp.cp_size > 1 else 1
    seq = 2 * cp.cp_size + 1 if cp.cp_size > 1 else 1
    k = np.arange(min(limits.max_requests, max(num_tokens // short, 1)), 0, -1, dtype=np.int64)
    k = np.repeat(k, 2)  # [tries]: request counts, most first, each with both filler lengths
    first = np.tile(np.array([seq, short], dtype=np.int64), len(k) // 2)
    rest = num_tokens - (k - 1) * first
    keep = rest >= short
    if not keep.any():
        return None
    k, first, rest = k[keep], first[keep], rest[keep]
    lens = np.repeat(first, k)  # each try: k - 1 fillers, then the remainder in its last slot
    ends = np.cumsum(k) - 1
    lens[ends] = rest
    batches = BatchSet.from_sizes(lens, k)
    n = batches.num_tokens
    sel = select_buckets(n, local_rows(batches, cp), np.ones(len(n), dtype=bool), table, factor)
    bad = np.flatnonzero(~sel.graph)
    return batches.batch(int(bad[0])) if bad.size else None
