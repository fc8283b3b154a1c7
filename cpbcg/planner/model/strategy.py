"""One model per CP mode: no CP, zigzag, interleave. The only module that computes per-rank
tokens, CP-activity, physical rows, worst cases, the smallest capturable size, `C(B)`, or the
bucket list SGLang captures.

The classes mirror SGLang 0.5.23's own split (`sglang/srt/layers/cp/bcg/`): `bcg.py`'s
`PrefillCPBCGInput` (shared: `required_local_tokens` aligns `_max_local_tokens` up to
`get_cp_padding_align_size()`, `select_replay_bucket`), `zigzag_bcg.py`'s `ZigzagCPBCGInput`
(`min_capture_tokens = 2*cp`, `_max_local_tokens` from the zigzag split) and
`interleave_bcg.py`'s `InterleaveCPBCGInput` (`min_capture_tokens = cp`,
`_max_local_tokens = ceil(sum(lens) / cp)`). `NoCP` is `cp_size == 1`: rows equal tokens.

Rules (each written once, here):

* zigzag split: a request of `L` tokens is cut into `seg = 2*cp` blocks, `base, rem = divmod(L,
  seg)`, block `j` holds `base + [j < rem]`; rank `r` owns blocks `r` and `seg-1-r`, so it holds
  `2*base + h_r(rem)` with `h_r(m) = [r < m] + [seg-1-r < m]` (`_zigzag_extra_table`).
* interleave: token `i` of the forward goes to rank `i % cp`.
* physical rows (every rank) = `align_up(max over ranks, align_size)`; `align_size` defaults to
  `2*cp` zigzag, `cp` interleave (0.5.23 `layers/cp/padding.py::get_cp_padding_align_size`).
* CP-active: zigzag needs every request `>= 2*cp` tokens; interleave a forward `>= cp` tokens.
* capture (0.5.23 `PrefillCudaGraphRunner.capture_prepare`): bucket `B` is the fewest synthetic
  requests of at most `context_len` tokens; `C(B)` is that batch's rows. More requests than
  request slots is an error (`assert bs <= self.max_bs`).
* bucket preparation (0.5.23 `get_prefill_num_tokens_to_capture` + `utils/common.py::
  get_cuda_graph_batch_size_alignment`, then `layers/cp/bcg/bcg.py::
  filter_prefill_cp_bcg_capture_num_tokens`): with DeepEP first every bucket is rounded up to a
  multiple of 8 (`arg_groups/cuda_graph_hook.py::apply_deepep_adjustments`); the runner rounds
  every bucket up to a multiple of `cp_size`, sorts and drops duplicates; the CP filter then drops
  buckets below `min_capture_tokens` (none left: start-up fails).

Vectorised methods take a `BatchSet` (`cpbcg.planner.model.layout`) or int64 arrays; the scalar
ones (`rows_of`, `capture_pieces`) are plain loops, the references the vectorised ones are tested
against. Get the model of a deployment with `CPLayout.model` (or `strategy_model`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, Sequence, overload

import numpy as np

from cpbcg.errors import ModelError
from cpbcg.planner.arrays import BoolArray, Int32Array, Int64Array, sorted_unique
from cpbcg.planner.choices import CaptureLayout, CPStrategy
from cpbcg.planner.model.batches import BatchSet
from cpbcg.planner.words import counted


UNNAMED_ENGINE = "the engine"
"""What the capture note names when no engine release is given (`CaptureSpec.engine`: a deployment
built by hand)."""
DEEPEP_BUCKET_MULTIPLE = 8
"""DeepEP a2a under breakable prefill graphs: buckets rounded up to a multiple of 8 (0.5.23
`apply_deepep_adjustments`)."""
EXACT_DP_STEPS = 1 << 20
"""Most numpy steps (`cp_size * requests * 2*cp_size`) the exact zigzag worst case may take; above
it (cp 64 with 128 requests, cp 1,000 at all) the §2 upper bound stands in: never below the truth,
so headroom and guarantees stay safe, and at most `align` rows above it."""
_NONE = -(1 << 30)
"""Marks an unreachable residue sum in the worst-case DP tables."""
_FIELD_BITS = 16
_NOTE_ITEMS = 8
"""Most buckets a note lists one by one."""
_RANKS_PER_WORD = 64 // _FIELD_BITS


@overload
def align_up(x: int, align: int) -> int: ...
@overload
def align_up(x: Int64Array, align: int) -> Int64Array: ...
def align_up(x: int | Int64Array, align: int) -> int | Int64Array:
    """Round `x` (int or int64 array) up to a multiple of `align` (>= 1)."""
    return -(-x // align) * align


@dataclass(frozen=True)
class CaptureSpec:
    """How buckets are captured (the dummy batch's shape)."""

    layout: CaptureLayout = CaptureLayout.single_request
    """Dummy-batch layout."""
    max_context_size_tokens: int | None = None
    """Longest dummy request (tokens); required for `context_bounded`."""
    max_capture_requests: int | None = None
    """Request slots available to the dummy batch (SGLang's `max_bs` of the capture); None = unbounded."""
    engine: str = UNNAMED_ENGINE
    """The engine and release that captures the list, as the capture note names it (`EngineRules.release`:
    `SGLang 0.5.23`, set by `cpbcg.config`); `UNNAMED_ENGINE` for a deployment built by hand."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layout", CaptureLayout(self.layout))


@dataclass(frozen=True)
class RequestBlocks:
    """How one request is split under zigzag, for explanations (`cpbcg layout`)."""

    extend_len: int
    """Extend tokens of the request."""
    block_tokens: tuple[int, ...]
    """[2*cp_size] tokens in each block, block 0 first."""
    rank_blocks: tuple[tuple[int, int], ...]
    """[cp_size] the two block indices rank r owns: `(r, 2*cp_size - 1 - r)`."""


@dataclass(frozen=True)
class PreparedBuckets:
    """A configured bucket list as SGLang 0.5.23 captures it (`StrategyModel.prepare_buckets`)."""

    configured_tokens: tuple[int, ...]
    """The list as given (tokens)."""
    capture_num_tokens: tuple[int, ...]
    """What the runner captures: rounded, unique, ascending, `>= min_capture_tokens`."""
    rounded: tuple[tuple[int, int], ...]
    """`(configured, captured)` for every bucket the rounding moved."""
    dropped: tuple[int, ...]
    """Rounded buckets below `min_capture_tokens` (the CP filter drops them)."""
    multiple_tokens: int
    """The runner's rounding multiple (`cp_size`; 8*... with DeepEP, see `prepare_buckets`)."""
    min_capture_tokens: int
    """Smallest bucket kept."""
    engine: str = UNNAMED_ENGINE
    """The engine and release the note names (`CaptureSpec.engine`)."""

    @property
    def note(self) -> str | None:
        """One line saying how the list changed, or None when SGLang captures it as given."""
        parts: list[str] = []
        if self.rounded:
            moved = ", ".join(f"{a} -> {b}" for a, b in self.rounded[:_NOTE_ITEMS])
            more = f", ... ({len(self.rounded)} in all)" if len(self.rounded) > _NOTE_ITEMS else ""
            parts.append(f"rounded up to multiples of {self.multiple_tokens}: {moved}{more}")
        merged = len(self.configured_tokens) - len(self.capture_num_tokens) - len(self.dropped)  # repeats, given or after rounding
        if merged > 0:
            parts.append(f"{counted(merged, 'duplicate')} dropped")
        if self.dropped:
            which = "bucket" if len(self.dropped) == 1 else f"{len(self.dropped)} buckets:"
            parts.append(f"dropped {which} {', '.join(map(str, self.dropped))} (below min_capture_tokens {self.min_capture_tokens})")
        if not parts:
            return None
        kept = self.capture_num_tokens
        shown = list(kept) if len(kept) <= _NOTE_ITEMS else f"{len(kept)} buckets {kept[0]}..{kept[-1]}"
        return f"{self.engine} captures {shown}: " + "; ".join(parts)


class StrategyModel:
    """Rules of one CP mode at one `cp_size` and row alignment. Subclasses: `NoCP`, `Zigzag`,
    `Interleave`; build one with `strategy_model`. Instances are immutable and cached."""

    strategy: ClassVar[CPStrategy | None] = None
    """The `--cp-strategy` this models (None: no CP)."""

    def __init__(self, cp_size: int, align_size: int | None = None) -> None:
        self.cp_size = int(cp_size)
        self.align_rows = int(align_size) if align_size is not None else self.default_align_rows()
        """Row alignment (rows): `align_size`, or the runtime default of the mode."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cp_size={self.cp_size}, align_rows={self.align_rows})"

    # --- sizes -------------------------------------------------------------------------------
    def default_align_rows(self) -> int:
        """0.5.23 `get_cp_padding_align_size()`: `2*cp` zigzag, `cp` otherwise."""
        return self.cp_size

    @property
    def min_capture_tokens(self) -> int:
        """Smallest bucket the CP capture keeps (0.5.23 `min_capture_tokens`; tokens); also the
        smallest CP-active forward."""
        return self.cp_size

    @property
    def min_request_tokens(self) -> int:
        """Smallest extend length a request of a CP-active forward (and a capture piece) may have."""
        return 1

    @property
    def bucket_multiple_tokens(self) -> int:
        """The runner rounds every bucket up to a multiple of this (0.5.23
        `get_cuda_graph_batch_size_alignment` on CUDA, no two-batch overlap, attention TP 1:
        `attn_cp_size`)."""
        return self.cp_size

    # --- per forward ---------------------------------------------------------------------------
    def local_tokens(self, batches: BatchSet) -> Int64Array:
        """[num_batches, cp_size] int64: logical tokens each rank holds for each batch."""
        raise NotImplementedError

    def active(self, batches: BatchSet) -> BoolArray:
        """[num_batches] bool: whether each batch runs under CP (and may replay a CP graph)."""
        return batches.num_tokens >= self.min_capture_tokens

    def rows(self, batches: BatchSet) -> Int64Array:
        """[num_batches] int64: physical rows per rank, `align_up(max rank tokens, align_rows)`
        (0.5.23 `required_local_tokens`)."""
        raise NotImplementedError

    def rows_of(self, extend_seq_lens: Sequence[int]) -> int:
        """Rows of one forward, a plain loop (0.5.23 `required_local_tokens` of one batch)."""
        raise NotImplementedError

    def blocks(self, extend_len: int) -> RequestBlocks | None:
        """The zigzag blocks of one request (None when the mode has no blocks)."""
        return None

    @property
    def adversarial_request_tokens(self) -> int:
        """Filler request length of adversarial batches: `2*cp + 1` puts its one extra token in
        block 0, which rank 0 owns, so many of them fill rank 0 (1 without CP)."""
        return 2 * self.cp_size + 1

    # --- forwards known by size ------------------------------------------------------------
    def worst_case_rows(self, num_tokens: Int64Array, num_requests: Int64Array) -> Int64Array:
        """§2 upper bound on rows of any `num_requests` requests of `num_tokens` tokens
        ([N] int64 arrays): `align_up(floor(n/cp + k*(1 - 1/cp)), align)` zigzag,
        `align_up(ceil(n/cp), align)` interleave, `n` without CP."""
        return self._share_rows(np.asarray(num_tokens, dtype=np.int64))

    @overload
    def _share_rows(self, num_tokens: int) -> int: ...
    @overload
    def _share_rows(self, num_tokens: Int64Array) -> Int64Array: ...
    def _share_rows(self, num_tokens: int | Int64Array) -> int | Int64Array:
        """Rows of `num_tokens` tokens dealt evenly over the ranks: `align_up(ceil(n/cp), align)`
        (0.5.23 `InterleaveCPBCGInput._max_local_tokens`, aligned)."""
        return align_up(-(-num_tokens // self.cp_size), self.align_rows)

    def bound_active(self, num_tokens: Int64Array, num_requests: Int64Array,
                     decode_requests: Int64Array | None = None) -> BoolArray:
        """[N] bool: some forward of `num_tokens` tokens in `num_requests` requests is CP-active.
        `decode_requests` [N] (optional): how many of those requests are one-token decode rows of
        a mixed-chunk forward."""
        return np.asarray(num_tokens) >= self.min_capture_tokens

    def worst_forward_rows(self, num_tokens: Int64Array, num_requests: Int64Array) -> Int64Array:
        """[N] int64: most rows any EXACTLY `num_requests[i]` requests of `num_tokens[i]` tokens
        need (forwards that cannot be CP-active get `worst_case_rows`)."""
        return np.asarray(self.worst_case_rows(num_tokens, num_requests), dtype=np.int64)

    def worst_rows_upto(self, num_tokens: Int64Array, max_requests: int) -> Int64Array:
        """[N] int64 (`num_tokens` ascending, each CP-active): most rows any forward of that many
        tokens in AT MOST `max_requests` requests needs."""
        return np.asarray(self.worst_case_rows(num_tokens, np.ones_like(num_tokens)), dtype=np.int64)

    # --- capture ------------------------------------------------------------------------------
    def capture_pieces(self, bucket_tokens: int, spec: CaptureSpec) -> list[int]:
        """Extend lengths of the dummy batch that captures `bucket_tokens` (0.5.23
        `capture_prepare`). Raises `ModelError` when the context-bounded layout needs more than
        `max_capture_requests` requests or leaves a piece below `min_request_tokens`."""
        if spec.layout is CaptureLayout.single_request:
            return [bucket_tokens]
        ctx = _context(spec)
        full, rest = divmod(bucket_tokens, ctx)
        pieces = [ctx] * full + ([rest] if rest else [])
        if spec.max_capture_requests is not None and len(pieces) > spec.max_capture_requests:
            raise ModelError(
                f"bucket {bucket_tokens}: context-bounded capture needs {counted(len(pieces), 'request')} of "
                f"<= {ctx} tokens, more than max_capture_requests={spec.max_capture_requests}"
            )
        if min(pieces) < self.min_request_tokens:
            raise ModelError(
                f"bucket {bucket_tokens}: context-bounded capture leaves a piece of {min(pieces)} "
                f"tokens, shorter than 2*cp_size={self.min_request_tokens}"
            )
        return pieces

    def capacity_rows(self, sizes: Int64Array, spec: CaptureSpec) -> tuple[BoolArray, Int64Array]:
        """`(capturable [M] bool, C(B) [M] int64)` for bucket sizes `sizes` ([M] int64 tokens)
        under the capture layout of `spec`, vectorised (the rules of `capture_pieces`; `C` of an
        uncapturable size is meaningless)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        if spec.layout is CaptureLayout.single_request:
            return np.ones(len(sizes), dtype=bool), self._single_request_rows(sizes)
        ctx = _context(spec)
        full, rest = np.divmod(sizes, ctx)
        short = self.min_request_tokens
        ok = ((rest == 0) | (rest >= short)) & ((full == 0) | (ctx >= short))
        if spec.max_capture_requests is not None:
            ok &= full + (rest > 0) <= spec.max_capture_requests
        return ok, self._pieces_rows(full, rest, ctx)

    def capture_tokens_limit(self, spec: CaptureSpec) -> int | None:
        """Largest bucket the capture layout of `spec` can hold at all (tokens; None = no limit):
        above it `capacity_rows` marks every size uncapturable (context-bounded: more pieces than
        `max_capture_requests`, or a context shorter than `min_request_tokens`, so no full piece);
        at or below it a size is uncapturable only when its last piece is shorter than
        `min_request_tokens` (a run of fewer than `min_request_tokens` sizes)."""
        if spec.layout is CaptureLayout.single_request:
            return None
        ctx = _context(spec)
        if ctx < self.min_request_tokens:
            return ctx - 1
        return None if spec.max_capture_requests is None else spec.max_capture_requests * ctx

    def _single_request_rows(self, sizes: Int64Array) -> Int64Array:
        return self._pieces_rows(np.zeros_like(sizes), sizes, 1)

    def _pieces_rows(self, full: Int64Array, rest: Int64Array, ctx: int) -> Int64Array:
        """[M] int64 rows of `full[i]` requests of `ctx` tokens plus one of `rest[i]`."""
        return np.asarray(self._share_rows(full * ctx + rest), dtype=np.int64)

    def prepare_buckets(self, configured: Sequence[int], deepep: bool = False, engine: str = UNNAMED_ENGINE) -> PreparedBuckets:
        """The bucket list SGLang 0.5.23 captures from `configured` (tokens): with `deepep`,
        rounded up to multiples of 8 first; then rounded up to multiples of
        `bucket_multiple_tokens`, sorted, duplicates dropped; then buckets below
        `min_capture_tokens` dropped (module doc). `engine`: the release the note names
        (`CaptureSpec.engine`). Raises `ModelError` if none remain."""
        given = tuple(int(b) for b in configured)
        out = np.asarray(given, dtype=np.int64)
        if deepep:
            out = align_up(out, DEEPEP_BUCKET_MULTIPLE)
        out = align_up(out, self.bucket_multiple_tokens)
        rounded = tuple(sorted({(a, int(b)) for a, b in zip(given, out.tolist()) if a != b}))
        unique = sorted(set(out.tolist()))
        least = self.min_capture_tokens
        kept = tuple(b for b in unique if b >= least)
        if not kept:
            raise ModelError(f"no capture bucket is >= {self.min_capture_rule}={least}; nothing to capture")
        dropped = tuple(b for b in unique if b < least)
        multiple = self.bucket_multiple_tokens * (DEEPEP_BUCKET_MULTIPLE if deepep else 1)
        return PreparedBuckets(given, kept, rounded, dropped, multiple, least, engine)

    def round_buckets(self, sizes: Sequence[int] | Int64Array) -> Int64Array:
        """[M] int64: each size rounded up as the runner rounds it (without DeepEP; no filter)."""
        return np.asarray(align_up(np.asarray(sizes, dtype=np.int64), self.bucket_multiple_tokens), dtype=np.int64)

    def capture_grid(self, sizes: Int64Array) -> Int64Array:
        """[M'] int64: `sizes` ([M] int64 tokens) as the runner prepares them (rounded up, unique,
        ascending, `>= min_capture_tokens`), without DeepEP; may be empty."""
        out = sorted_unique(self.round_buckets(sizes))
        return out[out >= self.min_capture_tokens]

    def filter_capturable(self, buckets: Sequence[int]) -> list[int]:
        """Sorted unique buckets `>= min_capture_tokens` (0.5.23's CP filter alone, no rounding).
        Raises `ModelError` if none remain."""
        unique = sorted({int(b) for b in buckets})
        kept = [b for b in unique if b >= self.min_capture_tokens]
        if not kept:
            raise ModelError(f"no capture bucket is >= {self.min_capture_rule}={self.min_capture_tokens}; nothing to capture")
        return kept

    min_capture_rule: ClassVar[str] = "cp_size"
    """`min_capture_tokens` in words, for messages."""

    capture_emulated: ClassVar[bool] = False
    """Whether `cpbcg capture` can emulate this mode's CP forward (its rank split lives in
    `cpbcg.graph_capture.zigzag`: zigzag only)."""

class NoCP(StrategyModel):
    """`cp_size == 1`: every forward is eligible for the plain prefill graphs; rows = tokens."""

    def __init__(self, cp_size: int = 1, align_size: int | None = None) -> None:
        super().__init__(cp_size, align_size)

    def default_align_rows(self) -> int:
        return 1

    @property
    def min_capture_tokens(self) -> int:
        return 1

    @property
    def bucket_multiple_tokens(self) -> int:
        return 1

    def local_tokens(self, batches: BatchSet) -> Int64Array:
        return batches.num_tokens.reshape(-1, 1).astype(np.int64)

    def active(self, batches: BatchSet) -> BoolArray:
        return np.ones(batches.num_batches, dtype=bool)

    def rows(self, batches: BatchSet) -> Int64Array:
        return batches.num_tokens

    def rows_of(self, extend_seq_lens: Sequence[int]) -> int:
        return sum(int(x) for x in extend_seq_lens)

    def worst_case_rows(self, num_tokens: Int64Array, num_requests: Int64Array) -> Int64Array:
        return num_tokens

    def bound_active(self, num_tokens: Int64Array, num_requests: Int64Array,
                     decode_requests: Int64Array | None = None) -> BoolArray:
        return np.ones(len(num_tokens), dtype=bool)

    @property
    def adversarial_request_tokens(self) -> int:
        return 1

    def _pieces_rows(self, full: Int64Array, rest: Int64Array, ctx: int) -> Int64Array:
        return np.asarray(full * ctx + rest, dtype=np.int64)

    min_capture_rule = "1"


class Interleave(StrategyModel):
    """0.5.23 `InterleaveCPBCGInput`: token `i` to rank `i % cp`; rows `align_up(ceil(n/cp), align)`,
    monotone in `n` (the natural bucket always fits); CP-active iff `n >= cp`."""

    strategy = CPStrategy.interleave

    def local_tokens(self, batches: BatchSet) -> Int64Array:
        cp, n = self.cp_size, batches.num_tokens
        out = np.empty((batches.num_batches, cp), dtype=np.int64)
        for rank in range(cp):
            out[:, rank] = n // cp + (n % cp > rank)
        return out

    def rows(self, batches: BatchSet) -> Int64Array:
        return self._share_rows(batches.num_tokens)

    def rows_of(self, extend_seq_lens: Sequence[int]) -> int:
        return int(self._share_rows(sum(int(x) for x in extend_seq_lens)))


class Zigzag(StrategyModel):
    """0.5.23 `ZigzagCPBCGInput`: the zigzag split (module doc); CP-active iff every request has
    `>= 2*cp` tokens; smallest capture `2*cp`."""

    strategy = CPStrategy.zigzag
    min_capture_rule = "2*cp_size"
    capture_emulated = True

    def default_align_rows(self) -> int:
        return 2 * self.cp_size

    @property
    def min_capture_tokens(self) -> int:
        return 2 * self.cp_size

    @property
    def min_request_tokens(self) -> int:
        return 2 * self.cp_size

    def blocks(self, extend_len: int) -> RequestBlocks:
        """THE zigzag rule (0.5.23 `ZigzagCPBCGInput._max_local_tokens`): `seg = 2*cp` blocks,
        `base, rem = divmod(L, seg)`, block `j` holds `base + [j < rem]`; rank `r` owns blocks `r`
        and `seg-1-r`. Every other zigzag computation derives from it (`extra_table`)."""
        seg = 2 * self.cp_size
        base, rem = divmod(extend_len, seg)
        return RequestBlocks(extend_len, tuple(base + (j < rem) for j in range(seg)),
                             tuple((r, seg - 1 - r) for r in range(self.cp_size)))

    @functools.cached_property
    def extra_table(self) -> Int64Array:
        """[2*cp, cp] int64: `h_r(m)`, the tokens above `2*base` rank `r` holds of a request with
        remainder `m` (`[r < m] + [seg-1-r < m]`), read off `blocks(m)`; a request of `L = seg*base
        + m` tokens gives rank `r` `2*base + h_r(m)`."""
        rows = []
        for m in range(2 * self.cp_size):
            split = self.blocks(m)
            rows.append([split.block_tokens[a] + split.block_tokens[b] for a, b in split.rank_blocks])
        return np.asarray(rows, dtype=np.int64)

    def _request_tokens(self, lengths: Int64Array) -> Int64Array:
        """[..., cp] int64: per-rank tokens of single requests of `lengths` tokens."""
        base, rem = np.divmod(np.asarray(lengths, dtype=np.int64), 2 * self.cp_size)
        return 2 * base[..., None] + self.extra_table[rem]

    def active(self, batches: BatchSet) -> BoolArray:
        if batches.num_batches == 0:
            return np.zeros(0, dtype=bool)
        shortest = np.minimum.reduceat(batches.extend_seq_lens, batches.offsets[:-1])
        return shortest >= self.min_request_tokens

    def local_tokens(self, batches: BatchSet) -> Int64Array:
        out = np.empty((batches.num_batches, self.cp_size), dtype=np.int64)
        if batches.num_batches == 0:
            return out
        twice_base, extras = self._extras(batches)
        for rank, extra in enumerate(extras):
            out[:, rank] = twice_base + extra
        return out

    def rows(self, batches: BatchSet) -> Int64Array:
        twice_base, extras = self._extras(batches)
        return align_up(twice_base + functools.reduce(np.maximum, extras), self.align_rows)

    def _extras(self, batches: BatchSet) -> tuple[Int64Array, list[Int64Array]]:
        """`(2*sum(base) [num_batches], [cp] arrays of per-rank extras)`.

        The per-request extras (`extra_table[rem]`, 0..2 per rank) are packed 16 bits per rank
        into int64 words and summed per batch in one `reduceat` per word; batches of 32,768 or
        more requests (where a 16-bit field could overflow) take the plain per-rank path. The
        extras of a request add up to its `rem` over the ranks, so
        `sum(base) = (n - sum of extras) / (2*cp)` exactly."""
        cp, seg = self.cp_size, 2 * self.cp_size
        lens = batches.extend_seq_lens
        if seg & (seg - 1) == 0:  # cp a power of two: mask
            rem = lens & (seg - 1)
        else:  # float quotient is exact here: lens < 2**52 and the fractional part is >= 1/seg
            rem = lens - (lens * (1.0 / seg)).astype(np.int64) * seg
        table = self.extra_table
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

    def rows_of(self, extend_seq_lens: Sequence[int]) -> int:
        per_rank = np.zeros(self.cp_size, dtype=np.int64)
        for length in extend_seq_lens:
            per_rank += self._request_tokens(np.int64(length))
        return int(align_up(int(per_rank.max()), self.align_rows))

    def _pieces_rows(self, full: Int64Array, rest: Int64Array, ctx: int) -> Int64Array:
        tokens = full[:, None] * self._request_tokens(np.int64(ctx))[None, :] + self._request_tokens(rest)
        return np.asarray(align_up(tokens.max(axis=1), self.align_rows), dtype=np.int64)

    # --- worst cases -------------------------------------------------------------------------
    def worst_case_rows(self, num_tokens: Int64Array, num_requests: Int64Array) -> Int64Array:
        return align_up((num_tokens + num_requests * (self.cp_size - 1)) // self.cp_size, self.align_rows)

    def bound_active(self, num_tokens: Int64Array, num_requests: Int64Array,
                     decode_requests: Int64Array | None = None) -> BoolArray:
        """Every request needs `2*cp_size` tokens, so a mixed-chunk forward (one-token decode
        rows, `decode_requests > 0`) is never CP-active."""
        active = np.asarray(num_tokens) >= self.min_request_tokens * np.asarray(num_requests)
        return active if decode_requests is None else active & (np.asarray(decode_requests) == 0)

    def worst_forward_rows(self, num_tokens: Int64Array, num_requests: Int64Array) -> Int64Array:
        """Exact over exactly `k` requests. A request `L = seg*b + m` (`b >= 1`) gives rank `r`
        `2b + h_r(m)` tokens; splitting a request of base `b >= 2` into `seg` and `L - seg` leaves
        every rank's count unchanged, so exactly `k` requests with bases summing to `u >= k` reach
        what at most `k` residues summing to `S = n - seg*u` reach: `max over u >= k of
        2u + Q_r(k, S)` (`_most_extra_tokens`). Vectorised per distinct `k`."""
        rows = np.asarray(self.worst_case_rows(num_tokens, num_requests), dtype=np.int64)
        active = self.bound_active(num_tokens, num_requests)
        ks = sorted_unique(num_requests[active]).tolist()
        tables = [self._most_extra_tokens(rank, max(ks)) for rank in range(self.cp_size)] if ks else []
        for k in ks:
            mine = np.flatnonzero(active & (num_requests == k))
            tokens = _exact_k_tokens(num_tokens[mine], int(k), 2 * self.cp_size, [t[k] for t in tables])
            rows[mine] = align_up(tokens, self.align_rows)
        return rows

    def worst_rows_upto(self, num_tokens: Int64Array, max_requests: int) -> Int64Array:
        """Exact over at most `max_requests` requests (zigzag needs every request `>= 2*cp`, so
        `k <= n // (2*cp)`); past `EXACT_DP_STEPS` the §2 bound. See `_zigzag_worst_tokens`."""
        cp = self.cp_size
        k_top = min(max_requests, int(num_tokens.max()) // (2 * cp)) if num_tokens.size else 0
        if cp * max(k_top, 1) * 2 * cp > EXACT_DP_STEPS:  # very wide CP: the §2 bound (>= the truth)
            return np.asarray(self.worst_case_rows(num_tokens, np.minimum(max_requests, num_tokens // (2 * cp))), dtype=np.int64)
        return np.asarray(align_up(self._worst_tokens(num_tokens, max_requests), self.align_rows), dtype=np.int64)

    def _worst_tokens(self, n: Int64Array, max_requests: int) -> Int64Array:
        """[N] most logical tokens one rank can hold for a zigzag batch of `n` tokens (n ascending)
        in at most `max_requests` requests.

        `k` requests with residues summing to `S` and bases summing to `u = (n - S) / seg >= k`
        give `2u + H`, `H = sum h_r(m)`. A DP over (requests, `S`) gives the largest `H`
        (`Q[k, S]`: at most `k` requests, `k >= 1`); then for each `n` the answer is the best rank
        and `u` with `S = n - seg*u`, `1 <= u`, `k = min(max_requests, u)`. For
        `u >= max_requests` that is a running maximum over `S`; below it only
        `n / (2*seg - 1) <= u` can reach `S` (each residue is `< seg`), a short range per `n`.
        Tighter than the §2 bound: n=8100, 32 requests, cp 4 needs at most 2048 rows, the bound
        says 2056. Time: O(cp * (k_top * seg * s_top + k_top**2 * seg))."""
        seg = 2 * self.cp_size
        if not n.size:
            return np.zeros(0, dtype=np.int64)
        k_top = int(min(max_requests, int(n.max()) // seg))
        best = np.full(len(n), _NONE, dtype=np.int64)
        for rank in range(self.cp_size):
            q = self._most_extra_tokens(rank, k_top)
            np.maximum(best, _best_over_bases(q, n, max_requests, seg), out=best)
        return best

    def _most_extra_tokens(self, rank: int, k_top: int) -> Int32Array:
        """[k_top + 1, S] int32: most `H` rank `rank` gets from 1..k requests whose residues sum
        to exactly `S` (row 0 unreachable: a batch holds at least one request)."""
        seg = 2 * self.cp_size
        h = self.extra_table[:, rank]
        s_top = k_top * (seg - 1)
        table = np.full((k_top + 1, s_top + 1), _NONE, dtype=np.int32)
        table[0, 0] = 0
        for c in range(1, k_top + 1):
            width = c * (seg - 1) + 1  # residue sums c requests can reach
            row, prev = table[c, :width], table[c - 1]
            for m in range(seg):
                np.maximum(row[m:], prev[: width - m] + h[m], out=row[m:])
        table[0, 0] = _NONE
        np.maximum.accumulate(table, axis=0, out=table)
        return table


def _context(spec: CaptureSpec) -> int:
    ctx = spec.max_context_size_tokens
    if ctx is None or ctx < 1:
        raise ModelError("context_bounded capture needs max_context_size_tokens >= 1")
    return int(ctx)


def _exact_k_tokens(n: Int64Array, k: int, seg: int, residue_rows: list[Int32Array]) -> Int64Array:
    """[N] most logical tokens one rank holds over exactly `k` zigzag requests of `n` tokens
    (every `n >= seg*k`): max over ranks `r` and `u >= k` of `2u + Q_r(k, n - seg*u)`;
    `residue_rows[r]` is `Q_r(k, S)` for `S = 0..k*(seg-1)` (0 requests read as 0)."""
    best = np.zeros(len(n), dtype=np.int64)
    if not residue_rows:
        return best
    rows = np.stack(residue_rows).astype(np.int64)  # [cp, S]: every rank's row has the same length
    j = np.arange(rows.shape[1]) // seg
    res_of = n % seg
    for res in range(min(seg, rows.shape[1])):
        mine = np.flatnonzero(res_of == res)
        if not mine.size:
            continue
        # best over S <= res + seg*j, then over the ranks (the same index for every rank)
        run = np.maximum.accumulate(rows[:, res::seg] - 2 * j[res::seg], axis=1).max(axis=0)
        bases = (n[mine] - res) // seg
        top_j = np.minimum(bases - k, len(run) - 1)  # S <= n - seg*k, i.e. u >= k
        best[mine] = np.maximum(0, 2 * bases + run[top_j])
    return best


def _best_over_bases(q: Int32Array, n: Int64Array, max_requests: int, seg: int) -> Int64Array:
    """[N] max over `u >= 1` of `2u + q[min(max_requests, u), n - seg*u]` (see `_worst_tokens`)."""
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


@functools.lru_cache(maxsize=64)
def strategy_model(cp_size: int, strategy: CPStrategy = CPStrategy.zigzag, align_size: int | None = None) -> StrategyModel:
    """The model of one CP mode (the one place that branches on the strategy and on `cp_size == 1`)."""
    if cp_size == 1:
        return NoCP(1, align_size)
    return (Zigzag if CPStrategy(strategy) is CPStrategy.zigzag else Interleave)(cp_size, align_size)
