"""A log gives the resolved server (issue 30 "Deliver", issue 29's one resolution step): each
launch's settings dump or launch command and the values its server printed go through
`cpbcg.engines.sglang.startup.resolve_server` as a launch command does, per launch, every value sourced
`log line N`. Logs are SYNTHETIC, written from SGLang's format strings (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg import api
from cpbcg.cli import app
from cpbcg.engines.sglang.startup import log_given, log_printed
from cpbcg.engines.sglang.logs.settings import read_log_settings
from sglang_log_fixtures import prefill_line, resolved_line, startup_lines, write_log

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("wide_plain_terminal")


def cp4_forwards(sizes, date="2026-11-02"):
    return "".join(prefill_line(n, 1, prefix=f"[{date} 10:00:01 ATTN_CP{r} TP{r}] ") for n in sizes for r in range(4))


def trtllm_page1_log(path):
    """A cp-4 launch whose dump asks for attention_backend=trtllm_mha with page_size=1 (line 2)."""
    body = startup_lines(cp=4, tp=4).replace("'page_size': 1,", "'page_size': 1, 'attention_backend': 'trtllm_mha',")
    return write_log(path, body + resolved_line() + cp4_forwards((100, 9000)))


def test_a_dump_asking_trtllm_mha_at_page_1_on_sm100_resolves_page_64(tmp_path):
    log = read_log_settings(trtllm_page1_log(tmp_path / "a.log"))
    assert log.sglang_flags()["page_size"] == (1, 2) and log.sglang_flags()["attention_backend"] == ("trtllm_mha", 2)
    _, dep = api.load_config_and_deployment(None, {"server.gpu": "B200"}, log=log)
    server = dep.server
    assert server.given["page_size"].source == "log line 2" and server.given["attention_backend"].source == "log line 2"
    assert (server.page_size.value, server.page_size.source) == (64, "0.5.23 override")
    assert server.page_size.describe() == "64: trtllm_mha (0.5.23 overrides)"
    assert any(n.startswith("page_size 1 -> 64: trtllm_mha takes 16, 32, 64 or 128") for n in server.notes)
    assert dep.scheduler.page_size == 64 and dep.cp.cp_size == 4 and server.cp_graphs
    # the values the server printed (line 7) are the resolved ones, each sourced to its line
    assert (server.max_prefill_tokens.value, server.max_prefill_tokens.source) == (16384, "log line 7")
    assert (server.max_total_tokens.value, server.max_total_tokens.source) == (500000, "log line 7")
    assert dep.scheduler.max_total_tokens == 500000 and dep.scheduler.max_running_requests == 256
    # the same launch through the command line: the option wins over the log, and says so
    _, pinned = api.load_config_and_deployment(None, {"scheduler.page_size": 32}, log=log)
    assert (pinned.server.page_size.value, pinned.server.page_size.source) == (32, "option")


def test_the_plan_json_records_each_resolved_settings_source(tmp_path):
    path = trtllm_page1_log(tmp_path / "a.log")
    result = runner.invoke(app, ["plan", "-t", str(path), "--gpu", "B200", "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    server = orjson.loads(result.stdout)["server"]
    assert server["page_size"] == {"value": 64, "source": "0.5.23 override", "rule": "trtllm_mha (0.5.23 overrides)"}
    assert server["chunked_prefill_size"] == {"value": 8192, "source": "log line 7", "rule": "printed by the server (log line 7)"}
    assert server["attention_backend"]["source"] == "log line 2" and server["gpu_source"] == "given (--gpu)"
    assert "page_size 64: trtllm_mha (0.5.23 overrides)" in server["said"]
    # said once: the log states 1, the server it starts runs 64, and why (no second "starts with page_size 1 -> 64" note)
    assert ("cpbcg: from the log: scheduler.page_size 1 (server_args.page_size, line 2), but the server 0.5.23 starts from it runs 64, "
            "because trtllm_mha takes 16, 32, 64 or 128 (0.5.23 _mla_backend_page_constraints): planned with 64") in result.stderr
    assert "page_size 1 -> 64" not in result.stderr and sum("page_size" in line for line in result.stderr.splitlines()) == 1


def chunk_off_log(path):
    body = startup_lines(cp=1, chunk=8192)
    body += "[2026-11-02 09:59:01] Automatically turn off --chunked-prefill-size as it is not supported for qwen2_vl\n"
    return write_log(path, body + resolved_line(chunk=-1, max_prefill=12000, max_running=48) + prefill_line(12895, 1, graph=False))


def test_a_log_printing_chunking_off_plans_with_chunking_off(tmp_path):
    log = read_log_settings(chunk_off_log(tmp_path / "off.log"))
    assert log.sglang_flags()["chunked_prefill_size"] == (8192, 2)  # the dump asked for 8192
    _, dep = api.load_config_and_deployment(None, None, log=log)
    chunk = dep.server.chunked_prefill_size
    assert (chunk.value, chunk.source, chunk.rule) == (-1, "log line 7", "printed by the server (log line 7)")
    assert dep.scheduler.chunked_prefill_size == -1 and dep.scheduler.max_prefill_tokens == 12000
    assert "chunked_prefill_size 8192 -> -1: as the server printed (log line 7)" in dep.server.notes
    assert dep.scheduler.largest_forward_tokens == 12000  # the largest forward is then max_prefill_tokens
    result = runner.invoke(app, ["plan", "-t", str(tmp_path / "off.log"), "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["server"]["chunked_prefill_size"]["value"] == -1


def test_each_launch_is_resolved_with_its_own_lines(tmp_path):
    first = startup_lines(cp=1).replace("'page_size': 1,", "'page_size': 1, 'attention_backend': 'triton',")
    first += resolved_line() + prefill_line(100, 1, prefix="[2026-11-02 10:00:01 TP0] ")
    second = startup_lines(cp=1, date="2026-11-03").replace("'page_size': 1,", "'page_size': 1, 'attention_backend': 'trtllm_mha',")
    second += resolved_line(chunk=-1, prefix="[2026-11-03 09:59:30 TP0] ") + prefill_line(200, 1, prefix="[2026-11-03 10:00:01 TP0] ")
    path = write_log(tmp_path / "two.log", first + second)
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    launches = orjson.loads(result.stdout)["observed"]["launches"]
    servers = [x["server"] for x in launches]
    assert [s["chunked_prefill_size"]["value"] for s in servers] == [8192, -1]
    assert [s["chunked_prefill_size"]["source"] for s in servers] == ["log line 7", "log line 14"]
    assert [s["page_size"]["value"] for s in servers] == [1, 64]
    assert servers[0]["page_size"]["source"] == "log line 2" and servers[1]["page_size"]["rule"] == "trtllm_mha (0.5.23 overrides)"


def test_a_logs_launch_command_is_resolved_by_the_launch_command_rules(tmp_path):
    words = "--tp-size 4 --attn-cp-size 4 --enable-prefill-cp --cp-strategy zigzag --attention-backend fa3 --page-size 16"
    body = f"[2026-11-02 09:59:00] python -m sglang.launch_server --model-path org/m {words}\n" + cp4_forwards((100,))
    log = read_log_settings(write_log(tmp_path / "cmd.log", body))
    _, from_log = api.load_config_and_deployment(None, {"server.gpu": "H200"}, log=log)
    _, from_args = api.load_config_and_deployment(None, {"server.gpu": "H200", "server.args": words})
    a, b = from_log.server, from_args.server
    values = [{k: v["value"] for k, v in s.summary().items() if isinstance(v, dict)} for s in (a, b)]
    assert values[0] == values[1] and values[0]["prefill_attention_backend"] == "fa3"
    assert a.findings() == b.findings() and a.findings()  # fa3 prefill: no zigzag CP graph, said for both
    assert (a.page_size.value, a.page_size.source) == (16, "log line 2") and b.page_size.source == "launch command"


def test_log_values_0_5_23_would_not_take_are_said_and_left_out():
    given, skipped = log_given({"page_size": (0, 3), "attention_backend": ("no_such", 3), "tp_size": (2, 3), "model_path": (None, 3),
                                "load_format": ("auto", 3)})
    assert {k: g.value for k, g in given.items()} == {"tp_size": 2} and given["tp_size"].source == "log line 3"
    assert len(skipped) == 2 and all(s.startswith("log line 3: --") and s.endswith("not read (0.5.23's default planned)") for s in skipped)
    printed = log_printed({"max_total_num_tokens": (1000, 9), "chunked_prefill_size": (-1, 9), "context_len": (4096, 9),
                           "max_running_requests": (0, 9)})
    assert {k: (g.value, g.source) for k, g in printed.items()} == {"max_total_tokens": (1000, "log line 9"),
                                                                    "chunked_prefill_size": (-1, "log line 9")}


def test_tp_and_pp_from_the_rank_prefixes_beat_the_default(tmp_path):
    """A launch that does not state tp_size / pp_size but whose ranks print `TP0..7` / `PP0..3` (0.5.23
    `run_scheduler_process` prints them only when the size is > 1) is resolved at tp 8 / pp 4, sourced to the prefixes."""
    from cpbcg.config import load_config
    from sglang_log_fixtures import prefill_line, write_log

    from cpbcg.engines.sglang.logs.settings import read_log_settings

    lines = "".join(f"[2026-11-02 09:59:10 TP{r}] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB, mem usage=15.00 GB.\n"
                    for r in range(8))
    log = write_log(tmp_path / "tp8.log", lines + prefill_line(2048, 1))
    settings = read_log_settings(log)
    server = load_config(None, {}, log=settings).server_resolution
    assert server is not None and server.tp_size == 8
    assert server.given["tp_size"].source == "log: rank prefixes TP0..7, line 2"  # line 1: the synthetic-log header
    lines = "".join(f"[2026-11-02 09:59:10 PP{r}] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB, mem usage=15.00 GB.\n"
                    for r in range(4))
    log = write_log(tmp_path / "pp4.log", lines + prefill_line(2048, 1, prefix="[2026-11-02 10:00:01 PP0] "))
    server = load_config(None, {}, log=read_log_settings(log)).server_resolution
    assert server is not None and server.pp_size == 4 and server.prefill_graph_backend.value == "disabled"  # pp > 1: graphs off


def test_the_model_class_the_server_printed_beats_the_assumed_model(tmp_path):
    """`Load weight end. ... type=X` (0.5.23 `model_runner.py`) names the model class: the start-up rules that
    read the architecture take it, its shape still assumed, and both said."""
    from cpbcg.config import load_config
    from cpbcg.engines.sglang.logs.settings import read_log_settings
    from sglang_log_fixtures import prefill_line, startup_lines, write_log

    body = startup_lines(cp=1).replace("type=LlamaForCausalLM", "type=Qwen2_5_VLForConditionalGeneration")
    settings = read_log_settings(write_log(tmp_path / "vl.log", body + prefill_line(2048, 1)))
    assert settings.architecture is not None and settings.architecture[0] == "Qwen2_5_VLForConditionalGeneration"
    server = load_config(None, {}, log=settings).server_resolution
    assert server is not None and server.model.architecture == "Qwen2_5_VLForConditionalGeneration" and not server.model_assumed
    assert server.model_source.startswith(f"Qwen2_5_VLForConditionalGeneration as the server printed it (log line {settings.architecture[1]}); "
                                          "its shape assumed")
    # this synthetic dump states the prefill graph backend (breakable), which 0.5.23 keeps: the graph is as the log says
    assert server.prefill_graph_backend.value == "breakable" and server.prefill_graph_backend.source.startswith("log line")


def test_the_gpu_the_server_printed_beats_the_assumed_gpu(tmp_path):
    """The MoE kernel-config line names the GPU as torch does (`device_name=NVIDIA_H100_80GB_HBM3`): the server
    is resolved on an H100 (fa3, 8192-token chunks), sourced to the line; a GPU outside the catalogue is said."""
    from cpbcg.config import load_config
    from cpbcg.planner.hardware import gpu_from_device_name
    from cpbcg.engines.sglang.logs.settings import read_log_settings
    from sglang_log_fixtures import prefill_line, write_log

    moe = ("[2026-11-02 09:59:12 TP0] Using default MoE kernel config. Performance might be sub-optimal! Config file not found at "
           "/x/configs/triton_3_4_0/E=8,N=14336,device_name={}.json\n")
    log = write_log(tmp_path / "h100.log", moe.format("NVIDIA_H100_80GB_HBM3") + prefill_line(2048, 1))
    server = load_config(None, {}, log=read_log_settings(log)).server_resolution
    assert server is not None and (server.gpu.name, server.gpu_assumed) == ("H100", False)
    assert server.gpu_source == "NVIDIA_H100_80GB_HBM3 as the server printed it (log line 2)"
    assert (server.chunked_prefill_size.value, server.attention_backend.value) == (8192, "fa3")
    log = write_log(tmp_path / "4090.log", moe.format("NVIDIA_GeForce_RTX_4090") + prefill_line(2048, 1))
    server = load_config(None, {}, log=read_log_settings(log)).server_resolution
    assert server is not None and server.gpu_assumed
    assert any("NVIDIA_GeForce_RTX_4090, not in cpbcg's GPU catalogue" in n for n in server.notes)
    assert [getattr(gpu_from_device_name(d), "name", None) for d in ("NVIDIA_A100-SXM4-40GB", "NVIDIA_A100-SXM4-80GB", "AMD_Instinct_MI300X",
            "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition")] == ["A100-40GB", "A100", "MI300X", "RTX-PRO-6000"]
