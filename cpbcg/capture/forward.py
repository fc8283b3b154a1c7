"""One CP prefill forward through a bucket's pieces, its verification, and its timing.

`cp_forward` runs every local rank's rows through the pieces; at each break it gathers keys and
values across ranks and runs zigzag CP attention eagerly. `verify_layout` checks a live batch
fits the bucket (the runtime's refusal message otherwise), shards it, runs it, gathers and
unshards the output and compares it with the unsharded eager reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from cpbcg.capture import zigzag
from cpbcg.capture.comm import RankGroup
from cpbcg.capture.graphs import GraphBackend, Outputs
from cpbcg.capture.model import ProxyModel, piece, reference_forward, split_qkv
from cpbcg.errors import CaptureError

Runner = Callable[[int, torch.Tensor, torch.Tensor], Outputs]
"""Runs piece `k` on `(x [C, hidden], attn [C, q_width])`: a bucket's graphs or eager pieces."""

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.bfloat16: (5e-2, 4e-2),
    torch.float16: (1e-2, 1e-2),
}
"""`(atol, rtol)` per dtype: a layout verifies when `max_abs_err <= atol + rtol * max|reference|`.

bfloat16 keeps 8 significant bits, so one rounding step at the largest outputs (|x| ~ 4..16)
is 0.03..0.06; sharded and unsharded matmuls round differently, and 2 layers compound it.
rtol 0.04 allows about 5-10 such steps; injected faults err by O(max|reference|)."""


@dataclass(frozen=True)
class ForwardOps:
    """The sharding and attention functions a forward uses (tests swap in faulty ones)."""

    plan: Callable[..., zigzag.ShardPlan] = zigzag.plan_zigzag
    """`(extend_seq_lens, cp_size, rows, device) -> ShardPlan`."""
    shard: Callable[[torch.Tensor, zigzag.ShardPlan], torch.Tensor] = zigzag.shard
    """Global `[n, hidden]` → `[cp_size, rows, hidden]`."""
    attention: Callable[..., torch.Tensor] = zigzag.cp_attention
    """`(q, k_all, v_all, plan, rank) -> [rows, q_width]`."""


@dataclass(frozen=True)
class LayoutCheck:
    """Outcome of replaying one live batch in one bucket."""

    max_abs_err: float
    """Largest |replayed - reference| over real tokens (model dtype units)."""
    tolerance: float
    """`atol + rtol * max|reference|` for the model dtype."""
    verified: bool
    """All outputs finite and `max_abs_err <= tolerance`."""


def capacity_error(rows: int, bucket: int, capacity: int) -> CaptureError:
    """The runtime's refusal for a live batch that needs more rows than the bucket captured."""
    return CaptureError(
        f"Live batch needs {rows} local CP rows, but global prefill bucket {bucket} has captured capacity {capacity}"
    )


def eager_runner(model: ProxyModel) -> Runner:
    """Runner that calls the pieces eagerly (the `eager_ms` baseline and the dry run)."""
    pieces = [piece(model, k) for k in range(model.num_pieces)]
    return lambda k, x, attn: pieces[k](x, attn)


def cp_forward(
    run: Runner, model: ProxyModel, group: RankGroup, plan: zigzag.ShardPlan, x_local: torch.Tensor,
    ops: ForwardOps = ForwardOps(),
) -> torch.Tensor:
    """Forward the sharded batch `x_local [cp_size, rows, hidden]` on the group's local ranks.

    Returns the final hidden states gathered from every rank, `[cp_size*rows, hidden]`.
    """
    rows = plan.rows
    state = {r: x_local[r] for r in group.local_ranks}
    attn = {r: x_local.new_zeros(rows, model.dims.q_width) for r in group.local_ranks}
    for k in range(model.num_pieces):
        outs = {r: run(k, state[r], attn[r]) for r in group.local_ranks}
        state = {r: out[0] for r, out in outs.items()}
        if k == model.num_layers:
            break
        qkv = {r: split_qkv(out[1], model.dims) for r, out in outs.items()}
        k_all = group.gather({r: t[1] for r, t in qkv.items()})
        v_all = group.gather({r: t[2] for r, t in qkv.items()})
        attn = {r: ops.attention(t[0], k_all, v_all, plan, r) for r, t in qkv.items()}
    return group.gather(state)


def batch_input(model: ProxyModel, num_tokens: int, seed: int) -> torch.Tensor:
    """Seeded `[num_tokens, hidden]` input rows in the model dtype (same on every rank)."""
    gen = torch.Generator(device=model.device).manual_seed(seed)
    x = torch.randn(num_tokens, model.dims.hidden_size, generator=gen, device=model.device)
    return x.to(model.dtype)


def verify_layout(
    run: Runner, model: ProxyModel, group: RankGroup, extend_seq_lens: tuple[int, ...], bucket: int,
    capacity: int, rows_needed: int, seed: int, ops: ForwardOps = ForwardOps(),
) -> LayoutCheck:
    """Replay one live batch in a bucket and compare with the unsharded eager forward.

    Raises `CaptureError` with the runtime's message if `rows_needed > capacity` (never
    truncates), or if the replay inputs do not match the captured buffers.
    """
    if rows_needed > capacity:
        raise capacity_error(rows_needed, bucket, capacity)
    x = batch_input(model, sum(extend_seq_lens), seed)
    plan = ops.plan(list(extend_seq_lens), group.cp_size, capacity, model.device)
    with torch.inference_mode():
        out = zigzag.unshard(cp_forward(run, model, group, plan, ops.shard(x, plan), ops), plan)
        ref = reference_forward(model, x, extend_seq_lens)
    diff = (out.float() - ref.float()).abs()
    atol, rtol = TOLERANCES[model.dtype]
    err = float(diff.max())
    tol = atol + rtol * float(ref.float().abs().max())
    finite = bool(torch.isfinite(out).all())
    return LayoutCheck(err if finite else float("inf"), tol, finite and err <= tol)


def time_forward_ms(
    backend: GraphBackend, group: RankGroup, fn: Callable[[], object], iters: int
) -> float | None:
    """Per-rank milliseconds of `fn` (one CP forward) from CUDA events, after one untimed
    warm-up, synchronizing before the timer is read. Emulated ranks run one after another, so
    the time is divided by the number of local ranks. None in a dry run (no CUDA events)."""
    if backend.dry_run:
        return None
    with torch.inference_mode():
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / iters / len(group.local_ranks)
