"""Bound mode (SGLang server logs: forward sizes only) end to end, reader options on the CLI,
the trace progress bar and `--trace -`, with hand-worked values."""

import itertools

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

import cpbcg.cli.trace_progress as trace_progress
from cpbcg import api
from cpbcg.gates.gates import Gates
from cpbcg.cli import app
from cpbcg.outputs.notes import FORMAT_LABELS
from cpbcg.planner.bound import bound_active, bound_demand, worst_forward_rows
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.optimise.guarantee import Limits, worst_rows
from cpbcg.planner.model.layout import BatchSet, CPLayout, CPStrategy, local_rows
from cpbcg.planner.model.selector import BucketTable
from cpbcg.planner.traces import ForwardSizes

runner = CliRunner()
LOG = "tests/assets/traces/sglang-server.log"
"""Four forwards (k, n): (1, 2048), (3, 2048), (2, 700), (3, 2048)."""
GOOD = "tests/assets/traces/good.jsonl"
BURSTGPT = "tests/assets/requests/burstgpt.csv"
CP4 = CPLayout(4)


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "200")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def sizes(pairs):
    """`ForwardSizes` of `(num_requests, num_tokens)` pairs, each once."""
    k, n = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    return ForwardSizes(n, k, np.ones(len(n), dtype=np.int64), np.zeros(len(n), dtype=np.int64))


def test_hand_worked_rows_cp4():
    # [1534, 161, 353] (2048 tokens, 3 requests) needs 513 -> 520 rows (domain §2); no 3 requests
    # of 2048 tokens need more (the §2 bound floor(512 + 3*0.75) = 514 aligns to 520 too).
    # One request of 2048: 2048 = 8*256, every rank 512. Two of 700: at most 176.
    rows = worst_forward_rows(np.array([2048, 2048, 700]), np.array([3, 1, 2]), CP4)
    assert rows.tolist() == [520, 512, 176]
    assert local_rows(BatchSet.from_lists([[1534, 161, 353]]), CP4).tolist() == [520]


def _brute_rows(n, k, cp):
    """Most rows over every multiset of `k` lengths >= 2*cp summing to `n` (slow; tiny cases)."""
    seg, best = 2 * cp, 0
    for cut in itertools.combinations(range(1, n - seg * k + k), k - 1):  # stars and bars on L - seg
        extra = np.diff([0, *cut, n - seg * k + k]) - 1
        lens = (extra + seg).tolist()
        best = max(best, int(local_rows(BatchSet.from_lists([lens]), CPLayout(cp))[0]))
    return best


@pytest.mark.parametrize("cp", [2, 3])
def test_rows_are_exact_over_exactly_k_requests(cp):
    seg = 2 * cp
    pairs = [(k, n) for k in (1, 2, 3, 4) for n in range(seg * k, seg * k + 2 * seg + 1)]
    got = worst_forward_rows(np.array([n for _, n in pairs]), np.array([k for k, _ in pairs]), CPLayout(cp))
    assert got.tolist() == [_brute_rows(n, k, cp) for k, n in pairs]


def test_exactly_k_is_tighter_than_at_most_k():
    # cp 2, 4 requests of 16 tokens: every request is 4 = 2*cp tokens, 8 rows per rank; with fewer
    # requests ([5, 5, 6]: rank 0 holds 3 + 3 + 3 = 9 -> 12) guarantee's at-most-k table says 12.
    n, rows = worst_rows(Limits(4, 16), CPLayout(2))
    assert int(rows[n.tolist().index(16)]) == 12
    assert worst_forward_rows(np.array([16]), np.array([4]), CPLayout(2)).tolist() == [8]


def test_cp_active_rules():
    n, k = np.array([63, 64, 8, 7, 3, 4]), np.array([8, 8, 1, 1, 1, 1])
    assert bound_active(n, k, CP4).tolist() == [False, True, True, False, False, False]
    inter = CPLayout(4, CPStrategy.interleave)
    assert bound_active(n, k, inter).tolist() == [True, True, True, True, False, True]
    assert bound_active(n, k, CPLayout(1)).tolist() == [True] * 6
    # interleave rows: align_up(ceil(n/cp), cp) whatever k; cp 1: n
    assert worst_forward_rows(np.array([2049, 2048]), np.array([3, 1]), inter).tolist() == [516, 512]
    assert worst_forward_rows(np.array([2049, 5]), np.array([3, 1]), CPLayout(1)).tolist() == [2049, 5]


def test_default_list_rescues_the_worst_case_in_2304():
    # C(2048) = 512 cannot hold 520 rows; the next bucket 2304 (C = 576) can, within 2x.
    demand = bound_demand(sizes([(3, 2048), (1, 2048), (8, 63)]), CP4)
    assert demand.rows.tolist()[:2] == [520, 512] and demand.active.tolist() == [True, True, False]
    table = BucketTable.build(sglang_default_buckets(8192), CP4)
    sel = demand.select(table)
    assert sel.bucket_tokens.tolist()[:2] == [2304, 2048]
    assert sel.rescued.tolist() == [True, False, False] and sel.graph.tolist() == [True, True, False]


def test_api_plan_and_check_on_a_server_log():
    dep = api.load_deployment(cp_size=4)
    source = api.open_trace(LOG, dep)
    assert source.is_bound
    result = api.plan(source, dep)
    ev = result.evaluation
    # forwards 2048 (1 req) -> 2048, 2048 (3 req) -> 2304 twice; the mixed forward, 700 tokens plus
    # 2 one-token decode rows (702 in 4 requests), is not CP-active: eager
    assert (ev.batches, ev.tokens, ev.graph_batches, ev.padded_tokens, ev.rescued) == (4, 6846, 3, 512, 2)
    assert ev.eager["not_cp_active"] == 1
    assert result.recommendation is not None
    report, _ = api.check(LOG, dep, Gates())
    assert report.header["bound"] is True and "worst-case bound" in report.header["source"]
    assert report.evaluation.padded_tokens == 512


def test_plan_cli_says_bound():
    result = runner.invoke(app, ["plan", "-t", LOG, "--cp-size", "4", "-f", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["bound"] is True and doc["source"].endswith("(SGLang server log: forward sizes only, planned as a worst-case bound)")
    assert (doc["batches"], doc["graph_batches"], doc["padded_tokens"], doc["rescued"]) == (4, 3, 512, 2)
    assert "SGLang server log" in result.stderr and "worst-case bound" in result.stderr
    table = runner.invoke(app, ["plan", "-t", LOG, "--cp-size", "4", "--no-recommend"])
    assert table.exit_code == 0 and "planned as a worst-case bound" in table.stdout


def test_replay_check_cli_says_bound(tmp_path):
    # the fixture is dated 2025 (before breakable prefill graphs: gating it is refused); the same log dated 2026-11
    recent = tmp_path / "recent.log"
    recent.write_text(open(LOG).read().replace("[2025-06-01 ", "[2026-11-01 "))
    assert runner.invoke(app, ["replay-check", "-t", LOG, "--cp-size", "4", "--min-coverage", "0.75"]).exit_code == 2
    LOG_ = str(recent)
    result = runner.invoke(app, ["replay-check", "-t", LOG_, "--cp-size", "4", "-f", "json", "--min-coverage", "0.75"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert doc["bound"] is True and doc["passed"] is True and doc["rescued"] == 2
    assert "worst-case bound" in result.stderr
    replay = runner.invoke(app, ["replay-check", "-t", LOG_, "--cp-size", "4", "--replay", "1"])
    assert replay.exit_code == 2 and "nothing to replay" in replay.stderr


def test_request_traces_are_not_bound():
    doc = orjson.loads(runner.invoke(app, ["plan", "-t", GOOD, "--cp-size", "4", "-f", "json"]).stdout)
    assert doc["bound"] is False


def test_plan_reads_stdin():
    with open(GOOD, "rb") as handle:
        data = handle.read()
    result = runner.invoke(app, ["plan", "-t", "-", "--cp-size", "4", "-f", "json", "--no-recommend"], input=data)
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    # good.jsonl: [1534, 161, 353], [8192] x3, [100, 28] -> 5 forwards, 2048 + 3*8192 + 128 tokens
    assert doc["source"] == "<stdin>" and (doc["batches"], doc["tokens"]) == (5, 26752)
    check = runner.invoke(app, ["replay-check", "--report-only", "-t", "-", "--cp-size", "4", "-f", "json"], input=data)
    assert check.exit_code == 0, check.output
    assert orjson.loads(check.stdout)["tokens"] == 26752


def test_burstgpt_filters_on_the_cli():
    def requests(*args):
        result = runner.invoke(app, ["plan", "-t", BURSTGPT, "-f", "json", "--no-recommend", *args])
        assert result.exit_code == 0, result.output
        return orjson.loads(result.stdout)["simulation"]["requests"]

    assert requests() == 5
    assert requests("--model", "ChatGPT") == 3
    assert requests("--model", "GPT-4", "--log-type", "API log") == 1


def test_output_field_on_the_cli():
    result = runner.invoke(app, ["plan", "-t", "tests/assets/requests/generic.csv", "--length-field", "prompt_tokens",
                                 "--output-field", "nope", "-f", "json", "--no-recommend"])
    assert result.exit_code == 2 and "nope" in result.stderr


def test_reader_options_warned_on_batch_traces():
    result = runner.invoke(app, ["plan", "-t", GOOD, "--model", "GPT-4", "--no-recommend"])
    assert result.exit_code == 0
    assert f"cpbcg: warning: --model applies to request traces only; {GOOD} is a batch trace" in result.stderr
    log = runner.invoke(app, ["plan", "-t", LOG, "--rate", "3", "--no-recommend"])
    assert f"cpbcg: warning: --rate applies to request traces only; {LOG} is an SGLang server log" in log.stderr
    with open(GOOD, "rb") as handle:
        piped = runner.invoke(app, ["plan", "-t", "-", "--log-type", "API log", "--no-recommend"], input=handle.read())
    assert piped.exit_code == 0, piped.output
    assert "cpbcg: warning: --log-type applies to request traces only; <stdin> is a batch trace" in piped.stderr


def test_format_labels_come_from_the_registry():
    assert FORMAT_LABELS["burstgpt"] == "BurstGPT" and FORMAT_LABELS["mooncake"] == "Mooncake"
    assert FORMAT_LABELS["sglang-log"] == "SGLang server log (bound)"


def test_progress_bar_shows_requests_for_request_traces(monkeypatch):
    seen = []

    class Bar:
        def __init__(self, description):
            self.description = description

        def __enter__(self):
            seen.append([self.description])
            return lambda amount=1: seen[-1].append(amount)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(trace_progress, "progress_bar", Bar)
    with trace_progress.TraceProgress() as bar:
        bar.requests(3)
        bar.forwards(BatchSet.from_lists([[5]]))
        bar.requests(10)
    with trace_progress.TraceProgress() as bar:
        bar.forwards(BatchSet.from_lists([[5], [6]]))
        bar.forwards(sizes([(1, 9)]))
    assert seen == [["simulating requests", 3, 7], ["replaying forwards", 2, 1]]
    dep = api.load_deployment(cp_size=4)
    calls = []
    source = api.open_trace(BURSTGPT, dep, progress=calls.append)
    list(source.batches)
    assert calls and calls[-1] == 5
