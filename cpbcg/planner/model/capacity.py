"""Local capacity `C(B)`: the CP-local rows a graph captured for global bucket `B` holds.

The runtime captures bucket `B` from a dummy batch and records that batch's physical rows
(docs/model.md "Local capacity"). Two capture layouts exist:

* `single_request`: one request of `B` tokens. cp 4, align 8:
  `C(2048)=512, C(2304)=576, C(2560)=640, C(2100)=528`.
* `context_bounded` (newer SGLang): the fewest requests of at most `max_context_size_tokens`
  each (full pieces, then the remainder). An error if that needs more than
  `max_capture_requests` request slots or leaves a piece shorter than `2*cp_size`.

Buckets below `2*cp_size` (zigzag) or below `cp_size` (interleave) cannot be captured and are
dropped, as SGLang's capture filter does; if none remain, that is an error. SGLang 0.5.23 first
rounds every configured bucket up to a multiple of `cp_size` (`capture_buckets`).

The rules are the strategy models' (`cpbcg.planner.model.strategy`); this module is their entry
point for a `CPLayout` and a `CaptureSpec`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from cpbcg.planner.choices import CaptureLayout
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.model.strategy import UNNAMED_ENGINE, CaptureSpec, PreparedBuckets

__all__ = ["CaptureLayout", "CaptureSpec", "capturable_buckets", "capture_buckets", "capture_pieces", "local_capacity",
           "minimum_capture_tokens"]


def capture_pieces(bucket_tokens: int, cp: CPLayout, spec: CaptureSpec) -> list[int]:
    """Extend lengths of the dummy batch used to capture `bucket_tokens`.

    Raises `ModelError` when the context-bounded layout needs more request slots than allowed
    or would make a piece shorter than `2*cp_size` (docs/model.md "Local capacity").
    """
    return cp.model.capture_pieces(bucket_tokens, spec)


def capture_buckets(buckets: Sequence[int], cp: CPLayout, deepep: bool = False, engine: str = UNNAMED_ENGINE) -> PreparedBuckets:
    """The list SGLang 0.5.23 captures from the configured `buckets` (tokens): rounded up to
    multiples of `cp_size` (of 8 first with DeepEP), unique, ascending, below-minimum dropped;
    `.note` says what changed, naming `engine` (`CaptureSpec.engine`). Raises `ModelError` if no bucket remains."""
    return cp.model.prepare_buckets(buckets, deepep, engine)


def capturable_buckets(buckets: Sequence[int], cp: CPLayout) -> list[int]:
    """Sorted unique buckets that SGLang's CP capture filter keeps (no rounding): `>= 2*cp_size`
    under zigzag (every rank needs a block of each of its two halves), `>= cp_size` under
    interleave (a token per rank). Without CP (`cp_size` 1) every bucket is kept.

    Raises `ModelError` if no bucket remains.
    """
    return cp.model.filter_capturable(buckets)


def minimum_capture_tokens(cp: CPLayout) -> int:
    """Smallest bucket the CP capture keeps: `2*cp_size` zigzag, `cp_size` interleave, 1 without CP."""
    return cp.model.min_capture_tokens


def local_capacity(buckets: Sequence[int], cp: CPLayout, spec: CaptureSpec = CaptureSpec()) -> np.ndarray:
    """[num_buckets] int64: `C(B)` rows for each (already capturable, ascending) bucket.

    Raises `ModelError` from `capture_pieces` for a bucket the capture layout cannot capture.
    """
    sizes = np.asarray([int(b) for b in buckets], dtype=np.int64)
    ok, capacity = cp.model.capacity_rows(sizes, spec)
    if not ok.all():
        capture_pieces(int(sizes[np.argmin(ok)]), cp, spec)  # raises with the reason
    return capacity
