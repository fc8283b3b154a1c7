"""The optimiser's candidate grid: capturable bucket sizes and their local capacity `C(B)`.

Sizes are multiples of a step up to a limit (plus explicit extras), keeping those the capture
layout can capture (domain §3; `capacity.capture_pieces` is the one-size rule, vectorised
here): `>= 2*cp_size` under zigzag, and under the context-bounded layout no piece shorter than
`2*cp_size` and no more pieces than `max_capture_requests`. `C(B)` is nondecreasing over the
kept sizes (see `optimise.py`); a violation raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy, align_up, local_rows


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
    capturable sizes (`>= 2*cp_size` under zigzag; context-bounded capture possible, as
    `capacity.capture_pieces` decides).

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
    """Capturable sizes and their `C(B)`, vectorised (the rules of `capacity.capture_pieces`)."""
    single = BatchSet(sizes, np.arange(len(sizes) + 1, dtype=np.int64))
    if spec.layout is CaptureLayout.single_request:
        return sizes, local_rows(single, cp)
    ctx = spec.max_context_size_tokens
    if ctx is None or ctx < 1:
        raise ModelError("context_bounded capture needs max_context_size_tokens >= 1")
    full, rest = np.divmod(sizes, ctx)
    pieces = full + (rest > 0)
    short = cp.min_request_tokens if cp.cp_size > 1 else 1
    ok = (rest == 0) | (rest >= short)
    ok &= (full == 0) | (ctx >= short)
    if spec.max_capture_requests is not None:
        ok &= pieces <= spec.max_capture_requests
    sizes, full, rest = sizes[ok], full[ok], rest[ok]
    if cp.cp_size == 1 or cp.strategy is CPStrategy.interleave:
        return sizes, local_rows(BatchSet(sizes, np.arange(len(sizes) + 1, dtype=np.int64)), cp)
    seg = 2 * cp.cp_size
    rank = np.arange(cp.cp_size)

    def per_rank(length):  # [.., cp] zigzag tokens of one request of `length` on each rank
        base, rem = np.divmod(np.asarray(length)[..., None], seg)
        return 2 * base + (rem > rank) + (rem > seg - 1 - rank)

    tokens = full[:, None] * per_rank(np.int64(ctx))[None, :] + per_rank(rest)
    return sizes, align_up(tokens.max(axis=1), cp.align_rows).astype(np.int64)
