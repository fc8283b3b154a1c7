"""0.5.23 `arg_groups/attention_hook.py` and its post-process passes (`overrides.py`): the attention
backends, the page size they take and the platform checks; at model load `attention_registry.py`.
Steps of `pipeline.STEPS`."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution, platform
from cpbcg.planner.hardware import GPU, ModelSpec
from cpbcg.engines.sglang.server import Value


def default_attention_backend(model: ModelSpec, mla: bool, gpu: GPU, tp_size: int) -> str:
    """0.5.23 `model_override_base.py::get_default_attn_backend` without speculative decoding:
    MHA: fa3 on Hopper, trtllm_mha on SM100, aiter on AMD, else flashinfer; MLA: fa3 on Hopper,
    flashinfer on SM100, aiter on AMD with 16 or 128 KV heads per TP rank, else triton."""
    p = platform(gpu)
    if not mla:
        return "fa3" if p["sm90"] else "trtllm_mha" if p["sm100"] else "aiter" if p["hip"] else "flashinfer"
    if p["sm90"]:
        return "fa3"
    if p["sm100"]:
        return "flashinfer"
    if p["hip"]:
        heads = max(1, model.num_key_value_heads // tp_size) if model.num_key_value_heads >= tp_size else 1
        return "aiter" if heads in (16, 128) else "triton"
    return "triton"


def _pages(backend: str) -> str:
    return {"trtllm_mha": "16, 32, 64 or 128", "trtllm_mla": "32 or 64", "cutedsl_mla": "32 or 64"}.get(backend, "64")


def handle_attention_backend_compatibility(r: Resolution) -> None:
    """`handle_attention_backend_compatibility` with its passes: `_attention_backend_default` (equal split
    backends -> the base backend; none -> `get_default_attn_backend`), torch_native and flex_attention turn
    the CUDA graphs off (flex_attention refuses speculative decoding), `_mla_backend_page_constraints`
    (flashmla 64; trtllm_mla, cutedsl_mla 32|64 else 64; trtllm_mha 16|32|64|128 else 64; hpc_ops 64),
    `_mla_kv_cache_dtype_checks` (trtllm_mla needs Blackwell), `_cutedsl_prefill_backend_fill`, the
    trtllm_mha platform checks (SM90/SM100/SM120; prefill CP needs SM100) and `_fa4_page_constraint`
    (fa4, non-MLA, SM100 -> 128)."""
    prefill_b, decode_b, p = r.prefill_backend, r.decode_backend, r.p
    if prefill_b is not None and prefill_b == decode_b:
        r.backend = Value(prefill_b, r.source("prefill_attention_backend"), "the split backends are equal (0.5.23 _attention_backend_default)")
    elif r.backend.value is None:
        r.backend = Value(default_attention_backend(r.model, r.mla, r.gpu, r.tp), "GPU default",
                          f"{'MLA' if r.mla else 'MHA'} on {r.gpu.name} (0.5.23 get_default_attn_backend)")
    if r.backend.value in ("torch_native", "flex_attention"):  # CUDA graphs off, whatever was asked for them
        r.graph_backend = Value("disabled", "0.5.23 override",
                                f"{r.backend.value} attention turns CUDA graphs off (0.5.23 handle_attention_backend_compatibility)")
        if r.backend.value == "flex_attention" and r.raw("speculative_algorithm") is not None:
            r.refuse("handle_attention_backend_compatibility", "Speculative decoding is currently not supported with Flex Attention backend")
    base = r.backend.value
    named = {base, decode_b, prefill_b}
    old_page = r.page.value
    new_page, why = old_page, ""
    if base == "flashmla" or decode_b == "flashmla":
        new_page, why = 64, "flashmla"
    if (base == "trtllm_mla" or decode_b == "trtllm_mla") and new_page not in (32, 64):
        new_page, why = 64, "trtllm_mla"
    if "cutedsl_mla" in named and new_page not in (32, 64):
        new_page, why = 64, "cutedsl_mla"
    if "trtllm_mha" in named and new_page not in (16, 32, 64, 128):
        new_page, why = 64, "trtllm_mha"
    if "hpc_ops" in named and new_page != 64:
        new_page, why = 64, "hpc_ops"
    if new_page != old_page:
        r.page = Value(new_page, "0.5.23 override", f"{why} (0.5.23 overrides)")
        if old_page is not None:
            r.notes.append(f"page_size {old_page} -> {new_page}: {why} takes {_pages(why)} (0.5.23 _mla_backend_page_constraints)")
    if (base == "trtllm_mla" or decode_b == "trtllm_mla") and not p["blackwell"]:
        r.refuse("_mla_kv_cache_dtype_checks", "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
                 "Please use a different backend.")
    if "cutedsl_mla" in named and not r.refusals:
        if prefill_b == "cutedsl_mla":
            r.refuse("_cutedsl_prefill_backend_fill", "CuteDSL MLA only supports decoding for now")
        elif not p["sm100"]:
            r.refuse("_cutedsl_prefill_backend_fill", "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). "
                     "Please use a different backend.")
        elif prefill_b is None:
            r.prefill_backend = "trtllm_mla"
    prefill_run, decode_run = r.prefill_run, r.decode_run
    if "trtllm_mha" in (prefill_run, decode_run) and not r.refusals:
        hopper_or_blackwell = p["sm90"] or p["sm100"] or p["sm120"]
        if prefill_run == "trtllm_mha" and not hopper_or_blackwell:
            r.refuse("handle_attention_backend_compatibility", "TRTLLM MHA backend for prefill requires Hopper (SM90), "
                     "Blackwell (SM100), or SM120 GPUs. Please use a different prefill backend.")
        elif decode_run == "trtllm_mha" and not hopper_or_blackwell:
            r.refuse("handle_attention_backend_compatibility", "TRTLLM MHA backend for decode is only supported on Hopper "
                     "(SM90), Blackwell (SM100) and (SM120) GPUs. Please use a different decode backend.")
        elif prefill_run == "trtllm_mha" and not p["sm100"] and r.cp > 1:
            r.refuse("handle_attention_backend_compatibility", "Prefill context parallelism with the TRTLLM MHA prefill "
                     "backend requires SM100 (trtllm-gen context kernel): the SM90/SM120 fmha_v2 prefill path does not "
                     "implement CP shard masking.")
    if not r.refusals and "fa4" in named and not r.mla and p["sm100"] and r.page.value != 128:
        if r.page.value is not None:
            r.notes.append(f"page_size {r.page.value} -> 128: fa4 takes 128 for non-MLA models (0.5.23 _fa4_page_constraint)")
        r.page = Value(128, "0.5.23 override", "fa4 (0.5.23 overrides)")


def page_size_default(r: Resolution) -> None:
    """`overrides.py::_page_size_default`: no page size -> 1."""
    if r.page.value is None:
        r.page = Value(1, DEFAULT, "no backend constraint (0.5.23 _page_size_default)")


ENCODER_DECODER_ARCHITECTURES = frozenset({"WhisperForConditionalGeneration", "MllamaForConditionalGeneration", "MossVLForConditionalGeneration"})
"""0.5.23 `configs/model_config.py::is_encoder_decoder_model`: models with cross attention."""


def create_attention_backends(r: Resolution) -> None:
    """At model load, `attention_registry.py`: `create_trtllm_mha_backend` refuses MLA models;
    `create_hpc_ops_backend` refuses MLA models, cross attention (`is_encoder_decoder_model`) and
    speculative decoding."""
    if r.refusals:
        return
    for backend in dict.fromkeys((r.prefill_run, r.decode_run)):
        if backend == "trtllm_mha" and r.mla:
            r.refuse("create_trtllm_mha_backend", "trtllm_mha backend can only be used with non-MLA models.")
        elif backend == "hpc_ops" and r.mla:
            r.refuse("create_hpc_ops_backend", "hpc_ops backend can only be used with non-MLA models.")
        elif backend == "hpc_ops" and r.archs & ENCODER_DECODER_ARCHITECTURES:
            r.refuse("create_hpc_ops_backend", "Cross attention is not supported in the hpc_ops attention backend.")
        elif backend == "hpc_ops" and r.raw("speculative_algorithm") is not None:
            r.refuse("create_hpc_ops_backend", "hpc_ops backend does not support speculative decoding for now.")
        if r.refusals:
            return
