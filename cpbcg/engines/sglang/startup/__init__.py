"""The server SGLang 0.5.23 actually starts: its start-up resolution, restated as an ordered list of
small named steps (`STEPS`), each in a module named after 0.5.23's `arg_groups` hook it restates and
each naming the 0.5.23 function:

1. `parallel.handle_deprecated_dp_attention`
2. `pd_disaggregation.handle_pd_disaggregation` (a PD prefill server refuses the fake transfer backend)
3. `cuda_graph.handle_cuda_graph_config` (`parse_cuda_graph_config`, `apply_cuda_graph_compatibility`
   and its `disable_breakable_cudagraph_if_incompatible`: KDA models other than GLM-5 Next, DeepSeek-V4
   and CP without CP graphs -- every Hopper and Ampere GPU with prefill CP -- and multimodal models
   outside the allow-list capture no prefill graph; then `apply_cuda_graph_disaggregation_roles`: none
   on a PD decode server)
4. `memory.handle_gpu_memory_settings`
5. `model.deepseek_family_overrides`, `model.gpt_oss_overrides`, `model.llama4_overrides`, `model.deepseek_v4_overrides` (the
   model override registry), `model.gpt_oss_attention_backends` and `model.llama4_attention_backend`
   (`handle_model_specific_adjustments`)
6. `attention.handle_attention_backend_compatibility` (and its post-process passes; torch_native and
   flex_attention turn CUDA graphs off)
7. `cuda_graph.disable_prefill_cuda_graph_for_deepseek_trtllm_mla`
8. `attention.page_size_default` (`_page_size_default`)
9. `parallel.handle_data_parallelism` (attention DP: refusals, the chunk divided by `attn_dp_size`)
10. `parallel.handle_context_parallelism`
11. `cuda_graph.apply_prefill_cp_cuda_graph_default` (`supports_prefill_cp_bcg`; the compatibility
    rules again when it turns the graph on)
12. `model.handle_model_capability_adjustments`
13. at model load, `attention.create_attention_backends` (`create_trtllm_mha_backend`, `create_hpc_ops_backend`)
14. `cuda_graph.say_why_the_prefill_graph_is_off` (cpbcg's: the short reason a report leads with)

From what the user gives -- server arguments by name (`args.parse_launch_words`: a launch command's
words as 0.5.23's argparse takes them; `args.log_given`: a log), the model and the GPU --
`resolve_server` returns the engine-neutral `cpbcg.engines.sglang.server.ResolvedServer`.
`tests/test_server_resolution_conformance.py` runs 0.5.23's functions from the wheel on random launches
and compares; what is not restated is `NOT_MODELLED`, said per launch (`ResolvedServer.not_modelled`).
"""

from cpbcg.engines.sglang.startup.args import (
    ATTENTION_BACKENDS, MODELLED_FLAGS, launch_notes, log_given, log_printed, parse_launch_words, server_words, unrecognized_flag,
)
from cpbcg.engines.sglang.startup.attention import default_attention_backend
from cpbcg.engines.sglang.startup.memory import gpu_memory_chunk
from cpbcg.engines.sglang.startup.model import MULTIMODAL_ARCHITECTURES, MULTIMODAL_BREAKABLE_GRAPH_ARCHITECTURES, is_multimodal
from cpbcg.engines.sglang.startup.pipeline import (
    NOT_MODELLED, STEPS, check_flag_words, check_server_flags, resolve_emitted, resolve_server,
)

__all__ = [
    "ATTENTION_BACKENDS", "MODELLED_FLAGS", "MULTIMODAL_ARCHITECTURES", "MULTIMODAL_BREAKABLE_GRAPH_ARCHITECTURES", "NOT_MODELLED", "STEPS",
    "check_flag_words", "check_server_flags", "default_attention_backend", "gpu_memory_chunk", "is_multimodal", "launch_notes", "log_given", "log_printed",
    "parse_launch_words", "resolve_emitted", "resolve_server", "server_words", "unrecognized_flag",
]
