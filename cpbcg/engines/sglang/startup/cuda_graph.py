"""0.5.23 `arg_groups/cuda_graph_hook.py`: the prefill CUDA graph config, and each rule that turns the
prefill graph on or off. Steps of `pipeline.STEPS`; each names the 0.5.23 function it restates."""

from __future__ import annotations

from typing import Any

from cpbcg.engines.sglang.startup.model import MULTIMODAL_BREAKABLE_GRAPH_ARCHITECTURES, is_multimodal
from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution
from cpbcg.engines.sglang.server import Value
from cpbcg.engines.sglang.release import CP_GRAPH_BACKENDS, INTERLEAVE_CP_GRAPH_ARCHITECTURE

DEEPSEEK_V4_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"})
"""0.5.23 `configs/model_config.py::is_deepseek_v4` (it tests `architectures[0]`)."""


def handle_cuda_graph_config(r: Resolution) -> None:
    """`parse_cuda_graph_config`: the prefill backend is breakable on CUDA (`default_prefill_backend`),
    disabled by `--disable-cuda-graph` / `--disable-prefill-cuda-graph`, or as given
    (`--cuda-graph-backend-prefill`, `--cuda-graph-config`'s `prefill.backend`: locked, automatic rules
    leave it); `max_bs` and `bs` as given. Then `apply_cuda_graph_compatibility`: `--pp-size > 1`
    disables an unlocked breakable graph, else `disable_breakable_cudagraph_if_incompatible` runs on the
    values given (no attention backend is resolved yet: a CP launch has no CP graph at this point unless
    its prefill backend was given)."""
    graph_json = r.raw("cuda_graph_config") or {}
    prefill_raw = graph_json.get("prefill")
    prefill_json: dict[str, Any] = prefill_raw if isinstance(prefill_raw, dict) else {}
    r.graph_backend = Value("breakable" if r.p["cuda"] else "disabled", DEFAULT, "breakable on CUDA (default_prefill_backend)")
    if r.raw("disable_cuda_graph"):
        r.graph_backend, r.locked_backend = Value("disabled", r.source("disable_cuda_graph"), "--disable-cuda-graph"), True
    if r.raw("disable_prefill_cuda_graph"):
        r.graph_backend, r.locked_backend = Value("disabled", r.source("disable_prefill_cuda_graph"), "--disable-prefill-cuda-graph"), True
    if r.raw("cuda_graph_backend_prefill") is not None:
        r.graph_backend, r.locked_backend = Value(r.raw("cuda_graph_backend_prefill"), r.source("cuda_graph_backend_prefill")), True
    r.max_bs_given, r.max_bs_source = r.raw("cuda_graph_max_bs_prefill"), r.source("cuda_graph_max_bs_prefill")
    r.bs_given, r.bs_source = r.raw("cuda_graph_bs_prefill"), r.source("cuda_graph_bs_prefill")
    if "backend" in prefill_json:
        r.graph_backend, r.locked_backend = Value(str(prefill_json["backend"]), r.source("cuda_graph_config"), "--cuda-graph-config"), True
    if isinstance(prefill_json.get("max_bs"), int):
        r.max_bs_given, r.max_bs_source = prefill_json["max_bs"], r.source("cuda_graph_config")
    if isinstance(prefill_json.get("bs"), list):
        r.bs_given, r.bs_source = tuple(prefill_json["bs"]), r.source("cuda_graph_config")
    if r.pp > 1 and not r.locked_backend and r.graph_backend.value == "breakable":
        r.graph_backend = Value("disabled", DEFAULT, "pp_size > 1 (0.5.23 apply_cuda_graph_compatibility)")
    else:
        _disable_breakable_if_incompatible(r)  # on the values given so far: no backend resolved yet
    apply_cuda_graph_disaggregation_roles(r)


def apply_cuda_graph_disaggregation_roles(r: Resolution) -> None:
    """`apply_cuda_graph_disaggregation_roles` (run by `handle_cuda_graph_config` and again by
    `apply_prefill_cp_cuda_graph_default`): a PD decode server (`--disaggregation-mode decode`) captures no
    prefill graph unless its prefill backend was given (a PD prefill server's missing decode graph is said by
    `pd_disaggregation.handle_pd_disaggregation`: cpbcg plans prefill graphs)."""
    if r.raw("disaggregation_mode", "null") == "decode" and not r.locked_backend and r.graph_backend.value != "disabled":
        r.graph_off = "a PD decode server"
        r.graph_backend = Value("disabled", r.source("disaggregation_mode"),
                                "--disaggregation-mode decode (0.5.23 apply_cuda_graph_disaggregation_roles)")


def disable_prefill_cuda_graph_for_deepseek_trtllm_mla(r: Resolution) -> None:
    """`disable_prefill_cuda_graph_for_deepseek_trtllm_mla`: DeepSeek-V3 prefilling on trtllm_mla runs
    without a prefill graph unless its backend was given."""
    if (not r.refusals and not r.locked_backend and r.graph_backend.value != "disabled" and "DeepseekV3ForCausalLM" in r.archs
            and r.prefill_run == "trtllm_mla"):
        r.graph_backend = Value("disabled", "model", "DeepSeek-V3 on trtllm_mla (0.5.23 disable_prefill_cuda_graph_for_deepseek_trtllm_mla)")


def supports_prefill_cp_bcg(r: Resolution) -> list[str]:
    """Why 0.5.23 `layers/cp/bcg/__init__.py::supports_prefill_cp_bcg` is false (empty: true): it needs
    `enable_prefill_cp`, `pp_size 1`, `attn_cp_size == tp_size` and (zigzag, trtllm_mha) or (interleave,
    dsa); interleave (`InterleaveCPBCGInput.supports`) also `dp_size 1`, `ep_size 1`, `attn_cp_size > 1`
    and GLM-5 Next."""
    missing: list[str] = []
    if not r.enable_cp:
        missing.append("--enable-prefill-cp is not set")
    if r.pp != 1:
        missing.append(f"--pp-size is {r.pp}, CP graphs need 1")
    if r.cp != r.tp:
        missing.append(f"--attn-cp-size {r.cp} differs from --tp-size {r.tp}")
    wanted = CP_GRAPH_BACKENDS.get(r.strategy or "")
    if wanted is None:
        missing.append(f"--cp-strategy {r.strategy} has no CP graphs (zigzag or interleave)")
    elif r.prefill_run != wanted:
        missing.append(f"{r.strategy} CP graphs need prefill attention backend {wanted}, the server runs {r.prefill_run}")
    if r.strategy == "interleave":
        if r.dp != 1 or r.ep != 1:
            missing.append(f"interleave CP graphs need --dp-size 1 and --ep-size 1 (got {r.dp}, {r.ep})")
        if r.cp <= 1:
            missing.append("interleave CP graphs need --attn-cp-size > 1")
        if INTERLEAVE_CP_GRAPH_ARCHITECTURE not in r.archs:
            missing.append(f"interleave CP graphs need {INTERLEAVE_CP_GRAPH_ARCHITECTURE}, not {r.arch0}")
    return missing


def apply_prefill_cp_cuda_graph_default(r: Resolution) -> None:
    """`apply_prefill_cp_cuda_graph_default` (run when `--enable-prefill-cp`): a supported CP configuration
    (`supports_prefill_cp_bcg`) gets the breakable prefill graph unless its backend was given, and
    `apply_cuda_graph_compatibility` runs again (`disable_breakable_cudagraph_if_incompatible` on the final
    values). Why there is no CP graph is kept for every launch (`ResolvedServer.no_cp_graph`)."""
    r.no_cp_graph = supports_prefill_cp_bcg(r)
    if r.enable_cp and not r.no_cp_graph and not r.locked_backend:
        r.graph_backend = Value("breakable", DEFAULT, "supported prefill CP (0.5.23 apply_prefill_cp_cuda_graph_default)")
        r.graph_off = ""
        _disable_breakable_if_incompatible(r)
        apply_cuda_graph_disaggregation_roles(r)


def _disable_breakable_if_incompatible(r: Resolution) -> None:
    """`disable_breakable_cudagraph_if_incompatible` (run by `apply_cuda_graph_compatibility`): an unlocked
    breakable prefill graph is disabled by the first rule that holds, in its order: a model with KDA
    linear-attention layers (`uses_kda_attention`) other than GLM-5 Next, DeepSeek-V4 (`is_deepseek_v4`)
    without CP graphs, `attn_cp_size > 1` without CP graphs (`supports_prefill_cp_bcg` false: every Hopper and
    Ampere GPU with prefill CP), `dcp_size > 1`, two-batch overlap, a MoE all-to-all backend other than none,
    deepep, megamoe, flashinfer, and a multimodal model outside `multimodal_breakable_cuda_graph_supported_model_archs`."""
    if r.locked_backend or r.graph_backend.value != "breakable":
        return
    why = _breakable_incompatible(r)
    if why is not None:
        r.graph_off = why[0]
        r.graph_backend = Value("disabled", "0.5.23 override", f"{why[0]}: {why[1]} (0.5.23 disable_breakable_cudagraph_if_incompatible)")


def say_why_the_prefill_graph_is_off(r: Resolution) -> None:
    """Not a 0.5.23 step: why the prefill graph ended disabled, in short (`ResolvedServer.graph_off`), the
    CP rule's reason restated on the final values (`supports_prefill_cp_bcg` after the backends resolved)."""
    if r.graph_backend.value != "disabled":
        r.graph_off = ""
        return
    if r.graph_off.startswith("CP without CP graphs") and r.no_cp_graph:
        r.graph_backend = Value("disabled", "0.5.23 override", f"{r.graph_off}: --attn-cp-size {r.cp} and {r.no_cp_graph[0]} "
                                "(0.5.23 disable_breakable_cudagraph_if_incompatible)")
    elif not r.graph_off:
        r.graph_off = r.graph_backend.rule or r.graph_backend.source


def _breakable_incompatible(r: Resolution) -> tuple[str, str] | None:
    """(in short, in full) for the first rule of `disable_breakable_cudagraph_if_incompatible` that holds."""
    if r.model.kda_attention and INTERLEAVE_CP_GRAPH_ARCHITECTURE not in r.archs:  # GLM-5 Next is validated with KDA
        return f"KDA hybrid linear attention ({r.arch0})", "its config declares KDA layers (0.5.23 uses_kda_attention)"
    missing = supports_prefill_cp_bcg(r)
    if r.arch0 in DEEPSEEK_V4_ARCHITECTURES and missing:
        return f"DeepSeek-V4 ({r.arch0}) without CP graphs", f"heavy capture-pool memory pressure: only its supported CP path captures ({missing[0]})"
    if r.cp > 1 and missing:
        return f"CP without CP graphs on {r.gpu.name}", f"--attn-cp-size {r.cp} and {missing[0]}"
    if r.raw("dcp_size", 1) > 1:
        return "decode context parallel", f"--dcp-size {r.raw('dcp_size')}"
    if r.raw("enable_two_batch_overlap", False):
        return "two-batch overlap", "--enable-two-batch-overlap"
    a2a = r.raw("moe_a2a_backend", "none")
    if a2a not in ("none", "deepep", "megamoe", "flashinfer"):
        return "an unvalidated MoE all-to-all backend", f"--moe-a2a-backend {a2a}"
    if is_multimodal(r.model, r.given) and not r.archs & MULTIMODAL_BREAKABLE_GRAPH_ARCHITECTURES:
        return f"multimodal {r.arch0}", "outside 0.5.23's breakable-graph allow-list (--language-model-only serves its text part with graphs)"
    return None
