"""Zigzag CP sharding in torch: shard a batch's rows over ranks, gather them back, and attend.

The split is the runtime's (docs/model.md "Layout", SGLang 0.5.23 `ZigzagCPStrategy` in `srt/layers/cp/zigzag.py`), taken from the
planner's one implementation `cpbcg.planner.model.layout.zigzag_blocks`: each request of `L` tokens
is cut into `seg = 2*cp_size` blocks, block `j` holding `base + 1` tokens if `j < rem` else `base` (`base, rem = divmod(L, seg)`);
rank `r` holds block `r` then block `seg-1-r` of every request, requests in batch order, then
padding rows up to the bucket's captured capacity.

At the break each rank's two query blocks attend causally to every earlier row of the same
request, whichever rank holds it: keys and values are gathered from all ranks (`[cp*rows, ...]`,
rank 0's rows first) and masked by request id and position. Padding rows hold junk and are
never visible to real rows; a padding query attends only to itself so its output stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from cpbcg.graph_capture.model import attention
from cpbcg.errors import CaptureError
from cpbcg.planner.model.layout import zigzag_blocks

PAD = -1
"""Index, request id and position of a padding row."""


@dataclass(frozen=True)
class ShardPlan:
    """Where every token of a batch lives on the CP ranks (one bucket's row count)."""

    extend_seq_lens: tuple[int, ...]
    """Extend tokens of each request, in batch order."""
    cp_size: int
    """Number of CP ranks."""
    rows: int
    """Physical rows per rank (the bucket's captured capacity `C(B)` at replay)."""
    token_index: torch.Tensor
    """[cp_size, rows] int64: global token index (requests concatenated) of each row, -1 = padding."""
    request_id: torch.Tensor
    """[cp_size, rows] int64: request of each row, -1 = padding."""
    position: torch.Tensor
    """[cp_size, rows] int64: position of the row's token inside its request, -1 = padding."""
    _masks: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_seq_lens)

    @property
    def valid(self) -> torch.Tensor:
        """[cp_size, rows] bool: real (non-padding) rows."""
        return self.token_index >= 0

    def logical_tokens(self) -> list[int]:
        """[cp_size] real rows per rank (equals `planner.layout.local_tokens`)."""
        return self.valid.sum(dim=1).tolist()

    def attention_mask(self, rank: int) -> torch.Tensor:
        """[rows, cp_size*rows] bool: which gathered key rows each of `rank`'s query rows sees."""
        if rank not in self._masks:
            self._masks[rank] = _mask(self, rank)
        return self._masks[rank]


def rank_token_index(extend_seq_lens: list[int], cp_size: int) -> list[np.ndarray]:
    """[cp_size] arrays of global token indices each rank holds, in row order (no padding).

    The blocks are the planner's (`cpbcg.planner.model.layout.zigzag_blocks`): rank `r` takes block
    `r` then block `2*cp_size-1-r` of every request, requests in batch order.
    """
    per_rank: list[list[np.ndarray]] = [[] for _ in range(cp_size)]
    offset = 0
    for length in extend_seq_lens:
        blocks = zigzag_blocks(length, cp_size)
        starts = offset + np.concatenate([[0], np.cumsum(blocks.block_tokens)[:-1]])
        for rank, owned in enumerate(blocks.rank_blocks):
            for block in owned:
                per_rank[rank].append(np.arange(starts[block], starts[block] + blocks.block_tokens[block]))
        offset += length
    return [np.concatenate(parts).astype(np.int64) for parts in per_rank]


def plan_zigzag(extend_seq_lens: list[int], cp_size: int, rows: int, device: torch.device) -> ShardPlan:
    """Zigzag placement of a batch on `cp_size` ranks of `rows` rows each.

    Raises `CaptureError` if a rank needs more than `rows` rows (rows are never truncated).
    """
    lens = [int(x) for x in extend_seq_lens]
    per_rank = rank_token_index(lens, cp_size)
    needed = max(len(p) for p in per_rank)
    if needed > rows:
        raise CaptureError(f"batch {lens} needs {needed} rows on one CP rank, only {rows} are captured")
    token_index = np.full((cp_size, rows), PAD, dtype=np.int64)
    for rank, idx in enumerate(per_rank):
        token_index[rank, : len(idx)] = idx
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    req_of_token = np.repeat(np.arange(len(lens)), lens)
    valid = token_index >= 0
    request_id = np.where(valid, req_of_token[np.maximum(token_index, 0)], PAD)
    position = np.where(valid, token_index - starts[np.maximum(request_id, 0)], PAD)
    as_t = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    return ShardPlan(tuple(lens), cp_size, rows, as_t(token_index), as_t(request_id), as_t(position))


def padding_junk(rows: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """[rows, width] deterministic non-zero filler for padding rows (so a leak shows)."""
    grid = torch.arange(rows * width, device=like.device, dtype=torch.float32).view(rows, width)
    return (2.0 * torch.sin(0.37 * grid) + 0.5).to(like.dtype)


def shard(x: torch.Tensor, plan: ShardPlan) -> torch.Tensor:
    """Global `[num_tokens, width]` → per-rank `[cp_size, rows, width]`, padding rows filled with junk."""
    out = padding_junk(plan.cp_size * plan.rows, x.shape[1], x).view(plan.cp_size, plan.rows, -1)
    valid = plan.valid
    out[valid] = x[plan.token_index[valid]]
    return out


def unshard(gathered: torch.Tensor, plan: ShardPlan) -> torch.Tensor:
    """Gathered `[cp_size*rows, ...]` (or `[cp_size, rows, ...]`) → global `[num_tokens, ...]`.

    Padding rows are dropped; every real token appears exactly once.
    """
    flat = gathered.flatten(0, 1) if gathered.shape[:2] == (plan.cp_size, plan.rows) else gathered
    if flat.shape[0] != plan.cp_size * plan.rows:
        raise CaptureError(f"gathered rows {tuple(gathered.shape)} do not match cp_size {plan.cp_size} x rows {plan.rows}")
    valid = plan.valid.reshape(-1)
    out = flat.new_empty((plan.num_tokens, *flat.shape[1:]))
    out[plan.token_index.reshape(-1)[valid]] = flat[valid]
    return out


def _mask(plan: ShardPlan, rank: int) -> torch.Tensor:
    q_req, q_pos = plan.request_id[rank], plan.position[rank]
    k_req, k_pos = plan.request_id.reshape(-1), plan.position.reshape(-1)
    mask = (q_req[:, None] == k_req[None, :]) & (k_pos[None, :] <= q_pos[:, None]) & (k_req[None, :] >= 0)
    pad_rows = torch.nonzero(q_req < 0).squeeze(1)
    mask[pad_rows, rank * plan.rows + pad_rows] = True
    return mask


def cp_attention(
    q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, plan: ShardPlan, rank: int
) -> torch.Tensor:
    """Zigzag CP attention of one rank's queries over the keys/values gathered from all ranks.

    Args:
        q: [rows, H, D] this rank's queries.
        k_all, v_all: [cp_size*rows, KV, D] keys and values of every rank, rank 0 first.
        plan: the batch's shard plan; rank: this rank.
    Returns:
        [rows, H*D] attention output in `q.dtype` (4-D SDPA, so fused kernels run where they can).
    """
    return attention(q, k_all, v_all, mask=plan.attention_mask(rank))
