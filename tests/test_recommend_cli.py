"""`cpbcg plan` recommendation modes through typer's runner."""

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.planner.buckets import read_bucket_file
from cpbcg.planner.export import parse_sglang_flags

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "lens.jsonl"
    rows = [[1534, 161, 353]] * 4 + [[2048]] * 3 + [[700, 300]] * 5 + [[4096]] * 2 + [[40, 3]] * 2
    path.write_text("".join(orjson.dumps({"extend_seq_lens": r}).decode() + "\n" for r in rows))
    return path


def test_recommend_json_beats_baselines_and_reports_headroom(small_trace):
    result = invoke("plan", "--trace", str(small_trace), "--max-buckets", "3", "--max-tokens", "4096", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["recommended"] == [1000, 2049, 4096] and doc["exact"] is True
    lists = {entry["name"]: entry for entry in doc["lists"]}
    assert set(lists) == {"recommended", "sglang-default", "pow2", "vllm", "trtllm", "uniform"}
    best = lists["recommended"]["modelled_ms"]
    assert all(entry["modelled_ms"] >= best for name, entry in lists.items() if len(entry["buckets"]) <= 3)
    assert lists["recommended"]["graph_batches"] == 14  # all but the 2 inactive forwards
    assert doc["headroom"] is None
    assert [p["max_buckets"] for p in doc["pareto"]][:3] == [1, 2, 3]


@pytest.mark.parametrize("objective", ["coverage", "time"])
def test_objective_choice_is_reported(small_trace, objective):
    result = invoke("plan", "-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--objective", objective, "-f", "json")
    doc = orjson.loads(result.stdout)
    assert doc["objective"] == objective and doc["recommended"] == [1000, 2049, 4096]
    text = " ".join(invoke("plan", "-t", str(small_trace), "-k", "3", "--objective", objective).stdout.split())
    assert {"coverage": "objective: most graph forwards, then least time", "time": "objective: least modelled time"}[objective] in text
    assert invoke("plan", "-t", str(small_trace), "-k", "3", "--objective", "speed").exit_code == 2


def test_headroom_finding_names_the_extra_bucket(small_trace):
    result = invoke("plan", "--trace", str(small_trace), "--max-buckets", "2", "--max-tokens", "2048", "--include", "2048")
    assert result.exit_code == 0, result.output
    assert "full-chunk batches (n = 2048) fall back" in result.stdout
    assert "add bucket 2049 (C=520 rows" in result.stdout
    doc = orjson.loads(invoke("plan", "--trace", str(small_trace), "-k", "2", "--max-tokens", "2048", "--include", "2048", "-f", "json").stdout)
    assert doc["headroom"]["extra_bucket"] == 2049 and doc["headroom"]["batches"] == 4


def test_cost_options_change_the_model(small_trace):
    doc = orjson.loads(invoke("plan", "-t", str(small_trace), "-k", "3", "--token-ms", "0", "--eager-fixed-ms", "1", "--graph-fixed-ms", "0", "-f", "json").stdout)
    assert doc["cost_model"] == {"graph_fixed_ms": 0.0, "eager_fixed_ms": 1.0, "token_ms": 0.0, "source": "command line"}
    assert doc["lists"][0]["modelled_ms"] == pytest.approx(2.0)  # only the 2 inactive [40, 3] forwards pay


@pytest.mark.parametrize("fmt", ["yaml", "json", "sglang-json"])
def test_emit_to_file_reads_back(small_trace, tmp_path, fmt):
    out = tmp_path / ("b.yaml" if fmt == "yaml" else "b.json")
    result = invoke("plan", "-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--emit", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert read_bucket_file(out) == [1000, 2049, 4096]
    assert "Recommended 3 buckets" in result.stdout


def test_emit_sglang_on_stdout_is_only_the_flags(small_trace):
    result = invoke("plan", "-t", str(small_trace), "-k", "3", "--max-tokens", "4096", "--emit", "sglang")
    assert result.exit_code == 0
    assert result.stdout.startswith("--cuda-graph-bs-prefill 1000 2049 4096 ")
    assert parse_sglang_flags(result.stdout) == [1000, 2049, 4096]


def test_evaluation_mode_emits_the_configured_list():
    result = invoke("plan", "--buckets", "pow2:1024", "--emit", "sglang-json")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout) == {"prefill": {"bs": [8, 16, 32, 64, 128, 256, 512, 1024], "max_bs": 1024}}


def test_guarantee_mode_and_check():
    result = invoke("plan", "--guarantee", "--max-requests", "32", "--max-tokens", "8192", "--cp-size", "4")
    assert result.exit_code == 0, result.output
    assert "11 buckets: 16,34,70,142,250,394,654,1166,2190,4238,8334" in result.stdout
    failed = invoke("plan", "--check-guarantee", "--buckets", "sglang-default:8192", "--max-requests", "32", "--max-tokens", "8192")
    assert failed.exit_code == 1
    assert "smallest n = 8103" in failed.stdout and "extend_seq_lens" in failed.stdout
    ok = invoke("plan", "--check-guarantee", "--buckets", "16,34,70,142,250,394,654,1166,2190,4238,8334", "--max-requests", "32", "-f", "json")
    assert ok.exit_code == 0 and orjson.loads(ok.stdout)["ok"] is True


def test_plot_writes_a_png(small_trace, tmp_path):
    out = tmp_path / "plan.png"
    result = invoke("plan", "-t", str(small_trace), "-k", "2", "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--guarantee", "--max-tokens", "8192"], "needs --max-requests"),
        (["--guarantee", "--check-guarantee", "--max-requests", "4"], "exclude each other"),
        (["--plot", "x.png"], "--plot needs --max-buckets"),
        (["-k", "2", "--include", "8192,abc"], "--include"),
        (["-k", "1", "--include", "1024,2048"], "exceed --max-buckets"),
        (["-k", "2", "--emit", "json", "-f", "json"], "needs -o FILE"),
        (["-k", "2", "--manifest", "missing.json"], "missing.json"),
    ],
)
def test_errors_are_one_line_exit_2(args, message):
    result = invoke("plan", *args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
