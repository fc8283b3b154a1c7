"""CP-local layout of prefill batches: the deployment's CP settings (`CPLayout`) and many
batches as flat arrays (`BatchSet`).

The rules (per-rank tokens, CP-activity, rows, worst cases, `C(B)`) live in one place,
`cpbcg.planner.model.strategy` (one model per CP mode, as SGLang 0.5.23's
`layers/cp/bcg/{zigzag,interleave}_bcg.py`); `CPLayout.model` is the model of a deployment and
the functions below are its vectorised entry points over a `BatchSet`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.choices import CPStrategy
from cpbcg.planner.model.strategy import RequestBlocks, StrategyModel, Zigzag, align_up, strategy_model

__all__ = ["MAX_TOKENS", "BatchSet", "CPLayout", "CPStrategy", "RequestBlocks", "align_up", "cp_active", "local_rows",
           "local_tokens", "worst_case_rows", "zigzag_blocks"]

MAX_TOKENS = 2**31 - 1
"""Largest length, count or bucket cpbcg accepts (tokens): far above any real context, and small
enough that no sum over a trace can overflow int64."""


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


_EVERY_ONCE: Int64Array = np.zeros(0, dtype=np.int64)
"""Marks a `BatchSet` built without counts (`__post_init__` puts a 1 per batch)."""


@dataclass(frozen=True)
class BatchSet:
    """Many prefill batches as flat arrays (ragged, no per-request Python objects).

    Batch `i` is `extend_seq_lens[offsets[i]:offsets[i+1]]` and occurred `counts[i]` times.
    Every batch holds at least one request; every length is >= 1 (the readers enforce it).
    """

    extend_seq_lens: Int64Array
    """[num_requests] int64: extend tokens of every request, batch after batch."""
    offsets: Int64Array
    """[num_batches + 1] int64: start of each batch in `extend_seq_lens`; last = num_requests."""
    counts: Int64Array = field(default_factory=lambda: _EVERY_ONCE)
    """[num_batches] int64: how many times each batch occurred (weights, >= 1); default all 1."""

    def __post_init__(self) -> None:
        if self.counts is _EVERY_ONCE:
            object.__setattr__(self, "counts", np.ones(len(self.offsets) - 1, dtype=np.int64))

    @classmethod
    def from_sizes(cls, extend_seq_lens: Sequence[int] | Int64Array, sizes: Sequence[int] | Int64Array,
                   counts: Sequence[int] | Int64Array | None = None) -> "BatchSet":
        """From flat lengths ([num_requests] int64-like) and requests per batch ([num_batches])."""
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        weights = _EVERY_ONCE if counts is None else np.asarray(counts, dtype=np.int64)
        return cls(np.asarray(extend_seq_lens, dtype=np.int64), offsets, weights)

    @classmethod
    def from_lists(
        cls, batches: Sequence[Sequence[int]], counts: Sequence[int] | None = None
    ) -> "BatchSet":
        """Build from Python lists of extend lengths (convenient for tests and small inputs).

        Raises `TraceError` for an empty batch or a length that is not a positive integer.
        """
        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        if np.any(sizes == 0):
            raise TraceError(f"batch {int(np.argmin(sizes))} has no requests")
        flat = [x for b in batches for x in b]
        if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 1 <= x <= MAX_TOKENS for x in flat):
            raise TraceError(f"extend_seq_lens must be positive integers up to {MAX_TOKENS}")
        return cls.from_sizes(flat, sizes, counts)

    @classmethod
    def concat(cls, parts: Iterable["BatchSet"]) -> "BatchSet":
        """Join several sets in order."""
        parts = list(parts)
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(1, np.int64))
        lens = np.concatenate([p.extend_seq_lens for p in parts])
        shifts = np.cumsum([0] + [len(p.extend_seq_lens) for p in parts[:-1]])
        offsets = np.concatenate([[0]] + [p.offsets[1:] + s for p, s in zip(parts, shifts)])
        counts = np.concatenate([p.counts for p in parts])
        return cls(lens, offsets.astype(np.int64), counts)

    @property
    def num_batches(self) -> int:
        return len(self.offsets) - 1

    @cached_property
    def num_requests(self) -> Int64Array:
        """[num_batches] int64: requests per batch."""
        return np.diff(self.offsets)

    @cached_property
    def num_tokens(self) -> Int64Array:
        """[num_batches] int64: `n = sum(extend_seq_lens)` of each batch (tokens)."""
        return self._segment_sum(self.extend_seq_lens)

    def split(self, max_batches: int) -> Iterator["BatchSet"]:
        """Consecutive pieces of at most `max_batches` batches (views, no copy)."""
        for start in range(0, self.num_batches, max_batches):
            stop = min(start + max_batches, self.num_batches)
            edges = self.offsets[start : stop + 1]
            yield BatchSet(self.extend_seq_lens[edges[0] : edges[-1]], edges - edges[0], self.counts[start:stop])

    def batch(self, index: int) -> list[int]:
        """The extend lengths of batch `index` as a Python list."""
        return [int(x) for x in self.extend_seq_lens[self.offsets[index] : self.offsets[index + 1]]]

    def subset(self, mask: BoolArray) -> "BatchSet":
        """The batches where `mask` ([num_batches] bool) is true, in order."""
        sizes = self.num_requests[mask]
        keep = np.repeat(mask, self.num_requests)
        return BatchSet.from_sizes(self.extend_seq_lens[keep], sizes, self.counts[mask])

    def _segment_sum(self, values: Int64Array) -> Int64Array:
        if self.num_batches == 0:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(values, self.offsets[:-1], dtype=np.int64)


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
