"""The hardware and the model a deployment runs on: a GPU catalogue and a model's shape.

Both are inputs of SGLang 0.5.23's start-up resolution (`--gpu`, `--model-config`): the GPU's
compute capability decides whether trtllm_mha prefill CP runs (SM100 family only,
`arg_groups/attention_hook.py`), its memory the default chunk size
(`arg_groups/memory_hook.py::handle_gpu_memory_settings`); the model's architecture decides MLA
(`configs/model_config.py`), its context length the capture layout, and its size the cost
models (capture time, graph memory, forward time).

Pure data: the planner reads no files. A model's Hugging Face `config.json` is read at the input
edge and handed here as a mapping (`model_spec_from_config`).
"""

from __future__ import annotations

import re

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ASSUMED_GPU", "ASSUMED_MODEL", "GPU", "GPUS", "MLA_ARCHITECTURES", "ModelSpec", "gpu_by_name", "model_spec_from_config",
           "uses_mla"]


@dataclass(frozen=True)
class GPU:
    """One GPU model as 0.5.23's start-up code sees it."""

    name: str
    """Catalogue name (`B200`), matched case-insensitively by `gpu_by_name`."""
    vendor: str
    """`nvidia` or `amd`."""
    compute_capability: tuple[int, int]
    """CUDA compute capability (major, minor); (0, 0) for AMD parts."""
    memory_mib: int
    """Total memory per GPU in MiB, as `nvidia-smi --query-gpu=memory.total` (or rocm-smi)
    reports it: what 0.5.23's `get_device_memory_capacity` returns."""
    source: str
    """Where `memory_mib` and the capability come from."""

    @property
    def memory_gib(self) -> float:
        """`memory_mib / 1024` (GiB)."""
        return self.memory_mib / 1024

    @property
    def is_sm100(self) -> bool:
        """The SM100 family (compute capability 10.x: B200, GB200, B300, GB300), the only one
        with trtllm_mha prefill context parallelism in 0.5.23 (`is_sm100_supported`)."""
        return self.vendor == "nvidia" and self.compute_capability[0] == 10


_NV_SPEC = "NVIDIA datasheet (HBM capacity); MiB as nvidia-smi reports it"
_AMD_SPEC = "AMD datasheet (HBM capacity); MiB as rocm-smi reports it"

GPUS: dict[str, GPU] = {g.name.upper(): g for g in (
    GPU("A100-40GB", "nvidia", (8, 0), 40_960, _NV_SPEC),
    GPU("A100", "nvidia", (8, 0), 81_920, _NV_SPEC + " (80 GB part)"),
    GPU("L40S", "nvidia", (8, 9), 46_068, _NV_SPEC),
    GPU("H100", "nvidia", (9, 0), 81_559, _NV_SPEC + " (SXM 80 GB)"),
    GPU("H800", "nvidia", (9, 0), 81_559, _NV_SPEC),
    GPU("H20", "nvidia", (9, 0), 97_871, _NV_SPEC),
    GPU("H200", "nvidia", (9, 0), 143_771, _NV_SPEC + " (141 GB)"),
    GPU("B200", "nvidia", (10, 0), 183_359, _NV_SPEC + " (180 GB usable)"),
    GPU("GB200", "nvidia", (10, 0), 189_471, _NV_SPEC + " (186 GB)"),
    GPU("B300", "nvidia", (10, 3), 275_040, _NV_SPEC + " (288 GB HBM3e, approximate MiB)"),
    GPU("GB300", "nvidia", (10, 3), 284_208, _NV_SPEC + " (288 GB HBM3e, approximate MiB)"),
    GPU("RTX-PRO-6000", "nvidia", (12, 0), 97_887, _NV_SPEC + " (Blackwell workstation, SM120)"),
    GPU("MI300X", "amd", (0, 0), 196_592, _AMD_SPEC),
    GPU("MI325X", "amd", (0, 0), 262_128, _AMD_SPEC),
    GPU("MI355X", "amd", (0, 0), 294_896, _AMD_SPEC),
)}
"""The GPUs `--gpu` accepts, by upper-case name."""


def gpu_from_device_name(device: str) -> GPU | None:
    """The catalogue GPU a device name names as torch prints it (`torch.cuda.get_device_name`, `-` and
    spaces as `_`: `NVIDIA_H100_80GB_HBM3`, `NVIDIA_A100-SXM4-40GB`, `NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition`,
    `AMD_Instinct_MI300X`): the longest run of its words that is a catalogue name (`A100-40GB` before
    `A100`); None when none is."""
    words = [w for w in re.split(r"[_\s-]+", device.strip()) if w and w.upper() not in ("NVIDIA", "AMD")]
    best: GPU | None = None
    best_len = 0
    for i in range(len(words)):
        for j in range(i + 1, len(words) + 1):
            found = GPUS.get("-".join(words[i:j]).upper())
            if found is not None and j - i > best_len:
                best, best_len = found, j - i
        memory = next((w for w in words[i + 1:] if re.fullmatch(r"\d+GB", w.upper())), None)  # `A100 SXM4 40GB`: `A100-40GB`
        if memory is not None and (found := GPUS.get(f"{words[i]}-{memory}".upper())) is not None and best_len < 2:
            best, best_len = found, 2
    return best


def gpus_holding(gib: float, vendor: str = "nvidia") -> list[GPU]:
    """The catalogue GPUs of `vendor` with the least memory that is at least `gib` GiB (a server's printed free
    memory is a floor on its GPU's), least memory first (catalogue order among equals): several when they hold about
    the same (within 0.5%: H100, H800, A100 80GB); empty when none holds it."""
    fits = sorted((g for g in GPUS.values() if g.vendor == vendor and g.memory_mib >= gib * 1024), key=lambda g: g.memory_mib)
    return [g for g in fits if g.memory_mib <= fits[0].memory_mib * 1.005]


def gpu_by_name(name: str) -> GPU:
    """The catalogue entry for `name` (case-insensitive). Raises `ValueError` naming the
    known GPUs when there is none."""
    found = GPUS.get(name.strip().upper())
    if found is None:
        raise ValueError(f"unknown GPU {name!r} (known: {', '.join(g.name for g in GPUS.values())})")
    return found


_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """What the planner needs of a model, read from its Hugging Face `config.json` (for
    multimodal models the `text_config` part holds the language model's shape)."""

    architecture: str
    """`architectures[0]` (`LlamaForCausalLM`)."""
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    """`num_key_value_heads`, else `num_attention_heads` (MHA)."""
    head_dim: int
    """`head_dim`, else `hidden_size // num_attention_heads`."""
    intermediate_size: int | None
    """Dense MLP width (None: not stated)."""
    vocab_size: int | None
    context_length: int | None
    """`max_position_embeddings` (tokens; None: not stated)."""
    dtype_bytes: int
    """Bytes per weight/activation element of `torch_dtype` / `dtype` (2 when not stated)."""
    kv_lora_rank: int | None
    """MLA's compressed KV rank (DeepSeek V2/V3, Kimi K2); None for MHA/GQA models."""
    num_experts: int | None
    """Routed experts (`num_experts`, `num_local_experts` or `n_routed_experts`); None: dense."""
    num_experts_per_tok: int | None
    moe_intermediate_size: int | None
    source: str
    """The file (or preset) it was read from."""
    architectures: tuple[str, ...] = ()
    """All of `architectures` (0.5.23 tests membership: `"X" in hf_config.architectures`)."""
    index_topk: int | None = None
    """DSA indexer top-k (DeepSeek V3.2, GLM-5): set only for sparse-attention checkpoints."""
    index_kpool: int = 1
    """DSA pooled index keys per group (`index_kpool`, default 1)."""
    use_mla_flag: bool = True
    """`use_mla` of the text config (DeepSeek-VL2 only; default true)."""
    model_type: str | None = None
    """The language model's `model_type` (the `text_config`'s for multimodal models)."""
    kda_attention: bool = False
    """The config declares Kimi Delta Attention (KDA) linear-attention layers: `linear_attn_config.kda_layers`,
    or `layer_types` with `linear_attention` and `linear_num_heads` and `linear_head_dim` stated, in the config
    or its `text_config` (0.5.23 `configs/model_config.py::uses_kda_attention`)."""


def _int(config: Mapping[str, Any], key: str, source: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{source}: {key}: expected a positive integer, got {value!r}")
    return value


ASSUMED_GPU = GPUS["B200"]
"""The GPU assumed when none is given (`--gpu`, `server.gpu`, a log): SM100, where 0.5.23 runs
zigzag CP prefill graphs. The one definition: the start-up resolution and the cost models both
take it (and say it is assumed)."""


def model_spec_from_config(config: Mapping[str, Any], source: str) -> ModelSpec:
    """A `ModelSpec` from a parsed `config.json` mapping. Raises `ValueError` ("SOURCE: KEY:
    ...") when `architectures`, `num_hidden_layers`, `hidden_size` or `num_attention_heads` is
    missing or not a positive integer, or a stated size is not one."""
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ValueError(f"{source}: architectures: expected a list of model class names")
    text = config.get("text_config")
    shape: Mapping[str, Any] = {**config, **text} if isinstance(text, Mapping) else config
    required = {}
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads"):
        value = _int(shape, key, source)
        if value is None:
            raise ValueError(f"{source}: {key}: missing (a Hugging Face config.json states it)")
        required[key] = value
    heads = required["num_attention_heads"]
    dtype = shape.get("torch_dtype", shape.get("dtype", "bfloat16"))
    experts = next((v for k in ("num_experts", "num_local_experts", "n_routed_experts") if (v := _int(shape, k, source))), None)
    return ModelSpec(
        architecture=archs[0],
        num_hidden_layers=required["num_hidden_layers"],
        hidden_size=required["hidden_size"],
        num_attention_heads=heads,
        num_key_value_heads=_int(shape, "num_key_value_heads", source) or heads,
        head_dim=_int(shape, "head_dim", source) or required["hidden_size"] // heads,
        intermediate_size=_int(shape, "intermediate_size", source),
        vocab_size=_int(shape, "vocab_size", source),
        context_length=_int(shape, "max_position_embeddings", source),
        dtype_bytes=_DTYPE_BYTES.get(str(dtype), 2),
        kv_lora_rank=_int(shape, "kv_lora_rank", source),
        num_experts=experts,
        num_experts_per_tok=_int(shape, "num_experts_per_tok", source),
        moe_intermediate_size=_int(shape, "moe_intermediate_size", source),
        source=source,
        architectures=tuple(a for a in archs if isinstance(a, str)),
        index_topk=_int(shape, "index_topk", source),
        index_kpool=_int(shape, "index_kpool", source) or 1,
        use_mla_flag=shape.get("use_mla", True) is not False,
        model_type=str(shape["model_type"]) if isinstance(shape.get("model_type"), str) else None,
        kda_attention=any(_declares_kda(part) for part in (config, text) if isinstance(part, Mapping)),
    )


def _declares_kda(config: Mapping[str, Any]) -> bool:
    """0.5.23 `uses_kda_attention` on one config level (`ModelSpec.kda_attention`)."""
    linear = config.get("linear_attn_config")
    if isinstance(linear, Mapping) and linear.get("kda_layers"):
        return True
    layer_types = config.get("layer_types") or []
    return (isinstance(layer_types, list) and "linear_attention" in layer_types and config.get("linear_num_heads") is not None
            and config.get("linear_head_dim") is not None)


MLA_ARCHITECTURES = frozenset({
    "DeepseekV2ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV3ForCausalLMNextN",
    "Glm4MoeLiteForCausalLM", "Glm4MoeLiteForCausalLMNextN", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
    "Glm5NextForConditionalGeneration", "Glm5NextForConditionalGenerationNextN", "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN", "HYV4ForCausalLM", "HYV4ForCausalLMNextN", "DotsVLMForCausalLM", "Dots3NoteForCausalLM",
    "Dots3NoteForCausalLMNextN", "MistralLarge3ForCausalLM", "MistralLarge3ForCausalLMEagle", "KimiK25ForConditionalGeneration",
    "Eagle3DeepseekV2ForCausalLM", "GigaChat35ForCausalLM", "GigaChat35ForCausalLMNextN", "MiniCPM3ForCausalLM",
    "KimiVLForConditionalGeneration", "KimiLinearForCausalLM", "KimiK3LinearForCausalLM", "KimiK3ForConditionalGeneration",
    "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration", "SarvamMLAForCausalLM",
})
"""Architectures 0.5.23 always runs with MLA (`configs/model_config.py`, `ModelConfig._derive_model_shapes`'s
`attention_arch = AttentionArch.MLA` branches). `uses_mla` adds the conditional ones."""
_MLA_IF_KV_LORA = frozenset({"PixtralForConditionalGeneration", "BailingMoeForCausalLMNextN"})


def uses_mla(model: ModelSpec) -> bool:
    """Whether 0.5.23 runs `model` with MLA (`AttentionArch.MLA`, what `use_mla_backend` reads):
    an architecture of `MLA_ARCHITECTURES`; Pixtral or a Bailing NextN draft with a
    `kv_lora_rank`; DeepSeek-VL2 unless its text config says `use_mla: false`
    (`configs/model_config.py`). Any architecture listed counts, as 0.5.23 tests membership."""
    archs = set(model.architectures or (model.architecture,))
    if archs & MLA_ARCHITECTURES:
        return True
    if archs & _MLA_IF_KV_LORA and model.kv_lora_rank is not None:
        return True
    return "DeepseekVL2ForCausalLM" in archs and model.use_mla_flag


ASSUMED_MODEL = ModelSpec(
    architecture="LlamaForCausalLM", num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
    head_dim=128, intermediate_size=28672, vocab_size=128256, context_length=131072, dtype_bytes=2, kv_lora_rank=None,
    num_experts=None, num_experts_per_tok=None, moe_intermediate_size=None,
    source="assumed: a Llama-3.1-70B-shaped dense GQA model (give --model-config)",
    architectures=("LlamaForCausalLM",), model_type="llama",
)
"""The model assumed when none is given (`--model-config`, `server.model_config`): a dense GQA
(non-MLA) model, which trtllm_mha serves, of the most common CP size (Llama-3.1-70B's
`config.json`, `cpbcg/configs/models/llama-3.1-70b.config.json`). The one definition: the
start-up resolution and the cost models both take it (and say it is assumed)."""
