"""CP-local layout of prefill batches: per-rank logical tokens and physical rows.

The rules are the runtime's own (domain brief §2, matching SGLang's zigzag split of a prefill
forward across `cp_size` ranks):

* zigzag: each request of `L` extend tokens is cut into `seg = 2 * cp_size` blocks,
  `base, rem = divmod(L, seg)`, block `j` holding `base + 1` tokens if `j < rem` else `base`.
  Rank `r` owns blocks `r` and `seg - 1 - r`.
* interleave: token `i` of the batch goes to rank `i % cp_size`.
* physical rows (equal on every rank) = `align_up(max over ranks of logical tokens, align_size)`.

Everything here is vectorised over many batches at once. A set of batches is a `BatchSet`:
the flat request lengths of all batches plus offsets, so no Python loop runs per request.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, Sequence

import numpy as np

from cpbcg.errors import ConfigError, TraceError
from cpbcg.planner.choices import CPStrategy


MAX_TOKENS = 2**31 - 1
"""Largest length, count or bucket cpbcg accepts (tokens): far above any real context, and small
enough that no sum over a trace can overflow int64."""


def align_up(x: np.ndarray | int, align: int) -> np.ndarray | int:
    """Round `x` (int or int64 array) up to a multiple of `align` (>= 1)."""
    return -(-x // align) * align


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

    @property
    def align_rows(self) -> int:
        """Effective row alignment (rows)."""
        if self.align_size is not None:
            return self.align_size
        if self.cp_size == 1:
            return 1
        return 2 * self.cp_size if self.strategy is CPStrategy.zigzag else self.cp_size

    @property
    def min_request_tokens(self) -> int:
        """Smallest extend length a request may have for its forward to be CP-active: `2*cp_size`
        under zigzag (domain §2), 1 under interleave or without CP (`cp_size == 1`)."""
        return 2 * self.cp_size if self.strategy is CPStrategy.zigzag and self.cp_size > 1 else 1

    @property
    def min_active_tokens(self) -> int:
        """Smallest CP-active forward (tokens): `2*cp_size` zigzag, `cp_size` interleave (every
        rank gets a token), 1 without CP. Also the smallest capturable bucket."""
        if self.cp_size == 1:
            return 1
        return 2 * self.cp_size if self.strategy is CPStrategy.zigzag else self.cp_size


@dataclass(frozen=True)
class BatchSet:
    """Many prefill batches as flat arrays (ragged, no per-request Python objects).

    Batch `i` is `extend_seq_lens[offsets[i]:offsets[i+1]]` and occurred `counts[i]` times.
    Every batch holds at least one request; every length is >= 1 (the readers enforce it).
    """

    extend_seq_lens: np.ndarray
    """[num_requests] int64: extend tokens of every request, batch after batch."""
    offsets: np.ndarray
    """[num_batches + 1] int64: start of each batch in `extend_seq_lens`; last = num_requests."""
    counts: np.ndarray = field(default=None)  # type: ignore[assignment]
    """[num_batches] int64: how many times each batch occurred (weights, >= 1)."""

    def __post_init__(self) -> None:
        if self.counts is None:
            object.__setattr__(self, "counts", np.ones(len(self.offsets) - 1, dtype=np.int64))

    @classmethod
    def from_sizes(cls, extend_seq_lens, sizes, counts=None) -> "BatchSet":
        """From flat lengths ([num_requests] int64-like) and requests per batch ([num_batches])."""
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        weights = None if counts is None else np.asarray(counts, dtype=np.int64)
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
    def num_requests(self) -> np.ndarray:
        """[num_batches] int64: requests per batch."""
        return np.diff(self.offsets)

    @cached_property
    def num_tokens(self) -> np.ndarray:
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
        return self.extend_seq_lens[self.offsets[index] : self.offsets[index + 1]].tolist()

    def subset(self, mask: np.ndarray) -> "BatchSet":
        """The batches where `mask` ([num_batches] bool) is true, in order."""
        sizes = self.num_requests[mask]
        keep = np.repeat(mask, self.num_requests)
        return BatchSet.from_sizes(self.extend_seq_lens[keep], sizes, self.counts[mask])

    def _segment_sum(self, values: np.ndarray) -> np.ndarray:
        if self.num_batches == 0:
            return np.zeros(0, dtype=np.int64)
        return np.add.reduceat(values, self.offsets[:-1], dtype=np.int64)


def cp_active(batches: BatchSet, layout: CPLayout) -> np.ndarray:
    """[num_batches] bool: whether each batch runs under CP (and may replay a CP graph).

    zigzag (domain §2): `cp_size > 1`, total `>= 2*cp_size` and every request `>= 2*cp_size`.
    interleave: `cp_size > 1` and total `>= cp_size` (every rank gets a token; an assumption
    documented in docs/model.md). With `cp_size == 1` there is no CP and every batch is eligible
    for the plain (non-CP) graphs.
    """
    if batches.num_batches == 0:
        return np.zeros(0, dtype=bool)
    if layout.cp_size == 1:
        return np.ones(batches.num_batches, dtype=bool)
    if layout.strategy is CPStrategy.interleave:
        return batches.num_tokens >= layout.cp_size
    shortest = np.minimum.reduceat(batches.extend_seq_lens, batches.offsets[:-1])
    return shortest >= layout.min_request_tokens


def local_tokens(batches: BatchSet, layout: CPLayout) -> np.ndarray:
    """[num_batches, cp_size] int64: logical tokens each rank holds for each batch.

    Matches SGLang's zigzag split (domain §2): `[1534, 161, 353]` at cp 4 gives
    `[513, 511, 512, 512]`. Computed for every batch, CP-active or not.
    """
    cp = layout.cp_size
    out = np.empty((batches.num_batches, cp), dtype=np.int64)
    if batches.num_batches == 0:
        return out
    if cp == 1:
        out[:, 0] = batches.num_tokens
        return out
    if layout.strategy is CPStrategy.interleave:
        n = batches.num_tokens
        for rank in range(cp):
            out[:, rank] = n // cp + (n % cp > rank)
        return out
    twice_base, extras = _zigzag_extras(batches, cp)
    for rank, extra in enumerate(extras):
        out[:, rank] = twice_base + extra
    return out


_FIELD_BITS = 16
_RANKS_PER_WORD = 64 // _FIELD_BITS


def _zigzag_extras(batches: BatchSet, cp: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Zigzag per-rank tokens as `(2*sum(base) [num_batches], [cp] arrays of per-rank extras)`.

    Per request, rank r gets `2*base + [rem > r] + [rem > 2cp-1-r]`. The per-request extras
    (0..2 per rank) are looked up from `rem` in one gather, packed 16 bits per rank into int64
    words, and summed per batch in one `reduceat` per word; batches of 32,768 or more requests
    (where a 16-bit field could overflow) take the plain per-rank path. The extras of a request
    add up to its `rem` over the ranks, so `sum(base) = (n - sum of extras) / (2*cp)` exactly.
    """
    seg = 2 * cp
    lens = batches.extend_seq_lens
    if seg & (seg - 1) == 0:  # cp a power of two: mask
        rem = lens & (seg - 1)
    else:  # float quotient is exact here: lens < 2**52 and the fractional part is >= 1/seg
        rem = lens - (lens * (1.0 / seg)).astype(np.int64) * seg
    ranks = np.arange(cp)
    table = (np.arange(seg)[:, None] > ranks).astype(np.int64) + (np.arange(seg)[:, None] > seg - 1 - ranks)
    if batches.num_batches and batches.num_requests.max() >= 1 << (_FIELD_BITS - 1):
        extras = [batches._segment_sum(table[rem, rank]) for rank in range(cp)]
    else:
        mask = (1 << _FIELD_BITS) - 1
        extras = []
        for first in range(0, cp, _RANKS_PER_WORD):
            group = list(range(first, min(cp, first + _RANKS_PER_WORD)))
            shifts = np.array([_FIELD_BITS * (r - first) for r in group], dtype=np.int64)
            lut = (table[:, group] << shifts).sum(axis=1)  # [seg] packed extras per rem value
            packed = batches._segment_sum(lut[rem])
            extras += [(packed >> shift) & mask for shift in shifts]
    return 2 * ((batches.num_tokens - functools.reduce(np.add, extras)) // seg), extras


def local_rows(batches: BatchSet, layout: CPLayout) -> np.ndarray:
    """[num_batches] int64: physical CP-local rows per rank = `align_up(max rank tokens, align)`.

    With `cp_size == 1` rows equal the batch's tokens (no alignment).
    Example (domain §2): `[1534, 161, 353]`, cp 4, align 8 → 513 → 520 rows.
    """
    if layout.cp_size == 1:
        return batches.num_tokens
    if layout.strategy is CPStrategy.interleave:
        n = batches.num_tokens
        return align_up(-(-n // layout.cp_size), layout.align_rows)
    twice_base, extras = _zigzag_extras(batches, layout.cp_size)
    return align_up(twice_base + functools.reduce(np.maximum, extras), layout.align_rows)


def worst_case_rows(num_tokens: np.ndarray | int, num_requests: np.ndarray | int, layout: CPLayout):
    """Upper bound on rows for any batch of `num_tokens` tokens in `num_requests` requests.

    Domain §2: each request adds at most `1 - 1/cp` rows above the even share, so rows are at
    most `align_up(floor(n/cp + k*(1 - 1/cp)), align)`. Exact integer arithmetic; int or int64 array.
    """
    cp = layout.cp_size
    if cp == 1:
        return num_tokens
    if layout.strategy is CPStrategy.interleave:
        return align_up(-(-np.asarray(num_tokens) // cp), layout.align_rows)
    return align_up((num_tokens + num_requests * (cp - 1)) // cp, layout.align_rows)


@dataclass(frozen=True)
class RequestBlocks:
    """How one request is split under zigzag, for explanations (`cpbcg layout`)."""

    extend_len: int
    """Extend tokens of the request."""
    block_tokens: tuple[int, ...]
    """[2*cp_size] tokens in each block, block 0 first."""
    rank_blocks: tuple[tuple[int, int], ...]
    """[cp_size] the two block indices rank r owns: `(r, 2*cp_size - 1 - r)`."""


def zigzag_blocks(extend_len: int, cp_size: int) -> RequestBlocks:
    """Split one request of `extend_len` tokens into its `2*cp_size` zigzag blocks."""
    seg = 2 * cp_size
    base, rem = divmod(extend_len, seg)
    blocks = tuple(base + (j < rem) for j in range(seg))
    owners = tuple((r, seg - 1 - r) for r in range(cp_size))
    return RequestBlocks(extend_len, blocks, owners)
