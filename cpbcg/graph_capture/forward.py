"""One CP prefill forward through a bucket's pieces, its verification, and its timing.

`cp_forward` runs every local rank's rows through the pieces; at each break it gathers keys and
values across ranks and runs zigzag CP attention eagerly. `verify_layout` checks a live batch
fits the bucket (the runtime's refusal message otherwise), shards it, runs it through the graphs
and through the same pieces eagerly (they must agree bit for bit), unshards the output and
compares it with the unsharded float32 forward (`tolerance_for` the model dtype).
`time_forward_ms` times one forward with CUDA events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from cpbcg.graph_capture import zigzag
from cpbcg.graph_capture.comm import RankGroup
from cpbcg.graph_capture.graphs import BucketGraphs, GraphBackend, Outputs
from cpbcg.graph_capture.model import ProxyModel, reference_forward, split_qkv
from cpbcg.graph_capture.records import LayoutCheck, Tolerance
from cpbcg.errors import CaptureError

Runner = Callable[[int, torch.Tensor, torch.Tensor], Outputs]
"""Runs piece `k` on `(x [C, hidden], attn [C, q_width])`: a bucket's graphs or eager pieces."""

FP32_TOLERANCE = Tolerance("float32", atol=1e-4, rtol=1e-4, noise_factor=0.0)
"""float32: `max_abs_err <= 1e-4 + 1e-4 * max|reference|`, the reference being the unsharded
float32 forward (reduction order is the only difference)."""
NOISE_FACTOR = 2.0
"""Low precision: the CP output may err at most twice as much as the unsharded forward in the
same dtype does, both against the float32 reference (sharded matmuls round differently; on CPU
the two errors were equal, while the injected attention faults err 5-40x the floor)."""
LOW_PRECISION_ATOL = {torch.bfloat16: 2.0**-10, torch.float16: 2.0**-13}
"""Floor of the low-precision tolerance (a few units in the last place at |x| ~ 1)."""


def tolerance_for(dtype: torch.dtype) -> Tolerance:
    """The verification rule of a model dtype."""
    if dtype == torch.float32:
        return FP32_TOLERANCE
    return Tolerance(str(dtype).removeprefix("torch."), LOW_PRECISION_ATOL[dtype], 0.0, NOISE_FACTOR)


@dataclass(frozen=True)
class ForwardOps:
    """The sharding and attention functions a forward uses (tests swap in faulty ones)."""

    plan: Callable[..., zigzag.ShardPlan] = zigzag.plan_zigzag
    """`(extend_seq_lens, cp_size, rows, device) -> ShardPlan`."""
    shard: Callable[[torch.Tensor, zigzag.ShardPlan], torch.Tensor] = zigzag.shard
    """Global `[n, hidden]` → `[cp_size, rows, hidden]`."""
    attention: Callable[..., torch.Tensor] = zigzag.cp_attention
    """`(q, k_all, v_all, plan, rank) -> [rows, q_width]`."""


class ReusedAttention:
    """`ForwardOps.attention` for the second of two forwards of one batch (graph replay, then the
    same pieces eagerly): the attention runs eagerly in both, so where a call's inputs equal the
    first forward's same call bit for bit its result is the first one's (the same deterministic
    function of the same inputs); any difference computes it afresh. Halves the attention work of
    `verify_layout`, the bulk of a CPU dry run (issue 34)."""

    def __init__(self, attention: Callable[..., torch.Tensor]):
        self.attention = attention
        self.first: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor]] = []
        self.replaying = False
        self.calls = 0
        self.reused = 0

    def __call__(self, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, plan: zigzag.ShardPlan, rank: int) -> torch.Tensor:
        if not self.replaying:
            out = self.attention(q, k_all, v_all, plan, rank)
            self.first.append((q, k_all, v_all, rank, out))
            return out
        i, self.calls = self.calls, self.calls + 1
        if i < len(self.first):
            q0, k0, v0, rank0, out0 = self.first[i]
            if rank == rank0 and torch.equal(q, q0) and torch.equal(k_all, k0) and torch.equal(v_all, v0):
                self.reused += 1
                return out0
        return self.attention(q, k_all, v_all, plan, rank)


def capacity_error(rows: int, bucket: int, capacity: int) -> CaptureError:
    """The runtime's refusal for a live batch that needs more rows than the bucket captured."""
    return CaptureError(
        f"Live batch needs {rows} local CP rows, but global prefill bucket {bucket} has captured capacity {capacity}"
    )


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
        qkv = {r: split_qkv(_fused_qkv(out[1], k), model.dims) for r, out in outs.items()}
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
    graphs: BucketGraphs, model: ProxyModel, truth: ProxyModel, group: RankGroup, kind: str,
    extend_seq_lens: tuple[int, ...], rows_needed: int, seed: int, ops: ForwardOps = ForwardOps(),
) -> LayoutCheck:
    """Replay one live batch in a bucket and compare it twice.

    1. Graph vs eager, bit for bit: the same sharded input through the graph replays and through
       the same pieces run eagerly (same wrapper, same kernels, same attention).
    2. Against the unsharded float32 forward `truth` (per-request causal attention, independent
       of the CP code): within `tolerance_for(model.dtype)`; for low precision the tolerance is
       `NOISE_FACTOR` times the error of the unsharded forward in the model dtype.

    Raises `CaptureError` with the runtime's message if `rows_needed > capacity` (never
    truncates), or if the replay inputs do not match the captured buffers.
    """
    if rows_needed > graphs.capacity_rows:
        raise capacity_error(rows_needed, graphs.bucket, graphs.capacity_rows)
    x = batch_input(model, sum(extend_seq_lens), seed)
    plan = ops.plan(list(extend_seq_lens), group.cp_size, graphs.capacity_rows, model.device)
    reuse = ReusedAttention(ops.attention)
    twice = replace(ops, attention=reuse)
    with torch.inference_mode():
        x_local = ops.shard(x, plan)
        out = cp_forward(graphs.run_piece, model, group, plan, x_local, twice)
        reuse.replaying = True
        same = bool(torch.equal(out, cp_forward(graphs.run_eager, model, group, plan, x_local, twice)))
        reuse.first.clear()
        out = zigzag.unshard(out, plan).float()
        ref = reference_forward(truth, x.float(), extend_seq_lens)
        tol = tolerance_for(model.dtype)
        noise = None
        if tol.noise_factor:
            noise = float((reference_forward(model, x, extend_seq_lens).float() - ref).abs().max())
            limit = tol.noise_factor * noise + tol.atol
        else:
            limit = tol.atol + tol.rtol * float(ref.abs().max())
    err = float((out - ref).abs().max()) if bool(torch.isfinite(out).all()) else float("inf")
    return LayoutCheck(kind, tuple(extend_seq_lens), rows_needed, err, limit, noise, same)


def time_forward_ms(backend: GraphBackend, group: RankGroup, fn: Callable[[], object], iters: int) -> float:
    """Per-rank milliseconds of `fn` (one CP forward) from CUDA events, after one untimed
    warm-up, synchronizing before the timer is read. Emulated ranks run one after another, so
    the time is divided by the number of local ranks. Not for a dry run (no CUDA events)."""
    with torch.inference_mode():
        fn()
        backend.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        backend.synchronize()
    return start.elapsed_time(end) / iters / len(group.local_ranks)


def _fused_qkv(qkv_out: torch.Tensor | None, index: int) -> torch.Tensor:
    """The fused QKV output of piece `index` (every piece but the last has one)."""
    if qkv_out is None:
        raise CaptureError(f"piece {index} gave no QKV output: only the last piece ends without attention")
    return qkv_out
