"""Gates (`cpbcg.gates.gates`) and CI reports (`cpbcg.outputs.ci_reports`): every gate passing and failing with
exact messages, `--max-eager` parsing, replay sampling, JUnit parsed back, exact annotations."""

import xml.etree.ElementTree as ET

import orjson
import pytest

from cpbcg.gates.gates import Gates as GateConfig
from cpbcg.errors import ConfigError
from cpbcg.gates.gates import (
    CheckReport, ReplayRecord, check_gates, count_of, format_value, parse_max_eager, replay_gate, sample_graph_batches,
)
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.evaluate import evaluate
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable
from cpbcg.outputs.ci_reports import (
    append_step_summary, github_annotations, junit_xml, report_json, step_summary_markdown,
)

CP4 = CPLayout(4)
# Same batches as tests/assets/traces/good.jsonl: 5 forwards, 2048 + 3*8192 + 128 = 26,752 tokens.
BATCHES = [[1534, 161, 353], [8192], [100, 28]]
COUNTS = [1, 3, 1]
HEADER = {"source": "good.jsonl", "cp_size": 4, "cp_strategy": "zigzag", "align_size": 8, "max_padding_factor": 2.0}


def evaluation(buckets):
    table = BucketTable.build(buckets, CP4)
    return evaluate([BatchSet.from_lists(BATCHES, COUNTS)], table, CP4, 2.0)


@pytest.fixture(scope="module")
def sparse():
    """Buckets 128, 2048: only [100, 28] replays (coverage 1/5); [1534,161,353] lacks rows in
    2048 (local_capacity), 8192 is above the largest bucket."""
    return evaluation([128, 2048])


@pytest.fixture(scope="module")
def full():
    """SGLang default list to 8192: all 5 replay, [1534,161,353] rescued into 2304 (256 padding)."""
    return evaluation(sglang_default_buckets(8192))


def gate(ev, **gates):
    (result,) = check_gates(ev, GateConfig(**gates))
    return result


def test_evaluation_numbers_the_gates_read(sparse, full):
    assert (sparse.batches, sparse.tokens, sparse.graph_batches, sparse.graph_tokens) == (5, 26752, 1, 128)
    assert sparse.eager["local_capacity"] == 1 and sparse.eager["above_largest_bucket"] == 3
    assert (full.coverage, full.token_coverage, full.padded_tokens) == (1.0, 1.0, 256)


@pytest.mark.parametrize(
    "gates, passed, message",
    [
        ({"min_coverage": 0.2}, True, "min_coverage: batch coverage 20.00% >= 20.00%"),
        ({"min_coverage": 0.21}, False, "min_coverage: batch coverage 20.00% is below the minimum 21.00%"),
        ({"min_token_coverage": 0.004}, True, "min_token_coverage: token coverage 0.48% >= 0.40%"),
        ({"min_token_coverage": 0.005}, False, "min_token_coverage: token coverage 0.48% is below the minimum 0.50%"),
        ({"max_eager": {"local_capacity": 1}}, True, "max_eager.local_capacity: eager batches (local_capacity) 1 <= 1"),
        (
            {"max_eager": {"local_capacity": 0}}, False,
            "max_eager.local_capacity: eager batches (local_capacity) 1 is above the maximum 0 "
            "(first: extend_seq_lens [1534, 161, 353])",
        ),
        ({"max_eager": {"above_largest_bucket": 3}}, True, "max_eager.above_largest_bucket: eager batches (above_largest_bucket) 3 <= 3"),
        (
            {"max_eager": {"above_largest_bucket": 2}}, False,
            "max_eager.above_largest_bucket: eager batches (above_largest_bucket) 3 is above the maximum 2 "
            "(first: extend_seq_lens [8192])",
        ),
        ({"max_eager": {"not_cp_active": 0}}, True, "max_eager.not_cp_active: eager batches (not_cp_active) 0 <= 0"),
        ({"max_eager": {"padding_limit": 0}}, True, "max_eager.padding_limit: eager batches (padding_limit) 0 <= 0"),
    ],
)
def test_each_gate_passes_and_fails_on_the_sparse_list(sparse, gates, passed, message):
    result = gate(sparse, **gates)
    assert result.passed is passed
    assert result.message() == message


def test_padding_gate_passes_and_fails(full):
    assert full.padding_overhead == pytest.approx(256 / 26752)
    ok, bad = gate(full, max_padding=0.01), gate(full, max_padding=0.009)
    assert ok.passed and ok.message() == "max_padding: padding overhead 0.96% <= 1.00%"
    assert not bad.passed and bad.message() == "max_padding: padding overhead 0.96% is above the maximum 0.90%"
    assert (bad.measured, bad.threshold, bad.comparison, bad.unit) == (256 / 26752, 0.009, "<=", "fraction")


def test_gates_come_in_fixed_order_and_unset_ones_are_skipped(sparse):
    cfg = GateConfig(max_eager={"local_capacity": 0, "not_cp_active": 0}, max_padding=0.1, min_coverage=0.5)
    names = [g.name for g in check_gates(sparse, cfg)]
    assert names == ["min_coverage", "max_padding", "max_eager.not_cp_active", "max_eager.local_capacity"]
    assert check_gates(sparse, GateConfig()) == ()


def test_format_value_adds_digits_only_when_two_would_hide_a_difference():
    assert format_value(0.7275, "fraction") == "72.75%"
    assert format_value(0.89999, "fraction", 0.9) == "89.9990%"
    assert format_value(0.9, "fraction", 0.9) == "90.00%"
    assert format_value(5397, "batches") == "5,397"


def test_parse_max_eager_accepts_repeats_later_wins():
    assert parse_max_eager(["local_capacity=0", "padding_limit = 3", "local_capacity=2"]) == {"local_capacity": 2, "padding_limit": 3}
    assert parse_max_eager([]) == {}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("local_capacity", "expected REASON=N"),
        ("bogus=1", "unknown reason 'bogus' (choose from not_cp_active, above_largest_bucket, padding_limit, local_capacity, context_limit, multimodal_input)"),
        ("local_capacity=-1", "N must be a non-negative integer, got '-1'"),
        ("local_capacity=1.5", "N must be a non-negative integer, got '1.5'"),
        ("local_capacity=", "N must be a non-negative integer, got ''"),
    ],
)
def test_parse_max_eager_refuses_bad_specs(spec, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_max_eager([spec])


def test_replay_gate_counts_unverified_replays():
    from cpbcg.graph_capture.records import BatchReplay

    good = ReplayRecord.of(BatchReplay((1534, 161, 353), 2304, None, True, True, 0.001, 1.0))
    bad = ReplayRecord.of(BatchReplay((100, 28), 128, None, False, False, 0.5, None))
    assert replay_gate([good]).passed
    result = replay_gate([good, bad])
    assert not result.passed and (result.measured, result.threshold) == (1, 0)
    assert result.message() == (
        "replay_verified: failed replays of 2 captured-graph replays 1 is above the maximum 0 "
        "(first: extend_seq_lens [100, 28], max_abs_err 0.5)"
    )


def test_sample_graph_batches_only_graph_batches_in_trace_order():
    table = BucketTable.build([128, 2048, 2304], CP4)
    chunks = [BatchSet.from_lists([[100, 28], [3, 200], [9000]]), BatchSet.from_lists([[1534, 161, 353], [2048], [64, 64]])]
    everything = sample_graph_batches(chunks, table, CP4, 2.0, k=10)
    # [3, 200] is not CP-active, [9000] is above the largest bucket.
    assert everything == [[100, 28], [1534, 161, 353], [2048], [64, 64]]
    two = sample_graph_batches(chunks, table, CP4, 2.0, k=2, seed=7)
    assert len(two) == 2 and all(b in everything for b in two)
    assert two == sample_graph_batches(chunks, table, CP4, 2.0, k=2, seed=7)
    assert sample_graph_batches(chunks, table, CP4, 2.0, k=0) == []


def report_of(ev, **gates):
    return CheckReport(HEADER, ev, check_gates(ev, GateConfig(**gates)))


def test_junit_parses_back_one_case_per_gate(sparse):
    report = report_of(sparse, min_coverage=0.21, max_padding=0.5, max_eager={"local_capacity": 0})
    root = ET.fromstring(junit_xml(report))
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("cpbcg.replay_check", "3", "2")
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["source"] == "good.jsonl" and props["cp_size"] == "4"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["min_coverage", "max_padding", "max_eager.local_capacity"]
    assert all(c.get("classname") == "cpbcg.replay_check" for c in cases.values())
    assert cases["max_padding"].find("failure") is None
    failure = cases["min_coverage"].find("failure")
    assert failure.get("type") == "GateFailed"
    assert failure.get("message") == "min_coverage: batch coverage 20.00% is below the minimum 21.00%"
    assert failure.text.splitlines() == [
        "gate: min_coverage", "measured: batch coverage = 20.00% (0.2)", "threshold: >= 21.00% (0.21)",
    ]
    eager = cases["max_eager.local_capacity"].find("failure").text.splitlines()
    assert eager[1:] == ["measured: eager batches (local_capacity) = 1", "threshold: <= 0", "first: extend_seq_lens [1534, 161, 353]"]
    assert "natural bucket overflow (old runtime crash): 1 forwards" in suite.find("system-out").text


def test_junit_with_no_gates_is_an_empty_passing_suite(full):
    root = ET.fromstring(junit_xml(report_of(full)))
    assert (root.get("tests"), root.get("failures")) == ("0", "0") and root.find("testsuite/testcase") is None


def test_annotations_are_exact_and_escaped(sparse):
    report = report_of(sparse, min_coverage=0.21, max_padding=0.5, max_eager={"local_capacity": 0})
    assert github_annotations(report) == [
        "::error title=cpbcg gate min_coverage::min_coverage: batch coverage 20.00%25 is below the minimum 21.00%25",
        "::error title=cpbcg gate max_eager.local_capacity::max_eager.local_capacity: eager batches (local_capacity) "
        "1 is above the maximum 0 (first: extend_seq_lens [1534, 161, 353])",
    ]
    assert github_annotations(report_of(sparse, min_coverage=0.2)) == []


def test_step_summary_markdown(sparse, tmp_path):
    report = report_of(sparse, min_coverage=0.21, max_eager={"local_capacity": 1})
    text = step_summary_markdown(report)
    lines = text.splitlines()
    assert lines[0] == "## ❌ cpbcg replay-check: 1 of 2 gates failed"
    assert "| `min_coverage` | 20.00% | >= 21.00% | ❌ fail |" in lines
    assert "| `max_eager.local_capacity` | 1 | <= 1 | ✅ pass |" in lines
    assert "| natural bucket overflow (old runtime crash) | 1 | |" in lines
    assert "- `[1534, 161, 353]` (n=2048)" in lines
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step")
    append_step_summary(summary, text)
    append_step_summary(summary, text)
    assert summary.read_text() == "earlier step\n" + text + text


def test_counts_agree_in_number(sparse):
    assert [count_of(n, "gate") for n in (0, 1, 2, 1234)] == ["0 gates", "1 gate", "2 gates", "1,234 gates"]
    assert count_of(1, "batch", "batches") == "1 batch" and count_of(3, "batch", "batches") == "3 batches"
    assert replay_gate([ReplayRecord([8], 8, True, 0.0, None)]).message() == (
        "replay_verified: failed replays of 1 captured-graph replay 0 <= 0"
    )
    one = step_summary_markdown(report_of(sparse, min_coverage=0.21))
    assert one.splitlines()[0] == "## ❌ cpbcg replay-check: 1 of 1 gate failed"
    single = CheckReport(HEADER, evaluation([2048]), ())
    assert "· 1 bucket 2048..2048" in step_summary_markdown(single)
    assert "· 2 buckets 128..2048" in one


def test_report_json_extends_the_plan_document(sparse):
    report = CheckReport(HEADER, sparse, check_gates(sparse, GateConfig(min_coverage=0.21)), (ReplayRecord([100, 28], 128, True, 0.0, 0.2),))
    doc = orjson.loads(report_json(report))
    assert doc["source"] == "good.jsonl" and doc["batches"] == 5 and doc["coverage"] == 0.2
    assert doc["passed"] is False
    assert doc["gates"] == [{
        "name": "min_coverage", "metric": "batch coverage", "measured": 0.2, "threshold": 0.21, "comparison": ">=",
        "unit": "fraction", "passed": False, "message": "min_coverage: batch coverage 20.00% is below the minimum 21.00%",
    }]
    assert doc["overflow_examples"] == [[1534, 161, 353]] and doc["natural_overflow"] == 1
    assert doc["replays"] == [{"extend_seq_lens": [100, 28], "bucket": 128, "verified": True, "max_abs_err": 0.0, "replay_ms": 0.2}]
