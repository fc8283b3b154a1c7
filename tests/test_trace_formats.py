"""The newer trace formats (BurstGPT, SplitwiseSim, vLLM bench, AIBrix, Azure 2024/2025, Parquet,
SGLang server logs), output lengths, stdin, and the registry's detection."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.assembly.sources import open_source
from cpbcg.planner.traces import ForwardSizes, ReadOptions, TraceFormat, TraceKind
from cpbcg.assembly.registry import FORMATS, detect_format, open_trace, read_requests
from cpbcg.errors import MAX_LIBRARY_MESSAGE_CHARS

REQUESTS = pytest.importorskip("pathlib").Path(__file__).parent / "assets" / "requests"
TRACES = REQUESTS.parent / "traces"


def read(name, fmt="auto", **options):
    chunks = list(read_requests(REQUESTS / name, fmt, ReadOptions(**options)))
    cat = lambda attr: None if getattr(chunks[0], attr) is None else np.concatenate([getattr(c, attr) for c in chunks]).tolist()  # noqa: E731
    return cat("input_tokens"), cat("arrival_s"), cat("output_tokens")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("burstgpt.csv", TraceFormat.burstgpt),
        ("splitwise.csv", TraceFormat.splitwise),
        ("vllm-bench.json", TraceFormat.vllm_bench),
        ("vllm-bench-indented.json", TraceFormat.vllm_bench),
        ("aibrix.jsonl", TraceFormat.aibrix),
        ("azure-2024.csv", TraceFormat.azure),
        ("azure-2025.csv", TraceFormat.azure),
        ("azure.parquet", TraceFormat.parquet),
        ("../traces/sglang-server.log", TraceFormat.sglang_log),
        ("../traces/extra-keys.jsonl", TraceFormat.batches),
    ],
)
def test_detection(name, expected):
    assert detect_format(REQUESTS / name) is expected


def test_every_registered_format_is_a_trace_format_choice():
    assert [f.value for f in TraceFormat] == ["auto", *(f.name for f in FORMATS)]


@pytest.mark.parametrize(
    "name, inputs, outputs",
    [
        ("azure.csv", [374, 396, 879, 91], [44, 109, 55, 16]),
        ("mooncake.jsonl", [1200, 600, 1100, 1200], [10, 5, 7, 1]),
        ("vidur.csv", [3772, 2015, 3858], [54, 156, 133]),
        ("azure-2024.csv", [2162, 4418, 93], [5, 12, 0]),
        ("azure-2025.csv", [1840, 733], [210, 95]),
        ("splitwise.csv", [1020, 4230, 128], [92, 17, 512]),
        ("burstgpt.csv", [472, 1087, 417, 2360, 655], [18, 0, 331, 157, 29]),
        ("aibrix.jsonl", [101, 55, 900, 12], [20, 7, 64, 1]),
    ],
)
def test_output_lengths_are_read(name, inputs, outputs):
    got_inputs, _, got_outputs = read(name)
    assert got_inputs == inputs and got_outputs == outputs


def test_traces_without_output_lengths_say_none():
    assert read("vidur-arrived-at.csv")[2] == [5, 6, 7]
    assert read("generic.csv", "csv", length_field="prompt_tokens")[2] is None


def test_burstgpt_filters_and_seconds():
    assert read("burstgpt.csv", model="ChatGPT") == ([472, 1087, 2360], [5.0, 45.0, 125.0], [18, 0, 157])
    assert read("burstgpt.csv", model="GPT-4", log_type="API log") == ([655], [130.0], [29])
    with pytest.raises(TraceError, match=r"burstgpt.csv:1: empty trace: no requests \(after the filters model='Claude'\)"):
        read("burstgpt.csv", model="Claude")


def test_splitwise_seconds():
    assert read("splitwise.csv")[1] == [0.0, 0.2503, 0.9]


def test_aibrix_requests_of_a_line_arrive_together_in_ms():
    inputs, times, _ = read("aibrix.jsonl")
    assert inputs == [101, 55, 900, 12] and times == [0.0, 0.0, 1.0, 3.0]


def test_vllm_bench_sorted_by_start_time_and_without_times():
    assert read("vllm-bench.json") == ([1000, 300, 2000], [100.0, 100.25, 100.5], [128, 64, 0])
    assert read("vllm-bench-indented.json") == ([512, 64], None, [10, 20])


def test_parquet_azure_and_burstgpt_columns():
    inputs, times, outputs = read("azure.parquet")
    assert inputs == [374, 396, 879] and outputs == [44, 109, 55]
    assert np.allclose(np.array(times) - times[0], [0.0, 0.315, 4.542])
    assert read("burstgpt.parquet", model="ChatGPT") == ([472, 1087], [5.0, 45.0], [18, 0])


def test_parquet_without_pyarrow_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(TraceError, match=r"reading Parquet traces needs pyarrow: pip install 'cpbcg\[parquet\]'"):
        read("azure.parquet")


@pytest.mark.parametrize(
    "name, fmt, message",
    [
        ("azure.csv", "burstgpt", 'azure.csv:1: missing column "Request tokens"'),
        ("azure.csv", "splitwise", 'azure.csv:1: missing column "prompt_size"'),
        ("mooncake.jsonl", "aibrix", 'mooncake.jsonl:1: missing field "requests"'),
        ("mooncake.jsonl", "vllm", 'mooncake.jsonl:2: not valid JSON'),
        ("vllm-bench-short-output.json", "auto", "vllm-bench-short-output.json:1: output_lens: 2 entries, input_lens has 3"),
        ("azure.csv", "parquet", "azure.csv:1: not a readable Parquet file"),
        ("null-length.parquet", "auto", "null-length.parquet:2: ContextTokens: null is not a token count"),
        ("aibrix-mixed-null-output.jsonl", "auto", "aibrix-mixed-null-output.jsonl:2: requests[0].output_length: null mixed with numbers"),
        ("../traces/sglang-more-requests-than-tokens.log", "auto", "sglang-more-requests-than-tokens.log:1: #new-seq: 5 > #new-token: 3: each request extends at least one token: "
                                                                  "the log's only Prefill batch line is unreadable (1)"),
        ("azure.csv", "sglang-log", 'azure.csv:1: no readable "Prefill batch" lines: not an SGLang server log'),
    ],
)
def test_wrong_format_or_bad_value_is_a_clear_error(name, fmt, message):
    with pytest.raises(TraceError) as info:
        opened = open_trace(REQUESTS / name, fmt)
        list(opened.items)
    text = str(info.value)
    assert message in text and text.startswith(str(REQUESTS / name).split("/../")[0]) and "\n" not in text and len(text) <= MAX_LIBRARY_MESSAGE_CHARS, text


def test_sglang_log_gives_forward_sizes_as_a_bound():
    opened = open_trace(TRACES / "sglang-server.log")
    assert opened.kind is TraceKind.forwards and opened.is_bound
    forwards = list(opened.items)
    assert all(isinstance(f, ForwardSizes) for f in forwards)
    f = forwards[0]
    # the mixed forward (700 new tokens, `mixed #running-req: 2`) carries its 2 decode rows
    assert f.num_tokens.tolist() == [2048, 2048, 702, 2048] and f.num_requests.tolist() == [1, 3, 4, 3]
    assert f.cached_tokens.tolist() == [0, 512, 0, 0] and f.decode_requests.tolist() == [0, 0, 2, 0]
    merged = f.aggregate()
    assert merged.num_tokens.tolist() == [702, 2048, 2048] and merged.num_requests.tolist() == [4, 1, 3]
    assert merged.counts.tolist() == [1, 1, 2]


def test_sglang_log_source_is_labelled_bound_and_refuses_to_pass_as_batches():
    source = open_source(TRACES / "sglang-server.log")
    assert source.is_bound and source.trace_format is TraceFormat.sglang_log
    with pytest.raises(TraceError, match="forward sizes, not extend lengths: plan it in bound mode"):
        list(source.batches)


def test_stdin_is_read_when_the_path_is_dash(monkeypatch):
    data = (REQUESTS / "mooncake.jsonl").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert detect_format("-") is TraceFormat.mooncake
    chunks = list(read_requests("-"))
    assert np.concatenate([c.input_tokens for c in chunks]).tolist() == [1200, 600, 1100, 1200]


def test_stdin_batches_and_errors_name_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[5, 6]\n[7, -1]\n")))
    with pytest.raises(TraceError, match=r"^<stdin>:2: list\[1\]: -1 is not a positive integer"):
        list(open_trace("-").items)


def test_stdin_read_past_its_start_cannot_be_reread(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"[5]\n" * 1_000_000)))
    assert sum(b.num_batches for b in open_trace("-", "batches").items) == 1_000_000
    with pytest.raises(TraceError, match="standard input was already read"):
        list(open_trace("-", "batches").items)


@pytest.mark.parametrize(
    "name, requests",
    [("burstgpt.csv", 5), ("splitwise.csv", 3), ("vllm-bench.json", 3), ("aibrix.jsonl", 4), ("azure-2024.csv", 3), ("azure-2025.csv", 2), ("azure.parquet", 3)],
)
def test_each_new_format_plans_end_to_end(name, requests):
    import json

    from typer.testing import CliRunner

    from cpbcg.cli import app

    result = CliRunner().invoke(app, ["plan", "-t", str(REQUESTS / name), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert f"from {requests} requests" in result.output  # the simulation note on stderr
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["simulation"]["requests"] == requests


def test_plan_reads_the_trace_from_stdin():
    from typer.testing import CliRunner

    from cpbcg.cli import app

    data = (REQUESTS / "mooncake.jsonl").read_bytes()
    result = CliRunner().invoke(app, ["plan", "-t", "-", "--format", "json"], input=data)
    assert result.exit_code == 0, result.output
    assert "from 4 requests (mooncake" in result.output.lower()
    bad = CliRunner().invoke(app, ["plan", "-t", "-"], input=b"[5]\n[0123]\n")
    assert bad.exit_code == 2
    assert bad.output.strip() == "cpbcg: error: <stdin>:2: not valid JSON (number with leading zero is not allowed)"


def test_readers_load_neither_the_config_nor_pyarrow_unless_reading_parquet():
    import subprocess

    code = (
        "import sys\n"
        "from cpbcg.assembly.registry import open_trace\n"
        f"for name in ['mooncake.jsonl', 'azure.csv', 'burstgpt.csv', 'vllm-bench.json', 'aibrix.jsonl', '../traces/good.jsonl', '../traces/sglang-server.log']:\n"
        f"    list(open_trace({str(REQUESTS)!r} + '/' + name).items)\n"
        "print(sorted(m for m in ('cpbcg.config', 'pydantic', 'pyarrow', 'typer', 'rich', 'torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_parquet_without_pyarrow_is_one_line_naming_the_file(monkeypatch, tmp_path):
    import sys

    from cpbcg.errors import TraceError
    from cpbcg.planner.traces import parquet

    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    path = tmp_path / "log.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(TraceError) as info:
        list(parquet.read(path, parquet.ReadOptions()))
    assert str(info.value) == f"{path}: reading Parquet traces needs pyarrow: pip install 'cpbcg[parquet]'"


def test_a_fifo_or_directory_as_a_trace_is_refused_without_blocking(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a pipe, FIFO or device"), (tmp_path, "a directory")):
        for call in (lambda p: open_trace(p), lambda p: detect_format(p)):
            with pytest.raises(TraceError) as info:
                call(path)
            assert str(info.value) == f"{path}: {kind}, not a trace file; give a file, or stream it on standard input as '-'"
