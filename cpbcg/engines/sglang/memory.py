"""The memory pre-flight of a prefill graph list under SGLang 0.5.23's start-up memory rule.

0.5.23 sizes the static memory (weights plus the KV pool) before it captures any graph:
`arg_groups/memory_hook.py::handle_gpu_memory_settings`, when `mem_fraction_static` is not given,
sets `mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3)` with (MiB)

    reserved_mem = 512 + max(chunked_prefill_size (or max_prefill_tokens), 2048) * 1.5
                 + tp_size * pp_size / 8 * 1024 + reserve_for_graph_mb
    reserve_for_graph_mb = decode max_bs * 2                      (decode graphs on)
                         + len(prefill bs) * 8  (non-MLA) or 1.5 GiB (MLA)   (prefill graphs on)
    reserved_mem = max(reserved_mem, 10 GiB) when gpu_mem > 60 GiB

(DeepEP's all-to-all reserve and the VLM adjustment left out, and post-capture KV sizing taken as
off, its environment default `SGLANG_ENABLE_POST_CAPTURE_KV_SIZING`). The decode `max_bs` is the
GPU-memory default of the same function (8, 48/160, 32/160, 256/512, 512 by memory and TP, capped
by `max_running_requests`). So each prefill bucket of a non-MLA model takes 8 MiB from the KV pool
before the pool is sized (unless the 10 GiB floor binds), and the graphs and the eager activation
of a chunk must fit in what is left outside the static fraction: the pre-flight says both.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpbcg.engines.sglang.decode import default_decode_max_bs
from cpbcg.planner.hardware import GPU, ModelSpec

__all__ = ["MemoryPreflight", "decode_max_bs", "kv_bytes_per_token", "preflight", "reserved_mem_mib"]

MIB = 1 << 20
PREFILL_BUCKET_RESERVE_MIB = 8
"""0.5.23 `reserve_for_graph_mb`: non-torch memory per prefill graph of a non-MLA backend (MiB)."""
MLA_PREFILL_RESERVE_MIB = 1.5 * 1024
"""0.5.23 `reserve_for_graph_mb`: the flat prefill-graph reserve of an MLA backend (MiB)."""


def decode_max_bs(gpu_mem_mib: int, tp_size: int, max_running_requests: int | None = None) -> int:
    """0.5.23 `handle_gpu_memory_settings`'s default decode graph `max_bs` for a GPU of
    `gpu_mem_mib` MiB at `tp_size` (`decode.default_decode_max_bs`, the one restatement), capped by
    `max_running_requests` when given."""
    bs = default_decode_max_bs(gpu_mem_mib, tp_size)
    return min(bs, max_running_requests) if max_running_requests is not None else bs


def reserved_mem_mib(gpu_mem_mib: int, activation_tokens: int, tp_size: int, pp_size: int, decode_bs: int | None,
                     prefill_buckets: int | None, mla: bool) -> float:
    """0.5.23's `reserved_mem` (MiB; module doc): `decode_bs` None = decode graphs off,
    `prefill_buckets` None = prefill graphs off."""
    reserved = 512 + max(activation_tokens, 2048) * 1.5 + tp_size * pp_size / 8 * 1024
    if decode_bs is not None:
        reserved += decode_bs * 2
    if prefill_buckets is not None:
        reserved += MLA_PREFILL_RESERVE_MIB if mla else prefill_buckets * PREFILL_BUCKET_RESERVE_MIB
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def kv_bytes_per_token(model: ModelSpec, tp_size: int, mla: bool) -> float:
    """KV-cache bytes one token takes on one GPU, the cache in the model's dtype (an assumption:
    `--kv-cache-dtype` auto): MLA `L * (kv_lora_rank + 64) * bytes` (not split by TP), else
    `2 * L * max(1, kv_heads / tp) * head_dim * bytes`."""
    if mla and model.kv_lora_rank:
        return float(model.num_hidden_layers * (model.kv_lora_rank + 64) * model.dtype_bytes)
    heads = max(1.0, model.num_key_value_heads / max(tp_size, 1))
    return float(2 * model.num_hidden_layers * heads * model.head_dim * model.dtype_bytes)


@dataclass(frozen=True)
class MemoryPreflight:
    """What a prefill graph list costs in KV tokens and whether its capture fits (per GPU)."""

    gpu: str
    gpu_mem_mib: int
    mem_fraction_static: float
    """0.5.23's `mem_fraction_static` with the list (module doc)."""
    default_mem_fraction_static: float
    """The same with SGLang's default list."""
    reserved_mib: float
    """What 0.5.23 keeps outside the static memory with the list (MiB)."""
    list_reserve_mib: float
    """The part of it the list's prefill graphs take (MiB; 8 per bucket, or 1.5 GiB for MLA)."""
    default_reserve_mib: float
    kv_bytes_per_token: float
    kv_tokens_vs_default: int
    """KV tokens the list leaves over the default list (negative: fewer)."""
    mean_request_tokens: float
    """Mean prefill tokens per request of the traffic."""
    graph_mib: float
    """The list's graph memory (estimate or measured)."""
    eager_peak_mib: float
    """The eager activation peak of a full chunk (estimate)."""
    activation_reserve_mib: float
    """`max(chunk, 2048) * 1.5` MiB: what 0.5.23 reserves for activations."""
    source: str

    @property
    def capture_fits(self) -> bool:
        """Whether the list's graphs and a full chunk's eager activation fit the activation reserve."""
        return self.graph_mib + self.eager_peak_mib <= self.activation_reserve_mib

    @property
    def requests_vs_default(self) -> float:
        """`kv_tokens_vs_default` in requests of the mean prefill."""
        return self.kv_tokens_vs_default / self.mean_request_tokens if self.mean_request_tokens > 0 else 0.0

    def said(self, name: str, buckets: int) -> str:
        """One line for the verdict (the rule's source is in `source` and the JSON)."""
        kv = self.kv_tokens_vs_default
        change = ("the same KV pool as the default" if kv == 0 else
                  f"{kv:+,} KV tokens against the default, about {abs(self.requests_vs_default):,.1f} requests of the mean "
                  f"{self.mean_request_tokens:,.0f}-token prefill")
        fits = "fits" if self.capture_fits else "does NOT fit (expect an OOM at capture)"
        return (f"{self.gpu} {self.gpu_mem_mib / 1024:,.0f} GiB, mem_fraction_static {self.mem_fraction_static:.3f}: the {name}'s "
                f"{buckets} buckets reserve {self.list_reserve_mib:,.0f} MiB against the default's {self.default_reserve_mib:,.0f} MiB "
                f"(0.5.23 reserve_for_graph_mb): {change}; capture {fits}: {self.graph_mib:,.0f} MiB of graphs + "
                f"{self.eager_peak_mib:,.0f} MiB eager peak in the {self.activation_reserve_mib:,.0f} MiB activation reserve")

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "gpu_memory_bytes": self.gpu_mem_mib * MIB, "mem_fraction_static": self.mem_fraction_static,
                "default_mem_fraction_static": self.default_mem_fraction_static, "reserved_bytes": int(self.reserved_mib * MIB),
                "list_reserve_bytes": int(self.list_reserve_mib * MIB), "default_reserve_bytes": int(self.default_reserve_mib * MIB),
                "kv_bytes_per_token": self.kv_bytes_per_token, "kv_tokens_vs_default": self.kv_tokens_vs_default,
                "requests_vs_default": self.requests_vs_default, "mean_request_tokens": self.mean_request_tokens,
                "graph_bytes": int(self.graph_mib * MIB), "eager_peak_bytes": int(self.eager_peak_mib * MIB),
                "activation_reserve_bytes": int(self.activation_reserve_mib * MIB), "capture_fits": self.capture_fits,
                "source": self.source}


def preflight(model: ModelSpec, gpu: GPU, *, tp_size: int, pp_size: int, mla: bool, activation_tokens: int,
              max_running_requests: int | None, buckets: int, default_buckets: int, graph_mib: float, eager_peak_mib: float,
              mean_request_tokens: float, assumed: str = "") -> MemoryPreflight:
    """The pre-flight of a list of `buckets` prefill graphs against SGLang's default list of
    `default_buckets` (module doc); `activation_tokens` is the chunk (or `max_prefill_tokens`
    without chunking). `assumed` names what was assumed (the model or the GPU)."""
    decode = decode_max_bs(gpu.memory_mib, tp_size, max_running_requests)
    mine = reserved_mem_mib(gpu.memory_mib, activation_tokens, tp_size, pp_size, decode, buckets, mla)
    theirs = reserved_mem_mib(gpu.memory_mib, activation_tokens, tp_size, pp_size, decode, default_buckets, mla)
    fraction = round((gpu.memory_mib - mine) / gpu.memory_mib, 3)
    default_fraction = round((gpu.memory_mib - theirs) / gpu.memory_mib, 3)
    per_token = kv_bytes_per_token(model, tp_size, mla)
    kv = int(round((fraction - default_fraction) * gpu.memory_mib * MIB / per_token)) if per_token > 0 else 0  # the pool follows the rounded fraction
    prefill = (lambda k: MLA_PREFILL_RESERVE_MIB) if mla else (lambda k: k * PREFILL_BUCKET_RESERVE_MIB)
    source = ("0.5.23 handle_gpu_memory_settings and reserve_for_graph_mb; post-capture KV sizing off, KV cache in the model "
              f"dtype{'; ' + assumed if assumed else ''}")
    return MemoryPreflight(gpu.name, gpu.memory_mib, fraction, default_fraction, mine, prefill(buckets), prefill(default_buckets),
                           per_token, kv, mean_request_tokens, graph_mib, eager_peak_mib, max(activation_tokens, 2048) * 1.5, source)
