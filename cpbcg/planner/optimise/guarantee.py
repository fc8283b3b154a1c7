"""Guarantee mode (trace-free): buckets that replay *every* CP-active batch within limits.

A CP-active batch of `n` tokens in `k` requests needs at most
`worst_case_rows(n, k) = align_up(floor(n/cp + k*(1 - 1/cp)), align)` rows (docs/model.md "Layout"; rows grow
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
from cpbcg.planner.model.layout import BatchSet, CPLayout, local_rows
from cpbcg.planner.model.selector import BucketTable, replay_windows, select_buckets


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
    batch of that size needs (`StrategyModel.worst_rows_upto`: exact for zigzag, else the §2 formula).
    Cached (guarantee and check ask for the same limits); the arrays are read-only."""
    n, rows = _worst_rows(limits, cp)
    n.flags.writeable = rows.flags.writeable = False
    return n, rows


def _worst_rows(limits: Limits, cp: CPLayout) -> tuple[np.ndarray, np.ndarray]:
    n = np.arange(cp.model.min_capture_tokens, limits.max_tokens + 1, dtype=np.int64)
    return n, cp.model.worst_rows_upto(n, limits.max_requests)


def headroom_required(max_tokens: int, max_requests: int, cp: CPLayout) -> list[tuple[int, int]]:
    """`[(max_tokens, rows)]`: a full chunk of at most `max_requests` requests at its exact
    worst-case rows, for `optimise(..., required=...)` (with `max_bucket_tokens` above the chunk:
    at cp 4 a full 8192-token chunk of 32 requests needs 2,072 rows, bucket 8192 holds 2,048).
    Empty when no CP-active forward of `max_tokens` tokens exists."""
    if max_tokens < cp.model.min_capture_tokens:
        return []
    # the chunk alone: each size's worst case depends on that size and the limits only (not on
    # the smaller sizes `worst_rows` lists), so this costs O(1) in the chunk, not O(chunk)
    rows = cp.model.worst_rows_upto(np.asarray([max_tokens], dtype=np.int64), max_requests)
    return [(max_tokens, int(rows[0]))]


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
    lo, hi = replay_windows(n, rows, sizes, cap, max_padding_factor)
    impossible = np.flatnonzero(lo > hi)
    if impossible.size:
        i = int(impossible[0])
        raise ModelError(
            f"no bucket can replay every batch of {n[i]} tokens: worst case needs {rows[i]} rows "
            f"within {max_padding_factor:g}x (try --bucket-multiple 1 or a larger --max-padding-factor)"
        )
    chosen: list[int] = []
    last = -1
    for lo_i, hi_i in zip(lo.tolist(), hi.tolist()):  # hi is nondecreasing in n
        if last < lo_i:
            last = hi_i
            chosen.append(hi_i)
    return [int(b) for b in sizes[chosen]]


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
    eager = sel.reason_of(i)
    assert eager is not None  # forward i is among the failing ones
    reason = eager.value
    witness = _witness(int(n[i]), limits, cp, table, max_padding_factor)
    return GuaranteeCheck(False, int(n[i]), int(rows[i]), reason, witness, int(failing.size))


def _witness(num_tokens: int, limits: Limits, cp: CPLayout, table: BucketTable, factor: float) -> list[int] | None:
    """A batch of `num_tokens` that falls back: requests of `2*cp+1` tokens (one extra token on
    rank 0 each) plus one remainder request; tries every request count, most first."""
    short, seq = cp.model.min_request_tokens, cp.model.adversarial_request_tokens
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


@dataclass(frozen=True)
class GuaranteeResult:
    """A trace-free guarantee: every CP-active forward within `limits` replays in `buckets`."""

    limits: Limits
    """Most requests and tokens per forward."""
    buckets: list[int]
    """The list proved (or found)."""
    check: GuaranteeCheck
    """The proof, or the smallest forward that falls back."""
    recommended: bool
    """True: `buckets` is the fewest-bucket list found; False: the configured list was checked."""
    max_tokens_source: str = ""
    """Where `limits.max_tokens` came from (`given (--max-tokens)`, the deployment's chunk and its rule)."""
