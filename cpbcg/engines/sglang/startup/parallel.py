"""0.5.23 `arg_groups/parallel_hook.py`: attention data parallelism and the context-parallelism
refusals. Steps of `pipeline.STEPS`."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.engines.sglang.server import Value


def handle_deprecated_dp_attention(r: Resolution) -> None:
    """`handle_deprecated_dp_attention`: `--dp-size N --enable-dp-attention` is `--attn-dp-size N --dp-size 1`
    (when `--attn-dp-size` is not given)."""
    if r.raw("enable_dp_attention") and r.attn_dp == 1:
        r.attn_dp, r.dp = r.dp, 1


def handle_data_parallelism(r: Resolution) -> None:
    """`handle_data_parallelism`: `--attn-dp-size > 1` with `--dp-size > 1` is refused; with attention DP,
    `tp_size` must be divisible by `attn_dp_size` (an assert: 0.5.23 prints no message), the chunk is divided
    by `attn_dp_size`, and a prefill graph `max_bs` above it (not given) is cut to it, its list regenerated
    (not given)."""
    if r.attn_dp > 1 and r.dp > 1:
        r.refuse("handle_data_parallelism", f"--dp-size {r.dp} with --attn-dp-size {r.attn_dp}: data-parallel replicas combined "
                 "with attention data parallelism are not supported.")
        return
    if r.attn_dp <= 1:
        return
    if r.tp % r.attn_dp:
        r.refuse("handle_data_parallelism", f"(an assert, no message) tp_size must be divisible by attn_dp_size (--tp-size {r.tp}, "
                 f"--attn-dp-size {r.attn_dp})")
        return
    old = r.chunk.value
    r.chunk = Value(old // r.attn_dp, "0.5.23 override", f"{old} / attn_dp_size {r.attn_dp} (0.5.23 handle_data_parallelism)")
    r.notes.append(f"chunked_prefill_size {old} -> {r.chunk.value}: divided by --attn-dp-size {r.attn_dp} (0.5.23 handle_data_parallelism)")
    if r.graph_backend.value != "disabled" and r.max_bs.value is not None and r.max_bs.value > r.chunk.value and r.max_bs_given is None:
        r.max_bs = Value(r.chunk.value, DEFAULT, "the per-DP-rank chunk (0.5.23 handle_data_parallelism)")
        if r.bs_given is None:
            top = min(r.max_bs.value, MAX_BUCKET_TOKENS)
            r.bs = Value(tuple(sglang_default_buckets(top)) if top >= 4 else (), DEFAULT,
                         f"generate_prefill_cuda_graph_batch_sizes({r.max_bs.value})")


def handle_context_parallelism(r: Resolution) -> None:
    """`handle_context_parallelism` (its first failing check; skipped after an earlier refusal): the model
    checks of `_boundary_parallelism_overrides`, then the HIP, DeepSeek V3.2 and MiMo V2 rules, CP-TP group
    sharing (`resolve_cp_tp_group_sharing`), then the strategy and divisibility asserts (`tp_size` divisible by
    `attn_cp_size` and by `attn_dp_size * attn_cp_size`) and the `moe_dp_size` asserts."""
    if r.refusals:
        return
    check, mtype, cp, enable_cp, strategy = "handle_context_parallelism", r.model.model_type or "", r.cp, r.enable_cp, r.strategy
    if mtype in ("nemotron_h", "nemotron_h_puzzle") and cp > 1:
        r.refuse(check, "Nemotron-H does not support --attn-cp-size > 1")
    elif mtype == "longcat_flash" and enable_cp and cp > 1:
        r.refuse(check, "LongCat-Flash does not support --enable-prefill-cp with --attn-cp-size > 1")
    elif enable_cp and r.p["hip"] and r.arch0 != "DeepseekV4ForCausalLM":
        r.refuse(check, f"Prefill CP on HIP is only supported for DeepseekV4ForCausalLM, got {r.arch0!r}.")
    elif enable_cp and r.arch0 == "DeepseekV32ForCausalLM" and strategy == "zigzag":
        r.refuse(check, "DeepSeek V3.2 prefill CP does not support --cp-strategy zigzag; use interleave.")
    elif enable_cp and r.arch0 in ("MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM") and strategy != "zigzag":
        r.refuse(check, "MiMo V2 prefill CP only supports --cp-strategy zigzag.")
    elif (why := _cp_tp_group_sharing(r)) is not None:
        r.refuse("resolve_cp_tp_group_sharing", why)
    elif enable_cp and strategy is None:
        r.refuse(check, "--cp-strategy must be set when --enable-prefill-cp is enabled.")
    elif cp > 1 and r.tp % cp:
        r.refuse(check, f"tp_size must be divisible by attn_cp_size (--tp-size {r.tp}, --attn-cp-size {cp})")
    elif cp > 1 and r.tp % (r.attn_dp * cp):
        r.refuse(check, f"tp_size must be divisible by attn_dp_size * attn_cp_size (--tp-size {r.tp}, --attn-dp-size {r.attn_dp})")
    elif (why := _moe_dp(r)) is not None:
        r.refuse(check, why)


def _moe_dp(r: Resolution) -> str | None:
    """`handle_context_parallelism`'s `moe_dp_size` asserts, their messages."""
    moe_dp = r.raw("moe_dp_size", 1)
    if moe_dp > 1:
        if r.tp % moe_dp:
            return "tp_size must be divisible by moe_dp_size"
        if r.ep * moe_dp > r.tp:
            return "ep_size * moe_dp_size must be less than or equal to tp_size"
        if r.pp != 1:
            return "PP is not supported with context parallelism"
        if r.ep > 1 and r.ep * moe_dp != r.tp:
            return "ep_size * moe_dp_size must be equal to tp_size"
    if r.cp != moe_dp and moe_dp != 1:
        return "attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1"
    return None


CP_TP_GROUP_SHARING = {"Glm5NextForConditionalGeneration": "interleave", "Qwen4ExpForConditionalGeneration": "zigzag"}
"""0.5.23 `cp_tp_group_sharing_hook.py::_SUPPORTED_MODELS` and the CP strategy each requires."""


def _cp_tp_group_sharing(r: Resolution) -> str | None:
    """0.5.23 `cp_tp_group_sharing_hook.py::resolve_cp_tp_group_sharing` (run by `handle_context_parallelism`):
    prefill CP on GLM-5 Next or Qwen4-Exp shares the CP group with TP: `--attn-cp-size == --tp-size`, the
    model's strategy (GLM-5 Next interleave, Qwen4-Exp zigzag), no `--dcp-size > 1`, `--enable-mixed-chunk`,
    `--moe-dp-size > 1` (Qwen4-Exp also no `--ep-size > 1`, MoE all-to-all, `--pp-size > 1`, PD decode; GLM-5 Next as a
    PD server only a prefill server over mooncake with speculative DFLASH, `--pp-size`, `--dp-size`, `--ep-size` 1), and
    Qwen4-Exp runs without a prefill graph. The other speculative checks and the linear-head divisibility are NOT_MODELLED."""
    strategy = CP_TP_GROUP_SHARING.get(r.arch0)
    if not r.enable_cp or r.cp <= 1 or strategy is None:
        return None
    if r.cp != r.tp:
        return f"CP-TP group sharing requires --attn-cp-size == --tp-size, got attn_cp_size={r.cp}, tp_size={r.tp}."
    if r.strategy != strategy:
        return f"CP-TP group sharing requires --cp-strategy {strategy}."
    unsupported = {"dcp-size > 1": r.raw("dcp_size", 1) > 1, "enable-mixed-chunk": bool(r.raw("enable_mixed_chunk", False)),
                   "moe-dp-size > 1": r.raw("moe_dp_size", 1) > 1}
    mode = r.raw("disaggregation_mode", "null")
    if r.arch0 == "Qwen4ExpForConditionalGeneration":
        unsupported |= {"ep-size > 1": r.ep > 1, "moe-a2a-backend": r.raw("moe_a2a_backend", "none") != "none", "pp-size > 1": r.pp > 1,
                        "disaggregation-mode decode": mode == "decode"}
    elif mode != "null":  # GLM-5 Next as a PD server: prefill only, over mooncake, speculative DFLASH
        transfer = r.raw("disaggregation_transfer_backend", "mooncake")
        unsupported |= {"disaggregation-mode decode": mode == "decode",
                        "disaggregation-transfer-backend != mooncake": transfer not in ("mooncake", "mooncake_tcp"),
                        "speculative-algorithm != DFLASH": r.raw("speculative_algorithm") != "DFLASH", "pp-size > 1": r.pp > 1,
                        "dp-size > 1": r.dp > 1, "ep-size > 1": r.ep > 1}
    for flag, on in unsupported.items():
        if on:
            return f"--{flag} is not supported with CP-TP group sharing."
    if r.arch0 == "Qwen4ExpForConditionalGeneration":
        r.graph_backend = Value("disabled", "0.5.23 override", "Qwen4-Exp CP-TP group sharing (0.5.23 resolve_cp_tp_group_sharing)")
    return None
