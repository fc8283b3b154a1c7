"""CP-local layout of prefill batches: the deployment's CP settings (`CPLayout`) and many
batches as flat arrays (`BatchSet`).

The rules (per-rank tokens, CP-activity, rows, worst cases, `C(B)`) live in one place,
`cpbcg.planner.model.strategy` (one model per CP mode, as SGLang 0.5.23's
`layers/cp/bcg/{zigzag,interleave}_bcg.py`); `CPLayout.model` is the model of a deployment and
the functions below are its vectorised entry points over a `BatchSet`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cpbcg.errors import ConfigError
from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.choices import CPStrategy
from cpbcg.planner.model.batches import MAX_TOKENS, BatchSet
from cpbcg.planner.model.strategy import RequestBlocks, StrategyModel, Zigzag, align_up, strategy_model

__all__ = ["MAX_TOKENS", "BatchSet", "CPLayout", "CPStrategy", "RequestBlocks", "align_up", "cp_active", "local_rows",
           "local_tokens", "worst_case_rows", "zigzag_blocks"]


@dataclass(frozen=True)
class CPLayout:
    """The static CP settings a deployment fixes.

    `cp_size == 1` means no context parallelism: rows equal tokens and every batch is eligible.
    """

    cp_size: int
    """Number of CP ranks (SGLang `--attn-cp-size`)."""
    strategy: CPStrategy = CPStrategy.zigzag
    """Sequence split strategy."""
    align_size: int | None = None
    """Row alignment; `None` means the runtime default (`2*cp_size` zigzag, `cp_size` interleave)."""

    def __post_init__(self) -> None:
        if self.cp_size < 1:
            raise ConfigError(f"cp_size must be >= 1, got {self.cp_size}")
        if self.align_size is not None and self.align_size < 1:
            raise ConfigError(f"align_size must be >= 1, got {self.align_size}")
        object.__setattr__(self, "strategy", CPStrategy(self.strategy))

    @cached_property
    def model(self) -> StrategyModel:
        """The rules of this CP mode (`cpbcg.planner.model.strategy`)."""
        return strategy_model(self.cp_size, self.strategy, self.align_size)

    @property
    def align_rows(self) -> int:
        """Effective row alignment (rows): `align_size`, else `2*cp_size` zigzag, `cp_size`
        interleave, 1 without CP."""
        return self.model.align_rows

    @property
    def min_request_tokens(self) -> int:
        """Smallest extend length a request may have for its forward to be CP-active: `2*cp_size`
        under zigzag (docs/model.md "Layout"), 1 under interleave or without CP (`cp_size == 1`)."""
        return self.model.min_request_tokens

    @property
    def min_active_tokens(self) -> int:
        """Smallest CP-active forward (tokens): `2*cp_size` zigzag, `cp_size` interleave (every
        rank gets a token), 1 without CP. Also the smallest capturable bucket (0.5.23 `min_capture_tokens`)."""
        return self.model.min_capture_tokens


def cp_active(batches: BatchSet, layout: CPLayout) -> BoolArray:
    """[num_batches] bool: whether each batch runs under CP (and may replay a CP graph).

    zigzag (docs/model.md "Layout"): `cp_size > 1`, total `>= 2*cp_size` and every request `>= 2*cp_size`.
    interleave: `cp_size > 1` and total `>= cp_size` (every rank gets a token; an assumption
    documented in docs/model.md). With `cp_size == 1` there is no CP and every batch is eligible
    for the plain (non-CP) graphs.
    """
    return layout.model.active(batches)


def local_tokens(batches: BatchSet, layout: CPLayout) -> Int64Array:
    """[num_batches, cp_size] int64: logical tokens each rank holds for each batch.

    Matches SGLang's zigzag split (docs/model.md "Layout"): `[1534, 161, 353]` at cp 4 gives
    `[513, 511, 512, 512]`. Computed for every batch, CP-active or not.
    """
    return layout.model.local_tokens(batches)


def local_rows(batches: BatchSet, layout: CPLayout) -> Int64Array:
    """[num_batches] int64: physical CP-local rows per rank = `align_up(max rank tokens, align)`.

    With `cp_size == 1` rows equal the batch's tokens (no alignment).
    Example (docs/model.md "Layout"): `[1534, 161, 353]`, cp 4, align 8 → 513 → 520 rows.
    """
    return layout.model.rows(batches)


def worst_case_rows(num_tokens: Int64Array | int, num_requests: Int64Array | int, layout: CPLayout) -> Int64Array:
    """Upper bound on rows for any batch of `num_tokens` tokens in `num_requests` requests.

    Domain §2: each request adds at most `1 - 1/cp` rows above the even share, so rows are at
    most `align_up(floor(n/cp + k*(1 - 1/cp)), align)`. Exact integer arithmetic; int or int64 array.
    """
    return layout.model.worst_case_rows(np.asarray(num_tokens, dtype=np.int64), np.asarray(num_requests, dtype=np.int64))


def zigzag_blocks(extend_len: int, cp_size: int) -> RequestBlocks:
    """Split one request of `extend_len` tokens into its `2*cp_size` zigzag blocks."""
    return Zigzag(cp_size).blocks(extend_len)
