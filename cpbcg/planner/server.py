"""The server SGLang 0.5.23 actually starts: its start-up resolution, restated as one pure step.

From what the user gives -- server arguments by name (from a launch command's words, a cpbcg
config or option, a log), the model (`ModelSpec`) and the GPU (`GPU`) -- `resolve_server`
returns a `ResolvedServer`: the page size, chunk, prefill token budget, request slots,
attention backends, prefill CUDA-graph backend and list, the start-up refusals and whether
prefill CP graphs are captured (`supports_prefill_cp_bcg`), each value with its source.

The rules, in 0.5.23's pipeline order (`arg_groups/pipeline.py::run_resolution_pipeline`),
each restated from the function named:

1. `memory_hook.py::handle_gpu_memory_settings`: `chunked_prefill_size` not given -> by GPU
   memory (MiB as `get_device_memory_capacity` reports): < 20 GiB 2048, < 60 GiB 4096,
   < 160 GiB 8192, else 16384 (no GPU known: 4096). The prefill graph `max_bs` not given ->
   the chunk (MLA models: at most 8192), at most 8192 with `--pp-size > 1` (breakable, no
   list given), at most `max_total_tokens`, at most 4096 for a `llama-2` model path; the
   list not given -> `generate_prefill_cuda_graph_batch_sizes(max_bs)`.
2. `model_overrides/deepseek_v2.py::_deepseek_family_overrides` (DeepSeek family): a DSA
   checkpoint (`index_topk`) takes `attention_backend dsa` when none is set and page size
   `64 * index_kpool`; the others take `trtllm_mla` on SM100 when no backend is set.
3. `model_hook.py::handle_model_capability_adjustments`: multimodal architectures without
   chunked-prefill support (mllama, LLaVA-Llama, Grok-1 V/A, MossVL, CLIP) run with
   `chunked_prefill_size -1`.
4. `attention_hook.py::handle_attention_backend_compatibility`: `_attention_backend_default`
   (equal split backends -> the base backend; none -> `get_default_attn_backend`),
   `_mla_backend_page_constraints` (flashmla 64; trtllm_mla, cutedsl_mla 32|64 else 64;
   trtllm_mha 16|32|64|128 else 64; hpc_ops 64), `_mla_kv_cache_dtype_checks` (trtllm_mla
   needs Blackwell), the trtllm_mha platform checks (SM90/SM100/SM120; prefill CP needs SM100),
   `_fa4_page_constraint` (fa4, non-MLA, SM100 -> 128).
5. `overrides.py::_page_size_default`: no page size -> 1.
6. `parallel_hook.py::handle_context_parallelism`: per-model CP refusals, `--cp-strategy`
   required with `--enable-prefill-cp`, `tp_size` divisible by `attn_cp_size` and by
   `attn_dp_size * attn_cp_size`.
7. `cuda_graph_hook.py::apply_prefill_cp_cuda_graph_default` and
   `layers/cp/bcg/__init__.py::supports_prefill_cp_bcg`: CP graphs need `enable_prefill_cp`,
   `pp_size 1`, `attn_cp_size == tp_size`, (zigzag, trtllm_mha) or (interleave, dsa); interleave
   also `dp_size 1`, `ep_size 1`, `attn_cp_size > 1` and GLM-5 Next.
8. At model load, `attention_registry.py::create_trtllm_mha_backend`: trtllm_mha refuses MLA models.

`tests/test_server_resolution_conformance.py` runs these 0.5.23 functions from the wheel on
random flag sets, models and GPUs and compares. What is not modelled is listed in
`NOT_MODELLED` and said per input (`ResolvedServer.not_modelled`).
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cpbcg.planner.hardware import ASSUMED_GPU, ASSUMED_MODEL, GPU, ModelSpec, uses_mla
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS, sglang_default_buckets
from cpbcg.engines.sglang.launch import SGLANG_FLAGS
from cpbcg.planner.sglang_release import CP_GRAPH_BACKENDS, INTERLEAVE_CP_GRAPH_ARCHITECTURE, SGLANG_VERSION

__all__ = [
    "ASSUMED_GPU", "ASSUMED_MODEL", "ATTENTION_BACKENDS", "Given", "NOT_MODELLED", "Refusal", "ResolvedServer", "ServerCheck", "Value",
    "check_flag_words", "check_server_flags", "log_given", "log_printed", "parse_launch_words", "resolve_server", "server_words",
    "unrecognized_flag",
]

SGLANG = SGLANG_VERSION

ATTENTION_BACKENDS = frozenset({
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4", "flashinfer",
    "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "hpc_ops",
    "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu",
})
"""0.5.23 `arg_groups/choices.py::ATTENTION_BACKEND_CHOICES`."""
CP_STRATEGIES = frozenset({"zigzag", "interleave"})
PREFILL_GRAPH_BACKENDS = frozenset({"breakable", "full", "disabled", "tc_piecewise"})

NOT_MODELLED = (
    "speculative decoding (draft backends, eagle top-k)", "DeepEP / MoE all-to-all bucket rounding",
    "HIP, NPU, XPU, MUSA, CPU platform handlers", "mem_fraction_static and the KV pool size (max_total_tokens, "
    "max_running_requests when not given)", "attention sinks and asymmetric K/V heads in the default backend",
    "deterministic inference, LoRA, hierarchical cache, disaggregation",
    "the DeepSeek family's CP auto-configuration (attention DP from --dp-size) and the DSA CP checks",
    "other automatic prefill-graph disables (KDA models, DeepSeek-V4)",
)
"""Parts of 0.5.23's start-up resolution `resolve_server` does not restate."""

_INT_FLAGS = {
    "page_size": 1, "chunked_prefill_size": -1, "max_prefill_tokens": 1, "max_running_requests": 1, "max_total_tokens": 1,
    "tp_size": 1, "pp_size": 1, "dp_size": 1, "ep_size": 1, "attn_cp_size": 1, "attn_dp_size": 1, "moe_dp_size": 1,
    "cuda_graph_max_bs_prefill": 1, "prefill_max_requests": 1,
}
"""Integer server arguments the resolution reads, with the least value accepted."""
_BOOL_FLAGS = frozenset({"enable_prefill_cp", "disable_cuda_graph", "disable_prefill_cuda_graph", "enable_mixed_chunk",
                         "disable_radix_cache"})
_TEXT_FLAGS = {
    "attention_backend": ATTENTION_BACKENDS, "prefill_attention_backend": ATTENTION_BACKENDS,
    "decode_attention_backend": ATTENTION_BACKENDS, "cp_strategy": CP_STRATEGIES,
    "cuda_graph_backend_prefill": PREFILL_GRAPH_BACKENDS, "model_path": None, "speculative_algorithm": None,
}
_LIST_FLAGS = frozenset({"cuda_graph_bs_prefill"})
_JSON_FLAGS = frozenset({"cuda_graph_config"})
MODELLED_FLAGS = frozenset(_INT_FLAGS) | _BOOL_FLAGS | frozenset(_TEXT_FLAGS) | _LIST_FLAGS | _JSON_FLAGS
"""Server arguments (0.5.23 field names) the resolution reads; others are listed as not modelled."""
_AFFECTS_UNMODELLED = frozenset({"speculative_algorithm"})

_MM_NO_CHUNK = frozenset({"Grok1VForCausalLM", "Grok1AForCausalLM", "LlavaLlamaForCausalLM", "MllamaForConditionalGeneration",
                          "MossVLForConditionalGeneration", "CLIPModel"})
"""0.5.23 `configs/model_config.py::is_multimodal_chunked_prefill_supported`'s unsupported list."""
_DEEPSEEK_FAMILY = frozenset({
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


@dataclass(frozen=True)
class Given:
    """A server argument as the user (or a log) gave it, and where it came from."""

    value: Any
    source: str
    """`launch command`, `option`, `config`, `log`, ... (said in reports)."""


@dataclass(frozen=True)
class Value:
    """A resolved setting: its value, where it came from and the rule that decided it."""

    value: Any
    source: str
    """`option`, `config`, `launch command`, `model`, `GPU default`, `log`, `0.5.23 default`, `0.5.23 override`, `assumed`."""
    rule: str = ""
    """Why (the 0.5.23 function), empty when taken as given."""

    def describe(self) -> str:
        """`64: trtllm_mha (0.5.23 overrides)`-style text."""
        shown = "none" if self.value is None else ",".join(map(str, self.value)) if isinstance(self.value, tuple) else str(self.value)
        return f"{shown}: {self.rule or self.source}"

    def to_dict(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": value, "source": self.source, "rule": self.rule}


@dataclass(frozen=True)
class Refusal:
    """A start-up check that fails: 0.5.23 exits with `message`."""

    check: str
    """The 0.5.23 function that raises (`handle_context_parallelism`)."""
    message: str


@dataclass(frozen=True)
class ResolvedServer:
    """What SGLang 0.5.23 runs for the inputs `resolve_server` took (values in tokens)."""

    gpu: GPU
    gpu_source: str
    model: ModelSpec
    model_source: str
    use_mla: bool
    attention_backend: Value
    prefill_attention_backend: Value
    """As the runner uses it: `--prefill-attention-backend`, else `attention_backend`."""
    decode_attention_backend: Value
    page_size: Value
    chunked_prefill_size: Value
    """-1: chunking off."""
    max_prefill_tokens: Value
    max_running_requests: Value
    """None: decided at start from the KV pool (not decidable here)."""
    max_total_tokens: Value
    """None: the KV pool the server sizes from free memory (not decidable here)."""
    enable_mixed_chunk: Value
    tp_size: int
    attn_cp_size: int
    pp_size: int
    dp_size: int
    ep_size: int
    enable_prefill_cp: bool
    cp_strategy: str | None
    prefill_graph_backend: Value
    """`breakable`, `full` or `disabled` (0.5.23 `cuda_graph_config.prefill.backend`)."""
    prefill_graph_max_bs: Value
    prefill_graph_bs: Value
    """The prefill graph list as configured (tokens, ascending as given); the CP runner rounds it
    (`cpbcg.planner.model.capacity.capture_buckets`)."""
    refusals: tuple[Refusal, ...]
    """Start-up checks that fail, in the order 0.5.23 runs them (the first is what it prints)."""
    no_cp_graph: tuple[str, ...]
    """Why `supports_prefill_cp_bcg` is false (empty when CP graphs are captured)."""
    not_modelled: tuple[str, ...] = ()
    """Given server arguments the resolution does not read."""
    given: Mapping[str, Given] = field(default_factory=dict)
    """The server arguments resolved, as given (0.5.23 field names)."""
    notes: tuple[str, ...] = ()
    """Values 0.5.23 changed from what was given (`page_size 1 -> 64: ...`)."""
    overrides: tuple[str, ...] = ()
    """Launch-command values a cpbcg option replaced (`--page-size 16 overrides the launch command's --page-size 32`)."""
    model_assumed: bool = False
    """No model was given: `model` is `hardware.ASSUMED_MODEL` (the cost models say so)."""
    gpu_assumed: bool = False
    """No GPU was given: `gpu` is `hardware.ASSUMED_GPU` (the cost models say so)."""

    @property
    def starts(self) -> bool:
        return not self.refusals

    @property
    def supports_prefill_cp_bcg(self) -> bool:
        """0.5.23's `supports_prefill_cp_bcg` on the resolved arguments."""
        return not self.no_cp_graph

    @property
    def cp_graphs(self) -> bool:
        """Starts and captures CP prefill graphs."""
        return self.starts and self.supports_prefill_cp_bcg and self.prefill_graph_backend.value == "breakable"

    def findings(self) -> list[tuple[str, str]]:
        """`(what 0.5.23 would do, why)`: refusals first, then why no CP graph is captured."""
        out = [("refuse to start", r.message) for r in self.refusals]
        out += [("capture no CP graph", m) for m in self.no_cp_graph]
        if self.starts and self.supports_prefill_cp_bcg and self.prefill_graph_backend.value != "breakable":
            out.append(("capture no CP graph", f"the prefill CUDA graph backend is {self.prefill_graph_backend.describe()}"))
        return out

    def summary(self) -> dict[str, Any]:
        """JSON form: every resolved value with source and rule, the verdict and what was not modelled."""
        values = {name: getattr(self, name).to_dict() for name in (
            "attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size", "chunked_prefill_size",
            "max_prefill_tokens", "max_running_requests", "max_total_tokens", "prefill_graph_backend", "prefill_graph_max_bs",
            "prefill_graph_bs")}
        return {
            "sglang_version": SGLANG, "gpu": self.gpu.name, "gpu_source": self.gpu_source, "architecture": self.model.architecture,
            "model_source": self.model_source, "use_mla": self.use_mla, **values,
            "tp_size": self.tp_size, "attn_cp_size": self.attn_cp_size, "pp_size": self.pp_size, "cp_strategy": self.cp_strategy,
            "enable_prefill_cp": self.enable_prefill_cp, "starts": self.starts,
            "refusals": [{"check": r.check, "message": r.message} for r in self.refusals],
            "supports_prefill_cp_bcg": self.supports_prefill_cp_bcg, "cp_graphs": self.cp_graphs,
            "no_cp_graph": list(self.no_cp_graph), "not_modelled": list(self.not_modelled), "notes": list(self.notes),
            "said": self.header_lines(),
        }

    def header_lines(self) -> list[str]:
        """One line per resolved value a plan depends on (`page_size 64: trtllm_mha (0.5.23 overrides)`)."""
        return [
            f"server: SGLang {SGLANG} on {self.gpu.name} ({self.gpu_source}), {self.model.architecture} ({self.model_source})"
            f"{', MLA' if self.use_mla else ''}",
            f"attention {self.prefill_attention_backend.describe()}",
            f"page_size {self.page_size.describe()}",
            f"chunked_prefill_size {self.chunked_prefill_size.describe()}",
            f"max_prefill_tokens {self.max_prefill_tokens.describe()}",
            f"prefill graphs {self.prefill_graph_backend.value}, max_bs {self.prefill_graph_max_bs.describe()}",
            "starts with CP prefill graphs" if self.cp_graphs else
            "; ".join(f"would {what}: {why}" for what, why in self.findings()),
        ]


# --- input: a launch command's words ---------------------------------------------------------

def _flag_name(word: str) -> str:
    return word[2:].replace("-", "_")


def unrecognized_flag(flag: str) -> str | None:
    """None when 0.5.23's launch parser takes `--flag` (`cpbcg.engines.sglang.launch.SGLANG_FLAGS`, or a prefix
    of one: argparse's `allow_abbrev`), else the flag and the closest known one (difflib):
    `--attn-cp-sise (did you mean --attn-cp-size?)`."""
    if flag in _KNOWN_FLAGS or any(f.startswith(flag) for f in SGLANG_FLAGS):
        return None
    close = difflib.get_close_matches(flag, SGLANG_FLAGS, n=1)
    return f"{flag} (did you mean {close[0]}?)" if close else flag


_KNOWN_FLAGS = frozenset(SGLANG_FLAGS)


def parse_launch_words(words: Sequence[str], source: str = "launch command",
                       unrecognized: list[str] | None = None) -> dict[str, Given]:
    """Server arguments from the words of `python -m sglang.launch_server ...` (or `sglang serve`,
    or the flags alone): `--name value`, `--name=value`, `--flag` (true), `--name v1 v2 ...`
    (lists). Leading words before the first `--flag` (the program) are skipped; the last of a
    repeated flag wins, as argparse does. Values of the arguments the resolution reads are
    checked; others are kept as text. Raises `ValueError` ("--page-size: expected ...") for a
    bad value or a stray word, and for a flag 0.5.23 does not know (`unrecognized_flag`) unless
    `unrecognized` is given: then each is appended there and left out."""
    out: dict[str, Given] = {}
    i = 0
    while i < len(words) and not words[i].startswith("--"):
        i += 1
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or word == "--":
            raise ValueError(f"{word[:40]!r}: expected a --flag (a value without its flag?)")
        name, eq, inline = word.partition("=")
        values: list[str] = [inline] if eq else []
        i += 1
        if not eq:
            while i < len(words) and not words[i].startswith("--"):
                values.append(words[i])
                i += 1
        unknown = unrecognized_flag(name)
        if unknown is not None:  # 0.5.23's argparse exits: "unrecognized arguments"
            if unrecognized is None:
                raise ValueError(f"unrecognized SGLang {SGLANG} server argument {unknown}")
            unrecognized.append(unknown)
            continue
        key = _flag_name(name)
        out[key] = Given(_typed(key, name, values), source)
    return out


def log_given(flags: Mapping[str, tuple[Any, int]]) -> tuple[dict[str, Given], tuple[str, ...]]:
    """The server arguments one launch of a log states (`LogSettings.sglang_flags()`: 0.5.23
    field name -> (value, line), from the settings dump or the launch command), as resolution
    inputs with source `log line N`: the arguments the resolution reads (`MODELLED_FLAGS`),
    checked as a launch command's are; unset values (None) are left out. Returns them and, for
    each value 0.5.23 would not take, a note that it was not read (never raises)."""
    out: dict[str, Given] = {}
    skipped: list[str] = []
    for key, (value, line) in flags.items():
        if key not in MODELLED_FLAGS or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        words = (["true" if value else "false"] if isinstance(value, bool) else
                 [str(v) for v in value] if isinstance(value, (list, tuple)) else
                 [json.dumps(value)] if isinstance(value, dict) else [str(value)])
        try:
            out[key] = Given(_typed(key, flag, words), f"log line {line}")
        except ValueError as exc:
            skipped.append(f"log line {line}: {exc}: not read (0.5.23's default planned)")
    return out, tuple(skipped)


LOG_PRINTED = {"max_total_num_tokens": "max_total_tokens", "chunked_prefill_size": "chunked_prefill_size",
               "max_prefill_tokens": "max_prefill_tokens", "max_running_requests": "max_running_requests"}
"""Values a server prints it resolved (`Scheduler.__init__`'s line, every release) -> the 0.5.23 field each is."""


def log_printed(resolved: Mapping[str, tuple[Any, int]]) -> dict[str, Given]:
    """What a launch's server printed it resolved (`LogSettings.resolved`: name -> (value, line),
    start-up overrides included: `chunked_prefill_size` -1) as `resolve_server`'s `printed`,
    source `log line N`: token counts of at least 1, or -1 for the chunk (chunking off)."""
    out: dict[str, Given] = {}
    for name, key in LOG_PRINTED.items():
        if name in resolved:
            value, line = resolved[name]
            if isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or (key == "chunked_prefill_size" and value == -1)):
                out[key] = Given(value, f"log line {line}")
    return out


def _typed(key: str, flag: str, values: list[str]) -> Any:
    if key in _BOOL_FLAGS:
        if not values:
            return True
        if len(values) == 1 and values[0].lower() in ("true", "false"):
            return values[0].lower() == "true"
        raise ValueError(f"{flag}: takes no value, got {' '.join(values)[:40]!r}")
    if not values:
        if key in MODELLED_FLAGS:
            raise ValueError(f"{flag}: expected a value")
        return True
    if key in _LIST_FLAGS:
        return tuple(_int(flag, v, 1) for v in values)
    if len(values) > 1:
        if key in MODELLED_FLAGS:
            raise ValueError(f"{flag}: expected one value, got {len(values)}: {' '.join(values)[:40]!r}")
        return tuple(values)
    raw = values[0]
    if key in _INT_FLAGS:
        return _int(flag, raw, _INT_FLAGS[key])
    if key in _TEXT_FLAGS:
        choices = _TEXT_FLAGS[key]
        if choices is not None and raw not in choices:
            raise ValueError(f"{flag}: {raw[:40]!r} is not a choice of SGLang {SGLANG} ({', '.join(sorted(choices))})")
        return raw
    if key in _JSON_FLAGS:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{flag}: not JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"{flag}: expected a JSON object of phases")
        return parsed
    return raw


def _int(flag: str, raw: str, least: int) -> int:
    text = raw.strip().replace("_", "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag}: expected an integer, got {raw[:40]!r}") from None
    if value < least or (flag == "--chunked-prefill-size" and value == 0) or value > 2**62:
        raise ValueError(f"{flag}: {value} is out of range (least {least})")
    return value


def server_words(text: str) -> list[str]:
    """The words of a launch command as a shell splits them (line continuations and comments
    allowed). Raises `ValueError` when the text does not split (an open quote)."""
    try:
        return shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise ValueError(f"cannot split the launch command: {exc}") from None


# --- the resolution --------------------------------------------------------------------------

@dataclass
class _State:
    given: Mapping[str, Given]
    values: dict[str, Value] = field(default_factory=dict)

    def raw(self, name: str, default: Any = None) -> Any:
        g = self.given.get(name)
        return default if g is None else g.value

    def source(self, name: str) -> str:
        g = self.given.get(name)
        return g.source if g is not None else f"{SGLANG} default"


def _platform(gpu: GPU) -> dict[str, bool]:
    """0.5.23's platform flags for `gpu` (`utils/common.py`: `is_sm90_supported` = capability
    major 9, `is_sm100_supported` 10, `is_sm120_supported` 12, `is_blackwell_supported` 10..12;
    CUDA >= 12.8 assumed)."""
    major = gpu.compute_capability[0] if gpu.vendor == "nvidia" else -1
    return {"sm90": major == 9, "sm100": major == 10, "sm120": major == 12, "blackwell": major in (10, 11, 12),
            "hip": gpu.vendor == "amd", "cuda": gpu.vendor == "nvidia"}


def default_attention_backend(model: ModelSpec, mla: bool, gpu: GPU, tp_size: int) -> str:
    """0.5.23 `model_override_base.py::get_default_attn_backend` without speculative decoding:
    MHA: fa3 on Hopper, trtllm_mha on SM100, aiter on AMD, else flashinfer; MLA: fa3 on Hopper,
    flashinfer on SM100, aiter on AMD with 16 or 128 KV heads per TP rank, else triton."""
    p = _platform(gpu)
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


def gpu_memory_chunk(gpu: GPU | None) -> int:
    """0.5.23 `handle_gpu_memory_settings`'s `chunked_prefill_size` for a GPU's memory (MiB)."""
    if gpu is None:
        return 4096
    mem = gpu.memory_mib
    return 2048 if mem < 20 * 1024 else 4096 if mem < 60 * 1024 else 8192 if mem < 160 * 1024 else 16384


def resolve_server(
    given: Mapping[str, Given],
    model: ModelSpec | None = None,
    gpu: GPU | None = None,
    *,
    printed: Mapping[str, Given] | None = None,
    model_source: str = "",
    gpu_source: str = "",
) -> ResolvedServer:
    """What 0.5.23 runs for the server arguments `given` (0.5.23 field names -> `Given`), the
    model and the GPU (None: `hardware.ASSUMED_MODEL`, `ASSUMED_GPU`, said as assumptions). `printed`
    are values a running server printed (a log): they win over the restated rules, with
    their source. Pure; never raises (bad values are refused by the parsers)."""
    model_assumed, gpu_assumed = model is None, gpu is None
    gpu_src = gpu_source or ("given" if gpu is not None else "assumed: SM100, where 0.5.23 runs zigzag CP graphs")
    gpu = gpu or ASSUMED_GPU
    model_src = model_source or (model.source if model is not None else ASSUMED_MODEL.source)
    model = model or ASSUMED_MODEL
    st = _State(given)
    p = _platform(gpu)
    mla = uses_mla(model)
    archs = set(model.architectures or (model.architecture,))
    arch0 = (model.architectures or (model.architecture,))[0]
    refusals: list[Refusal] = []
    notes: list[str] = []

    tp = st.raw("tp_size", 1)
    cp = st.raw("attn_cp_size", 1)
    pp = st.raw("pp_size", 1)
    dp = st.raw("dp_size", 1)
    ep = st.raw("ep_size", 1)
    attn_dp = st.raw("attn_dp_size", 1)
    enable_cp = bool(st.raw("enable_prefill_cp", False))
    strategy = st.raw("cp_strategy")

    # prefill CUDA graph config as parsed (cuda_graph_hook.py::parse_cuda_graph_config)
    graph_json = st.raw("cuda_graph_config") or {}
    prefill_raw = graph_json.get("prefill")
    prefill_json: dict[str, Any] = prefill_raw if isinstance(prefill_raw, dict) else {}
    graph_backend = Value("breakable" if p["cuda"] else "disabled", f"{SGLANG} default", "breakable on CUDA (default_prefill_backend)")
    locked_backend = False
    if st.raw("disable_cuda_graph"):
        graph_backend, locked_backend = Value("disabled", st.source("disable_cuda_graph"), "--disable-cuda-graph"), True
    if st.raw("disable_prefill_cuda_graph"):
        graph_backend, locked_backend = Value("disabled", st.source("disable_prefill_cuda_graph"), "--disable-prefill-cuda-graph"), True
    if st.raw("cuda_graph_backend_prefill") is not None:
        graph_backend, locked_backend = Value(st.raw("cuda_graph_backend_prefill"), st.source("cuda_graph_backend_prefill")), True
    max_bs_given = st.raw("cuda_graph_max_bs_prefill")
    max_bs_src = st.source("cuda_graph_max_bs_prefill")
    bs_given = st.raw("cuda_graph_bs_prefill")
    bs_src = st.source("cuda_graph_bs_prefill")
    if "backend" in prefill_json:
        graph_backend, locked_backend = Value(str(prefill_json["backend"]), st.source("cuda_graph_config"), "--cuda-graph-config"), True
    if isinstance(prefill_json.get("max_bs"), int):
        max_bs_given, max_bs_src = prefill_json["max_bs"], st.source("cuda_graph_config")
    if isinstance(prefill_json.get("bs"), list):
        bs_given, bs_src = tuple(prefill_json["bs"]), st.source("cuda_graph_config")
    if pp > 1 and not locked_backend and graph_backend.value == "breakable":
        graph_backend = Value("disabled", f"{SGLANG} default", "pp_size > 1 (0.5.23 apply_cuda_graph_compatibility)")

    # 1. handle_gpu_memory_settings
    chunk_given = st.raw("chunked_prefill_size")
    if chunk_given is None:
        chunk = Value(gpu_memory_chunk(gpu), "GPU default", f"{gpu.name} {gpu.memory_gib:.0f} GiB (0.5.23 handle_gpu_memory_settings)")
    else:
        chunk = Value(chunk_given, st.source("chunked_prefill_size"))
    max_total = st.raw("max_total_tokens")
    if max_bs_given is not None:
        max_bs = Value(max_bs_given, max_bs_src)
    else:
        bound, why = chunk.value, "chunked_prefill_size"
        if mla and bound > 8192:
            bound, why = 8192, "MLA caps capture at 8192"
        if pp > 1 and graph_backend.value == "breakable" and bs_given is None and bound > 8192:
            bound, why = 8192, "pp_size > 1 caps breakable capture at 8192"
        if max_total is not None and max_total < bound:
            bound, why = max_total, "max_total_tokens"
        if "llama-2" in str(st.raw("model_path", "")).lower() and bound > 4096:
            bound, why = 4096, "a llama-2 model path caps it at 4096"
        max_bs = Value(bound, "0.5.23 default", f"{why} (0.5.23 handle_gpu_memory_settings)")
    if bs_given is not None:
        bs = Value(tuple(bs_given), bs_src)
    else:
        top = min(max_bs.value, MAX_BUCKET_TOKENS)
        if top < max_bs.value:
            notes.append(f"prefill graph list cut at {top} tokens, cpbcg's largest bucket (0.5.23 would list up to {max_bs.value})")
        ladder = tuple(sglang_default_buckets(top)) if top >= 4 else ()
        bs = Value(ladder, "0.5.23 default", f"generate_prefill_cuda_graph_batch_sizes({max_bs.value})")

    # 2. model-specific overrides (_deepseek_family_overrides)
    backend = Value(st.raw("attention_backend"), st.source("attention_backend"))
    prefill_b = st.raw("prefill_attention_backend")
    decode_b = st.raw("decode_attention_backend")
    page: Value = Value(st.raw("page_size"), st.source("page_size"))
    no_backend = backend.value is None and prefill_b is None and decode_b is None
    family = arch0 in _DEEPSEEK_FAMILY
    dsa = arch0 in _DSA and model.index_topk is not None
    if family and dsa:
        if no_backend:
            backend = Value("dsa", "model", f"{arch0} with DSA (0.5.23 _deepseek_family_overrides)")
        if p["cuda"]:
            page = Value(64 * model.index_kpool, "model", f"DSA index_kpool {model.index_kpool} (0.5.23 _deepseek_family_overrides)")
    elif family and p["sm100"] and no_backend:
        backend = Value("trtllm_mla", "model", f"{arch0} on SM100 (0.5.23 _deepseek_family_overrides)")

    # 3. handle_model_capability_adjustments: multimodal models without chunked prefill
    if archs & _MM_NO_CHUNK:
        if chunk.value != -1:
            notes.append(f"chunked_prefill_size {chunk.value} -> -1: {arch0} has no chunked prefill")
        chunk = Value(-1, "model", f"{arch0} has no chunked prefill (0.5.23 handle_model_capability_adjustments)")

    # 4. handle_attention_backend_compatibility
    if prefill_b is not None and prefill_b == decode_b:
        backend = Value(prefill_b, st.source("prefill_attention_backend"), "the split backends are equal (0.5.23 _attention_backend_default)")
    elif backend.value is None:
        backend = Value(default_attention_backend(model, mla, gpu, tp), "GPU default",
                        f"{'MLA' if mla else 'MHA'} on {gpu.name} (0.5.23 get_default_attn_backend)")
    base = backend.value
    named = {base, decode_b, prefill_b}
    old_page = page.value
    new_page = old_page
    why = ""
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
        page = Value(new_page, "0.5.23 override", f"{why} (0.5.23 overrides)")
        if old_page is not None:
            notes.append(f"page_size {old_page} -> {new_page}: {why} takes {_pages(why)} (0.5.23 _mla_backend_page_constraints)")
    if (base == "trtllm_mla" or decode_b == "trtllm_mla") and not p["blackwell"]:
        refusals.append(Refusal("_mla_kv_cache_dtype_checks", "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
                                "Please use a different backend."))
    prefill_run = prefill_b or base
    decode_run = decode_b or base
    if "cutedsl_mla" in named and not refusals:
        if prefill_b == "cutedsl_mla":
            refusals.append(Refusal("_cutedsl_prefill_backend_fill", "CuteDSL MLA only supports decoding for now"))
        elif not p["sm100"]:
            refusals.append(Refusal("_cutedsl_prefill_backend_fill", "CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). "
                                    "Please use a different backend."))
        elif prefill_b is None:
            prefill_b = prefill_run = "trtllm_mla"
    if "trtllm_mha" in (prefill_run, decode_run) and not refusals:
        hopper_or_blackwell = p["sm90"] or p["sm100"] or p["sm120"]
        if prefill_run == "trtllm_mha" and not hopper_or_blackwell:
            refusals.append(Refusal("handle_attention_backend_compatibility", "TRTLLM MHA backend for prefill requires Hopper (SM90), "
                                    "Blackwell (SM100), or SM120 GPUs. Please use a different prefill backend."))
        elif decode_run == "trtllm_mha" and not hopper_or_blackwell:
            refusals.append(Refusal("handle_attention_backend_compatibility", "TRTLLM MHA backend for decode is only supported on Hopper "
                                    "(SM90), Blackwell (SM100) and (SM120) GPUs. Please use a different decode backend."))
        elif prefill_run == "trtllm_mha" and not p["sm100"] and cp > 1:
            refusals.append(Refusal("handle_attention_backend_compatibility", "Prefill context parallelism with the TRTLLM MHA prefill "
                                    "backend requires SM100 (trtllm-gen context kernel): the SM90/SM120 fmha_v2 prefill path does not "
                                    "implement CP shard masking."))
    if not refusals and "fa4" in named and not mla and p["sm100"]:
        if page.value != 128:
            if page.value is not None:
                notes.append(f"page_size {page.value} -> 128: fa4 takes 128 for non-MLA models (0.5.23 _fa4_page_constraint)")
            page = Value(128, "0.5.23 override", "fa4 (0.5.23 overrides)")

    if (not refusals and not locked_backend and graph_backend.value != "disabled" and "DeepseekV3ForCausalLM" in archs
            and prefill_run == "trtllm_mla"):
        graph_backend = Value("disabled", "model", "DeepSeek-V3 on trtllm_mla (0.5.23 disable_prefill_cuda_graph_for_deepseek_trtllm_mla)")

    # 5. _page_size_default
    if page.value is None:
        page = Value(1, "0.5.23 default", "no backend constraint (0.5.23 _page_size_default)")

    # 6. handle_context_parallelism
    if not refusals:
        refusals.extend(_context_parallelism(model, arch0, p, enable_cp, strategy, tp, cp, attn_dp))

    # 7. supports_prefill_cp_bcg and apply_prefill_cp_cuda_graph_default
    missing: list[str] = []
    if not enable_cp:
        missing.append("--enable-prefill-cp is not set")
    if pp != 1:
        missing.append(f"--pp-size is {pp}, CP graphs need 1")
    if cp != tp:
        missing.append(f"--attn-cp-size {cp} differs from --tp-size {tp}")
    wanted = CP_GRAPH_BACKENDS.get(strategy or "")
    if wanted is None:
        missing.append(f"--cp-strategy {strategy} has no CP graphs (zigzag or interleave)")
    elif prefill_run != wanted:
        missing.append(f"{strategy} CP graphs need prefill attention backend {wanted}, the server runs {prefill_run}")
    if strategy == "interleave":
        if dp != 1 or ep != 1:
            missing.append(f"interleave CP graphs need --dp-size 1 and --ep-size 1 (got {dp}, {ep})")
        if cp <= 1:
            missing.append("interleave CP graphs need --attn-cp-size > 1")
        if INTERLEAVE_CP_GRAPH_ARCHITECTURE not in archs:
            missing.append(f"interleave CP graphs need {INTERLEAVE_CP_GRAPH_ARCHITECTURE}, not {arch0}")
    if enable_cp and not missing and not locked_backend:
        graph_backend = Value("breakable", f"{SGLANG} default", "supported prefill CP (0.5.23 apply_prefill_cp_cuda_graph_default)")

    # 8. model load: attention_registry
    if not refusals and mla and "trtllm_mha" in (prefill_run, decode_run):
        refusals.append(Refusal("create_trtllm_mha_backend", "trtllm_mha backend can only be used with non-MLA models."))

    prefill_src = Value(prefill_run, st.source("prefill_attention_backend") if prefill_b else backend.source,
                        "" if prefill_b else backend.rule)
    decode_src = Value(decode_run, st.source("decode_attention_backend") if decode_b else backend.source, "" if decode_b else backend.rule)
    mpt = Value(st.raw("max_prefill_tokens", 16384), st.source("max_prefill_tokens"))
    mrr_given = st.raw("max_running_requests")
    mrr = (Value(mrr_given, st.source("max_running_requests")) if mrr_given is not None
           else Value(None, "0.5.23 default", "decided at start from the KV pool"))
    mtt = (Value(max_total, st.source("max_total_tokens")) if max_total is not None
           else Value(None, "0.5.23 default", "sized at start from free GPU memory"))
    mixed = Value(bool(st.raw("enable_mixed_chunk", False)), st.source("enable_mixed_chunk"))
    resolved = {"page_size": page, "chunked_prefill_size": chunk, "max_prefill_tokens": mpt, "max_running_requests": mrr,
                "max_total_tokens": mtt}
    for key, g in (printed or {}).items():
        if key in resolved and g.value != resolved[key].value:
            notes.append(f"{key} {resolved[key].value} -> {g.value}: as the server printed ({g.source})")
        if key in resolved:
            resolved[key] = Value(g.value, g.source, f"printed by the server ({g.source})")
    not_modelled = tuple(sorted(
        f"--{k.replace('_', '-')}" for k in given if k not in MODELLED_FLAGS or k in _AFFECTS_UNMODELLED))
    return ResolvedServer(
        gpu=gpu, gpu_source=gpu_src, model=model, model_source=model_src, use_mla=mla,
        attention_backend=backend, prefill_attention_backend=prefill_src, decode_attention_backend=decode_src,
        page_size=resolved["page_size"], chunked_prefill_size=resolved["chunked_prefill_size"],
        max_prefill_tokens=resolved["max_prefill_tokens"], max_running_requests=resolved["max_running_requests"],
        max_total_tokens=resolved["max_total_tokens"], enable_mixed_chunk=mixed,
        tp_size=tp, attn_cp_size=cp, pp_size=pp, dp_size=dp, ep_size=ep, enable_prefill_cp=enable_cp, cp_strategy=strategy,
        prefill_graph_backend=graph_backend, prefill_graph_max_bs=max_bs, prefill_graph_bs=bs,
        refusals=tuple(refusals), no_cp_graph=tuple(missing), not_modelled=not_modelled, notes=tuple(notes), given=dict(given),
        model_assumed=model_assumed, gpu_assumed=gpu_assumed,
    )


def _pages(backend: str) -> str:
    return {"trtllm_mha": "16, 32, 64 or 128", "trtllm_mla": "32 or 64", "cutedsl_mla": "32 or 64"}.get(backend, "64")


def _context_parallelism(model: ModelSpec, arch0: str, p: dict[str, bool], enable_cp: bool, strategy: str | None,
                         tp: int, cp: int, attn_dp: int) -> list[Refusal]:
    """0.5.23 `parallel_hook.py::handle_context_parallelism` (first failing check; the model
    checks of `_boundary_parallelism_overrides`, then the HIP, DeepSeek V3.2 and MiMo V2 rules,
    then the strategy and divisibility asserts)."""
    check = "handle_context_parallelism"
    mtype = model.model_type or ""
    if mtype in ("nemotron_h", "nemotron_h_puzzle") and cp > 1:
        return [Refusal(check, "Nemotron-H does not support --attn-cp-size > 1")]
    if mtype == "longcat_flash" and enable_cp and cp > 1:
        return [Refusal(check, "LongCat-Flash does not support --enable-prefill-cp with --attn-cp-size > 1")]
    if enable_cp and p["hip"] and arch0 != "DeepseekV4ForCausalLM":
        return [Refusal(check, f"Prefill CP on HIP is only supported for DeepseekV4ForCausalLM, got {arch0!r}.")]
    if enable_cp and arch0 == "DeepseekV32ForCausalLM" and strategy == "zigzag":
        return [Refusal(check, "DeepSeek V3.2 prefill CP does not support --cp-strategy zigzag; use interleave.")]
    if enable_cp and arch0 in ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM") and strategy != "zigzag":
        return [Refusal(check, "MiMo V2 prefill CP only supports --cp-strategy zigzag.")]
    if enable_cp and strategy is None:
        return [Refusal(check, "--cp-strategy must be set when --enable-prefill-cp is enabled.")]
    if cp > 1:
        if tp % cp:
            return [Refusal(check, f"tp_size must be divisible by attn_cp_size (--tp-size {tp}, --attn-cp-size {cp})")]
        if tp % (attn_dp * cp):
            return [Refusal(check, f"tp_size must be divisible by attn_dp_size * attn_cp_size (--tp-size {tp}, --attn-dp-size {attn_dp})")]
    return []


# --- the verdict, as the commands render it --------------------------------------------------

@dataclass(frozen=True)
class ServerCheck:
    """What 0.5.23 does with a set of server flags (empty lists: starts, CP graphs on): the
    verdict of the start-up resolution (`cpbcg.planner.server.ResolvedServer.findings`)."""

    refuses_start: list[str]
    """Start-up checks that fail: the server exits with these messages."""
    no_cp_graph: list[str]
    """Why `supports_prefill_cp_bcg` is false: the server starts but captures no CP graph."""

    @property
    def ok(self) -> bool:
        return not self.refuses_start and not self.no_cp_graph

    def findings(self) -> list[tuple[str, str]]:
        """`(what 0.5.23 would do, why)` per failed check, start-up refusals first:
        `("refuse to start", msg)`, `("capture no CP graph", msg)`."""
        return [("refuse to start", m) for m in self.refuses_start] + [("capture no CP graph", m) for m in self.no_cp_graph]

    @classmethod
    def of(cls, server: ResolvedServer) -> "ServerCheck":
        """The verdict of a resolved server."""
        found = server.findings()
        return cls([m for w, m in found if w == "refuse to start"], [m for w, m in found if w != "refuse to start"])


def check_server_flags(
    *,
    attn_cp_size: int,
    cp_strategy: str | None,
    enable_prefill_cp: bool,
    tp_size: int = 1,
    pp_size: int = 1,
    dp_size: int = 1,
    ep_size: int = 1,
    prefill_attention_backend: str | None = None,
    architecture: str | None = None,
) -> ServerCheck:
    """0.5.23's start-up checks and `supports_prefill_cp_bcg` on flag values as the server takes
    them (`--attn-cp-size`, `--tp-size`, ...; None = not given), through the start-up resolution
    (`cpbcg.planner.server.resolve_server`, which states the rules) on the assumed GPU and model
    (`architecture` names another model class). Never raises."""
    values = {"attn_cp_size": attn_cp_size, "cp_strategy": cp_strategy, "enable_prefill_cp": enable_prefill_cp, "tp_size": tp_size,
              "pp_size": pp_size, "dp_size": dp_size, "ep_size": ep_size, "prefill_attention_backend": prefill_attention_backend}
    given = {k: Given(v, "flags") for k, v in values.items() if v is not None}
    model = ASSUMED_MODEL if architecture is None else replace(ASSUMED_MODEL, architecture=architecture, architectures=(architecture,))
    return ServerCheck.of(resolve_server(given, model))


def check_flag_words(words: list[str], model: ModelSpec | None = None, gpu: GPU | None = None) -> ServerCheck:
    """The verdict on a server command line's words (SGLang's flag names; the last value of a
    repeated flag wins; flags not given take 0.5.23's defaults), through the start-up
    resolution. Raises `ValueError` for a value 0.5.23 would not parse."""
    return ServerCheck.of(resolve_server(parse_launch_words(words, "flags file"), model, gpu))
