"""0.5.23's start-up rules that turn the prefill graph off or refuse a start beside CP (issue 39, round four):
KDA hybrid linear attention and DeepSeek-V4 (`disable_breakable_cudagraph_if_incompatible`), a PD decode
server (`apply_cuda_graph_disaggregation_roles`), a PD prefill server's transfer backend
(`handle_pd_disaggregation`), DSA DCP under PD (`_dsa_dcp_overrides`); and what a launch command leaves
unsaid (no `--model-path`, no `--attn-cp-size`), said. The wheel's own functions are compared in
tests/test_server_resolution_conformance.py; these hold cpbcg's answers and reasons.
"""

import json
from dataclasses import replace

import orjson
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.engines.sglang.startup import STEPS, parse_launch_words, resolve_server, server_words
from cpbcg.planner.hardware import ASSUMED_MODEL, GPUS, model_spec_from_config

runner = CliRunner()


def resolve(words: str, gpu: str = "B200", model=None):
    return resolve_server(parse_launch_words(server_words(words)), model, GPUS[gpu])


def _config(**extra) -> dict:
    return {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "num_hidden_layers": 4, "hidden_size": 2048,
            "num_attention_heads": 16, "kv_lora_rank": 512, **extra}


def test_a_kda_model_captures_no_prefill_graph_unless_glm5_next():
    kda = model_spec_from_config(_config(linear_attn_config={"kda_layers": [1, 2, 3]}), "config.json")
    assert kda.kda_attention
    layered = model_spec_from_config(_config(text_config={"layer_types": ["full_attention", "linear_attention"], "linear_num_heads": 32,
                                                          "linear_head_dim": 128}), "config.json")
    assert layered.kda_attention  # uses_kda_attention reads the text config too
    assert not model_spec_from_config(_config(), "config.json").kda_attention
    r = resolve("--tp-size 2", model=kda)
    assert (r.prefill_graph_backend.value, r.graph_off) == ("disabled", "KDA hybrid linear attention (KimiLinearForCausalLM)")
    assert "uses_kda_attention" in r.prefill_graph_backend.rule
    assert r.no_prefill_graph() is not None and "KDA" in r.no_prefill_graph()
    given = resolve("--tp-size 2 --cuda-graph-backend-prefill breakable", model=kda)
    assert given.prefill_graph_backend.value == "breakable"  # a given backend is locked
    glm = replace(kda, architecture="Glm5NextForConditionalGeneration", architectures=("Glm5NextForConditionalGeneration",))
    assert resolve("--tp-size 2", model=glm).prefill_graph_backend.value == "breakable"


def test_deepseek_v4_captures_a_prefill_graph_only_on_its_cp_graph_path():
    v4 = replace(ASSUMED_MODEL, architecture="DeepseekV4ForCausalLM", architectures=("DeepseekV4ForCausalLM",), model_type="deepseek_v4")
    plain = resolve("--tp-size 4", model=v4)
    assert plain.prefill_graph_backend.value == "disabled" and plain.graph_off.startswith("DeepSeek-V4")
    assert (plain.attention_backend.value, plain.page_size.value) == ("dsv4", 256)  # _deepseek_v4_overrides
    given = resolve("--tp-size 4 --attention-backend fa3 --page-size 64", model=v4)
    assert (given.attention_backend.value, given.page_size.value) == ("dsv4", 256)  # a model override wins, said
    assert "attention_backend fa3 -> dsv4: DeepseekV4ForCausalLM (0.5.23 _deepseek_v4_overrides)" in given.notes
    assert any("apply_deepseek_v4_defaults" in n for n in plain.notes)  # its own defaults: not modelled, said
    cp = resolve("--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag --prefill-attention-backend trtllm_mha", model=v4)
    assert (cp.prefill_graph_backend.value, cp.cp_graphs) == ("breakable", True)


def test_a_pd_decode_server_captures_no_prefill_graph_and_a_fake_prefill_refuses():
    decode = resolve("--tp-size 4 --disaggregation-mode decode")
    assert (decode.prefill_graph_backend.value, decode.graph_off) == ("disabled", "a PD decode server")
    assert "apply_cuda_graph_disaggregation_roles" in decode.prefill_graph_backend.rule
    cp = resolve("--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag --disaggregation-mode decode")
    assert (cp.supports_prefill_cp_bcg, cp.prefill_graph_backend.value) == (True, "disabled")  # supported; the role disables it
    locked = resolve("--tp-size 4 --disaggregation-mode decode --cuda-graph-backend-prefill breakable")
    assert locked.prefill_graph_backend.value == "breakable"
    prefill = resolve("--tp-size 4 --disaggregation-mode prefill")
    assert prefill.prefill_graph_backend.value == "breakable" and any("no decode CUDA graph" in n for n in prefill.notes)
    fake = resolve("--tp-size 4 --disaggregation-mode prefill --disaggregation-transfer-backend fake")
    assert [(x.check, x.message) for x in fake.refusals] == [
        ("handle_pd_disaggregation", "Prefill server does not support 'fake' as the transfer backend")]
    dsa = replace(ASSUMED_MODEL, architecture="DeepseekV32ForCausalLM", architectures=("DeepseekV32ForCausalLM",), index_topk=2048,
                  kv_lora_rank=512)
    assert resolve("--dcp-size 2 --tp-size 2 --disaggregation-mode decode", model=dsa).refusals[0].message == \
        "DSA DCP does not support PD disaggregation."


def test_each_new_rule_is_a_named_step():
    names = [f"{s.__module__.rsplit('.', 1)[-1]}.{s.__name__}" for s in STEPS]
    assert names[:3] == ["parallel.handle_deprecated_dp_attention", "pd_disaggregation.handle_pd_disaggregation",
                         "cuda_graph.handle_cuda_graph_config"]


def _check_server(*args):
    result = runner.invoke(app, ["check-server", "--format", "json", *args], env={"CPBCG_WIDTH": "200"})
    return result.exit_code, orjson.loads(result.stdout)


def test_a_launch_without_model_path_or_cp_flags_is_said():
    code, doc = _check_server("--server-args", "python -m sglang.launch_server --tp 4")
    assert code == 1
    assert doc["input_notes"] == [
        "--server-args: no --model-path: SGLang 0.5.23 exits 2 (the following arguments are required: --model-path/--model); "
        "planned as if it were given",
        "--server-args: no --attn-cp-size: SGLang 0.5.23 runs attn_cp_size 1 (no prefill context parallelism), planned at cp 1 "
        "(add --attn-cp-size N --enable-prefill-cp, or give --cp-size)"]
    code, doc = _check_server("--server-args", "python -m sglang.launch_server --model-path m --tp 4 --attn-cp-size 4 "
                              "--enable-prefill-cp --cp-strategy zigzag")
    assert (code, doc["input_notes"]) == (0, [])


def test_a_flags_file_without_cp_flags_says_it_plans_cp_1(tmp_path):
    flags = tmp_path / "server.flags"
    flags.write_text("--model-path m --tp-size 4 --cuda-graph-bs-prefill 512 1024 2048 4096 8192\n")
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i, "input_length": 600 + 300 * i, "output_length": 8}) + "\n" for i in range(6)))
    result = runner.invoke(app, ["plan", "--trace", str(trace), "--buckets", str(flags)], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    assert f"cpbcg: note: flags file {flags}: no --attn-cp-size: SGLang 0.5.23 runs attn_cp_size 1" in result.stderr
    assert "no --model-path" not in result.stderr
    flags.write_text("--model-path m --tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag "
                     "--cuda-graph-bs-prefill 512 1024 2048 4096 8192\n")
    again = runner.invoke(app, ["plan", "--trace", str(trace), "--buckets", str(flags)], env={"CPBCG_WIDTH": "200"})
    assert again.exit_code == 0 and "no --attn-cp-size" not in again.stderr
