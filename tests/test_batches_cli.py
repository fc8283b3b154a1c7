"""`cpbcg batches` and `cpbcg plan` on request traces, through the CLI runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cpbcg.cli import app

ASSETS = Path(__file__).parent / "assets" / "requests"
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
runner = CliRunner()


PAGE_1 = ["--server-args", "--enable-prefill-cp --cp-strategy zigzag --attention-backend flashinfer --chunked-prefill-size 8192"]
"""A server SGLang 0.5.23 runs at page size 1 with 8192-token chunks (flashinfer: no CP graphs, which plan says): the
settings these scheduler tests were written for, pinned explicitly since the default is now B200's page 64 and 16384."""

def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_batches_writes_a_batch_trace(tmp_path):
    out = tmp_path / "lens.jsonl"
    trace = tmp_path / "mooncake.jsonl"  # the fixture without its output lengths: the 256-token default applies
    trace.write_text("".join(line.replace(', "output_length"', ', "unused"') + "\n" for line in (ASSETS / "mooncake.jsonl").read_text().splitlines()))
    args = ["batches", "--trace", str(trace), "--prefix-cache", "unlimited", "-o", str(out), *PAGE_1]
    first = (
        "cpbcg: note: simulated 3 prefill forwards from 4 requests (Mooncake, timestamps): chunked_prefill_size 8192, "
        "prefill 40,000 tok/s + 5 ms/forward, prefix cache unlimited (2,223 of 4,100 prompt tokens cached); "
        "prefill busy 1.0%, at most 2 waiting"
    )
    result = runner.invoke(app, [*args, "--no-decode"])
    assert result.exit_code == 0, result.output
    assert lines_of(out) == [{"extend_seq_lens": [1200, 600]}, {"extend_seq_lens": [76]}, {"extend_seq_lens": [1]}]
    assert result.stderr.splitlines() == [first, f"3 prefill forwards → 3 lines → {out}"]
    # With decode: 3 x 255 steps of 256 default output tokens; A and B decode together
    # (255 x 5.05 ms), C and D alone (255 x 5.025 ms each, D after the last prefill):
    # 2,569.125 ms of 6,005.025 ms = 42.8%.
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert lines_of(out) == [{"extend_seq_lens": [1200, 600]}, {"extend_seq_lens": [76]}, {"extend_seq_lens": [1]}]
    assert result.stderr.splitlines() == [
        first,
        "cpbcg: note: decode: output lengths none in the trace, default_output_tokens 256 each; step 5 ms + 0.025 ms/request; "
        "decode busy 42.8% (0.0% with requests kept waiting); at most 2 running of 4,096 slots, "
        "KV pool 1,048,576 tokens (peak 1,800); admission stopped by KV 0x, by slots 0x",
        f"3 prefill forwards → 3 lines → {out}",
    ]


def test_batches_states_poisson_arrivals_for_traces_without_timestamps(tmp_path):
    out = tmp_path / "lens.jsonl"
    result = runner.invoke(app, ["batches", "-t", str(ASSETS / "vidur.csv"), "-o", str(out), "--rate", "2.5", "--chunked-prefill-size", "-1"])
    assert result.exit_code == 0, result.output
    note = result.stderr.splitlines()
    assert note[0].startswith("cpbcg: note: simulated 3 prefill forwards from 3 requests (vidur, no timestamps): no chunking, max_prefill_tokens 16384, ")
    assert note[1].startswith("cpbcg: note: decode: output lengths from the trace; ")
    assert note[2] == "cpbcg: note: Poisson arrivals at 2.5 req/s (no arrival times were read: the trace has none or no --time-field was given; --rate, seed 0)"


def test_batches_warns_that_scheduler_options_ignore_a_batch_trace(tmp_path):
    trace = tmp_path / "in.jsonl"
    trace.write_text('{"extend_seq_lens": [5, 6]}\n')
    result = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(tmp_path / "out.jsonl"), "--rate", "9", "--prefix-cache", "unlimited"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == f"cpbcg: warning: --prefix-cache, --rate apply to request traces only; {trace} is a batch trace"
    quiet = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(tmp_path / "out.jsonl")])
    assert "warning" not in quiet.stderr and "simulated" not in quiet.stderr


@pytest.mark.parametrize(
    "fold, expected",
    [
        ("consecutive", [([8], 2), ([4, 2], 1), ([8], 1)]),
        ("all", [([8], 3), ([4, 2], 1)]),
        ("none", [([8], 1), ([8], 1), ([4, 2], 1), ([8], 1)]),
    ],
)
def test_batches_folds_identical_batches(tmp_path, fold, expected):
    trace = tmp_path / "req.csv"
    trace.write_text("arrived_at,num_prefill_tokens\n0,20\n0,2\n100,8\n")
    out = tmp_path / "lens.jsonl"
    result = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(out), "--chunked-prefill-size", "8", "--fold", fold, *PAGE_1])
    assert result.exit_code == 0, result.output
    got = [(r["extend_seq_lens"], r.get("count", 1)) for r in lines_of(out)]
    assert got == expected


def test_batches_output_plans_like_the_request_trace(tmp_path):
    out = tmp_path / "lens.jsonl"
    trace = str(ASSETS / "azure.csv")
    assert runner.invoke(app, ["batches", "-t", trace, "-o", str(out)]).exit_code == 0
    direct = runner.invoke(app, ["plan", "-t", trace, "--cp-size", "4", "-f", "json"])
    via_file = runner.invoke(app, ["plan", "-t", str(out), "--cp-size", "4", "-f", "json"])
    assert direct.exit_code == via_file.exit_code == 0
    a, b = json.loads(direct.stdout), json.loads(via_file.stdout)
    assert (a["batches"], a["tokens"], a["graph_batches"]) == (b["batches"], b["tokens"], b["graph_batches"]) == (3, 1740, 3)


def test_batch_trace_input_is_refolded(tmp_path):
    trace = tmp_path / "in.jsonl"
    trace.write_text('{"extend_seq_lens": [5, 6]}\n{"extend_seq_lens": [5, 6], "count": 2}\n[7]\n')
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert lines_of(out) == [{"extend_seq_lens": [5, 6], "count": 3}, {"extend_seq_lens": [7]}]


def test_plan_accepts_scheduler_options():
    args = ["plan", "-t", str(ASSETS / "vidur.csv"), "--cp-size", "4", "-f", "json", "--rate", "1000", "--chunked-prefill-size", "4096"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tokens"] == 9645 and doc["batches"] == 3  # 4096-token chunks of 3772+2015+3858


@pytest.mark.parametrize(
    "args, message",
    [
        (["-t", "negative-length.csv"], "negative-length.csv:3: num_prefill_tokens: '-5' is not a positive integer"),
        (["-t", "non-monotonic-timestamps.jsonl"], "non-monotonic-timestamps.jsonl:4: timestamp goes backwards"),
        (["-t", "empty.csv"], "empty.csv:1: empty trace: no requests"),
        (["-t", "azure.csv", "--trace-format", "mooncake"], "azure.csv:1: not a JSON object"),
        (["-t", "azure.csv", "--trace-format", "batches"], "azure.csv:1: not valid JSON"),
        (["-t", "missing-column.csv", "--trace-format", "azure"], 'missing-column.csv:1: missing column "ContextTokens"'),
        (["-t", "azure.csv", "--prefix-cache", "-3"], "scheduler.prefix_cache"),
        (["-t", "azure.csv", "--chunked-prefill-size", "0"], "scheduler.chunked_prefill_size"),
        (["-t", "azure-2025-multimodal-zero.csv", "--strict"], "azure-2025-multimodal-zero.csv:3: ContextTokens: 0 is not a positive integer (--strict refuses"),
        (["-t", "azure.csv", "--page-size", "32", "--chunked-prefill-size", "16"], "command line: scheduler.page_size: must not exceed chunked_prefill_size 16"),
        (["-t", "binary.jsonl"], "binary.jsonl:1: not a text trace: binary data b'"),
        (["-t", "binary.jsonl", "--trace-format", "vidur"], "binary.jsonl:1: not a text trace: binary data b'"),
        (["-t", "cut-header.jsonl.gz"], "cut-header.jsonl.gz: truncated gzip stream (after 0 lines)"),
        (["-t", "cut-header.jsonl.gz", "--trace-format", "mooncake"], "cut-header.jsonl.gz: truncated gzip stream (after 0 lines)"),
        (["-t", "not-gzip.jsonl.gz"], "not-gzip.jsonl.gz:1: unknown CSV trace (columns: not gzip; read as plain text: no gzip magic bytes"),
        (["-t", "cr-in-header.csv"], "cr-in-header.csv:1: not a CSV header"),
        (["-t", "huge-length.jsonl"], "huge-length.jsonl:2: input_length: 2147483648 is above the largest supported length 2147483647"),
        (["-t", "huge-length.csv"], "huge-length.csv:3: num_prefill_tokens: 99999999999999999999999 is above the largest supported length"),
    ],
)
@pytest.mark.parametrize("command", ["batches", "plan"])
def test_bad_input_exits_2_with_one_line(tmp_path, command, args, message):
    args = [a if not a.endswith((".csv", ".jsonl", ".gz")) else str(ASSETS / a) for a in args]
    extra = ["-o", str(tmp_path / "out.jsonl")] if command == "batches" else []
    result = runner.invoke(app, [command, *args, *extra])
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stderr.startswith("cpbcg: error: ") and "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.isascii()
    assert not (tmp_path / "out.jsonl").exists()


def test_help_states_scheduler_defaults():
    result = runner.invoke(app, ["batches", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0
    for text in [
        "--chunked-prefill-size", "[default: SGLang", "[default: 16384]", "[default: 40000]",
        "--prefix-cache", "--time-scale", "--server-args", "--model-config", "--gpu",
        "--decode", "--no-decode", "--page-size", "--max-total-tokens", "[default: 1048576]", "--enable-mixed-chunk",
        "--default-output-tokens", "[default: 256]", "--decode-fixed-ms", "--decode-ms-per-request",
    ]:
        assert text in result.stdout


@pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces not present (../shared/traces)")
@pytest.mark.parametrize("decode, forwards", [("--no-decode", 17_679), ("--decode", 20_159)])  # decode: the trace's output lengths; SGLang 0.5.23 rules (issue 20): 20,169 -> 20,159
def test_plan_on_mooncake_trace(decode, forwards):
    args = ["plan", "-t", str(TRACES / "mooncake-fast25/conversation_trace.jsonl"), "--cp-size", "4", "--buckets", "sglang-default:8192", "-f", "json",
            decode, *PAGE_1]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tokens"] == 144_793_823 and doc["batches"] == forwards
    assert doc["simulation"]["decode"] is (decode == "--decode")


def test_page_size_reaches_the_simulation(tmp_path):
    # SGLang's page-16 forwards of [6758, 9000, 3000] with every request present at once.
    trace = tmp_path / "req.csv"
    trace.write_text("arrived_at,num_prefill_tokens\n0,6758\n0,9000\n0,3000\n")
    out = tmp_path / "lens.jsonl"
    result = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(out), "--page-size", "16", "--fold", "none", *PAGE_1])
    assert result.exit_code == 0, result.output
    assert [r["extend_seq_lens"] for r in lines_of(out)] == [[6758, 1424], [7576, 608], [2392]]
    bad = runner.invoke(app, ["batches", "-t", str(trace), "-o", str(out), "--max-total-tokens", "0"])
    assert bad.exit_code == 2


@pytest.mark.parametrize(
    "kind, given, expected",
    [
        ("batches", ["--prefix-cache", "--rate"], "--prefix-cache, --rate apply to request traces only; T is a batch trace"),
        (None, ["--length-field"], "--length-field applies to request traces only; the embedded default workload is already a batch stream"),
        ("batches", [], None),
        ("mooncake", ["--rate"], None),
    ],
)
def test_ignored_options_note(kind, given, expected):
    from cpbcg.outputs.notes import ignored_options_note

    note = ignored_options_note(kind, given, "T")
    assert note == (None if expected is None else f"cpbcg: warning: {expected}")


def test_warn_ignored_options_sniffs_the_trace(tmp_path):
    from cpbcg.cli.options import SchedulerOptions, TraceOptions, request_only_flags
    from cpbcg.outputs.notes import ignored_options_warning

    trace = tmp_path / "lens.jsonl"
    trace.write_text("[5, 6]\n")

    def warning(trace_options, scheduler):
        return ignored_options_warning(request_only_flags(trace_options, scheduler), trace_options.trace, "auto", None)

    assert warning(TraceOptions([trace]), SchedulerOptions(time_scale="2")) == f"cpbcg: warning: --time-scale applies to request traces only; {trace} is a batch trace"
    assert warning(TraceOptions([ASSETS / "azure.csv"]), SchedulerOptions(time_scale="2")) is None
    assert warning(TraceOptions([trace]), SchedulerOptions()) is None


def test_a_kv_pool_smaller_than_the_requests_is_warned_about(tmp_path):
    trace = tmp_path / "bench.json"
    trace.write_text('{"input_lens": [100, 200], "output_lens": [5, 5]}\n')
    result = runner.invoke(app, ["batches", "-t", str(trace), "--max-total-tokens", "50", "-o", str(tmp_path / "out.jsonl"), *PAGE_1])
    assert result.exit_code == 0, result.output
    # 200 = the 200-token prompt (its first output token's KV is written by the next decode step)
    assert ("cpbcg: warning: requests held 200 KV tokens, more than the 50-token pool: SGLang would retract requests at 2 "
            "decode points or never admit the largest (not simulated: forwards after the first are approximate); "
            "set --max-total-tokens to your server's") in result.stderr.splitlines()
