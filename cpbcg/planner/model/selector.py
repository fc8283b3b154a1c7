"""The runtime's replay selector: which captured bucket replays a batch, or why it runs eagerly.

Rule (docs/model.md "Replay selection", SGLang's breakable-CUDA-graph prefill runner with the bucket search):
buckets ascending; for a CP-active batch of `n` tokens needing `R` local rows, scan buckets
`B >= n`, stop at the first `B > max_padding_factor * n`, return the first `B` with
`R <= C(B)`; none → eager. Exactly `factor * n` is allowed (8 → 16 yes, 5 → 16 no).

Eager reasons, in the order they are decided:
`not_cp_active` (zigzag eligibility fails), `above_largest_bucket` (`n` > largest bucket),
`padding_limit` (a bucket with the capacity exists but lies beyond `factor * n`),
`local_capacity` (no bucket `>= n` has `R` rows of capacity).
`rescued`: the natural bucket (smallest `B >= n`) lacked capacity, a larger one fitted.
`natural_overflow`: the natural bucket is within the padding limit but lacks capacity; before
the bucket search existed the runtime crashed here ("Live batch needs X local CP rows, but
global prefill bucket B has captured capacity C").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np
import numpy.typing as npt

from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.model.capacity import CaptureSpec, capture_buckets, local_capacity
from cpbcg.planner.model.layout import CPLayout


class EagerReason(str, Enum):
    """Why a batch runs eagerly instead of replaying a graph."""

    not_cp_active = "not_cp_active"
    above_largest_bucket = "above_largest_bucket"
    padding_limit = "padding_limit"
    local_capacity = "local_capacity"
    context_limit = "context_limit"
    """A request's sequence (prefix + extend) above the prefill graphs' `max_seq_len` (SGLang
    0.5.23 `can_replay_locally`); decided by `cpbcg.planner.model.replay_limits`."""
    multimodal_input = "multimodal_input"
    """An interleave forward holding a request with images (0.5.23 `allows_replay`); decided by
    `cpbcg.planner.model.replay_limits`."""


EAGER_REASONS: tuple[EagerReason, ...] = tuple(EagerReason)
GRAPH = 0
"""Internal reason code of a forward replayed in a graph (see `Selection`)."""


@dataclass(frozen=True)
class BucketTable:
    """Captured buckets and their local capacities, ascending."""

    capture_num_tokens: Int64Array
    """[num_buckets] int64 ascending: global token buckets `B`."""
    capacity_rows: Int64Array
    """[num_buckets] int64: local capacity `C(B)` in rows per rank."""
    note: str | None = None
    """How SGLang changed the configured list before capturing it (rounding, duplicates, the CP
    filter), or None when it captures the list as given (`PreparedBuckets.note`)."""

    @classmethod
    def build(cls, buckets: Sequence[int], cp: CPLayout, spec: CaptureSpec = CaptureSpec(), deepep: bool = False) -> "BucketTable":
        """The buckets SGLang 0.5.23 captures from the configured `buckets` (rounded up to
        multiples of `cp_size`, unique, `>= min_capture_tokens`: `capacity.capture_buckets`) with
        capacities from the capture model (docs/model.md "Local capacity").

        Raises `ModelError` if no bucket is capturable or the capture layout is impossible.
        """
        prepared = capture_buckets(buckets, cp, deepep, spec.engine)
        kept = list(prepared.capture_num_tokens)
        return cls(np.asarray(kept, dtype=np.int64), local_capacity(kept, cp, spec), prepared.note)

    @classmethod
    def from_mapping(cls, capacity_rows: dict[int, int]) -> "BucketTable":
        """From explicit `{bucket: capacity}` (e.g. read from a capture manifest)."""
        items = sorted(capacity_rows.items())
        return cls(np.array([b for b, _ in items], np.int64), np.array([c for _, c in items], np.int64))

    def as_dict(self) -> dict[int, int]:
        return dict(zip(self.capture_num_tokens.tolist(), self.capacity_rows.tolist()))


@dataclass(frozen=True)
class Selection:
    """Per-forward outcome of the selector, aligned with the input arrays.

    Read it through its properties and methods (`graph`, `bucket_tokens`, `eager_mask`,
    `reason_of`, `eager_counts`); the reason codes are this module's business alone.
    """

    bucket_index: Int64Array
    """[num_forwards] int64: index into the table of the replaying bucket, -1 if eager."""
    reason_code: npt.NDArray[np.int8]
    """[num_forwards] int8: internal code, 0 graph, `1 + EAGER_REASONS.index(reason)` eager."""
    rescued: BoolArray
    """[num_forwards] bool: natural bucket lacked capacity, a larger one replays it."""
    natural_overflow: BoolArray
    """[num_forwards] bool: natural bucket within the padding limit lacked capacity."""
    capture_num_tokens: Int64Array
    """[num_buckets] int64: the table's buckets (tokens), so `bucket_tokens` needs no table."""

    @property
    def graph(self) -> BoolArray:
        """[num_forwards] bool: replayed from a captured graph."""
        return np.equal(self.reason_code, GRAPH)

    @property
    def bucket_tokens(self) -> Int64Array:
        """[num_forwards] int64: bucket `B` (tokens) each forward replays in, 0 if eager."""
        return np.where(self.bucket_index >= 0, self.capture_num_tokens[np.maximum(self.bucket_index, 0)], 0)

    def with_eager(self, mask: BoolArray, reason: EagerReason) -> "Selection":
        """The selection with the forwards of `mask` ([num_forwards] bool) eager for `reason`."""
        return Selection(np.where(mask, -1, self.bucket_index), np.where(mask, _CODE[reason], self.reason_code),
                         self.rescued & ~mask, self.natural_overflow & ~mask, self.capture_num_tokens)

    def eager_mask(self, reason: EagerReason | str) -> BoolArray:
        """[num_forwards] bool: eager for `reason`."""
        mask: BoolArray = self.reason_code == _CODE[EagerReason(reason)]
        return mask

    def reason_of(self, index: int) -> EagerReason | None:
        """Eager reason of forward `index`, or None when it replays in a graph."""
        code = int(self.reason_code[index])
        return None if code == GRAPH else EAGER_REASONS[code - 1]

    def eager_counts(self, weights: Int64Array) -> dict[EagerReason, int]:
        """`weights` ([num_forwards] int64) summed per eager reason, every reason present."""
        sums = np.bincount(self.reason_code.astype(np.int64), weights=weights, minlength=len(EAGER_REASONS) + 1)
        return {reason: int(round(sums[i + 1])) for i, reason in enumerate(EAGER_REASONS)}


_CODE = {reason: np.int8(i + 1) for i, reason in enumerate(EAGER_REASONS)}


def select_buckets(
    num_tokens: Int64Array,
    rows: Int64Array,
    active: BoolArray,
    table: BucketTable,
    max_padding_factor: float = 2.0,
) -> Selection:
    """Vectorised replay selection for many batches.

    Args:
        num_tokens: [N] int64, `n` per batch (tokens).
        rows: [N] int64, CP-local physical rows each batch needs.
        active: [N] bool, CP eligibility.
        table: captured buckets and capacities.
        max_padding_factor: largest allowed `B / n` (SGLang `max_padding_factor`, default 2).
    """
    buckets, capacity = table.capture_num_tokens, table.capacity_rows
    k = len(buckets)
    n, limit = num_tokens, num_tokens * float(max_padding_factor)  # the window rule of `replay_windows`
    natural = _natural_index(buckets, n)
    chosen = np.full(len(n), -1, dtype=np.int64)
    pending = np.flatnonzero(active & (natural < k))
    index = natural[pending]
    while pending.size:
        in_window = buckets[index] <= limit[pending]
        fits = in_window & (rows[pending] <= capacity[index])
        chosen[pending[fits]] = index[fits]
        more = in_window & ~fits & (index + 1 < k)
        pending, index = pending[more], index[more] + 1

    clipped = np.minimum(natural, k - 1)
    natural_in_window = active & (natural < k) & (buckets[clipped] <= limit)
    natural_overflow = natural_in_window & (rows > capacity[clipped])
    # A bucket >= n with enough capacity exists iff the suffix maximum of capacity suffices.
    suffix_max = np.maximum.accumulate(capacity[::-1])[::-1]
    some_fit = (natural < k) & (suffix_max[clipped] >= rows)

    reason = np.full(len(n), GRAPH, dtype=np.int8)
    eager = chosen < 0
    reason[eager & some_fit] = _CODE[EagerReason.padding_limit]
    reason[eager & ~some_fit] = _CODE[EagerReason.local_capacity]
    reason[eager & (natural >= k)] = _CODE[EagerReason.above_largest_bucket]
    reason[~active] = _CODE[EagerReason.not_cp_active]
    return Selection(chosen, reason, natural_overflow & ~eager, natural_overflow, buckets)


def replay_windows(
    num_tokens: Int64Array, rows: Int64Array, sizes: Int64Array, capacity: Int64Array, max_padding_factor: float
) -> tuple[Int64Array, Int64Array]:
    """`(lo, hi)` [N] int64 indices into ascending `sizes` ([M] int64 tokens, `capacity` [M]
    nondecreasing rows): the buckets that may replay a forward of `num_tokens` tokens needing
    `rows` rows are exactly `sizes[lo..hi]` (none when `lo > hi`): `lo` the first with `B >= n`
    and `C(B) >= R`, `hi` the last with `B <= factor*n` (the selector's float comparison; 0.5.23
    `select_replay_bucket`). The optimiser and guarantee mode plan on these windows."""
    lo = np.maximum(np.searchsorted(sizes, num_tokens, side="left"), np.searchsorted(capacity, rows, side="left"))
    return lo, replay_window_hi(sizes, num_tokens, max_padding_factor)


def replay_window_hi(sizes: Int64Array, num_tokens: Int64Array, max_padding_factor: float) -> Int64Array:
    """[N] int64: last index of ascending `sizes` with `B <= max_padding_factor * n` (-1 if none)."""
    return np.searchsorted(sizes, num_tokens * float(max_padding_factor), side="right") - 1


def _natural_index(buckets: Int64Array, num_tokens: Int64Array) -> Int64Array:
    """[N] index of the smallest bucket >= n (len(buckets) if none): a table lookup when the
    largest bucket is small enough, else a binary search."""
    largest = int(buckets[-1])
    if largest > 1 << 22 or len(num_tokens) < largest:
        return np.searchsorted(buckets, num_tokens, side="left")
    lookup = np.searchsorted(buckets, np.arange(largest + 2), side="left")  # lookup[largest+1] = k
    out: Int64Array = lookup[np.minimum(num_tokens, largest + 1)]
    return out


def select_one(
    num_tokens: int,
    rows: int,
    active: bool,
    capacity_rows: dict[int, int],
    max_padding_factor: float = 2.0,
) -> tuple[int | None, EagerReason | None, bool]:
    """The same rule for one batch, as a plain loop (the reference the vectorised path is tested
    and benchmarked against). Returns `(bucket or None, eager reason or None, rescued)`."""
    if not active:
        return None, EagerReason.not_cp_active, False
    candidates = sorted(b for b in capacity_rows if b >= num_tokens)
    if not candidates:
        return None, EagerReason.above_largest_bucket, False
    for bucket in candidates:
        if bucket > max_padding_factor * num_tokens:
            break
        if rows <= capacity_rows[bucket]:
            return bucket, None, bucket != candidates[0]
    if any(rows <= capacity_rows[b] for b in candidates):
        return None, EagerReason.padding_limit, False
    return None, EagerReason.local_capacity, False
