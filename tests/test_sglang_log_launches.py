"""SGLang server logs, round two (issue 30): a log is a sequence of launches, each with its own
settings (dump, launch flags, the values the server resolved, capture lines) and forwards; several
logs keep their own settings and comparison; what a log does not state is assumed (and said), what
it shows is inferred; standard input equals the file. Every log here is SYNTHETIC, written from
the format strings of SGLang's scheduler and start-up code (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg import api
from cpbcg.cli import app
from cpbcg.planner.traces import TraceFormat
from cpbcg.assembly.registry import detect_format
from cpbcg.engines.sglang.logs.log import LogReader
from cpbcg.engines.sglang.logs.settings import read_log_settings
from sglang_log_fixtures import (
    default_buckets, old_dump, piecewise_capture, prefill_line, resolved_line, sglang_graph_verdict, startup_lines, write_log,
)

runner = CliRunner()
PINNED = ["--page-size", "1", "--chunked-prefill-size", "8192", "--no-recommend"]


pytestmark = pytest.mark.usefixtures("wide_plain_terminal")


def plan_json(*args, stdin=None):
    result = runner.invoke(app, ["plan", *args, "-f", "json"], input=stdin)
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout), result.stderr


def cp1_log(path, sizes, date="2026-11-02"):
    """A 0.5.23 server at cp 1 (its dump says so); each verdict by SGLang's rule for its captured list."""
    buckets = default_buckets(8192)
    body = startup_lines(cp=1, date=date)
    for i, n in enumerate(sizes):
        body += prefill_line(n, 1, graph=sglang_graph_verdict(n, buckets), prefix=f"[{date} 10:00:{i % 60:02d} TP0] ")
    return write_log(path, body)


def test_several_logs_keep_their_settings_and_their_observed_comparison(tmp_path):
    a = cp1_log(tmp_path / "a.log", [1, 700, 9000, 3000])
    b = cp1_log(tmp_path / "b.log", [2, 5000, 100])
    doc, err = plan_json("-t", str(a), "-t", str(b), *PINNED)
    assert doc["cp_size"] == 1  # both state attn_cp_size 1: planned together at 1, not at the default
    logs = doc["observed"]["logs"]
    assert [one["path"] for one in logs] == [str(a), str(b)]
    assert [one["observed"]["forwards"] for one in logs] == [4, 3]
    assert all(one["observed"]["agreeing"] == one["observed"]["forwards"] for one in logs)
    assert [s["value"] for s in logs[0]["settings"] if s["key"] == "cp_size"] == [1]
    assert f"cpbcg: from {a}: cp_size 1 (server_args.attn_cp_size, line 2)" in err
    text = runner.invoke(app, ["plan", "-t", str(a), "-t", str(b), *PINNED]).stdout
    assert "SGLang logs, each under its own settings" in text and text.count("Observed (cuda graph, printed by the server) vs modelled — ") == 2


def test_logs_that_differ_are_planned_at_the_config_and_each_compared_under_its_own(tmp_path):
    a = cp1_log(tmp_path / "a.log", [1, 700])
    b = write_log(tmp_path / "b.log", startup_lines(cp=2, tp=2) + prefill_line(2048, 1, prefix="[2026-11-02 10:00:00 ATTN_CP0 TP0] "))
    doc, err = plan_json("-t", str(a), "-t", str(b), *PINNED)
    assert "the logs differ on cp_size" in err
    logs = doc["observed"]["logs"]
    assert [[s["value"] for s in one["settings"] if s["key"] == "cp_size"] for one in logs] == [[1], [2]]
    assert logs[0]["observed"]["agreeing"] == 2


def test_a_cp_size_the_log_does_not_state_is_read_from_the_rank_prefixes(tmp_path):
    # no dump, no flags: 0.5.23 prints ATTN_CPn only when attn_cp_size > 1, PPn only when pp_size > 1
    body = "".join(prefill_line(4096, 1, prefix=f"[2026-11-02 10:00:00 ATTN_CP{r} TP{r}] ") for r in range(2))
    head = "".join(f"[2026-11-02 09:59:59 ATTN_CP{r} TP{r}] Load weight begin. avail mem=60.00 GB\n" for r in range(2))
    log = read_log_settings(write_log(tmp_path / "cp2.log", head + body))
    shown = log.setting("cp_size")
    assert (shown.value, shown.line, shown.inferred) == (2, 2, True) and "rank prefixes ATTN_CP0..1" in shown.origin
    plain = read_log_settings(write_log(tmp_path / "cp1.log", "[2026-11-02 09:59:59 TP0] Load weight begin.\n" + prefill_line(1, 1)))
    assert plain.setting("cp_size").value == 1 and "carry no ATTN_CP tag" in plain.setting("cp_size").origin
    untagged = read_log_settings(write_log(tmp_path / "u.log", prefill_line(1, 1, prefix="[2026-04-05 20:02:48] ")))
    assert (untagged.setting("cp_size").value, untagged.setting("cp_size").line) == (1, 2)  # 0.5.23 prints no tag at tp 1, cp 1
    one_rank = read_log_settings(write_log(tmp_path / "r0.log", prefill_line(1, 1, prefix="[2026-11-02 10:00:00 ATTN_CP0 TP0] ")))
    assert one_rank.setting("cp_size") is None  # ATTN_CP is printed only when cp > 1, but one rank does not show the size


def test_a_one_token_graph_forward_is_no_model_error_once_the_prefixes_show_cp_1(tmp_path):
    path = write_log(tmp_path / "one.log", "[2026-11-02 09:59:59 TP0] Load weight begin.\n" + prefill_line(3, 1, graph=True))
    doc, err = plan_json("-t", str(path), *PINNED)
    assert doc["cp_size"] == 1 and doc["observed"]["model_errors"] == 0
    assert "cpbcg: from the log: cp_size 1 (rank prefixes (TP) carry no ATTN_CP tag" in err


def test_releases_before_attention_cp_run_without_cp(tmp_path):
    dump = read_log_settings(write_log(tmp_path / "old.log", old_dump(piecewise=True) + prefill_line(8, 1, prefix="[2025-09-01 10:00:00] ")))
    assert dump.setting("cp_size").value == 1 and "no attn_cp_size" in dump.setting("cp_size").origin
    version = read_log_settings(write_log(tmp_path / "v.log", "[2026-08-01 09:00:00] sglang version: 0.5.3\n" + prefill_line(8, 1, prefix="")))
    assert version.setting("cp_size").value == 1 and "SGLang 0.5.3 predates attention CP" in version.setting("cp_size").origin
    assert version.setting("cp_size").line == 2
    before = read_log_settings(write_log(tmp_path / "b.log", "[2025-03-01 09:00:00] server_args=ServerArgs(model_path='m', tp_size=1, "
                                         "chunked_prefill_size=8192, disable_cuda_graph=False, cuda_graph_max_bs=160)\n"
                                         + prefill_line(8, 1, style="old")))  # 2025-03's wording: no verdict (one would win)
    assert before.prefill_graphs is False and "a release before prefill CUDA graphs" in before.prefill_graphs_origin


def test_settings_the_log_does_not_state_are_assumed_and_an_eager_verdict_they_explain_is_theirs(tmp_path):
    path = write_log(tmp_path / "bare.log", prefill_line(1, 1, graph=True, prefix="") + prefill_line(300, 1, graph=True, prefix=""))
    doc, err = plan_json("-t", str(path), "--no-recommend")
    cp = doc["cp_size"]
    assert cp > 1, "the default deployment runs CP (the assumption this test is about)"
    assert f"cpbcg: assumed: cp_size {cp} (assumed: not in the log; --cp-size sets it)" in err
    obs = doc["observed"]
    assert obs["model_errors"] >= 1 and obs["assumption_errors"] == obs["model_errors"]
    assert obs["model_error_lines"][0]["explanations"][0] == f"the assumed cp_size {cp} (assumed: not in the log; --cp-size sets it)"
    assert [a["key"] for a in obs["launches"][0]["assumed"]][:2] == ["cp_size", "buckets"]


def test_every_forward_eager_without_capture_lines_is_likely_graphs_off(tmp_path):
    body = startup_lines(cp=1, capture=False).replace("'backend': 'breakable', ", "")
    body += "".join(prefill_line(n, 1, graph=False) for n in (100, 200, 400))
    doc, _ = plan_json("-t", str(write_log(tmp_path / "eager.log", body)), "--buckets", "128,256,512", *PINNED)
    obs = doc["observed"]
    assert obs["unexplained_eager"] == 3
    assert list(obs["eager_explanations"])[0] == "prefill graphs likely off (every forward of the launch ran eagerly, no capture line)"


@pytest.mark.parametrize("head_mib", [3])
def test_stdin_gets_the_files_settings_and_late_detection(tmp_path, head_mib):
    startup = startup_lines(cp=1)
    filler = "".join(f"[2026-11-02 09:59:59 TP0] Load weight progress {i:09d} {'x' * 80}\n" for i in range(head_mib * 11000))
    body = startup + filler + "".join(prefill_line(n, 1, graph=sglang_graph_verdict(n, default_buckets(8192))) for n in (1, 700, 9000))
    path = write_log(tmp_path / "late.log", body)
    assert path.stat().st_size > 2 << 20 and body.index("Prefill batch") > 2 << 20
    from_file, file_err = plan_json("-t", str(path), *PINNED)
    from_stdin, stdin_err = plan_json("-t", "-", *PINNED, stdin=path.read_bytes())
    assert from_stdin["cp_size"] == from_file["cp_size"] == 1
    assert from_stdin["observed"]["forwards"] == from_file["observed"]["forwards"] == 3
    assert from_stdin["observed"]["agreeing"] == from_file["observed"]["agreeing"] == 3
    assert [s for s in from_stdin["observed"]["log"]["settings"]] == [s for s in from_file["observed"]["log"]["settings"]]
    assert "cpbcg: from the log: cp_size 1 (server_args.attn_cp_size, line 2)" in stdin_err


def two_launches(tmp_path):
    """A restart: launch 1 at cp 1 (`[TP0]`), launch 2 at cp 2 (`[ATTN_CPn TP0]`), each with its capture."""
    first = startup_lines(cp=1) + "".join(prefill_line(n, 1, prefix=f"[2026-11-02 10:00:0{i} TP0] ") for i, n in enumerate((100, 200, 300)))
    second = startup_lines(cp=2, tp=2, date="2026-11-03").replace("mem usage=2.37 GB", "mem usage=0.77 GB")
    for i, n in enumerate((4096, 8192)):
        second += "".join(prefill_line(n, 1, prefix=f"[2026-11-03 10:00:0{i} ATTN_CP{r} TP{r}] ") for r in range(2))
    return write_log(tmp_path / "restart.log", first + second)


def test_a_log_of_two_launches_gives_both_launches_forwards_and_settings(tmp_path):
    path = two_launches(tmp_path)
    reader = LogReader(path)
    chunks = list(reader)
    assert [c.launch for c in chunks] == [1, 2] and [c.num_tokens.tolist() for c in chunks] == [[100, 200, 300], [4096, 8192]]
    assert reader.summary.launches == 2 and reader.summary.forwards == 5 and reader.summary.folded_copies == 2
    first, second = reader.launches()
    assert (first.setting("cp_size").value, second.setting("cp_size").value) == (1, 2)
    assert second.first_line == 10 and second.setting("cp_size").line == 10
    assert (first.capture.total_gb, second.capture.total_gb) == (2.37, 0.77)
    doc, err = plan_json("-t", str(path), *PINNED)
    launches = doc["observed"]["launches"]
    assert [(x["launch"], x["first_line"], x["forwards"]) for x in launches] == [(1, 1, 3), (2, 10, 2)]
    assert doc["observed"]["forwards"] == 5
    assert f"{path}: 2 launches (restarts); forwards per launch 3, 2" in err
    assert f"{path}: launch 2 (line 10) is compared under its own settings: cp_size 2 (server_args.attn_cp_size, line 10)" in err


def test_the_values_the_server_resolved_win_over_the_dump(tmp_path):
    body = startup_lines(cp=1, chunk=8192)
    body += "[2026-11-02 09:59:01] Automatically turn off --chunked-prefill-size as it is not supported for qwen2_vl\n"
    body += resolved_line(chunk=-1, max_prefill=12000, max_running=48) + prefill_line(12895, 1, graph=False)
    log = read_log_settings(write_log(tmp_path / "res.log", body))
    chunk = log.setting("scheduler.chunked_prefill_size")
    assert (chunk.value, chunk.line) == (-1, 7) and chunk.origin == "resolved by the server, line 7"
    assert log.setting("scheduler.max_prefill_tokens").value == 12000 and log.setting("scheduler.max_running_requests").value == 48
    assert log.resolved["max_total_num_tokens"] == (500000, 8) and log.resolved["context_len"] == (32768, 8)
    assert log.server_args["chunked_prefill_size"] == 8192  # the dump keeps what was asked
    assert log.sglang_flags()["chunked_prefill_size"] == (8192, 2) and log.sglang_flags()["attn_cp_size"] == (1, 2)


def test_json_records_each_settings_source_line_and_the_logs_version(tmp_path):
    body = "[2026-08-01 09:00:00] sglang version: 0.5.19\n" + startup_lines(cp=1, date="2026-08-01") + prefill_line(100, 1)
    doc, err = plan_json("-t", str(write_log(tmp_path / "v.log", body)), *PINNED)
    log = doc["observed"]["log"]
    assert log["sglang_version"] == "0.5.19" and log["version_line"] == 2
    assert {s["key"]: s["line"] for s in log["settings"]}["cp_size"] == 3
    assert "cpbcg: note: the log's SGLang version is 0.5.19 (line 2); cpbcg models 0.5.23" in err


def test_replay_token_and_waiting_image_req_of_0_5_23_are_read(tmp_path):
    line = ("[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 1000, #cached-token: 600, token usage: 0.10, "
            "#running-req: 0, #queue-req: 0, #pending-token: 0, #replay-token: 256, waiting-image-req: 3, cuda graph: True, "
            "input throughput (token/s): 1.00\n")
    chunk = next(iter(LogReader(write_log(tmp_path / "r.log", line))))
    assert (chunk.num_tokens.tolist(), chunk.cached_tokens.tolist(), chunk.graph.tolist()) == ([1256], [344], [1])


def test_a_piecewise_list_is_not_deployed_when_piecewise_graphs_were_off(tmp_path):
    body = old_dump(piecewise=False) + "".join(prefill_line(n, 1, graph=False, prefix="[2025-09-01 10:00:00] ") for n in (100, 2000))
    path = write_log(tmp_path / "pw.log", body)
    log = read_log_settings(path)
    assert log.prefill_graphs is False and log.setting("buckets") is None and "was not deployed" in log.notes[0]
    doc, _ = plan_json("-t", str(path), *PINNED)
    obs = doc["observed"]
    assert obs["model_coverage"] == 0.0 and obs["agreeing"] == 2


def test_disable_cuda_graph_with_piecewise_graphs_captured_keeps_prefill_graphs_on(tmp_path):
    buckets = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    body = old_dump(piecewise=True, disable_cuda_graph=True) + piecewise_capture(buckets)
    body += "".join(prefill_line(n, 1, graph=True, prefix="[2025-09-01 10:00:00] ") for n in (100, 2000))
    log = read_log_settings(write_log(tmp_path / "dcg.log", body))
    assert log.prefill_graphs is True and log.prefill_graphs_origin == "capture lines, line 3"
    assert log.setting("buckets").value == buckets
    assert (log.capture.total_gb, log.capture.total_line) == (0.77, 5)
    assert (log.capture.backend, log.capture.list_line) == ("piecewise", 3)
    # the piecewise runner's capture is another backend's: the breakable graphs planned keep the estimate
    doc, _ = plan_json("-t", str(write_log(tmp_path / "dcg.log", body)), *PINNED[:-1], "--validate-fraction", "0")
    estimate = doc["recommendation"]["capture_estimate"]
    assert estimate["measured"] is False and estimate["source"].startswith("estimate for ") and "calibrated" not in estimate["source"]


def test_pd_decode_request_lines_are_no_prefill_demand(tmp_path):
    stats = ("[2026-11-02 10:00:05 TP0] ReqTimeStats(rid={rid}, input_len=3000, cached_input_len=0, output_len=20, attempts=1, "
             "type={kind}): queue_duration=1.00ms, forward_duration=900.00ms, entry_time=179300000{i}.500\n")
    body = "".join(stats.format(rid=f"r{i}", kind="decode" if i % 2 else "unified", i=i) for i in range(4))
    path = write_log(tmp_path / "pd.log", body)
    from cpbcg.assembly.registry import read_requests

    assert [c.input_tokens.tolist() for c in read_requests(path)] == [[3000, 3000]]
    result = runner.invoke(app, ["plan", "-t", str(path), *PINNED])
    assert result.exit_code == 0, result.output
    assert "skipped 2 ReqTimeStats lines of type=decode (first: line 3)" in result.stderr


def test_a_file_with_request_lines_and_verdicts_says_how_to_compare_them(tmp_path):
    body = ("[2026-11-02 10:00:05 TP0] ReqTimeStats(rid=a, input_len=512, cached_input_len=0, output_len=7, attempts=1, type=unified): "
            "queue_duration=1.00ms, forward_duration=100.00ms, entry_time=1793000000.500\n") + prefill_line(512, 1)
    path = write_log(tmp_path / "both.log", body)
    assert detect_format(path) is TraceFormat.sglang_requests
    result = runner.invoke(app, ["plan", "-t", str(path), *PINNED])
    assert result.exit_code == 0, result.output
    assert "also has 1 Prefill batch lines with the server's graph verdicts" in result.stderr
    assert "--trace-format sglang-log compares the verdicts" in result.stderr


def test_npu_and_pipeline_parallel_logs_get_their_own_reason(tmp_path):
    npu = write_log(tmp_path / "npu.log", startup_lines(cp=1) + prefill_line(2048, 1, graph=False, label="npu graph"))
    doc, _ = plan_json("-t", str(npu), *PINNED)
    assert list(doc["observed"]["eager_explanations"])[0].startswith("an NPU server (npu graph)")
    body = "".join(prefill_line(2048, 1, graph=False, prefix=f"[2026-11-02 10:00:00 PP{p} TP0] ") for p in range(4))
    pp = write_log(tmp_path / "pp.log", startup_lines(cp=1, pp=4, capture=False) + body)
    doc, _ = plan_json("-t", str(pp), "--buckets", "2048", *PINNED)
    assert doc["observed"]["forwards"] == 1
    assert any(k.startswith("pipeline parallelism (pp_size 4)") for k in doc["observed"]["eager_explanations"])


def test_the_capture_estimate_is_the_logs_own_measured_total(tmp_path):
    path = cp1_log(tmp_path / "cap.log", [1, 700, 9000, 3000] * 10)
    doc, _ = plan_json("-t", str(path), "--page-size", "1", "--chunked-prefill-size", "8192", "--validate-fraction", "0",
                       "--include", ",".join(map(str, default_buckets(8192))))
    estimate = doc["recommendation"]["capture_estimate"]
    assert estimate["graph_mib"] == pytest.approx(2.37 * 1024)
    assert estimate["source"] == (f"calibrated from {path}:6 (breakable graphs, 2026-11-02: 58 buckets in 31.5 s, 2.37 GB in all, "
                                  "as the log printed them; every other count scaled from it)")


def test_the_line_parser_is_incremental_for_a_followed_log():
    from cpbcg.engines.sglang.logs.log import LogParser, parse_log_lines

    parser = LogParser()
    first = list(parse_log_lines([startup_lines(cp=1).splitlines()[0].encode(), prefill_line(100, 1).encode()], parser))
    assert [(e.kind, e.launch, e.line_no) for e in first] == [("forward", 1, 2)]
    later = list(parse_log_lines([startup_lines(cp=2, tp=2).splitlines()[0].encode(),
                                  prefill_line(200, 1, prefix="[2026-11-02 10:00:01 TP0] ").encode()], parser, first_line=3))
    assert [(e.kind, e.launch, e.line_no) for e in later] == [("launch", 2, 3), ("forward", 2, 4)]
    assert parser.scan.launch(2).setting("cp_size").value == 2


def test_a_cp_size_shown_only_by_the_forwards_rank_prefixes_is_planned_at(tmp_path):
    # no dump, no start-up lines: the first forward prints on ATTN_CP0, its copies on ATTN_CP1..7 follow
    body = "".join(prefill_line(4096 * (i % 3 + 1), 1, prefix=f"[2026-11-02 10:00:00 ATTN_CP{r} TP{r}] ") for i in range(20) for r in range(8))
    path = write_log(tmp_path / "cp8.log", body)
    shown = read_log_settings(path).setting("cp_size")
    assert (shown.value, shown.line, shown.inferred) == (8, 2, True) and "rank prefixes ATTN_CP0..7" in shown.origin
    doc, err = plan_json("-t", str(path), *PINNED)
    assert doc["cp_size"] == 8
    assert "cpbcg: from the log: cp_size 8 (rank prefixes ATTN_CP0..7, line 2)" in err and "assumed: cp_size" not in err


def test_a_page_size_the_dump_states_as_none_is_the_resolved_servers_not_assumed(tmp_path):
    body = "".join(prefill_line(2048, 1, prefix="[2026-11-02 10:00:00 ATTN_CP0 TP0] ") for _ in range(5))
    path = write_log(tmp_path / "none.log", startup_lines(cp=2, tp=2, page="None") + body)
    _, err = plan_json("-t", str(path), "--chunked-prefill-size", "8192", "--no-recommend", "--gpu", "B200")  # the log shows 75 GiB: H100
    assert "assumed: scheduler.page_size" not in err
    assert "cpbcg: from the log: scheduler.page_size 64 (resolved by 0.5.23 from the log's settings: " in err
    _, err = plan_json("-t", str(path), "--chunked-prefill-size", "8192", "--no-recommend")
    assert "cpbcg: from the log: scheduler.page_size 1 (resolved by 0.5.23 from the log's settings: " in err  # H100, inferred: fa3


def restart_to_cp2_log(tmp_path):
    """Launch 1 at cp 1 (58 buckets up to 8192, chunk 8192), then a restart at cp 2 with 50 buckets up to 4096 and a 4096 chunk
    (line 10); each verdict by SGLang's rule for its own launch's list."""
    first, second = default_buckets(8192), default_buckets(4096)
    body = startup_lines(cp=1)
    body += "".join(prefill_line(n, 1, graph=sglang_graph_verdict(n, first), prefix=f"[2026-11-02 10:00:0{i} TP0] ")
                    for i, n in enumerate((100, 6000, 9000)))
    body += startup_lines(cp=2, tp=2, max_bs=4096, chunk=4096, date="2026-11-03")
    for i, n in enumerate((6000, 3000, 200)):
        body += "".join(prefill_line(n, 1, graph=sglang_graph_verdict(n, second), prefix=f"[2026-11-03 10:00:0{i} ATTN_CP{r} TP{r}] ")
                        for r in range(2))
    return write_log(tmp_path / "restart-cp2.log", body)


def test_the_main_table_models_each_launch_under_its_own_server_and_recommends_for_the_last(tmp_path):
    path = restart_to_cp2_log(tmp_path)
    doc, err = plan_json("-t", str(path), "--no-recommend")
    # launch 1 (cp 1, up to 8192): 100 and 6000 in graphs, 9000 above the list; launch 2 (cp 2, up to 4096): 6000 above its list,
    # 3000 (1,500 rows per rank, C(3072) = 1,536) and 200 in graphs. Launch 1's list for all gave 5 of 6.
    assert [(one["launch"], one["first_line"], one["cp_size"], one["chunked_prefill_size"], len(one["buckets"]), max(one["buckets"]),
             one["evaluation"]["batches"], one["evaluation"]["graph_batches"]) for one in doc["launches"]] == [
        (1, 1, 1, 8192, 58, 8192, 3, 2), (2, 10, 2, 4096, 50, 4096, 3, 2)]
    assert (doc["batches"], doc["graph_batches"], doc["eager"]["above_largest_bucket"]) == (6, 4, 2)
    assert doc["graph_batches"] == sum(r["model_graph_forwards"] for r in doc["observed"]["ranks"]) == doc["observed"]["graph_forwards"]
    assert doc["cp_size"] == 2 and doc["server"]["chunked_prefill_size"]["value"] == 4096  # the header: the server as it runs now
    piped, _ = plan_json("-t", "-", "--no-recommend", stdin=path.read_bytes())  # bytes: the capture line's \r kept
    assert (piped["launches"], piped["graph_batches"], piped["cp_size"]) == (doc["launches"], 4, 2)  # standard input equals the file
    assert f"{path}: the main table models each of its 2 launches under the server it resolved to, totalled: launch 1 (line 1): " \
           "2 of 3 forwards in graphs under cp 1, 58 buckets 4..8192, chunk 8192; launch 2 (line 10): 2 of 3 forwards in graphs " \
           "under cp 2, 50 buckets 4..4096, chunk 4096" in err
    text = " ".join(runner.invoke(app, ["plan", "-t", str(path), "--no-recommend"]).stdout.split())
    assert "Main table by launch" in text and "│ 2 │ 10 │ 2 │ 4096 │ 50: 4..4096 │ 3 │ 2 (66.67%) │" in text
    # the recommendation: for launch 2's server (cp 2, chunk 4096), fitted on its 3 forwards only
    doc, err = plan_json("-t", str(path), "--validate-fraction", "0")
    rec = doc["recommendation"]
    assert [one["fitted"] for one in doc["launches"]] == [False, True]
    assert rec["configured_evaluation"]["batches"] == 3 and rec["configured_evaluation"]["buckets"] == default_buckets(4096)
    assert all(b % 2 == 0 for b in rec["buckets"]) and any(b % 4 for b in rec["buckets"])  # on launch 2's cp-2 grid, not cp 1's
    assert ":6 " not in rec["capture_estimate"]["source"] and ":14 (breakable graphs, 2026-11-03: 50 buckets" in rec["capture_estimate"]["source"]  # launch 2's capture
    assert "the recommendation is for the server as it runs now, launch 2 (line 10), fitted on its 3 forwards only" in err
    # replay-check gates the same per-launch total
    result = runner.invoke(app, ["replay-check", "-t", str(path), "--min-coverage", "0.7", "--format", "json"])
    checked = orjson.loads(result.stdout)
    assert result.exit_code == 1 and (checked["batches"], checked["graph_batches"], checked["passed"]) == (6, 4, False)  # 66.67% < 70%


def test_a_single_launch_log_has_no_launch_rows_in_the_main_table(tmp_path):
    path = cp1_log(tmp_path / "a.log", [1, 700, 9000, 3000])
    doc, err = plan_json("-t", str(path), *PINNED)
    assert "launches" not in doc and "the main table models each" not in err and doc["graph_batches"] == 2  # 700, 3000; 1 pads 4x, 9000 above


def test_malformed_start_up_lines_are_skipped_counted_and_said_with_their_line(tmp_path):
    body = startup_lines().replace("'chunked_prefill_size': 8192", "'chunked_prefill_size': nan").replace("num_tokens=[4, 8,", "num_tokens=[0, -16,")
    body += resolved_line().replace("chunked_prefill_size=8192", "chunked_prefill_size=nan") + prefill_line(100, 1)
    cut = startup_lines(max_bs=4096, date="2026-11-03").split("\n")
    body += cut[0][:120] + "\n" + "\n".join(cut[1:]) + prefill_line(200, 1, prefix="[2026-11-03 10:00:00 TP0] ")
    path = write_log(tmp_path / "bad.log", body)
    doc, err = plan_json("-t", str(path), *PINNED)
    # launch 1: the dump's nan chunk (line 2), the capture line's [0, -16, ...] (line 4), the resolved line's nan (line 7)
    assert (f"cpbcg: note: 3 unreadable start-up entries skipped (each setting taken as not printed): {path}:2: server_args."
            f"chunked_prefill_size nan is not a positive integer; {path}:4: a capture line listing num_tokens=[0, -16, 12, 16, 20, 24, "
            f"28, 32, 48, 64, ...]: a bucket is a positive token count, so the list is not read from it; {path}:7: the resolved value "
            "chunked_prefill_size=nan is not an integer") in err
    # the refused capture line is named as no source: the list falls back to the dump's max_bs, graphs on from the progress line 5
    one = doc["observed"]["launches"][0]
    assert [(s["value"], s["line"]) for s in one["settings"] if s["key"] == "buckets"] == [("sglang-default:8192", 2)]
    assert one["prefill_graphs_source"] == "capture lines, line 5"
    assert [u["line"] for u in one["unreadable"]] == [2, 4, 7]
    # launch 2 (line 9): a dump cut at 120 characters, said for that launch
    assert doc["observed"]["launches"][1]["first_line"] == 9 and [u["line"] for u in doc["observed"]["launches"][1]["unreadable"]] == [9]
    assert (f"cpbcg: note: launch 2: 1 unreadable start-up entry skipped (each setting taken as not printed): {path}:9: a settings dump "
            "`server_args={'model_path': 'org/model', 't...` that cannot be read: its brackets never close (a cut or wrapped line)") in err


def test_a_log_before_attention_cp_is_resolved_at_cp_1_and_its_graphs_off_are_said(tmp_path):
    # (line 2: write_log heads the file with a SYNTHETIC line) a 2025 dump with no attn_cp_size runs cp 1: no CP flags are emitted, so the attention backend is 0.5.23's
    # default for the GPU, not "the deployment's CP flags"; its disable_cuda_graph=True is said next to the list
    body = old_dump(disable_cuda_graph=True) + "".join(prefill_line(n, 1, graph=None, style="old", prefix="[2025-09-01 10:00:00] ")
                                                       for n in (100, 200, 400, 800))
    doc, err = plan_json("-t", str(write_log(tmp_path / "old.log", body)))
    assert doc["cp_size"] == 1
    backend = doc["server"]["prefill_attention_backend"]
    assert backend == {"value": "trtllm_mha", "source": "GPU default", "rule": "MHA on B200 (0.5.23 get_default_attn_backend)"}
    assert "CP flags" not in orjson.dumps(doc["server"]).decode()
    assert doc["server"]["prefill_graph_backend"] == {"value": "disabled", "source": "log line 2", "rule": "--disable-cuda-graph"}
    assert "--enable-prefill-cp" not in doc["recommendation"]["deploy"]
    off = [n for n in doc["recommendation"]["notes"] if n.startswith("graphs off")]
    assert off == ["graphs off: the server runs with prefill CUDA graphs disabled (--disable-cuda-graph, log line 2): the recommended "
                   "list and the flags --emit sglang writes only help a server with them on (the flags do not turn them on); "
                   "drop --disable-cuda-graph from the launch"]
    assert "cpbcg: note: graphs off:" in err
    on, _ = plan_json("-t", str(write_log(tmp_path / "on.log", body.replace("disable_cuda_graph=True", "disable_cuda_graph=False"))))
    assert not [n for n in on["recommendation"]["notes"] if n.startswith("graphs off")]
