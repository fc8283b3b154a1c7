"""0.5.23 `arg_groups/parallel_hook.py`: the context-parallelism refusals. A step of `pipeline.STEPS`."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import Resolution


def handle_context_parallelism(r: Resolution) -> None:
    """`handle_context_parallelism` (its first failing check; skipped after an earlier refusal): the model
    checks of `_boundary_parallelism_overrides`, then the HIP, DeepSeek V3.2 and MiMo V2 rules, then the
    strategy and divisibility asserts (`tp_size` divisible by `attn_cp_size` and by `attn_dp_size * attn_cp_size`)."""
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
    elif enable_cp and strategy is None:
        r.refuse(check, "--cp-strategy must be set when --enable-prefill-cp is enabled.")
    elif cp > 1 and r.tp % cp:
        r.refuse(check, f"tp_size must be divisible by attn_cp_size (--tp-size {r.tp}, --attn-cp-size {cp})")
    elif cp > 1 and r.tp % (r.attn_dp * cp):
        r.refuse(check, f"tp_size must be divisible by attn_dp_size * attn_cp_size (--tp-size {r.tp}, --attn-dp-size {r.attn_dp})")
