"""A server log's printed facts win over cpbcg's assumptions (issue 39, deliver 5): the release (a printed version,
or only dates, before breakable prefill graphs: SGLang PR #23906) -> planned with prefill graphs off, said first;
the attention backend it printed (`Use fa3 backend by default`) -> the page size and graphs that backend implies;
the chunk its forwards show (every long forward cut at exactly 8192) -> planned at that chunk; the GPU memory it
printed (`avail mem=... GB`) -> the catalogue GPU that holds it, said as inferred from FILE:LINE. Each source is in
the JSON. The logs are SYNTHETIC (tests/sglang_log_fixtures.py)."""

import orjson
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.engines.sglang.logs.settings import read_log_settings
from sglang_log_fixtures import SYNTHETIC_HEADER, prefill_line

runner = CliRunner()


def _log(tmp_path, head: str, sizes=(8192, 8192, 8192, 3000, 8192, 8192), date="2025-03-02", name="old.log"):
    body = "".join(prefill_line(n, 1, graph=None, prefix=f"[{date} 10:00:01 TP0] ", style="old") for n in sizes)
    path = tmp_path / name
    path.write_text(SYNTHETIC_HEADER + head + body)
    return path


OLD = "[2025-03-02 09:59:00] sglang version 0.4.3\n"
LOADED = "[2025-03-02 09:59:05 TP0] Load weight end. type=LlamaForCausalLM, avail mem=62.10 GB, mem usage=15.00 GB.\n"


def _plan(*args):
    result = runner.invoke(app, ["plan", *args], env={"CPBCG_WIDTH": "200"})
    assert result.exit_code == 0, result.output
    return result


def test_a_release_before_breakable_prefill_graphs_is_planned_with_them_off_said_first(tmp_path):
    path = _log(tmp_path, OLD + LOADED)
    log = read_log_settings(path)
    assert log.prefill_graphs is False
    assert log.prefill_graphs_origin == "SGLang 0.4.3 predates breakable prefill CUDA graphs by default (first in 0.5.15), line 2"
    out = _plan("-t", str(path)).stdout
    assert out.startswith("The server ran without prefill CUDA graphs (SGLang 0.4.3 predates breakable prefill CUDA graphs")
    doc = orjson.loads(_plan("-t", str(path), "-f", "json").stdout)
    assert doc["graphs_off"][0]["prefill_graphs_source"].startswith("SGLang 0.4.3 predates")
    # only dates, before PR #23906: the same; a 0.5.23 log (or one dated after) is not turned off by its release
    dated = read_log_settings(_log(tmp_path, LOADED, name="dated.log"))
    assert (dated.prefill_graphs, dated.prefill_graphs_origin) == (
        False, "the log is dated 2025-03-02, before breakable prefill CUDA graphs (SGLang PR #23906, 2026-05-04), line 1")
    recent = read_log_settings(_log(tmp_path, OLD.replace("0.4.3", "0.5.23").replace("2025-03-02", "2026-11-02"), date="2026-11-02",
                                    name="recent.log"))
    assert recent.prefill_graphs is None
    assert not _plan("-t", str(_log(tmp_path, "", date="2026-11-02", name="new.log"))).stdout.startswith("The server ran without")


def test_the_gpu_the_log_shows_is_planned_not_the_assumed_b200(tmp_path):
    path = _log(tmp_path, OLD + LOADED)
    assert read_log_settings(path).memory_seen == (77.1, 3)
    server = orjson.loads(_plan("-t", str(path), "-f", "json").stdout)["server"]
    assert server["gpu"] == "H100"
    assert server["gpu_source"] == (f"inferred from {path}:3 (the server shows 77.1 GiB of GPU memory: the smallest catalogue GPU "
                                    "that holds it; H800, A100 hold as much: give --gpu)")
    big = _log(tmp_path, OLD + LOADED.replace("62.10", "160.10"), name="big.log")
    assert orjson.loads(_plan("-t", str(big), "-f", "json").stdout)["server"]["gpu"] == "B200"
    given = orjson.loads(_plan("-t", str(path), "--gpu", "H200", "-f", "json").stdout)["server"]
    assert given["gpu"] == "H200"  # a given GPU beats the inference


def test_the_chunk_the_forwards_show_is_planned_said_as_read_from_the_log(tmp_path):
    path = _log(tmp_path, OLD + LOADED.replace("62.10", "160.10"))  # a B200-sized server: the assumed chunk would be 16384
    result = _plan("-t", str(path), "-f", "json")
    server = orjson.loads(result.stdout)["server"]
    assert server["chunked_prefill_size"]["value"] == 8192
    assert server["chunked_prefill_size"]["source"].startswith("log line 4: the Prefill batch lines: 5 forwards of exactly 8192 new tokens")
    assert "assumed: scheduler.chunked_prefill_size" not in result.stderr
    few = _log(tmp_path, OLD + LOADED.replace("62.10", "160.10"), sizes=(8192, 8192, 3000), name="few.log")
    assert orjson.loads(_plan("-t", str(few), "-f", "json").stdout)["server"]["chunked_prefill_size"]["value"] == 16384  # 2 are not enough


def test_the_attention_backend_the_log_prints_decides_the_page_size(tmp_path):
    head = OLD + "[2025-03-02 09:59:01 TP0] Attention backend not set. Use fa3 backend by default.\n" + LOADED
    path = _log(tmp_path, head)
    assert read_log_settings(path).attention_backend == ("fa3", 3)
    server = orjson.loads(_plan("-t", str(path), "-f", "json").stdout)["server"]
    assert server["attention_backend"] == {"value": "fa3", "source": "log line 3: the server printed it chose fa3", "rule": ""}
    assert server["page_size"]["value"] == 1  # a page-1 fa3 server is not re-planned at page 64
    plain = orjson.loads(_plan("-t", str(_log(tmp_path, OLD + LOADED.replace("62.10", "160.10"), name="b200.log")), "-f", "json").stdout)
    assert (plain["server"]["attention_backend"]["value"], plain["server"]["page_size"]["value"]) == ("trtllm_mha", 64)


def test_dp_ranks_the_prefixes_show_are_the_dp_size(tmp_path):
    from cpbcg import api

    body = "".join(prefill_line(n, 1, prefix=f"[2026-11-02 10:00:00 DP{d} TP{t}] ") for n in (100, 200) for d in range(2) for t in range(4))
    path = tmp_path / "dp.log"
    path.write_text(SYNTHETIC_HEADER + body)
    _, dep = api.load_config_and_deployment(None, {}, log=read_log_settings(path))
    server = dep.server
    assert (server.tp_size, server.dp_size) == (4, 2)  # was tp 4, dp 1 beside DP0..1
    assert server.given["dp_size"].source == "log: rank prefixes DP0..1, line 2"


def test_a_gpu_the_log_names_beats_the_memory_inference(tmp_path):
    named = OLD + "[2025-03-02 09:59:02 TP0] Running on NVIDIA H200 (141 GB)\n" + LOADED
    path = _log(tmp_path, named)
    assert read_log_settings(path).device_name == ("NVIDIA H200", 3)
    server = orjson.loads(_plan("-t", str(path), "-f", "json").stdout)["server"]
    assert (server["gpu"], server["gpu_source"]) == ("H200", "NVIDIA H200 as the server printed it (log line 3)")
    driver = _log(tmp_path, OLD + "[2025-03-02 09:59:02 TP0] NVIDIA driver version 580.65\n" + LOADED, name="driver.log")
    assert read_log_settings(driver).device_name is None  # names no catalogue GPU: the memory decides (H100)


def test_the_release_boundaries_are_the_wheels_own(tmp_path):
    """0.5.14 defaults prefill to tc_piecewise, 0.5.15 is the first whose prefill graphs are breakable by
    default on CUDA; 0.5.8 has no attn_cp_size, 0.5.9 has it (read from the released wheels on PyPI)."""
    def settings(version):
        head = OLD.replace("0.4.3", version).replace("2025-03-02", "2026-11-02")
        return read_log_settings(_log(tmp_path, head, date="2026-11-02", name=f"v{version}.log"))
    assert settings("0.5.14").prefill_graphs is False
    assert settings("0.5.15").prefill_graphs is None
    assert settings("0.5.8").setting("cp_size").value == 1
    assert "predates attention CP" not in settings("0.5.9").setting("cp_size").origin


def test_free_memory_after_the_weights_alone_says_nothing_of_the_gpu(tmp_path):
    """`Load weight end. avail mem=60.10 GB` without `mem usage`: the weights' size is unsaid, so 60 GiB is
    no GPU's size (a B200 with 120 GiB of weights shows it too): the GPU stays the one assumed."""
    floor_only = read_log_settings(_log(tmp_path, OLD + LOADED.replace(", mem usage=15.00 GB", ""), name="floor.log"))
    assert floor_only.memory_seen is None
    begin = "[2025-03-02 09:59:04 TP0] Load weight begin. avail mem=78.50 GB\n"
    assert read_log_settings(_log(tmp_path, OLD + begin, name="begin.log")).memory_seen == (78.5, 3)
