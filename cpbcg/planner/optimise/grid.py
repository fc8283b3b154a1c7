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

from cpbcg.errors import ConfigError, ModelError
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
