"""SGLang server logs as input and as truth (issue 21): every line variant, copies folded, DP ranks
apart, cut lines skipped and counted, the log configuring the plan, observed vs modelled, the
measured capture memory. Every log here is SYNTHETIC (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples
from typer.testing import CliRunner

from cpbcg import api
from cpbcg.cli import app
from cpbcg.errors import TraceError
from cpbcg.planner.traces import TraceFormat
from cpbcg.assembly.registry import detect_format
from cpbcg.engines.sglang.logs.log import LogReader, parse_records
from cpbcg.engines.sglang.logs.settings import parse_args_dump, parse_launch_flags, read_log_settings
from sglang_log_fixtures import default_buckets, prefill_line, sglang_graph_verdict, startup_lines, write_log

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "200")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def read_all(path):
    reader = LogReader(path)
    chunks = list(reader)
    cat = lambda name: np.concatenate([getattr(c, name) for c in chunks]).tolist()  # noqa: E731
    return reader.summary, {name: cat(name) for name in ("num_tokens", "num_requests", "cached_tokens", "decode_requests",
                                                         "line_no", "dp_rank", "graph")}


@pytest.mark.parametrize("line, expected", [
    (prefill_line(2048, 3, 512, style="old", prefix="[2024-10-01 12:00:00 TP0] "), (2048, 3, 512, 0, -1)),
    (prefill_line(2048, 3, 512, graph=False), (2048, 3, 512, 0, 0)),
    (prefill_line(700, 2, style="2026-02", graph=True), (700, 2, 0, 0, 1)),
    (prefill_line(700, 2, iteration=17), (700, 2, 0, 0, 1)),
    (prefill_line(100, 1, style="old", mixed=4, prefix="[2025-03-01 12:00:00 TP0] "), (104, 5, 0, 4, -1)),
    (prefill_line(512, 2, label="npu graph", graph=False), (512, 2, 0, 0, 0)),
    (prefill_line(512, 2, label="cpu graph"), (512, 2, 0, 0, 1)),
    ("sglang-1  | " + prefill_line(512, 2), (512, 2, 0, 0, 1)),
    ("2026-02-01T10:00:00.123456Z " + prefill_line(512, 2, prefix="[2026-02-01 10:00:00 DP0 TP0] "), (512, 2, 0, 0, 1)),
    ("[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 512, #cac\n", (512, 2, 0, 0, -1)),
    ("[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, #bootstrap-req: 0, #inflight-req: 2, "
     "mamba usage: 0.30, cuda graph: True, input throughput (token/s): 1.00\n", (64, 1, 0, 0, 1)),
])
def test_every_line_variant_reads(tmp_path, line, expected):
    summary, got = read_all(write_log(tmp_path / "s.log", line))
    assert (summary.forwards, summary.unreadable, summary.nonprefill) == (1, 0, 0)
    row = tuple(got[k][0] for k in ("num_tokens", "num_requests", "cached_tokens", "decode_requests", "graph"))
    assert row == expected and got["line_no"] == [2]


def test_pp_and_cp_copies_count_once_dp_ranks_apart(tmp_path):
    printers = ["PP0 ATTN_CP0 MOE_DP0 TP0 EP0", "PP0 ATTN_CP1 MOE_DP0 TP2 EP2", "PP1 ATTN_CP0 MOE_DP0 TP4 EP4", "PP1 ATTN_CP1 MOE_DP0 TP6 EP6"]
    sizes = {0: [(2048, 1), (1000, 2), (64, 1)], 1: [(4096, 2), (300, 3)]}
    body = ""
    for j in range(3):  # printers interleave; each prints every forward of its DP rank, in order
        for dp, forwards in sizes.items():
            if j < len(forwards):
                for p in (printers if j % 2 == 0 else printers[::-1]):
                    body += prefill_line(*forwards[j], prefix=f"[2026-11-02 10:00:0{j} DP{dp} {p}] ")
    summary, got = read_all(write_log(tmp_path / "pp-cp.log", body))
    assert summary.forwards == 5 and summary.records == 20 and summary.folded_copies == 15 and summary.copy_mismatches == 0
    assert summary.printers == 8 and summary.dp_ranks == (0, 1)
    assert sorted(zip(got["dp_rank"], got["num_tokens"])) == [(0, 64), (0, 1000), (0, 2048), (1, 300), (1, 4096)]


def test_a_copy_that_disagrees_is_counted(tmp_path):
    body = prefill_line(2048, 1, prefix="[2026-11-02 10:00:00 PP0 TP0] ") + prefill_line(1024, 1, prefix="[2026-11-02 10:00:00 PP1 TP4] ")
    summary, got = read_all(write_log(tmp_path / "m.log", body))
    assert got["num_tokens"] == [2048] and summary.copy_mismatches == 1


def test_cut_and_zero_lines_are_skipped_counted_and_located(tmp_path):
    body = (prefill_line(2048, 1) + "[2026-11-02 10:00:02 TP0] Prefill batch, #new-seq: 3, #new-to\n"
            + prefill_line(0, 1) + prefill_line(3, 5) + prefill_line(512, 2))
    path = write_log(tmp_path / "cut.log", body)
    summary, got = read_all(path)
    assert got["num_tokens"] == [2048, 512] and got["line_no"] == [2, 6]
    assert (summary.unreadable, summary.first_unreadable_line, summary.nonprefill, summary.first_nonprefill_line) == (2, 3, 1, 4)
    assert summary.skipped_note("cut.log") == ("cut.log: 2 unreadable Prefill batch lines skipped (first: line 3: #new-token: "
                                               "missing or not an integer: a Prefill batch line gives both #new-seq and #new-token; "
                                               "--strict refuses them); 1 with #new-token: 0 skipped (first: line 4)")
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"])
    assert result.exit_code == 0, result.output
    assert "2 unreadable Prefill batch lines skipped (first: line 3: #new-token: missing" in result.stderr
    # --strict refuses the first one, named by line and key, before any note
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend", "--strict"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (f"cpbcg: error: {path}:3: #new-token: missing or not an integer: a Prefill batch line "
                                             "gives both #new-seq and #new-token (--strict refuses an unreadable Prefill batch line)")
    # replay-check's JSON and JUnit carry the skipped count
    junit = tmp_path / "r.xml"
    result = runner.invoke(app, ["replay-check", "-t", str(path), "--min-coverage", "0.5", "-f", "json", "--junit", str(junit)])
    doc = orjson.loads(result.stdout)
    assert (doc["unreadable_prefill_lines"], doc["first_unreadable_prefill_line"], doc["nonprefill_lines"]) == (2, 3, 1)
    assert '<property name="unreadable_prefill_lines" value="2" />' in junit.read_text()


@pytest.mark.parametrize("sizes, expected", [
    ("#new-seq: 1, #new-token: -148", "#new-token: -148: a forward's new tokens are a positive count"),
    ("#new-seq: 3, #new-token: 2", "#new-seq: 3 > #new-token: 2: each request extends at least one token"),
    ("#new-seq: 1, #new-token: 99999999999", "#new-token: 99999999999: above cpbcg's limit of 2,147,483,647 tokens in a forward"),
])
def test_a_log_whose_only_prefill_line_is_malformed_names_the_line_and_the_key(tmp_path, sizes, expected):
    path = write_log(tmp_path / "bad.log", "[2026-04-05 20:02:47] Load weight end.\n"
                     f"[2026-04-05 20:02:48] Prefill batch, {sizes}, #cached-token: 0, token usage: 0.08, #running-req: 0, "
                     "#queue-req: 0, cuda graph: True\n")
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"cpbcg: error: {path}:3: {expected}: the log's only Prefill batch line is unreadable (1)"]


def test_two_records_on_one_line_are_split_and_folded_by_their_prefixes(tmp_path):
    a = prefill_line(2048, 1, prefix="[2026-11-02 10:00:00 PP0 TP0] ").rstrip("\n")
    b = prefill_line(2048, 1, prefix="[2026-11-02 10:00:00 PP1 TP4] ")
    recs = parse_records((a + b).encode())
    assert [(r.printer, r.new_token) for r in recs] == [(((b"PP", 0), (b"TP", 0)), 2048), (((b"PP", 1), (b"TP", 4)), 2048)]
    summary, got = read_all(write_log(tmp_path / "two.log", a + b))
    assert got["num_tokens"] == [2048] and summary.folded_copies == 1
    # without a prefix before the second, both come from the same printer: two forwards
    summary, got = read_all(write_log(tmp_path / "same.log", a + " Prefill batch, #new-seq: 2, #new-token: 300, #cached-token: 0, x\n"))
    assert got["num_tokens"] == [2048, 300] and summary.folded_copies == 0


def test_detection_finds_the_first_prefill_line_after_megabytes_of_startup(tmp_path):
    startup = "".join(f"[2026-11-02 09:00:00 TP0] Load weight {i}: loading shard {'x' * 80}\n" for i in range(30_000))
    path = write_log(tmp_path / "late.log", startup + prefill_line(2048, 1))
    assert path.stat().st_size > 2 << 20
    assert detect_format(path) is TraceFormat.sglang_log
    assert read_all(path)[1]["num_tokens"] == [2048]


def test_no_readable_line_is_one_clear_error(tmp_path):
    path = write_log(tmp_path / "none.log", prefill_line(3, 5))
    with pytest.raises(TraceError, match=r'none.log:2: #new-seq: 5 > #new-token: 3: each request extends at least one token: '
                                         r"the log's only Prefill batch line is unreadable \(1\)"):
        read_all(path)
    path = write_log(tmp_path / "zero.log", prefill_line(0, 1))  # #new-token: 0 only: no prefill at all
    with pytest.raises(TraceError, match=r'zero.log:1: no readable "Prefill batch" lines \(1 Prefill batch lines, none readable\)'):
        read_all(path)


def test_settings_dump_repr_dict_and_flags_are_read_with_ast():
    old = parse_args_dump("ServerArgs(model_path='m', attn_cp_size=4, load_format=<LoadFormat.AUTO: 'auto'>, page_size=16, x=[1, 2]) tail")
    assert old == {"model_path": "m", "attn_cp_size": 4, "page_size": 16, "x": [1, 2]}
    quoted = parse_args_dump("ServerArgs(a='x\\'y,(', b=<E.X: 'q'>, c=[1, (2, 3)], d=4) tail")
    assert quoted == {"a": "x'y,(", "c": [1, (2, 3)], "d": 4}
    new = parse_args_dump("{'tp_size': 2, 'cuda_graph_config': {'prefill': {'backend': 'breakable', 'bs': [512, 1024]}}, 'f': __import__('os')}")
    assert new == {"tp_size": 2, "cuda_graph_config": {"prefill": {"backend": "breakable", "bs": [512, 1024]}}}
    flags = parse_launch_flags(" --model-path m --attn-cp-size 4 --tp 4 --enable-prefill-cp --cp-strategy zigzag "
                               "--cuda-graph-bs-prefill 512 1024 --chunked-prefill-size=8192 --enable-mixed-chunk")
    assert flags["attn_cp_size"] == 4 and flags["tp_size"] == 4 and flags["enable_prefill_cp"] is True
    assert flags["cuda_graph_bs_prefill"] == [512, 1024] and flags["chunked_prefill_size"] == 8192 and flags["enable_mixed_chunk"] is True


def test_log_settings_and_capture_memory(tmp_path):
    path = write_log(tmp_path / "s.log", startup_lines(cp=1, chunk=8192, page=16) + prefill_line(2048, 1))
    s = read_log_settings(path)
    assert s.overrides() == {"cp_size": 1, "buckets": default_buckets(8192), "scheduler.chunked_prefill_size": 8192,
                             "scheduler.page_size": 16, "scheduler.max_prefill_tokens": 16384, "scheduler.enable_mixed_chunk": False}
    assert len(s.captured) == 58 and s.prefill_graphs is True and s.date == "2026-11-02"
    gb = s.capture.bucket_gb
    assert gb[8192] == 2.29 and all(v <= 0.01 for b, v in gb.items() if b != 8192) and len(gb) == 58
    assert s.capture.capture_s == 31.5
    older = read_log_settings(write_log(tmp_path / "o.log", startup_lines(dict_form=False, capture=False, max_bs=4096) + prefill_line(9, 1)))
    assert older.overrides()["buckets"] == "sglang-default:4096" and older.prefill_graphs is True


def synthetic_bcg_log(tmp_path, rng_seed=0, forwards=400):
    """A breakable-graph server without CP: each forward's verdict by SGLang's rule."""
    rng = np.random.default_rng(rng_seed)
    buckets = default_buckets(8192)
    body, graphs = startup_lines(cp=1), []
    for i in range(forwards):
        n = int(rng.choice([int(rng.integers(1, 12000)), int(rng.integers(1, 300))]))
        k = int(rng.integers(1, min(n, 8) + 1))
        graph = sglang_graph_verdict(n, buckets)
        graphs.append(graph)
        dp = i % 2
        body += prefill_line(n, k, graph=graph, prefix=f"[2026-11-02 10:{i // 60:02d}:{i % 60:02d} DP{dp} TP{dp}] ")
    return write_log(tmp_path / "bcg.log", body), graphs


def test_observed_and_modelled_agree_line_by_line_on_sglangs_rule(tmp_path):
    path, graphs = synthetic_bcg_log(tmp_path)
    log = api.log_settings(path)
    _, dep = api.load_config_and_deployment(None, {}, log=log)
    assert dep.cp.cp_size == 1 and len(dep.buckets) == 58
    result = api.plan(api.open_trace(path, dep), dep, None)
    obs = result.observed
    assert obs.model_errors == 0 and obs.unexplained_eager == 0 and obs.agreeing == obs.forwards == 400
    assert obs.graph_forwards == sum(graphs) and 0 < obs.coverage < 1
    assert [r.dp_rank for r in obs.ranks] == [0, 1] and sum(r.forwards for r in obs.ranks) == 400
    assert all(r.graph_forwards == r.model_graph_forwards and r.graph_tokens == r.model_graph_tokens for r in obs.ranks)


def test_disagreements_are_listed_with_lines_model_errors_first(tmp_path):
    body = startup_lines(cp=1) + prefill_line(9000, 1, graph=True) + prefill_line(2048, 1, graph=False) + prefill_line(2048, 2, graph=True)
    path = write_log(tmp_path / "d.log", body)
    log = api.log_settings(path)
    _, dep = api.load_config_and_deployment(None, {}, log=log)
    obs = api.plan(api.open_trace(path, dep), dep, None).observed
    assert obs.model_errors == 1 and obs.model_error_lines[0].line_no == 7 and obs.model_error_lines[0].model == "above_largest_bucket"
    assert obs.unexplained_eager == 1 and obs.eager_lines[0].line_no == 8 and obs.eager_lines[0].model == "graph 2048"
    assert "return_logprob, input embeddings or context limits (not in the log)" in obs.eager_explanations


def test_plan_cli_configures_from_the_log_and_reports_observed(tmp_path):
    path, graphs = synthetic_bcg_log(tmp_path, forwards=60)
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"])
    assert result.exit_code == 0, result.output
    assert "cpbcg: from the log: cp_size 1 (server_args.attn_cp_size, line 2)" in result.stderr
    assert "cpbcg: from the log: buckets 58 buckets 4..8192 (capture lines, line 4)" in result.stderr
    assert "Observed (cuda graph, printed by the server) vs modelled" in result.stdout
    assert "agree on 60 of 60 forwards" in result.stdout
    assert f"measured on 2026-11-02 by the log {path}, total 2.37 GiB measured (log line 6), capture 31.50 s" in result.stdout
    assert "│             8192 │      2.29 │" in result.stdout and "│ 49 other buckets │ 0.00 each │" in result.stdout
    over = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend", "--cp-size", "2", "-f", "json"])
    assert over.exit_code == 0, over.output
    assert "cp_size 1 (server_args.attn_cp_size, line 2; overridden by the command line)" in over.stderr
    doc = orjson.loads(over.stdout)
    assert doc["cp_size"] == 2 and doc["observed"]["forwards"] == 60 and doc["observed"]["capture"]["bucket_gb"]["8192"] == 2.29


def test_recommendation_uses_the_measured_capture_cost(tmp_path):
    path, _ = synthetic_bcg_log(tmp_path, forwards=80)
    doc = orjson.loads(runner.invoke(app, ["plan", "-t", str(path), "-f", "json", "--validate-fraction", "0"]).stdout)
    capture = doc["recommendation"]["capture_estimate"]
    # the log's own total replaces the estimate, said with what it printed and where
    assert capture["source"] == (f"calibrated from {path}:6 (breakable graphs, 2026-11-02: 58 buckets in 31.5 s, 2.37 GB in all, "
                                 "as the log printed them; every other count scaled from it)")
    assert capture["measured"] is True and capture["range_factor"] == 1.0
    k = doc["recommendation"]["num_buckets"]
    assert capture["capture_s"] == pytest.approx(31.5 / 58 * k)
    assert capture["graph_mib"] == pytest.approx(2.37 * 1024 / 8192 * max(doc["recommendation"]["buckets"]))


def test_min_observed_coverage_gate(tmp_path):
    path, graphs = synthetic_bcg_log(tmp_path, forwards=60)
    observed = sum(graphs) / 60
    ok = runner.invoke(app, ["replay-check", "-t", str(path), "--min-observed-coverage", f"{observed - 0.01:.4f}", "-f", "json"])
    assert ok.exit_code == 0, ok.output
    gate = orjson.loads(ok.stdout)["gates"][0]
    assert gate["name"] == "min_observed_coverage" and gate["measured"] == pytest.approx(observed)
    bad = runner.invoke(app, ["replay-check", "-t", str(path), "--min-observed-coverage", f"{observed + 0.01:.4f}"])
    assert bad.exit_code == 1 and "min_observed_coverage: observed cuda graph coverage" in bad.stderr
    no_verdict = write_log(tmp_path / "old.log", prefill_line(2048, 1, style="old"))
    refused = runner.invoke(app, ["replay-check", "-t", str(no_verdict), "--min-observed-coverage", "0.5"])
    assert refused.exit_code == 2 and "min_observed_coverage: the trace is not an SGLang server log" in refused.stderr


def test_mixed_forward_is_not_cp_active_under_zigzag(tmp_path):
    path = write_log(tmp_path / "mx.log", prefill_line(4096, 1, style="old", mixed=3, prefix="[2025-03-01 12:00:00 TP0] "))
    _, dep = api.load_config_and_deployment(None, {"cp_size": 4})
    ev = api.plan(api.open_trace(path, dep), dep, None).evaluation
    assert ev.eager["not_cp_active"] == 1


def test_a_log_dated_before_the_padding_cap_is_compared_without_it(tmp_path):
    # 5 tokens pad to bucket 16 (> 2x): eager under 0.5.23's rule, a graph on a server before PR #31487
    body = startup_lines(cp=1, date="2026-03-01", capture=False) + prefill_line(5, 1, graph=True, prefix="[2026-03-01 10:00:00 TP0] ")
    path = write_log(tmp_path / "early.log", body)
    log = api.log_settings(path)
    _, dep = api.load_config_and_deployment(None, {"buckets": [4, 16]}, log=log)
    obs = api.plan(api.open_trace(path, dep), dep, None).observed
    assert obs.model_errors == 0 and obs.notes and "before SGLang PR #31487" in obs.notes[0]


def test_request_lines_become_a_request_trace(tmp_path):
    body = (startup_lines(cp=1, capture=False)
            + "[2026-11-02 10:00:05 TP0] ReqTimeStats(rid=b, input_len=3000, cached_input_len=1000, output_len=20, attempts=1, "
              "type=unified): queue_duration=1.00ms, forward_duration=900.00ms, entry_time=1793000001.500\n"
            + prefill_line(2048, 1)
            + "[2026-11-02 10:00:06 TP0] ReqTimeStats(rid=a, input_len=512, cached_input_len=0, output_len=7, attempts=1, "
              "type=unified): queue_duration=1.00ms, forward_duration=100.00ms, entry_time=1793000000.500\n"
            + "[2026-11-02 10:00:06 PP1 TP4] ReqTimeStats(rid=a, input_len=512, cached_input_len=0, output_len=7, attempts=1, "
              "type=unified): queue_duration=1.00ms, forward_duration=100.00ms, entry_time=1793000000.500\n"
            + "[2026-11-02 10:00:09] Finish: obj=GenerateReqInput(rid='c', text='...'), out={'meta_info': {'id': 'c', "
              "'prompt_tokens': 100, 'completion_tokens': 5, 'cached_tokens': 0, 'e2e_latency': 2.5}}\n")
    path = write_log(tmp_path / "req.log", body)
    assert detect_format(path) is TraceFormat.sglang_requests
    from cpbcg.assembly.registry import read_requests

    chunk = list(read_requests(path))[0]
    # sorted by arrival: a (entry 0.5), b (1.5), c (10:00:09 - 2.5 s = 10:00:06.5)
    assert chunk.input_tokens.tolist() == [512, 2000, 100] and chunk.output_tokens.tolist() == [7, 20, 5]
    assert chunk.arrival_s.tolist()[:2] == [0.0, 1.0]
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert "simulated" in result.stderr and orjson.loads(result.stdout)["cp_size"] == 1


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_any_interleaving_of_printers_keeps_each_dp_ranks_forwards_once(tmp_path_factory, data):
    dp_ranks = data.draw(st.integers(1, 3))
    printers = data.draw(st.integers(1, 4))
    forwards = {dp: data.draw(st.lists(st.integers(1, 9000), min_size=1, max_size=6)) for dp in range(dp_ranks)}
    queues = [[(dp, p, j, n) for j, n in enumerate(ns)] for dp, ns in forwards.items() for p in range(printers)]
    body = ""
    while any(queues):  # any interleaving that keeps each printer's own order
        q = data.draw(st.sampled_from([q for q in queues if q]))
        dp, p, j, n = q.pop(0)
        body += prefill_line(n, 1, prefix=f"[2026-11-02 10:00:{j:02d} DP{dp} PP{p % 2} ATTN_CP{p // 2} TP{p}] ")
    path = write_log(tmp_path_factory.mktemp("fold") / "f.log", body)
    summary, got = read_all(path)
    kept = {dp: [n for d, n in zip(got["dp_rank"], got["num_tokens"]) if d == dp] for dp in forwards}
    assert kept == forwards and summary.folded_copies == sum(map(len, forwards.values())) * (printers - 1)


def test_an_older_printed_version_is_named(tmp_path):
    body = "[2026-08-01 09:00:00] sglang version: 0.5.9\n" + startup_lines(cp=1, capture=False, date="2026-08-01") + prefill_line(5, 1)
    path = write_log(tmp_path / "v.log", body)
    log = api.log_settings(path)
    assert log.version == "0.5.9"
    _, dep = api.load_config_and_deployment(None, {"buckets": [4, 16]}, log=log)
    obs = api.plan(api.open_trace(path, dep), dep, None).observed
    assert obs.model_errors == 1 and "SGLang 0.5.9 is older than the reference 0.5.23" in obs.notes[0]
    assert "a server without the 2x padding cap" in obs.model_error_lines[0].explanations[0]


def test_disagreement_reasons_per_case_equal_a_per_forward_reading():
    """`_LaunchTally.add` finds each disagreement's reasons once per case (eager reason, several
    requests, a mixed forward) and counts them with numpy: the counts, their order and the kept
    lines equal a reading forward by forward (CP 4 and the list assumed: every case occurs)."""
    from cpbcg.planner.model.layout import CPLayout
    from cpbcg.planner.model.selector import BucketTable
    from cpbcg.engines.sglang.observed import KEPT_EXAMPLES, AssumedSetting, ObservedTally
    from cpbcg.planner.bound import bound_demand
    from cpbcg.planner.traces.records import ObservedForwards
    from cpbcg.engines.sglang.logs.settings import LogSettings

    rng = np.random.default_rng(7)
    cp = CPLayout(4)
    table = BucketTable.build(default_buckets(8192), cp)
    assumed = (AssumedSetting("cp_size", 4, "--cp-size"), AssumedSetting("buckets", "sglang-default:8192", "--buckets"))
    tally = ObservedTally(table, cp, 2.0, LogSettings(), assumed=assumed)
    chunks = []
    for c in range(3):
        m = 3000
        n = rng.choice([3, 7, 100, 2048, 9000, 20000], m) + rng.integers(0, 50, m)
        k = np.minimum(rng.integers(1, 4, m), n)
        decode = np.where(rng.random(m) < 0.2, rng.integers(1, 4, m), 0)
        chunk = ObservedForwards(n + decode, k + decode, np.ones(m, dtype=np.int64), np.zeros(m, dtype=np.int64), decode_requests=decode,
                                 line_no=np.arange(m) + 10 + c * m, dp_rank=np.zeros(m, dtype=np.int64),
                                 graph=rng.integers(-1, 2, m).astype(np.int8))
        chunks.append(chunk)
        tally.add(chunk)
    got = tally.result()
    launch = tally._launches[1]
    errors, eager, explained, assumed_errors = [], [], {}, 0
    for chunk in chunks:
        sel = bound_demand(chunk, cp).select(table, launch.factor)
        for i in range(len(chunk.graph)):
            if chunk.graph[i] < 0 or bool(chunk.graph[i]) == bool(sel.graph[i]):
                continue
            multi = bool(chunk.num_requests[i] > 1)
            if chunk.graph[i] == 1:
                why = launch._error_reasons(sel.reason_of(i), multi)
                assumed_errors += any(w.startswith("the assumed ") for w in why)
                errors.append((int(chunk.line_no[i]), why))
            else:
                why = launch._eager_reasons(bool(chunk.decode_requests[i] > 0), multi)
                for w in why:
                    explained[w] = explained.get(w, 0) + 1
                eager.append((int(chunk.line_no[i]), why))
    assert (got.model_errors, got.unexplained_eager, got.assumption_errors) == (len(errors), len(eager), assumed_errors)
    assert list(got.eager_explanations.items()) == list(explained.items())
    assert [(d.line_no, d.explanations) for d in got.model_error_lines] == errors[:KEPT_EXAMPLES]
    assert [(d.line_no, d.explanations) for d in got.eager_lines] == eager[:KEPT_EXAMPLES]
    reasons = {w for _, why in errors for w in why} | set(explained)
    short = "a request shorter than 2*cp_size (lengths not in the log)"
    assert "worst-case rows: the log has no extend lengths" in reasons and 0 < explained[short] < len(eager) and assumed_errors > 0


def test_the_verdict_of_a_logged_server_is_calibrated_from_its_capture_line(tmp_path):
    path, _ = synthetic_bcg_log(tmp_path, forwards=80)
    result = runner.invoke(app, ["plan", "-t", str(path), "--validate-fraction", "0"], env={"CPBCG_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    screen = " ".join(result.stdout.split("\n\n")[0].split())
    assert f"costs capture: calibrated from {path}:6;" in screen
    # every count scaled from the 58 buckets in 31.5 s the log printed: the default list's figure follows it
    doc = orjson.loads(runner.invoke(app, ["plan", "-t", str(path), "--validate-fraction", "0", "-f", "json"]).stdout)["verdict"]
    assert doc["default"]["capture_seconds"] == pytest.approx(31.5 / 58 * doc["default"]["num_buckets"])
    assert doc["capture_range_factor"] == 1.0


def test_the_log_timestamp_pattern_is_written_once():
    # every SGLang log pattern is built on `engines/sglang/logs/settings.py`'s `TIMESTAMP` (8 copies in 4 files once,
    # then a ninth in watch's --since cut)
    import re
    from pathlib import Path

    import cpbcg

    date_time = re.compile(r"\\d\{4\}-\\d\\d-\\d\\d\)?\[ T\]")  # a date then a time, in a pattern's source
    found = {str(p.relative_to(Path(cpbcg.__file__).parent)): len(date_time.findall(p.read_text()))
             for p in Path(cpbcg.__file__).parent.rglob("*.py") if date_time.search(p.read_text())}
    # besides: the anchored ISO time of a CSV column, and watch's --since text (minutes or seconds)
    assert found == {"engines/sglang/logs/settings.py": 1, "planner/traces/csv_table.py": 1, "watching/follow.py": 1}


def test_a_capture_end_line_not_used_as_the_prefill_cost_is_said_with_why(tmp_path):
    decode = ("Capturing batches (bs=1 avail_mem=37.08 GB): 100%|##########| 52/52 [00:05<00:00,  9.85it/s]\n"
              "[2025-11-30 11:18:01] Capture cuda graph end. Time elapsed: 5.92 s. mem usage=1.44 GB. avail mem=37.06 GB.\n")
    path = write_log(tmp_path / "decode.log", decode + prefill_line(148, 1))
    result = runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"])
    assert result.exit_code == 0, result.output
    assert (f"cpbcg: note: {path}:3: the capture end line (1.44 GB, 5.92 s) is not used as the prefill capture cost: `Capture cuda "
            "graph end` names no prefill or piecewise graph: the decode graphs' capture (the one runner older releases have), not the "
            "prefill list's") in result.stderr
    # beside a prefill capture that was used: nothing said
    log = read_log_settings(write_log(tmp_path / "both.log", startup_lines() + decode + prefill_line(148, 1)))
    assert log.capture is not None and log.capture.total_gb is not None
    assert not [n for n in log.notes if "capture end line" in n]
