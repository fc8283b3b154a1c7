"""Proxy CP-local transformer body: the layers a prefill graph captures, with random weights.

Per layer (pre-norm, like Llama / Qwen / gpt-oss bodies):

    h = RMSNorm(x); qkv = h @ W_qkv                      # graph piece
    attn = attention(q, k, v)                            # the BREAK: eager, across CP ranks
    x = x + attn @ W_o                                   # graph piece
    h = RMSNorm(x); x = x + (silu(h @ W_g) * (h @ W_u)) @ W_d

Breakable-graph pieces run between the breaks: piece 0 is layer 0's pre-attention part,
piece k (1 <= k < L) is layer k-1's post-attention part followed by layer k's pre-attention
part, piece L is the last layer's post-attention part. Every piece is a pure function of
`(x, attn)`, so the same code runs captured (CUDA graph) or eagerly (dry run, reference).

Weights are drawn from `seed` on the target device (no downloads), scaled `1/sqrt(fan_in)` so
activations stay O(1) in bfloat16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from cpbcg.graph_capture.presets import ModelDims
from cpbcg.errors import ConfigError

RMS_EPS = 1e-6
Piece = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]
"""A graph piece: `(x [rows, hidden], attn [rows, q_width]) -> (x_out [rows, hidden], qkv or None)`."""


@dataclass(frozen=True)
class ProxyLayer:
    """Weights of one layer (all in the model dtype, on the model device)."""

    attn_norm: torch.Tensor
    """[hidden] RMSNorm weight before attention."""
    w_qkv: torch.Tensor
    """[hidden, q_width + 2 * kv_width] fused QKV projection."""
    w_o: torch.Tensor
    """[q_width, hidden] attention output projection."""
    mlp_norm: torch.Tensor
    """[hidden] RMSNorm weight before the MLP."""
    w_gate_up: torch.Tensor
    """[hidden, 2 * intermediate] fused gate and up projections."""
    w_down: torch.Tensor
    """[intermediate, hidden] down projection."""


@dataclass(frozen=True)
class ProxyModel:
    """A stack of proxy layers with the dimensions of a preset."""

    dims: ModelDims
    """Model dimensions."""
    layers: tuple[ProxyLayer, ...]
    """Layer weights, first layer first."""

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_pieces(self) -> int:
        """Graph pieces per forward: one more than the number of breaks (layers)."""
        return self.num_layers + 1

    @property
    def dtype(self) -> torch.dtype:
        return self.layers[0].w_qkv.dtype

    @property
    def device(self) -> torch.device:
        return self.layers[0].w_qkv.device


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """`float32` / `bfloat16` / `float16` → the torch dtype. Raises `ConfigError` for any other name."""
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise ConfigError(f"dtype {name!r} is not one of {', '.join(TORCH_DTYPES)}") from None


def build_model(dims: ModelDims, num_layers: int, seed: int, device: torch.device, dtype: torch.dtype) -> ProxyModel:
    """Random proxy model from `seed` (same weights on every rank of the same device type)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=gen, device=device, dtype=torch.float32)
        return (w / rows**0.5).to(dtype)

    def norm_weight() -> torch.Tensor:
        w = 1.0 + 0.1 * torch.randn(dims.hidden_size, generator=gen, device=device)
        return w.to(dtype)

    h, i = dims.hidden_size, dims.intermediate_size
    layers = tuple(
        ProxyLayer(norm_weight(), rand(h, dims.q_width + 2 * dims.kv_width), rand(dims.q_width, h),
                   norm_weight(), rand(h, 2 * i), rand(i, h))
        for _ in range(num_layers)
    )
    return ProxyModel(dims, layers)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm over the last axis, computed in float32, returned in `x.dtype`."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return x32.to(x.dtype) * weight


def pre_attention(layer: ProxyLayer, x: torch.Tensor) -> torch.Tensor:
    """`[rows, hidden]` → fused `qkv [rows, q_width + 2*kv_width]`."""
    return rms_norm(x, layer.attn_norm) @ layer.w_qkv


def post_attention(layer: ProxyLayer, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """Output projection + residual, then gated MLP + residual. `[rows, hidden]` out."""
    x = x + attn @ layer.w_o
    gate, up = (rms_norm(x, layer.mlp_norm) @ layer.w_gate_up).chunk(2, dim=-1)
    return x + (F.silu(gate) * up) @ layer.w_down


def split_qkv(qkv: torch.Tensor, dims: ModelDims) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused `[rows, q+2kv]` → q `[rows, H, D]`, k and v `[rows, KV, D]` (views)."""
    q, k, v = qkv.split([dims.q_width, dims.kv_width, dims.kv_width], dim=-1)
    rows = qkv.shape[0]
    return (q.view(rows, dims.num_attention_heads, dims.head_dim),
            k.view(rows, dims.num_key_value_heads, dims.head_dim),
            v.view(rows, dims.num_key_value_heads, dims.head_dim))


def piece(model: ProxyModel, index: int) -> Piece:
    """Graph piece `index` (0..num_layers) as a pure function of `(x, attn)`."""
    layers = model.layers

    def run(x: torch.Tensor, attn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if index > 0:
            x = post_attention(layers[index - 1], x, attn)
        qkv = pre_attention(layers[index], x) if index < len(layers) else None
        return x, qkv

    return run


def expand_kv(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """GQA: `[rows, KV, D]` → `[rows, H, D]` by repeating each KV head `H/KV` times."""
    return t.repeat_interleave(num_heads // t.shape[1], dim=1)


def sdpa_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Token-major `q [rows, H, D]`, `k, v [keys, KV, D]` and `mask [rows, keys]` → the 4-D
    `[1, H, rows, D]`, `[1, H, keys, D]`, `[1, 1, rows, keys]` layout SDPA's fused kernels
    (flash, memory-efficient; CPU flash) need. 3-D inputs fall back to the math kernel, which
    materialises `[H, rows, keys]` scores."""
    heads = q.shape[1]
    q4 = q.transpose(0, 1).unsqueeze(0)
    k4, v4 = (expand_kv(t, heads).transpose(0, 1).unsqueeze(0) for t in (k, v))
    return q4, k4, v4, None if mask is None else mask[None, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              is_causal: bool = False) -> torch.Tensor:
    """SDPA over token-major tensors (see `sdpa_inputs`): `[rows, H, D]` queries → `[rows, H*D]`."""
    q4, k4, v4, m4 = sdpa_inputs(q, k, v, mask)
    out = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=m4, is_causal=is_causal)  # [1, H, rows, D]
    return out[0].transpose(0, 1).reshape(q.shape[0], -1)


SDPA_KERNELS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
"""`torch._fused_sdp_choice` codes (`torch.nn.attention.SDPBackend`) → names."""


def sdpa_kernel(dims: ModelDims, device: torch.device, dtype: torch.dtype, masked: bool) -> str:
    """Name of the SDPA kernel PyTorch picks for this model's attention on `device` (`math`,
    `flash`, `efficient`, `cudnn`), asked of `torch._fused_sdp_choice` with small inputs of the
    same layout, dtype and head size; `math` when PyTorch cannot say (the safe, costly guess)."""
    rows, heads = 16, dims.num_attention_heads
    q = torch.zeros(rows, heads, dims.head_dim, device=device, dtype=dtype)
    kv = torch.zeros(rows, dims.num_key_value_heads, dims.head_dim, device=device, dtype=dtype)
    mask = torch.ones(rows, rows, dtype=torch.bool, device=device) if masked else None
    q4, k4, v4, m4 = sdpa_inputs(q, kv, kv, mask)
    try:
        code = int(torch._fused_sdp_choice(q4, k4, v4, attn_mask=m4, is_causal=not masked))
    except (AttributeError, RuntimeError, TypeError):
        return "math"
    return SDPA_KERNELS.get(code, "math")


def causal_attention_by_request(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                extend_seq_lens: Sequence[int]) -> torch.Tensor:
    """Causal attention within each request of a concatenated batch: `q [n, H, D]`, `k, v
    [n, KV, D]` → `[n, H*D]`. Requests of equal length go through one batched SDPA call
    (`[requests, H, length, D]`, `is_causal=True`), so a batch of many short requests costs a
    few calls, not one per request."""
    dims_h, dim = q.shape[1], q.shape[2]
    lens = torch.tensor([int(x) for x in extend_seq_lens], dtype=torch.int64)
    starts = torch.cumsum(lens, 0) - lens
    out = q.new_empty(q.shape[0], dims_h * dim)
    for length in torch.unique(lens).tolist():
        first = starts[lens == length]
        if len(first) == 1:
            sl = slice(int(first[0]), int(first[0]) + length)
            out[sl] = attention(q[sl], k[sl], v[sl], is_causal=True)
            continue
        rows = (first[:, None] + torch.arange(length)).reshape(-1).to(q.device)
        m = len(first)
        per = lambda t: t.index_select(0, rows).view(m, length, t.shape[1], dim)  # noqa: E731
        q4 = per(q).transpose(1, 2)
        k4, v4 = (expand_kv(per(t).flatten(0, 1), dims_h).view(m, length, dims_h, dim).transpose(1, 2) for t in (k, v))
        o = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True)  # [m, H, length, D]
        out[rows] = o.transpose(1, 2).reshape(m * length, dims_h * dim)
    return out


def reference_forward(model: ProxyModel, x: torch.Tensor, extend_seq_lens: Sequence[int]) -> torch.Tensor:
    """Unsharded eager forward of a whole batch: `x [n, hidden]` → `[n, hidden]`.

    Attention is causal within each request (requests concatenated in order), computed with
    `is_causal=True` per request (`causal_attention_by_request`, requests of equal length
    batched): independent of the CP code it verifies.
    """
    dims = model.dims
    for layer in model.layers:
        q, k, v = split_qkv(pre_attention(layer, x), dims)
        x = post_attention(layer, x, causal_attention_by_request(q, k, v, extend_seq_lens))
    return x


def upcast(model: ProxyModel) -> ProxyModel:
    """The same weights in float32 (the reference a low-precision run is judged against)."""
    layers = tuple(ProxyLayer(*(t.float() for t in (l.attn_norm, l.w_qkv, l.w_o, l.mlp_norm, l.w_gate_up, l.w_down)))
                   for l in model.layers)
    return ProxyModel(model.dims, layers)
