"""0.5.23 `arg_groups/parallel_hook.py`: attention data parallelism and the context-parallelism
refusals. Steps of `pipeline.STEPS`."""

from __future__ import annotations

from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS, sglang_default_buckets
from cpbcg.planner.server import Value


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
