"""Eager reasons beyond the selector's four that a trace can show (SGLang 0.5.23
`PrefillCudaGraphRunner.can_replay_locally`).

* `multimodal_input`: under interleave a forward holding a request with images runs eagerly
  (`InterleaveCPBCGInput.allows_replay`: `not contains_mm_inputs`); zigzag replays it. The
  simulation marks such forwards from the trace's image count (Azure 2025 `NumImages`; every
  chunk of the request counts). Decided before `context_limit`, after `not_cp_active`.
* `context_limit`: the runner replays a forward only if its longest sequence (cached prefix
  plus the tokens prefilled so far, this chunk included) is at most `max_context_size` and
  `max_seq_len` (`for context_limit in (self.max_context_size, self.max_seq_len)`). For CP
  graphs 0.5.23 drops `max_context_size` (`_ignore_max_context_size`), and `max_seq_len` is the
  prefill cuda-graph config's (the trtllm_mha and dsa backends set no default), so the limit
  is `Deployment.max_seq_len_tokens`, None unless configured. The
  scheduler simulation knows each request's position and hands it over in a
  `SeqBatchSet`; for a plain batch trace the longest extend length is the position (a lower
  bound: no prefix is known), so a forward counted here is eager for certain.

0.5.23's other eager conditions (LoRA, input embeddings,
return_logprob, hidden-state capture, target-verify, the DP vote) are not visible in the traces
cpbcg reads: docs/model.md lists them as not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.model.layout import BatchSet, CPStrategy
from cpbcg.planner.model.selector import EagerReason, Selection


def _required_max_seq_tokens() -> Int64Array:
    raise TypeError("SeqBatchSet needs max_seq_tokens")


@dataclass(frozen=True)
class SeqBatchSet(BatchSet):
    """A `BatchSet` that also knows each forward's longest sequence (prefix + extend so far)."""

    max_seq_tokens: Int64Array = field(default_factory=_required_max_seq_tokens)
    """[num_batches] int64: the longest request sequence of each forward after it (tokens)."""
    multimodal: BoolArray | None = None
    """[num_batches] bool: the forward holds a request with images, or None (none known)."""

    def split(self, max_batches: int) -> Iterator["SeqBatchSet"]:
        for start, piece in zip(range(0, self.num_batches, max_batches), super().split(max_batches)):
            part = slice(start, start + piece.num_batches)
            yield SeqBatchSet(piece.extend_seq_lens, piece.offsets, piece.counts, self.max_seq_tokens[part],
                              None if self.multimodal is None else self.multimodal[part])

    def subset(self, mask: BoolArray) -> "SeqBatchSet":
        plain = super().subset(mask)
        return SeqBatchSet(plain.extend_seq_lens, plain.offsets, plain.counts, self.max_seq_tokens[mask],
                           None if self.multimodal is None else self.multimodal[mask])


def max_seq_tokens(batches: BatchSet) -> Int64Array:
    """[num_batches] int64: each forward's longest sequence: a `SeqBatchSet`'s own, else the
    longest extend length (no prefix known)."""
    if isinstance(batches, SeqBatchSet):
        return batches.max_seq_tokens
    if batches.num_batches == 0:
        return np.zeros(0, dtype=np.int64)
    return np.maximum.reduceat(batches.extend_seq_lens, batches.offsets[:-1])


def apply_replay_limits(sel: Selection, batches: BatchSet, active: np.ndarray, strategy: CPStrategy,
                        max_context_tokens: int | None) -> Selection:
    """`sel` with the CP-active forwards 0.5.23 keeps out of graphs for what the trace shows:
    under interleave those holding images (`multimodal_input`), then those whose longest
    sequence exceeds `max_context_tokens` (`context_limit`; None: no limit). CP activity is
    decided first, as 0.5.23 does."""
    mm = getattr(batches, "multimodal", None)
    if strategy is CPStrategy.interleave and mm is not None:
        blocked = active & mm
        if blocked.any():
            sel = sel.with_eager(blocked, EagerReason.multimodal_input)
            active = active & ~blocked
    if max_context_tokens is None:
        return sel
    over = active & (max_seq_tokens(batches) > max_context_tokens)
    return sel.with_eager(over, EagerReason.context_limit) if over.any() else sel
