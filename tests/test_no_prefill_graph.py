"""When 0.5.23 captures no prefill graph for a launch, cpbcg says so first (issue 39).

`disable_breakable_cudagraph_if_incompatible` (0.5.23 `arg_groups/cuda_graph_hook.py`): a launch with
`attn_cp_size > 1` whose CP configuration has no CP graph (`supports_prefill_cp_bcg` false: every Hopper
and Ampere GPU) runs with the prefill graph backend disabled. `plan` answers that at the top and plans
the same traffic at cp 1; `--emit` writes nothing 0.5.23 refuses; `replay-check` refuses to gate it;
`check-server` exits 1.
"""

import orjson
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.planner.hardware import GPUS
from cpbcg.engines.sglang.startup import parse_launch_words, resolve_emitted, resolve_server, server_words
from cpbcg.engines.sglang.server import Given

runner = CliRunner()
CP4 = "python -m sglang.launch_server --model-path m --tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag"
ANSWER = "0.5.23 captures no prefill graph for this launch: CP without CP graphs on H200"


def invoke(*args):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


def resolve(words: str, gpu: str, model=None):
    return resolve_server(parse_launch_words(server_words(words)), model, GPUS[gpu])


def test_cp_on_hopper_has_no_prefill_graph_and_cp_1_keeps_breakable():
    cp4 = resolve(CP4, "H200")
    assert (cp4.starts, cp4.prefill_graph_backend.value, cp4.no_prefill_graph()) == (True, "disabled", ANSWER)
    assert cp4.cp_without_cp_graphs and cp4.what_would_help()[0].startswith("--attn-cp-size 1 (no attention CP")
    assert "disable_breakable_cudagraph_if_incompatible" in cp4.prefill_graph_backend.rule
    cp1 = resolve("--tp-size 4", "H200")
    assert (cp1.prefill_graph_backend.value, cp1.no_prefill_graph(), cp1.findings()) == ("breakable", None, [])
    b200 = resolve(CP4 + " --prefill-attention-backend trtllm_mha", "B200")
    assert (b200.prefill_graph_backend.value, b200.cp_graphs, b200.no_prefill_graph()) == ("breakable", True, None)
    assert resolve(CP4, "A100").no_prefill_graph() == ANSWER.replace("H200", "A100")


def test_multimodal_models_outside_the_allow_list_have_no_prefill_graph():
    from dataclasses import replace

    from cpbcg.planner.hardware import ASSUMED_MODEL

    def model(arch):
        return replace(ASSUMED_MODEL, architecture=arch, architectures=(arch,))

    vl = resolve("--tp-size 1", "B200", model("Qwen2_5_VLForConditionalGeneration"))
    assert vl.no_prefill_graph() == "0.5.23 captures no prefill graph for this launch: multimodal Qwen2_5_VLForConditionalGeneration"
    assert resolve("--language-model-only", "B200", model("Qwen2_5_VLForConditionalGeneration")).prefill_graph_backend.value == "breakable"
    assert resolve("--tp-size 1", "B200", model("Qwen3_5MoeForConditionalGeneration")).prefill_graph_backend.value == "breakable"
    assert resolve("--tp-size 1", "B200", model("Gemma3ForConditionalGeneration")).prefill_graph_backend.value == "breakable"
    assert resolve("--enable-multimodal", "B200", model("Gemma3ForConditionalGeneration")).prefill_graph_backend.value == "disabled"
    # an explicit backend is the user's: 0.5.23 keeps it
    assert resolve(CP4 + " --cuda-graph-backend-prefill breakable", "H200").prefill_graph_backend.value == "breakable"


def test_plan_on_h200_answers_no_prefill_graph_first_and_plans_cp_1():
    result = invoke("plan", "--gpu", "H200", "--server-args", CP4)
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first == f"{ANSWER}."  # the answer first, before plan's verdict and its notes
    assert f"cpbcg: {ANSWER}" in result.output
    assert "Planned instead: the same traffic at cp 1" in result.output and "cp_size 1" in result.output
    doc = orjson.loads(invoke("plan", "--gpu", "H200", "--server-args", CP4, "-f", "json").stdout)
    assert doc["no_prefill_graph"]["answer"] == ANSWER and doc["no_prefill_graph"]["cp_size"] == 4
    assert list(doc)[:2] == ["schema_version", "no_prefill_graph"]
    assert doc["cp_size"] == 1 and doc["coverage"] == 1.0  # the synthetic chat stream all fits the default list at cp 1


def test_plan_on_h200_without_a_launch_plans_what_0523_starts():
    # the deployment's CP flags leave trtllm_mha (refused with CP before SM100) to 0.5.23, which picks fa3
    doc = orjson.loads(invoke("plan", "--gpu", "H200", "-f", "json").stdout)
    assert doc["no_prefill_graph"]["answer"] == ANSWER


def test_emit_for_a_launch_without_prefill_graph_writes_nothing(tmp_path):
    out = tmp_path / "flags.txt"
    result = invoke("plan", "--gpu", "H200", "--server-args", CP4, "--emit", "sglang", "-o", str(out))
    assert result.exit_code == 2 and not out.exists()
    assert result.output.startswith(f"cpbcg: error: --emit sglang: nothing written: {ANSWER}")
    # the whole fix fits the error line (no "...": the cap is MAX_MESSAGE_CHARS, the helps are short)
    assert result.output.strip().endswith("--prefill-attention-backend trtllm_mha, --attn-cp-size = --tp-size (0.5.23's zigzag "
                                          "CP graphs)"), result.output
    ok = invoke("plan", "--gpu", "B200", "--emit", "sglang", "-o", str(out))
    assert ok.exit_code == 0 and out.exists()


def test_emitted_flags_are_resolved_and_a_refusal_is_found():
    h200 = resolve("--tp-size 4", "H200")
    refused = resolve_emitted("--attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag --prefill-attention-backend trtllm_mha", h200)
    assert refused.refusals and "requires SM100" in refused.refusals[0].message
    assert resolve_emitted("--cuda-graph-bs-prefill 16 32", h200).prefill_graph_bs.value == (16, 32)
    assert h200.given["tp_size"] == Given(4, "launch command")


def test_replay_check_refuses_to_gate_and_check_server_exits_1():
    gated = invoke("replay-check", "--gpu", "H200", "--server-args", CP4, "--embedded-sample", "--min-coverage", "0.5")
    assert gated.exit_code == 2 and gated.output.startswith(f"cpbcg: error: --server-args: {ANSWER}")
    assert gated.output.strip().endswith("--attn-cp-size = --tp-size (0.5.23's zigzag CP graphs)"), gated.output
    checked = invoke("check-server", "--gpu", "H200", "--server-args", CP4, "-f", "json")
    assert checked.exit_code == 1
    doc = orjson.loads(checked.stdout)
    assert doc["no_prefill_graph"] == ANSWER and doc["prefill_graph_backend"]["value"] == "disabled"


def test_a_launch_that_reaches_what_is_not_modelled_says_so():
    from dataclasses import replace

    from cpbcg.planner.hardware import ASSUMED_MODEL

    v3 = replace(ASSUMED_MODEL, architecture="DeepseekV3ForCausalLM", architectures=("DeepseekV3ForCausalLM",))
    notes = resolve(CP4 + " --attention-backend fa3 --dcp-size 2", "H200", v3).notes
    assert "not modelled for this launch: the DeepSeek family's DSA decode-CP backends (--dcp-size > 1) and its HIP page size " \
           "(0.5.23 may resolve it otherwise)" in notes
    assert not [n for n in resolve(CP4, "H200").notes if n.startswith("not modelled")]
