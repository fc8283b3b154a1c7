"""0.5.23's model-specific start-up rules: the architecture lists of `configs/model_config.py`,
`model_overrides/deepseek_v2.py` and `model_hook.py`. Steps of `pipeline.STEPS`."""

from __future__ import annotations

from collections.abc import Mapping

from cpbcg.engines.sglang.startup.state import Resolution
from cpbcg.planner.hardware import ModelSpec
from cpbcg.engines.sglang.server import Given, Value

_MM_NO_CHUNK = frozenset({"Grok1VForCausalLM", "Grok1AForCausalLM", "LlavaLlamaForCausalLM", "MllamaForConditionalGeneration",
                          "MossVLForConditionalGeneration", "CLIPModel"})
"""0.5.23 `configs/model_config.py::is_multimodal_chunked_prefill_supported`'s unsupported list."""
MULTIMODAL_ARCHITECTURES = frozenset({
    "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
    "BailingMoeV3VLForConditionalGeneration", "CLIPModel", "Cohere2VisionForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration", "DeepseekOCRForCausalLM", "DeepseekVL2ForCausalLM", "DiffusionGemmaForBlockDiffusion",
    "Dots3NoteForCausalLM", "DotsOCRForCausalLM", "DotsVLMForCausalLM", "EmbeddingGemma2Model",
    "Ernie4_5_VLMoeForConditionalGeneration", "Gemma3ForConditionalGeneration", "Gemma3nForConditionalGeneration",
    "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "Glm4vForConditionalGeneration",
    "Glm4vMoeForConditionalGeneration", "Glm5NextForConditionalGeneration", "GlmAsrForConditionalGeneration",
    "GlmImageForConditionalGeneration", "GlmOcrForConditionalGeneration", "Grok1AForCausalLM", "Grok1VForCausalLM",
    "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "InternVLChatModel", "JetVLMForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration", "Lfm2VlForConditionalGeneration",
    "LightOnOCRForConditionalGeneration", "Llama4ForConditionalGeneration", "LlavaForConditionalGeneration",
    "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM", "LlavaVidForCausalLM",
    "LocateAnythingForConditionalGeneration", "MiDashengLMModel", "MiMoV2ASRForCausalLM", "MiMoV2ForCausalLM", "MiniCPMO",
    "MiniCPMV", "MiniMaxM3SparseForConditionalGeneration", "Mistral3ForConditionalGeneration", "MllamaForConditionalGeneration",
    "MossVLForConditionalGeneration", "MultiModalityCausalLM", "MuseGlimmerForConditionalGeneration",
    "MuseSparkForConditionalGeneration", "NVILAForConditionalGeneration", "NVILALiteForConditionalGeneration",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3", "POINTSV15ChatModel",
    "PaddleOCRVLForConditionalGeneration", "Phi4MMForCausalLM", "PixtralForConditionalGeneration",
    "Qwen2AudioForConditionalGeneration", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
    "Qwen3ASRForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration", "Sarashina2VisionForCausalLM", "Step3VLForConditionalGeneration",
    "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration", "UnlimitedOCRForCausalLM",
    "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
})
"""0.5.23 `configs/model_config.py::multimodal_model_archs` (`is_multimodal_model`)."""
MULTIMODAL_BREAKABLE_GRAPH_ARCHITECTURES = frozenset({
    "Cohere2VisionForConditionalGeneration", "Glm5NextForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "KimiK3ForConditionalGeneration", "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration", "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration",
    "PaddleOCRVLForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration",
})
"""0.5.23 `configs/model_config.py::multimodal_breakable_cuda_graph_supported_model_archs`: multimodal models whose prefill
keeps breakable CUDA graphs."""
_MM_OFF_BY_DEFAULT = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration", "Step3VLForConditionalGeneration",
                                "InklingForConditionalGeneration", "MiMoV2ForCausalLM"})
"""`ModelConfig.__init__`: multimodal off unless `--enable-multimodal` (a MiMoV2 checkpoint: off without a vision and an audio
config, which cpbcg does not read: taken as text-only)."""
DEEPSEEK_FAMILY = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "Glm5NextForConditionalGeneration", "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN", "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM",
})
"""Architectures `_deepseek_family_overrides` is registered for (`model_overrides/deepseek_v2.py`)."""
_DSA = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
    "Glm5NextForConditionalGenerationNextN", "Glm5NextForConditionalGeneration", "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "HYV4ForCausalLM", "HYV4ForCausalLMNextN",
})
"""`configs/model_config.py::is_deepseek_dsa`: these architectures with an `index_topk`."""


def is_multimodal(model: ModelSpec, given: Mapping[str, Given]) -> bool:
    """0.5.23 `ModelConfig.is_multimodal`: an architecture of `multimodal_model_archs`, with multimodal on
    (`--enable-multimodal`; by default off for Gemma 3, Llama 4, Step3-VL, Inkling and MiMo V2) and not
    `--language-model-only`. A `text_config` without a listed architecture is not read (NOT_MODELLED)."""
    archs = model.architectures or (model.architecture,)
    enabled = given["enable_multimodal"].value if "enable_multimodal" in given else archs[0] not in _MM_OFF_BY_DEFAULT
    lm_only = bool(given["language_model_only"].value) if "language_model_only" in given else False
    return bool(enabled) and not lm_only and any(a in MULTIMODAL_ARCHITECTURES for a in archs)


def deepseek_family_overrides(r: Resolution) -> None:
    """`model_overrides/deepseek_v2.py::_deepseek_family_overrides` (run by `handle_model_specific_adjustments`):
    HYV4 refuses `--enable-prefill-cp` and `--dcp-size > 1`; a DSA checkpoint (`index_topk`) takes
    `attention_backend dsa` when no backend is set and page size `64 * index_kpool` (`--dcp-size > 1` refused
    with `index_kpool > 1`, and with PD disaggregation: `_dsa_dcp_overrides`), and with `--enable-prefill-cp` the DSA CP layout: attention DP from `--attn-dp-size`
    times `--dp-size` (`context_parallel_attn_dp_size`; both above 1 refused), `dp_size 1`, zigzag also
    `ep_size = tp_size` and DeepEP, `tp_size <= 8`, `attn_cp_size` the given one (interleave) else
    `tp_size / attn_dp_size`; the others take `trtllm_mla` on SM100 when no backend is set, and an MLA model
    with `--enable-prefill-cp` the MLA CP layout (attention DP as above, `dp_size 1`, `ep_size = tp_size`,
    DeepEP, `attn_cp_size = tp_size / attn_dp_size`). On ROCm the DSA page size is taken as aiter's preshuffle path has it
    (Triton >= 3.5; page 1 without it); the DSA DCP backend choices are NOT_MODELLED."""
    if r.arch0 not in DEEPSEEK_FAMILY:
        return
    check = "_deepseek_family_overrides"
    if r.arch0 in ("HYV4ForCausalLM", "HYV4ForCausalLMNextN"):
        if r.enable_cp:
            r.refuse(check, "--enable-prefill-cp is not supported for HYV4 because its attention path does not implement DSA "
                     f"context-parallel metadata and sharding. Got architecture={r.arch0!r} and enable_prefill_cp=True.")
            return
        if r.raw("dcp_size", 1) > 1:
            r.refuse(check, "--dcp-size > 1 is not supported for HYV4 because decode context parallelism gathers query heads across "
                     "DCP ranks but does not provide single-owner semantics for learnable attention sinks. "
                     f"Got architecture={r.arch0!r} and dcp_size={r.raw('dcp_size')!r}.")
            return
    no_backend = r.backend.value is None and r.prefill_backend is None and r.decode_backend is None
    if r.arch0 in _DSA and r.model.index_topk is not None:
        if r.raw("dcp_size", 1) > 1 and r.raw("disaggregation_mode", "null") != "null":  # _dsa_dcp_overrides
            r.refuse(check, "DSA DCP does not support PD disaggregation.")
            return
        if no_backend:
            r.backend = Value("dsa", "model", f"{r.arch0} with DSA (0.5.23 _deepseek_family_overrides)")
        if not (r.p["cuda"] or r.p["hip"]):
            return
        if r.enable_cp and not _cp_layout(r, "DSA", deepep=r.strategy == "zigzag",
                                          cp=r.cp if r.strategy == "interleave" and r.cp > 1 else None):
            return
        # on ROCm the aiter preshuffle paged-MQA path is taken as available (Triton >= 3.5; without it 0.5.23 sets page 1)
        if r.model.index_kpool > 1 and r.raw("dcp_size", 1) > 1:
            r.refuse(check, f"--dcp-size > 1 is not supported for DSA with index_kpool={r.model.index_kpool}: a pooled index key "
                     "spans positions owned by different DCP ranks.")
            return
        r.page = Value(64 * r.model.index_kpool, "model", f"DSA index_kpool {r.model.index_kpool} (0.5.23 _deepseek_family_overrides)")
        return
    if r.p["sm100"] and no_backend:
        r.backend = Value("trtllm_mla", "model", f"{r.arch0} on SM100 (0.5.23 _deepseek_family_overrides)")
    if r.enable_cp and r.mla:
        _cp_layout(r, "MLA", deepep=True, cp=None)


def _cp_layout(r: Resolution, kind: str, *, deepep: bool, cp: int | None) -> bool:
    """The DeepSeek family's CP layout (`_deepseek_family_overrides`), said in the notes; False after a refusal."""
    if r.attn_dp > 1 and r.dp > 1:  # model_override_base.py::context_parallel_attn_dp_size's assert
        r.refuse("context_parallel_attn_dp_size", f"--dp-size {r.dp} with --attn-dp-size {r.attn_dp}: data-parallel replicas combined "
                 "with attention data parallelism are not supported.")
        return False
    attn_dp = r.attn_dp * r.dp
    if kind == "DSA" and r.tp > 8:
        r.refuse("_deepseek_family_overrides", "Context parallel only supports single machine (tp_size <= 8). Cross-machine CP has "
                 "precision issues.")
        return False
    before = (r.cp, r.attn_dp, r.dp, r.ep)
    r.attn_dp, r.dp = attn_dp, 1
    if deepep:
        r.ep = r.tp
        r.declared["moe_a2a_backend"] = "deepep"
    r.cp = cp if cp is not None else r.tp // attn_dp
    if (r.cp, r.attn_dp, r.dp, r.ep) != before:
        r.notes.append(f"{kind} context parallelism on {r.arch0}: attn_cp_size {r.cp}, attn_dp_size {r.attn_dp}, dp_size {r.dp}, "
                       f"ep_size {r.ep} (0.5.23 _deepseek_family_overrides)")
    return True


GPT_OSS_ATTENTION_BACKENDS = ("triton", "trtllm_mha", "fa3", "fa4", "ascend", "intel_amx", "intel_xpu", "aiter")
"""0.5.23 `model_hook.py::handle_model_specific_adjustments`: the attention backends GptOssForCausalLM runs on."""


def gpt_oss_overrides(r: Resolution) -> None:
    """`model_overrides/gpt_oss.py::_gpt_oss_overrides`: GptOssForCausalLM with no attention backend set takes
    trtllm_mha on SM100, fa3 on SM90, aiter on AMD, else triton (A100, L40S, RTX PRO 6000 ...)."""
    if r.arch0 != "GptOssForCausalLM" or r.backend.value is not None or r.prefill_backend or r.decode_backend:
        return
    chosen = "trtllm_mha" if r.p["sm100"] else "fa3" if r.p["sm90"] else "aiter" if r.p["hip"] else "triton"
    r.backend = Value(chosen, "model", f"GptOssForCausalLM on {r.gpu.name} (0.5.23 _gpt_oss_overrides)")


def gpt_oss_attention_backends(r: Resolution) -> None:
    """`model_hook.py::handle_model_specific_adjustments` (GptOssForCausalLM): the prefill and decode backends
    (`attention_backends_of`, before any default is filled) must be in `GPT_OSS_ATTENTION_BACKENDS`."""
    if r.arch0 != "GptOssForCausalLM":
        return
    prefill, decode = r.prefill_backend or r.backend.value, r.decode_backend or r.backend.value
    if prefill not in GPT_OSS_ATTENTION_BACKENDS or decode not in GPT_OSS_ATTENTION_BACKENDS:
        r.refuse("handle_model_specific_adjustments", f"GptOssForCausalLM requires one of {list(GPT_OSS_ATTENTION_BACKENDS)} attention "
                 f"backend, but got the following backends\n- Prefill: {prefill}\n- Decode: {decode}\n")


LLAMA4_ARCHITECTURES = ("Llama4ForConditionalGeneration", "Llama4ForCausalLM")
LLAMA4_ATTENTION_BACKENDS = ("fa3", "aiter", "triton", "ascend", "trtllm_mha", "intel_xpu")
"""0.5.23 `model_hook.py::handle_model_specific_adjustments`: the attention backends Llama 4 runs on."""


def llama4_overrides(r: Resolution) -> None:
    """`model_overrides/llama4.py::_llama4_overrides`: Llama 4 with no `--attention-backend` takes trtllm_mha
    on SM100, fa3 on SM90, aiter on AMD, else triton."""
    if r.arch0 not in LLAMA4_ARCHITECTURES or r.backend.value is not None:
        return
    chosen = "trtllm_mha" if r.p["sm100"] else "fa3" if r.p["sm90"] else "aiter" if r.p["hip"] else "triton"
    r.backend = Value(chosen, "model", f"{r.arch0} on {r.gpu.name} (0.5.23 _llama4_overrides)")


def deepseek_v4_overrides(r: Resolution) -> None:
    """`model_overrides/deepseek_v4.py::_deepseek_v4_overrides` (registered for DeepseekV4ForCausalLM): the base
    attention backend is dsv4 and the page size 256, whatever was given (a model override is a declared value:
    it wins over the flag); a given `--prefill-attention-backend` still decides prefill. Its MoE-runner, SWA-ratio
    and NPU choices, and `apply_deepseek_v4_defaults`' request cap and checks, are NOT_MODELLED."""
    if r.arch0 != "DeepseekV4ForCausalLM" or not (r.p["cuda"] or r.p["hip"]):
        return
    rule = "DeepseekV4ForCausalLM (0.5.23 _deepseek_v4_overrides)"
    if r.backend.value not in (None, "dsv4"):
        r.notes.append(f"attention_backend {r.backend.value} -> dsv4: {rule}")
    if r.page.value not in (None, 256):
        r.notes.append(f"page_size {r.page.value} -> 256: {rule}")
    r.backend, r.page = Value("dsv4", "model", rule), Value(256, "model", rule)


def llama4_attention_backend(r: Resolution) -> None:
    """`model_hook.py::handle_model_specific_adjustments` (Llama 4): the base attention backend must be in
    `LLAMA4_ATTENTION_BACKENDS`."""
    if r.arch0 in LLAMA4_ARCHITECTURES and r.backend.value not in LLAMA4_ATTENTION_BACKENDS:
        r.refuse("handle_model_specific_adjustments", "fa3, aiter, triton, ascend, trtllm_mha or intel_xpu is required for Llama4 "
                 f"model but got {r.backend.value}")


def handle_model_capability_adjustments(r: Resolution) -> None:
    """`model_hook.py::handle_model_capability_adjustments`: multimodal architectures without chunked-prefill
    support (`is_multimodal_chunked_prefill_supported`: mllama, LLaVA-Llama, Grok-1 V/A, MossVL, CLIP) run with
    `chunked_prefill_size -1` (late in 0.5.23's pipeline; nothing after it reads the chunk)."""
    if r.archs & _MM_NO_CHUNK:
        if r.chunk.value != -1:
            r.notes.append(f"chunked_prefill_size {r.chunk.value} -> -1: {r.arch0} has no chunked prefill")
        r.chunk = Value(-1, "model", f"{r.arch0} has no chunked prefill (0.5.23 handle_model_capability_adjustments)")
