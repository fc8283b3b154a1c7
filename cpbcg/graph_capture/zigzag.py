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
import torch.nn.functional as F

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


QUERY_TILE_ROWS = 128
"""Query rows per SDPA call of the block-sparse CP attention (each tile attends to the key span
its rows need: the causal prefix of their requests, not every gathered row)."""


@dataclass(frozen=True)
class _Tiles:
    """One rank's block-sparse attention schedule (index tensors on the plan's device)."""

    key_order: torch.Tensor
    """[real keys] int64: gathered rows sorted by (request, position), padding keys left out."""
    tiles: tuple[tuple[slice | torch.Tensor, int, int, torch.Tensor], ...]
    """Per tile: its query rows (a slice where they are consecutive), the span `[lo, hi)` of
    `key_order` it reads, and its `[1, 1, rows, hi-lo]` bool mask (the causal mask
    `attention_mask` restricted to that span)."""
    pad_rows: torch.Tensor
    """Padding query rows of the rank (each attends only to its own key)."""


def _tiles(plan: ShardPlan, rank: int) -> _Tiles:
    """The rank's tiles, derived from the plan's request ids and positions only (as the mask is):
    keys sorted by (request, position) put every query's visible keys (its request's keys at
    positions <= its own) in one contiguous run `[lo, hi)`, so a tile of consecutive query rows
    reads the union of its rows' runs and masks the rest exactly as `attention_mask` does."""
    req, pos = plan.request_id.cpu().numpy(), plan.position.cpu().numpy()
    k_req, k_pos = req.reshape(-1), pos.reshape(-1)
    span = int(max(pos.max(initial=0), 0)) + 1
    keys = np.flatnonzero(k_req >= 0)
    key_code = k_req[keys] * span + k_pos[keys]
    order = np.argsort(key_code, kind="stable")
    sorted_code = key_code[order]
    q_req, q_pos = req[rank], pos[rank]
    real = np.flatnonzero(q_req >= 0)
    lo = np.searchsorted(sorted_code, q_req[real] * span, side="left")
    hi = np.searchsorted(sorted_code, q_req[real] * span + q_pos[real], side="right")
    device = plan.request_id.device
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    tiles = []
    for start in range(0, len(real), QUERY_TILE_ROWS):
        rows = real[start:start + QUERY_TILE_ROWS]
        t_lo, t_hi = lo[start:start + QUERY_TILE_ROWS], hi[start:start + QUERY_TILE_ROWS]
        first, last = int(t_lo.min()), int(max(t_hi.max(), t_lo.min()))
        cols = np.arange(first, last)
        mask = (cols[None, :] >= t_lo[:, None]) & (cols[None, :] < t_hi[:, None])
        consecutive = rows[-1] - rows[0] == len(rows) - 1
        where = slice(int(rows[0]), int(rows[-1]) + 1) if consecutive else as_t(rows)
        tiles.append((where, first, last, as_t(mask)[None, None]))
    return _Tiles(as_t(keys[order]), tuple(tiles), as_t(np.flatnonzero(q_req < 0)))


def _sorted_kv(plan: ShardPlan, order: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`k_all`, `v_all` rows in `order` as `[1, KV, keys, D]`, kept for the other ranks of the
    same layer (they attend over the same gathered tensors)."""
    last = plan._masks.get("sorted_kv")
    if last is not None and last[0] is k_all and last[1] is v_all:
        return last[2], last[3]
    k4, v4 = (t.index_select(0, order).transpose(0, 1).unsqueeze(0) for t in (k_all, v_all))
    plan._masks["sorted_kv"] = (k_all, v_all, k4, v4)
    return k4, v4


def cp_attention(
    q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, plan: ShardPlan, rank: int
) -> torch.Tensor:
    """Zigzag CP attention of one rank's queries over the keys/values gathered from all ranks,
    block-sparse: equal to SDPA under `plan.attention_mask(rank)` (the same visible keys per
    query), computed per tile of `QUERY_TILE_ROWS` query rows over only the key span the tile's
    requests need (the causal zigzag mask's nonzero blocks), GQA by SDPA's `enable_gqa` rather
    than expanded keys. A padding query's output is its own value row (it sees only its own key).

    Args:
        q: [rows, H, D] this rank's queries.
        k_all, v_all: [cp_size*rows, KV, D] keys and values of every rank, rank 0 first.
        plan: the batch's shard plan; rank: this rank.
    Returns:
        [rows, H*D] attention output in `q.dtype` (4-D SDPA, so fused kernels run where they can).
    """
    key = ("tiles", rank)
    if key not in plan._masks:
        plan._masks[key] = _tiles(plan, rank)
    sched: _Tiles = plan._masks[key]
    rows, heads, dim = q.shape
    out = q.new_empty(rows, heads * dim)
    k4, v4 = _sorted_kv(plan, sched.key_order, k_all, v_all)
    for where, lo, hi, mask in sched.tiles:
        q4 = q[where].transpose(0, 1).unsqueeze(0)  # [1, H, t, D]
        o = F.scaled_dot_product_attention(q4, k4[:, :, lo:hi], v4[:, :, lo:hi], attn_mask=mask, enable_gqa=True)
        out[where] = o[0].transpose(0, 1).reshape(-1, heads * dim)
    if sched.pad_rows.numel():
        own = v_all.index_select(0, sched.pad_rows + rank * plan.rows)  # [P, KV, D]
        out[sched.pad_rows] = own.repeat_interleave(heads // own.shape[1], dim=1).reshape(-1, heads * dim)
    return out


def dense_cp_attention(
    q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, plan: ShardPlan, rank: int
) -> torch.Tensor:
    """`cp_attention` as one SDPA call under the dense `[rows, cp_size*rows]` mask (the
    definition the block-sparse version is tested against; costs `cp_size` times the keys)."""
    return attention(q, k_all, v_all, mask=plan.attention_mask(rank))
