"""The start-up resolution's own rules and inputs (`cpbcg.engines.sglang.startup`, `cpbcg.planner.hardware`).

The rules are compared with 0.5.23's code in `test_server_resolution_conformance.py`; these
tests pin the values a user sees and the parts that test cannot run from the wheel (the
per-model overrides, the launch-command parser, the sources said)."""

from __future__ import annotations

import pytest

from cpbcg.planner.hardware import gpu_by_name, model_spec_from_config, uses_mla
from cpbcg.engines.sglang.startup import parse_launch_words, resolve_server, server_words
from cpbcg.engines.sglang.server import ASSUMED_MODEL, Given

CP4 = "--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag"


def resolve(words: str, model=None, gpu: str | None = None, **kw):
    return resolve_server(parse_launch_words(server_words(words)), model, gpu_by_name(gpu) if gpu else None, **kw)


def config(arch: str, **extra) -> dict:
    return {"architectures": [arch], "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8, **extra}


def test_nothing_given_is_a_b200_trtllm_mha_server_at_page_64_with_16k_chunks_said_as_assumed():
    r = resolve(CP4)
    assert (r.gpu.name, r.page_size.value, r.chunked_prefill_size.value, r.prefill_attention_backend.value) == (
        "B200", 64, 16384, "trtllm_mha")
    assert r.cp_graphs and r.starts and r.gpu_source.startswith("assumed") and r.model_source.startswith("assumed")
    assert r.page_size.describe() == "64: trtllm_mha (0.5.23 overrides)"
    assert r.chunked_prefill_size.describe() == "16384: B200 179 GiB (0.5.23 handle_gpu_memory_settings)"
    assert (r.prefill_graph_max_bs.value, len(r.prefill_graph_bs.value), r.prefill_graph_bs.value[-1]) == (16384, 74, 16384)
    assert r.max_running_requests.value is None and "KV pool" in r.max_running_requests.rule


def test_h100_defaults_to_fa3_at_page_1_and_8k_chunks_without_cp_graphs():
    r = resolve(CP4, gpu="H100")
    assert (r.page_size.value, r.chunked_prefill_size.value, r.prefill_attention_backend.value) == (1, 8192, "fa3")
    assert r.starts and not r.cp_graphs
    assert r.findings() == [("capture no CP graph", "zigzag CP graphs need prefill attention backend trtllm_mha, the server runs fa3"),
                            ("capture no prefill graph", "CP without CP graphs on H100")]  # disable_breakable_cudagraph_if_incompatible
    assert r.prefill_graph_backend.value == "disabled"
    forced = resolve(CP4 + " --prefill-attention-backend trtllm_mha", gpu="H200")
    assert not forced.starts and forced.refusals[0].check == "handle_attention_backend_compatibility"
    assert "requires SM100" in forced.refusals[0].message


def test_a_page_size_the_backend_does_not_take_is_raised_and_said():
    r = resolve(CP4 + " --page-size 1")
    assert r.page_size.value == 64 and r.notes == (
        "page_size 1 -> 64: trtllm_mha takes 16, 32, 64 or 128 (0.5.23 _mla_backend_page_constraints)",)
    kept = resolve(CP4 + " --page-size 32")
    assert kept.page_size.value == 32 and kept.page_size.source == "launch command" and not kept.notes


def test_an_mla_model_refuses_trtllm_mha_and_defaults_to_trtllm_mla_without_cp_graphs():
    ds = model_spec_from_config(config("DeepseekV3ForCausalLM", kv_lora_rank=512), "ds.json")
    assert uses_mla(ds)
    r = resolve(CP4, ds)
    assert r.attention_backend.value == "trtllm_mla" and r.attention_backend.source == "model"
    assert r.starts and not r.cp_graphs and r.prefill_graph_backend.value == "disabled"  # DeepSeek-V3 on trtllm_mla
    assert r.prefill_graph_max_bs.value == 8192  # MLA caps capture at 8192
    forced = resolve(CP4 + " --prefill-attention-backend trtllm_mha", ds)
    assert [x.message for x in forced.refusals] == ["trtllm_mha backend can only be used with non-MLA models."]


def test_a_dsa_checkpoint_takes_the_dsa_backend_and_page_64_times_kpool():
    glm = model_spec_from_config(config("GlmMoeDsaForCausalLM", kv_lora_rank=512, index_topk=2048, index_kpool=2), "glm.json")
    r = resolve(CP4.replace("zigzag", "interleave"), glm)
    assert (r.attention_backend.value, r.page_size.value) == ("dsa", 128)
    assert r.no_cp_graph == ("interleave CP graphs need Glm5NextForConditionalGeneration, not GlmMoeDsaForCausalLM",)


def test_mllama_turns_chunking_off_and_says_so():
    mllama = model_spec_from_config({"architectures": ["MllamaForConditionalGeneration"], "model_type": "mllama",
                                     "text_config": {"num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
                                                     "model_type": "mllama_text_model"}}, "m.json")
    r = resolve(CP4 + " --chunked-prefill-size 8192", mllama)
    assert r.chunked_prefill_size.value == -1 and r.chunked_prefill_size.source == "model"
    assert "chunked_prefill_size 8192 -> -1" in r.notes[0]
    assert r.prefill_graph_max_bs.value == 8192  # sized before the model override, as 0.5.23 does


def test_the_launch_command_parser_takes_shell_forms_and_refuses_bad_values():
    words = server_words("python3 -m sglang.launch_server --model-path m \\\n  --page-size=32 --cuda-graph-bs-prefill 512 1024 "
                         "--enable-prefill-cp --host 0.0.0.0  # a comment")
    given = parse_launch_words(words)
    assert {k: g.value for k, g in given.items()} == {"model_path": "m", "page_size": 32, "cuda_graph_bs_prefill": (512, 1024),
                                                      "enable_prefill_cp": True, "host": "0.0.0.0"}
    assert resolve_server(given).not_modelled == ("--host",)
    for bad, message in [("--page-size x", "--page-size: expected an integer, got 'x'"),
                         ("--attention-backend foo", "--attention-backend: 'foo' is not a choice of SGLang 0.5.23"),
                         ("--enable-prefill-cp yes", "--enable-prefill-cp: takes no value, got 'yes'"),
                         ("--chunked-prefill-size 0", "--chunked-prefill-size: 0 is out of range"),
                         ("--tp-size 4 4", "--tp-size: expected one value, got 2")]:
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace("+", r"\+")):
            parse_launch_words(bad.split())
    with pytest.raises(ValueError, match="cannot split the launch command"):
        server_words("--model-path 'open")


def test_values_the_server_printed_win_with_their_source():
    r = resolve(CP4, printed={"page_size": Given(32, "server.log:12"), "max_running_requests": Given(2048, "server.log:40")})
    assert r.page_size.value == 32 and r.page_size.source == "server.log:12"
    assert r.max_running_requests.describe() == "2048: printed by the server (server.log:40)"
    assert "page_size 64 -> 32: as the server printed (server.log:12)" in r.notes


def test_fa4_takes_page_128_and_the_assumed_model_is_not_mla():
    assert not uses_mla(ASSUMED_MODEL)
    # one assumed model and GPU, defined in hardware.py, taken by the resolution (and the cost models)
    from cpbcg.planner import hardware
    r = resolve(CP4)
    assert r.model is hardware.ASSUMED_MODEL and r.gpu is hardware.ASSUMED_GPU and r.model_assumed and r.gpu_assumed
    assert r.model_source.startswith("assumed") and r.gpu_source.startswith("assumed")
    r = resolve(CP4 + " --attention-backend fa4")
    assert r.page_size.value == 128 and r.page_size.rule == "fa4 (0.5.23 overrides)"


def test_model_spec_reads_the_new_fields():
    spec = model_spec_from_config(config("DeepseekVL2ForCausalLM", use_mla=False, model_type="deepseek_vl_v2"), "vl.json")
    assert (spec.architectures, spec.use_mla_flag, spec.model_type, uses_mla(spec)) == (
        ("DeepseekVL2ForCausalLM",), False, "deepseek_vl_v2", False)
    with pytest.raises(ValueError, match="^k.json: index_topk: expected a positive integer"):
        model_spec_from_config(config("X", index_topk="a"), "k.json")


# --- cpbcg check-server ------------------------------------------------------------------------

def _check_server(*args: str):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    return CliRunner().invoke(app, ["check-server", *args])


def test_check_server_exits_0_with_cp_graphs_and_says_the_resolved_values():
    result = _check_server("-f", "json")
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.stdout)
    assert (doc["page_size"]["value"], doc["chunked_prefill_size"]["value"], doc["cp_graphs"], doc["starts"]) == (64, 16384, True, True)
    assert doc["captured"][:2] == [8, 12] and doc["captured"][-1] == 16384 and len(doc["captured"]) == 73
    assert "dropped bucket 4 (below min_capture_tokens 8)" in doc["capture_note"]


def test_check_server_exits_1_when_the_server_refuses_or_runs_without_cp_graphs(tmp_path):
    refused = _check_server("--server-args", f"python -m sglang.launch_server {CP4} --prefill-attention-backend trtllm_mha", "--gpu", "H200")
    assert refused.exit_code == 1
    assert "refuses to start: handle_attention_backend_compatibility: Prefill context parallelism with the TRTLLM MHA" in " ".join(
        refused.stdout.split())
    args = tmp_path / "launch.sh"
    args.write_text(f"python -m sglang.launch_server \\\n  {CP4} \\\n  --attention-backend flashinfer  # no trtllm_mha\n")
    no_graphs = _check_server("--server-args", f"@{args}")
    assert no_graphs.exit_code == 1
    assert ("starts, but 0.5.23 captures no prefill graph for this launch: CP without CP graphs on B200"
            in " ".join(no_graphs.stdout.split()))
    assert ("CP prefill graphs: no (zigzag CP graphs need prefill attention backend trtllm_mha, the server runs flashinfer)"
            in " ".join(no_graphs.stdout.split()))
    mla = _check_server("--config", "deepseek-v3-cp4-mla")
    assert mla.exit_code == 1 and "trtllm_mha backend can only be used with non-MLA models." in mla.stdout


@pytest.mark.parametrize("args, message", [
    (["--gpu", "Z"], "cpbcg: error: --gpu: unknown GPU 'Z' (known: A100-40GB"),
    (["--server-args", "--page-size x"], "cpbcg: error: --server-args: --page-size: expected an integer, got 'x'"),
    (["--server-args", "@/nonexistent/launch.sh"], "cpbcg: error: /nonexistent/launch.sh: cannot read the launch command:"),
    (["--model-config", "/nonexistent/config.json"], "cpbcg: error: --model-config: /nonexistent/config.json: no such file"),
])
def test_check_server_refuses_bad_input_in_one_line(args, message):
    result = _check_server(*args)
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(message), line


def test_a_bad_model_config_names_the_file_and_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 0, "hidden_size": 8, "num_attention_heads": 1}')
    result = _check_server("--model-config", str(path))
    assert result.exit_code == 2 and result.stderr.strip() == (
        f"cpbcg: error: {path}: num_hidden_layers: expected a positive integer, got 0")


# --- the planning commands plan the resolved server ---------------------------------------------

def _cli(*args: str):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    return CliRunner().invoke(app, list(args))


def test_plan_says_the_resolution_in_its_header_and_json_and_plans_with_it(tmp_path):
    import json

    doc = json.loads(_cli("plan", "--no-recommend", "-f", "json").stdout)
    assert doc["server"]["page_size"] == {"value": 64, "source": "0.5.23 override", "rule": "trtllm_mha (0.5.23 overrides)"}
    assert doc["server"]["chunked_prefill_size"]["value"] == 16384 and doc["buckets"][-1] == 16384
    text = " ".join(_cli("plan", "--no-recommend").stdout.split())
    assert "page_size 64: trtllm_mha (0.5.23 overrides)" in text and "B200 (assumed: SM100" in text
    trace = tmp_path / "req.csv"
    trace.write_text("arrived_at,num_prefill_tokens\n0,6758\n0,9000\n0,3000\n")
    out = tmp_path / "flags.txt"
    result = _cli("plan", "-t", str(trace), "--page-size", "1", "--emit", "sglang", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert ("cpbcg: note: SGLang 0.5.23 starts with page_size 1 -> 64: trtllm_mha takes 16, 32, 64 or 128 "
            "(0.5.23 _mla_backend_page_constraints); planned with that") in result.stderr
    words = out.read_text().split()
    assert words[words.index("--page-size") + 1] == "64" and words[words.index("--chunked-prefill-size") + 1] == "16384"
    # the flags file read back as the bucket list is the launch command: the same server, no disagreement
    again = _cli("replay-check", "-t", str(trace), "--buckets", str(out), "--min-coverage", "0")
    assert again.exit_code == 0, again.output


def test_plan_warns_that_hopper_refuses_the_deployment_and_batches_takes_the_server_options(tmp_path):
    # the deployment's CP flags on H100 leave trtllm_mha (refused with CP before SM100) to 0.5.23: fa3, no CP graph, no prefill graph
    result = _cli("plan", "--no-recommend", "--gpu", "H100")
    assert result.stderr.startswith("cpbcg: 0.5.23 captures no prefill graph for this launch: CP without CP graphs on H100\n")
    assert "would refuse to start" not in result.stderr
    trace = tmp_path / "req.csv"
    trace.write_text("arrived_at,num_prefill_tokens\n0,6758\n0,9000\n0,3000\n")
    out = tmp_path / "lens.jsonl"
    ok = _cli("batches", "-t", str(trace), "-o", str(out), "--gpu", "H100", "--server-args", "--attention-backend fa3", "--no-decode")
    assert ok.exit_code == 0, ok.output
    assert "chunked_prefill_size 8192" in ok.stderr  # the H100's chunk, page 1 (fa3)
    bad = _cli("batches", "-t", str(trace), "-o", str(out), "--gpu", "TPU")
    assert bad.exit_code == 2 and bad.stderr.startswith("cpbcg: error: --gpu: unknown GPU 'TPU'")


def test_a_config_names_the_server_and_its_errors_name_the_line(tmp_path):
    from cpbcg.config import load_config
    from cpbcg.errors import ConfigError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("cp_size: 2\nserver:\n  gpu: H200\n  args: [--attention-backend, fa3]\n")
    server = load_config(str(cfg)).server_resolution
    assert server is not None and (server.gpu.name, server.page_size.value, server.chunked_prefill_size.value) == ("H200", 1, 8192)
    cfg.write_text("cp_size: 2\nserver:\n  gpu: V100\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}:3: server.gpu: unknown GPU 'V100'"):
        load_config(str(cfg))


def test_an_empty_launch_command_says_so_not_that_dot_is_a_directory():
    result = _check_server("--server-args", "")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == "cpbcg: error: --server-args: empty launch command"


def _plan(*args: str):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    return CliRunner().invoke(app, ["plan", "--no-recommend", *args])


def test_the_hopper_hardware_note_is_said_only_when_the_server_would_not_capture_cp_graphs(tmp_path):
    launch = f"python -m sglang.launch_server {CP4}"
    b200 = _plan("--server-args", launch, "--gpu", "B200", "--emit", "sglang", "-o", str(tmp_path / "b.txt"))
    assert b200.exit_code == 0, b200.output
    assert "CP graphs: trtllm_mha prefill with CP needs Blackwell" not in b200.output
    # on H200 the launch captures no prefill graph at all: nothing is written, and the answer says why and what would help
    h200 = _plan("--server-args", launch, "--gpu", "H200", "--emit", "sglang", "-o", str(tmp_path / "h.txt"))
    assert h200.exit_code == 2 and not (tmp_path / "h.txt").exists()
    assert "CP without CP graphs on H200" in h200.output and "an SM100 GPU (B200, GB200, B300, GB300)" in h200.output


def test_emit_refuses_to_write_flags_for_a_server_that_refuses_to_start(tmp_path):
    out = tmp_path / "h200.txt"
    launch = f"python -m sglang.launch_server {CP4} --prefill-attention-backend trtllm_mha"
    refused = _plan("--gpu", "H200", "--server-args", launch, "--emit", "sglang", "-o", str(out))
    assert refused.exit_code == 2, refused.output
    last = refused.output.strip().splitlines()[-1]
    assert last.startswith("cpbcg: error: --emit sglang: nothing written: SGLang 0.5.23 would refuse to start on H200 with these flags "
                           "(give --gpu B200 (SM100), or drop --emit): handle_attention_backend_compatibility: Prefill context "
                           "parallelism with the TRTLLM MHA")
    assert not out.exists()
    refused = _plan("--gpu", "H200", "--server-args", launch, "--page-size", "1")  # no --emit: nothing to plan, said first
    assert refused.exit_code == 2 and refused.stdout == "", refused.output
    assert refused.stderr.startswith("cpbcg: error: --server-args: nothing to plan: SGLang 0.5.23 would refuse to start with these flags "
                                     "(handle_attention_backend_compatibility: Prefill context parallelism with the TRTLLM MHA")
    # the deployment's own flags on H200: no trtllm_mha written; 0.5.23 then captures no prefill graph, and --emit says so
    default = _plan("--gpu", "H200", "--emit", "sglang", "-o", str(out))
    assert default.exit_code == 2 and not out.exists()
    assert "nothing written: 0.5.23 captures no prefill graph for this launch: CP without CP graphs on H200" in default.output


def test_an_option_over_a_launch_command_value_is_said(tmp_path):
    import json

    launch = f"python -m sglang.launch_server {CP4} --page-size 32"
    result = _plan("--cp-size", "8", "--page-size", "16", "--chunked-prefill-size", "8192", "--server-args", launch, "--gpu", "B200",
                   "--emit", "sglang", "-o", str(tmp_path / "cf.txt"), "-f", "json")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "overrides the launch command" in line]
    assert notes == ["cpbcg: note: --cp-size 8 overrides the launch command's --attn-cp-size 4",
                     "cpbcg: note: --cp-size 8 overrides the launch command's --tp-size 4",
                     "cpbcg: note: --page-size 16 overrides the launch command's --page-size 32"]
    server = json.loads(result.stdout)["server"]
    assert server["page_size"]["value"] == 16 and server["page_size"]["source"] == "option (overrides launch command 32)"
    same = _plan("--page-size", "32", "--server-args", launch, "--gpu", "B200")  # the same value: nothing to say
    assert same.exit_code == 0 and "overrides the launch command" not in same.output


def test_a_flag_sglang_does_not_know_is_bad_input_for_plan_and_a_refusal_for_check_server():
    typo = "python -m sglang.launch_server --tp-size 4 --attn-cp-sise 4 --enable-prefill-cp --cp-strategy zigzag"
    planned = _plan("--server-args", typo, "--page-size", "1", "--chunked-prefill-size", "8192")
    assert planned.exit_code == 2
    assert planned.output.strip().splitlines()[-1] == (
        "cpbcg: error: --server-args: SGLang 0.5.23 unrecognized arguments: --attn-cp-sise (did you mean --attn-cp-size?)")
    checked = _check_server("--server-args", f"python -m sglang.launch_server {CP4} --enable-prefil-cp --frobnicate 3")
    assert checked.exit_code == 1
    assert "refuses to start: parse_args: unrecognized arguments: --enable-prefil-cp (did you mean --enable-prefill-cp?), --frobnicate" \
        in " ".join(checked.output.split())
    abbreviated = _check_server("--server-args", f"python -m sglang.launch_server {CP4} --mem-fraction 0.8")  # argparse's allow_abbrev
    assert abbreviated.exit_code == 0, abbreviated.output
    with pytest.raises(ValueError, match=r"^unrecognized SGLang 0.5.23 server argument --page-sise \(did you mean --page-size\?\)$"):
        parse_launch_words(["--page-sise", "16"])
    # an ambiguous prefix is argparse's other refusal of the launch: the same kind (check-server 1, plan 2)
    ambiguous = _check_server("--server-args", f"python -m sglang.launch_server {CP4} --page 16")
    assert ambiguous.exit_code == 1, ambiguous.output
    assert "refuses to start: parse_args: ambiguous option: --page could match --page-size, --paged-experts-num-resident" \
        in " ".join(ambiguous.output.split())
    planned = _plan("--server-args", f"python -m sglang.launch_server {CP4} --page 16")
    assert planned.exit_code == 2 and planned.output.strip().splitlines()[-1] == (
        "cpbcg: error: --server-args: SGLang 0.5.23 ambiguous option: --page could match --page-size, --paged-experts-num-resident")
    # a word like no flag gets no suggestion (difflib cutoff): --bogus is not a typo of --host
    bogus = _check_server("--server-args", f"python -m sglang.launch_server {CP4} --bogus 1")
    assert bogus.exit_code == 1 and "unrecognized arguments: --bogus\n" in bogus.output and "did you mean" not in bogus.output


def test_a_chunk_below_the_page_is_sourced_where_it_was_given(tmp_path):
    # chunk 7 against 0.5.23's page 64 (trtllm_mha on B200): the error names the launch command, config line, flags file
    # or log line that gave 7, never "defaults"
    tail = "scheduler.chunked_prefill_size: 7 is below page_size 64: trtllm_mha (0.5.23 overrides): no chunk could be cut at a page boundary"
    launch = "python -m sglang.launch_server --chunked-prefill-size 7"
    config_file = tmp_path / "c.yaml"
    config_file.write_text(f"server:\n  args: {launch}\n")
    flags_file = tmp_path / "flags.txt"
    flags_file.write_text("--chunked-prefill-size 7 --cuda-graph-bs-prefill 8 16\n")
    log = tmp_path / "old.log"
    log.write_text("[2025-09-01 09:59:00] server_args=ServerArgs(model_path='org/model', tp_size=1, chunked_prefill_size=7, page_size=1, "
                   "disable_cuda_graph=False)\n[2025-09-01 10:00:00] Prefill batch. #new-seq: 1, #new-token: 100, #cached-token: 0, "
                   "cache hit rate: 0.00%, token usage: 0.01, #running-req: 0, #queue-req: 0\n")
    for args, where in ((["--server-args", launch], "--server-args"), (["--config", str(config_file)], f"{config_file}:2"),
                        (["--buckets", str(flags_file)], f"flags file {flags_file}"), (["-t", str(log)], f"{log}:1")):
        result = _plan(*args)
        assert result.exit_code == 2, result.output
        assert " ".join(result.output.split()).endswith(f"cpbcg: error: {where}: {tail}"), (args, result.output)


def test_plan_on_a_launch_that_does_not_start_answers_that_naming_where_it_was_given(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text('cp_size: 4\nserver: {gpu: B200, args: "--tp 4 --attn-cp-size 4 --enable-prefill-cp"}\n')
    result = _plan("-c", str(config))
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.startswith(f"cpbcg: error: {config}:2: server.args: nothing to plan: SGLang 0.5.23 would refuse to start "
                                    "with these flags (handle_context_parallelism: --cp-strategy must be set")
    config.write_text('cp_size: 4\nserver: {gpu: B200, args: "--tp 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag"}\n')
    assert _plan("-c", str(config)).exit_code == 0
