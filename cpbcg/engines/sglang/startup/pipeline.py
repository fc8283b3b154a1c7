"""The start-up steps in 0.5.23's order (`arg_groups/pipeline.py::run_resolution_pipeline`), and
`resolve_server`, which runs them on one launch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from cpbcg.engines.sglang.startup import attention, cuda_graph, memory, model, parallel, pd_disaggregation
from cpbcg.engines.sglang.startup.args import AFFECTS_UNMODELLED, MODELLED_FLAGS, parse_launch_words, server_words
from cpbcg.engines.sglang.startup.state import DEFAULT, Resolution
from cpbcg.planner.hardware import ASSUMED_GPU, ASSUMED_MODEL, GPU, ModelSpec
from cpbcg.engines.sglang.server import Given, ResolvedServer, ServerCheck, Value

Step = Callable[[Resolution], None]

STEPS: tuple[Step, ...] = (
    parallel.handle_deprecated_dp_attention,
    pd_disaggregation.handle_pd_disaggregation,
    cuda_graph.handle_cuda_graph_config,
    memory.handle_gpu_memory_settings,
    model.deepseek_family_overrides,
    model.gpt_oss_overrides,
    model.llama4_overrides,
    model.deepseek_v4_overrides,
    model.gpt_oss_attention_backends,
    model.llama4_attention_backend,
    attention.handle_attention_backend_compatibility,
    cuda_graph.disable_prefill_cuda_graph_for_deepseek_trtllm_mla,
    attention.page_size_default,
    parallel.handle_data_parallelism,
    parallel.handle_context_parallelism,
    cuda_graph.apply_prefill_cp_cuda_graph_default,
    model.handle_model_capability_adjustments,
    attention.create_attention_backends,
    cuda_graph.say_why_the_prefill_graph_is_off,
)
"""0.5.23's start-up resolution as cpbcg restates it, in `run_resolution_pipeline`'s order (the
breakable-graph disable runs inside `handle_cuda_graph_config` and `apply_prefill_cp_cuda_graph_default`,
as in 0.5.23; the model-load check, then the explanation of a disabled prefill graph, last). Each step
names the 0.5.23 function it restates."""

NOT_MODELLED = (
    "speculative decoding (draft backends, eagle top-k)", "DeepEP / MoE all-to-all bucket rounding",
    "HIP, NPU, XPU, MUSA, CPU platform handlers", "mem_fraction_static and the KV pool size (max_total_tokens, "
    "max_running_requests when not given)", "attention sinks and asymmetric K/V heads in the default backend",
    "deterministic inference, LoRA, hierarchical cache, PD disaggregation's checks beyond the fake prefill transfer "
    "backend and the graph roles",
    "the DeepSeek family's DSA decode-CP backends (--dcp-size > 1) and its HIP page size",
    "DeepSeek-V4's defaults and CP checks (apply_deepseek_v4_defaults, validate_deepseek_v4_cp: its flashmla "
    "backends and request limit); its dsv4 backend, page 256 and prefill-graph disable are restated",
    "multimodal detection from a config's text_config / vision_config alone (the architecture list decides)",
    "CP-TP group sharing's speculative checks beyond PD and its linear-attention head divisibility",
)
"""Parts of 0.5.23's start-up resolution `STEPS` do not restate."""


def resolve_server(
    given: Mapping[str, Given],
    model: ModelSpec | None = None,
    gpu: GPU | None = None,
    *,
    printed: Mapping[str, Given] | None = None,
    model_source: str = "",
    gpu_source: str = "",
    steps: tuple[Step, ...] = STEPS,
) -> ResolvedServer:
    """What 0.5.23 runs for the server arguments `given` (0.5.23 field names -> `Given`), the model
    and the GPU (None: `hardware.ASSUMED_MODEL`, `ASSUMED_GPU`, said as assumptions): `steps` in
    order on one `Resolution`. `printed` are values a running server printed (a log): they win over
    the restated rules, with their source. Pure; never raises (bad values are refused by the parsers)."""
    model_assumed, gpu_assumed = model is None, gpu is None
    gpu_src = gpu_source or ("given" if gpu is not None else "assumed: SM100, where 0.5.23 runs zigzag CP graphs")
    model_src = model_source or (model.source if model is not None else ASSUMED_MODEL.source)
    r = Resolution(given, model or ASSUMED_MODEL, gpu or ASSUMED_GPU)
    for step in steps:
        step(r)
    backend, prefill_b, decode_b = r.backend, r.prefill_backend, r.decode_backend
    prefill = Value(r.prefill_run, r.source("prefill_attention_backend") if prefill_b else backend.source, "" if prefill_b else backend.rule)
    decode = Value(r.decode_run, r.source("decode_attention_backend") if decode_b else backend.source, "" if decode_b else backend.rule)
    mrr_given, max_total = r.raw("max_running_requests"), r.raw("max_total_tokens")
    resolved = {
        "page_size": r.page, "chunked_prefill_size": r.chunk,
        "max_prefill_tokens": Value(r.raw("max_prefill_tokens", 16384), r.source("max_prefill_tokens")),
        "max_running_requests": Value(mrr_given, r.source("max_running_requests")) if mrr_given is not None
        else Value(None, DEFAULT, "decided at start from the KV pool"),
        "max_total_tokens": Value(max_total, r.source("max_total_tokens")) if max_total is not None
        else Value(None, DEFAULT, "sized at start from free GPU memory"),
    }
    for key, g in (printed or {}).items():
        if key in resolved and g.value != resolved[key].value:
            r.notes.append(f"{key} {resolved[key].value} -> {g.value}: as the server printed ({g.source})")
        if key in resolved:
            resolved[key] = Value(g.value, g.source, f"printed by the server ({g.source})")
    not_modelled = tuple(sorted(f"--{k.replace('_', '-')}" for k in given if k not in MODELLED_FLAGS or k in AFFECTS_UNMODELLED))
    r.notes.extend(f"not modelled for this launch: {part} (0.5.23 may resolve it otherwise)" for part in _not_modelled_hits(r))
    return ResolvedServer(
        gpu=r.gpu, gpu_source=gpu_src, model=r.model, model_source=model_src, use_mla=r.mla,
        attention_backend=backend, prefill_attention_backend=prefill, decode_attention_backend=decode,
        page_size=resolved["page_size"], chunked_prefill_size=resolved["chunked_prefill_size"],
        max_prefill_tokens=resolved["max_prefill_tokens"], max_running_requests=resolved["max_running_requests"],
        max_total_tokens=resolved["max_total_tokens"],
        enable_mixed_chunk=Value(bool(r.raw("enable_mixed_chunk", False)), r.source("enable_mixed_chunk")),
        tp_size=r.tp, attn_cp_size=r.cp, pp_size=r.pp, dp_size=r.dp, ep_size=r.ep, enable_prefill_cp=r.enable_cp, cp_strategy=r.strategy,
        prefill_graph_backend=r.graph_backend, prefill_graph_max_bs=r.max_bs, prefill_graph_bs=r.bs,
        refusals=tuple(r.refusals), no_cp_graph=tuple(r.no_cp_graph), not_modelled=not_modelled, notes=tuple(r.notes),
        given=dict(given), model_assumed=model_assumed, gpu_assumed=gpu_assumed, graph_off=r.graph_off,
    )


def _not_modelled_hits(r: Resolution) -> list[str]:
    """The parts of `NOT_MODELLED` this launch reaches, said per launch."""
    hits = []
    if r.arch0 in model.DEEPSEEK_FAMILY and r.raw("dcp_size", 1) > 1:
        hits.append(NOT_MODELLED[6])
    if r.p["hip"] or r.gpu.vendor not in ("nvidia", "amd"):
        hits.append(NOT_MODELLED[2])
    if r.raw("speculative_algorithm") is not None:
        hits.append(NOT_MODELLED[0])
    if r.arch0 in cuda_graph.DEEPSEEK_V4_ARCHITECTURES:
        hits.append(NOT_MODELLED[7])
    return hits


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
    them (`--attn-cp-size`, `--tp-size`, ...; None = not given), through `resolve_server` on the
    assumed GPU and model (`architecture` names another model class). Never raises."""
    values = {"attn_cp_size": attn_cp_size, "cp_strategy": cp_strategy, "enable_prefill_cp": enable_prefill_cp, "tp_size": tp_size,
              "pp_size": pp_size, "dp_size": dp_size, "ep_size": ep_size, "prefill_attention_backend": prefill_attention_backend}
    given = {k: Given(v, "flags") for k, v in values.items() if v is not None}
    model = ASSUMED_MODEL if architecture is None else replace(ASSUMED_MODEL, architecture=architecture, architectures=(architecture,))
    return ServerCheck.of(resolve_server(given, model))


def check_flag_words(words: list[str], model: ModelSpec | None = None, gpu: GPU | None = None) -> ServerCheck:
    """The verdict on a server command line's words (SGLang's flag names; the last value of a
    repeated flag wins; flags not given take 0.5.23's defaults), through `resolve_server`.
    Raises `ValueError` for a value 0.5.23 would not parse."""
    return ServerCheck.of(resolve_server(parse_launch_words(words, "flags file"), model, gpu))


def resolve_emitted(text: str, server: ResolvedServer) -> ResolvedServer:
    """0.5.23's start-up resolution of flags cpbcg writes (`--emit sglang|sglang-json`: the words of `text`)
    added to the launch `server` was resolved from (its given arguments; the written ones win), on its model
    and GPU (an assumed one stays assumed). Raises `ValueError` when 0.5.23 would not parse the words."""
    given = dict(server.given)
    given.update(parse_launch_words(server_words(text), "the emitted flags"))
    return resolve_server(given, None if server.model_assumed else server.model, None if server.gpu_assumed else server.gpu,
                          model_source=server.model_source, gpu_source=server.gpu_source)
