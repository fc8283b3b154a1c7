"""Real SGLang server logs pasted in SGLang's issue threads (short excerpts under tests/assets/real_logs/, each
with its source URL on its first line): the GPU, model class, tp/pp and prefill-graph state read from them,
every assumption said (issue 39, "Done when"). Before this round each was planned on the assumed B200 and
three with prefill graphs taken as on."""

from pathlib import Path

import pytest

from cpbcg import api
from cpbcg.engines.sglang.logs.settings import read_log_settings

LOGS = Path(__file__).parent / "assets" / "real_logs"


@pytest.mark.parametrize("name, gpu, gpu_said, model, tp, graphs, graphs_said", [
    ("gemma3-2025-03.log", "H200", "inferred from", "Gemma3ForConditionalGeneration", 1, False, "dated 2025-03-27, before breakable"),
    ("llama-2025-11-l40s.log", "L40S", "inferred from", "LlamaForCausalLM", 1, False, "dated 2025-11-11, before breakable"),
    ("tp8-2025-10.log", "B200", "assumed", "LlamaForCausalLM", 8, False, "dated 2025-10-16, before breakable"),
    ("tp2-piecewise-2025-11.log", "B200", "assumed", "LlamaForCausalLM", 2, True, "capture lines, line 5"),
])
def test_a_real_log_is_read_right_and_every_assumption_said(name, gpu, gpu_said, model, tp, graphs, graphs_said):
    path = LOGS / name
    assert path.read_text().startswith("# Excerpt of a real SGLang server log pasted in https://github.com/sgl-project/sglang/")
    log = read_log_settings(path)
    _, dep = api.load_config_and_deployment(None, {}, log=log)
    server = dep.server
    assert (server.gpu.name, server.model.architecture, server.tp_size, server.pp_size, log.prefill_graphs) == (gpu, model, tp, 1, graphs)
    assert server.gpu_source.startswith(gpu_said) and graphs_said in log.prefill_graphs_origin
    assert server.gpu_assumed == (gpu_said == "assumed")
    printed = log.architecture is not None
    assert server.model_source.startswith(f"{model} as the server printed it" if printed else "assumed")  # the shape: assumed, said
    assert "assumed" in server.model_source
