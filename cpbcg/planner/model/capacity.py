"""Local capacity `C(B)`: the CP-local rows a graph captured for global bucket `B` holds.

The runtime captures bucket `B` from a dummy batch and records that batch's physical rows
(domain brief §3). Two capture layouts exist:

* `single_request`: one request of `B` tokens. cp 4, align 8:
  `C(2048)=512, C(2304)=576, C(2560)=640, C(2100)=528`.
* `context_bounded` (newer SGLang): the fewest requests of at most `max_context_size_tokens`
  each (full pieces, then the remainder). An error if that needs more than
  `max_capture_requests` request slots or leaves a piece shorter than `2*cp_size`.

Buckets below `2*cp_size` (zigzag) or below `cp_size` (interleave) cannot be captured and are
dropped, as SGLang's capture filter does; if none remain, that is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from cpbcg.errors import ModelError
from cpbcg.planner.choices import CaptureLayout
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy, local_rows


@dataclass(frozen=True)
class CaptureSpec:
    """How buckets are captured (the dummy batch's shape)."""

    layout: CaptureLayout = CaptureLayout.single_request
    """Dummy-batch layout."""
    max_context_size_tokens: int | None = None
    """Longest dummy request (tokens); required for `context_bounded`."""
    max_capture_requests: int | None = None
    """Request slots available to the dummy batch (SGLang's `max_bs` of the capture); None = unbounded."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", CaptureLayout(self.layout))


def capture_pieces(bucket_tokens: int, cp: CPLayout, spec: CaptureSpec) -> list[int]:
    """Extend lengths of the dummy batch used to capture `bucket_tokens`.

    Raises `ModelError` when the context-bounded layout needs more request slots than allowed
    or would make a piece shorter than `2*cp_size` (domain §3).
    """
    if spec.layout is CaptureLayout.single_request:
        return [bucket_tokens]
    ctx = spec.max_context_size_tokens
    if ctx is None or ctx < 1:
        raise ModelError("context_bounded capture needs max_context_size_tokens >= 1")
    full, rest = divmod(bucket_tokens, ctx)
    pieces = [ctx] * full + ([rest] if rest else [])
    if spec.max_capture_requests is not None and len(pieces) > spec.max_capture_requests:
        raise ModelError(
            f"bucket {bucket_tokens}: context-bounded capture needs {len(pieces)} requests of "
            f"<= {ctx} tokens, more than max_capture_requests={spec.max_capture_requests}"
        )
    short = cp.min_request_tokens if cp.cp_size > 1 else 1
    if min(pieces) < short:
        raise ModelError(
            f"bucket {bucket_tokens}: context-bounded capture leaves a piece of {min(pieces)} "
            f"tokens, shorter than 2*cp_size={short}"
        )
    return pieces


def capturable_buckets(buckets: Sequence[int], cp: CPLayout) -> list[int]:
    """Sorted unique buckets that SGLang's CP capture keeps: `>= 2*cp_size` under zigzag (every
    rank needs a block of each of its two halves), `>= cp_size` under interleave (a token per
    rank). Without CP (`cp_size` 1) every bucket is kept.

    Raises `ModelError` if no bucket remains.
    """
    unique = sorted({int(b) for b in buckets})
    least = minimum_capture_tokens(cp)
    unique = [b for b in unique if b >= least]
    if not unique:
        rule = "2*cp_size" if cp.strategy is CPStrategy.zigzag else "cp_size"
        raise ModelError(f"no capture bucket is >= {rule}={least}; nothing to capture")
    return unique


def minimum_capture_tokens(cp: CPLayout) -> int:
    """Smallest bucket the CP capture keeps: `2*cp_size` zigzag, `cp_size` interleave, 1 without CP."""
    if cp.cp_size <= 1:
        return 1
    return 2 * cp.cp_size if cp.strategy is CPStrategy.zigzag else cp.cp_size


def local_capacity(buckets: Sequence[int], cp: CPLayout, spec: CaptureSpec = CaptureSpec()) -> np.ndarray:
    """[num_buckets] int64: `C(B)` rows for each (already capturable, ascending) bucket.

    Raises `ModelError` from `capture_pieces`.
    """
    pieces = [capture_pieces(int(b), cp, spec) for b in buckets]
    return local_rows(BatchSet.from_lists(pieces), cp)
