"""0.5.23 `arg_groups/memory_hook.py`: the chunk and the prefill graph list from the GPU's memory."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution
from cpbcg.planner.hardware import GPU
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.engines.sglang.server import Value


def gpu_memory_chunk(gpu: GPU | None) -> int:
    """0.5.23 `handle_gpu_memory_settings`'s `chunked_prefill_size` for a GPU's memory (MiB as
    `get_device_memory_capacity` reports): < 20 GiB 2048, < 60 GiB 4096, < 160 GiB 8192, else 16384
    (no GPU known: 4096)."""
    if gpu is None:
        return 4096
    mem = gpu.memory_mib
    return 2048 if mem < 20 * 1024 else 4096 if mem < 60 * 1024 else 8192 if mem < 160 * 1024 else 16384


def handle_gpu_memory_settings(r: Resolution) -> None:
    """`handle_gpu_memory_settings`: `chunked_prefill_size` not given -> `gpu_memory_chunk`; the prefill
    graph `max_bs` not given -> the chunk (MLA models: at most 8192), at most 8192 with `--pp-size > 1`
    (breakable, no list given), at most `max_total_tokens`, at most 4096 for a `llama-2` model path; the
    list not given -> `generate_prefill_cuda_graph_batch_sizes(max_bs)` (cut at cpbcg's largest bucket, said)."""
    chunk_given = r.raw("chunked_prefill_size")
    if chunk_given is None:
        r.chunk = Value(gpu_memory_chunk(r.gpu), "GPU default",
                        f"{r.gpu.name} {r.gpu.memory_gib:.0f} GiB (0.5.23 handle_gpu_memory_settings)")
    else:
        r.chunk = Value(chunk_given, r.source("chunked_prefill_size"))
    max_total = r.raw("max_total_tokens")
    if r.max_bs_given is not None:
        r.max_bs = Value(r.max_bs_given, r.max_bs_source)
    else:
        bound, why = r.chunk.value, "chunked_prefill_size"
        if r.mla and bound > 8192:
            bound, why = 8192, "MLA caps capture at 8192"
        if r.pp > 1 and r.graph_backend.value == "breakable" and r.bs_given is None and bound > 8192:
            bound, why = 8192, "pp_size > 1 caps breakable capture at 8192"
        if max_total is not None and max_total < bound:
            bound, why = max_total, "max_total_tokens"
        if "llama-2" in str(r.raw("model_path", "")).lower() and bound > 4096:
            bound, why = 4096, "a llama-2 model path caps it at 4096"
        r.max_bs = Value(bound, DEFAULT, f"{why} (0.5.23 handle_gpu_memory_settings)")
    if r.bs_given is not None:
        r.bs = Value(tuple(r.bs_given), r.bs_source)
    else:
        top = min(r.max_bs.value, MAX_BUCKET_TOKENS)
        if top < r.max_bs.value:
            r.notes.append(f"prefill graph list cut at {top} tokens, cpbcg's largest bucket (0.5.23 would list up to {r.max_bs.value})")
        ladder = tuple(sglang_default_buckets(top)) if top >= 4 else ()
        r.bs = Value(ladder, DEFAULT, f"generate_prefill_cuda_graph_batch_sizes({r.max_bs.value})")
