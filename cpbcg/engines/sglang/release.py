"""The SGLang release cpbcg models, and whether a deployment's flags start it with CP graphs.

`SGLANG_VERSION` is the one place the release is named (help, report headers, JSON
`sglang_version`, docs). The start-up rules themselves (page size, chunk, backends, refusals,
CP graphs) are `cpbcg.engines.sglang.startup`'s. `tests/test_sglang_deploy_conformance.py` evaluates 0.5.23's own code on
the flags `--emit sglang` writes.
"""

from __future__ import annotations

SGLANG_VERSION = "0.5.23"
"""The SGLang release whose scheduler, replay selection and flags cpbcg models (PyPI 2026-10-30)."""
RELEASE = f"SGLang {SGLANG_VERSION}"
"""The engine and release as notes name it (`EngineRules.release`, `CaptureSpec.engine`)."""

CP_GRAPH_BACKENDS = {"zigzag": "trtllm_mha", "interleave": "dsa"}
"""0.5.23 `PREFILL_CP_BCG_SUPPORTED_COMBINATIONS`: the prefill attention backend each CP
strategy needs for breakable CUDA graphs."""
INTERLEAVE_CP_GRAPH_ARCHITECTURE = "Glm5NextForConditionalGeneration"
"""0.5.23 `InterleaveCPBCGInput.supports`: the only model architecture with interleave CP graphs."""
HARDWARE_NOTE = {
    "zigzag": "trtllm_mha prefill with CP needs Blackwell (SM100: B200, GB200, B300, GB300) and a non-MLA model: on "
              "Hopper (H100/H200) 0.5.23 refuses --prefill-attention-backend trtllm_mha with --attn-cp-size > 1, and "
              "without it picks fa3 and captures no CP graph",
    "interleave": "dsa prefill CP graphs exist only for GLM-5 Next (Glm5NextForConditionalGeneration) "
                  "with --dp-size 1 and --ep-size 1",
}
"""The hardware or model each strategy's CP graphs need, stated beside emitted flags."""
