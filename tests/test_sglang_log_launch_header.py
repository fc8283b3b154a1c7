"""A log of several launches: the report's header, its stderr start-up lines and replay-check
follow one rule (`PlanResult.launch_header`, docs/traces.md): the header's deployment fields
describe the last launch (the server as it runs now, as the `server` block, the recommendation
and --emit do), the main table and bucket hits are the launches' total over the union of their
lists (`launch_total` says so, each launch's own list in `launches[]`), and the start-up lines
say which launch they describe. A log of one launch reports as before."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from sglang_log_fixtures import default_buckets
from test_sglang_log_launches import cp1_log, restart_to_cp2_log

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("wide_plain_terminal")


def run(*args, code=0, stdin=None):
    result = runner.invoke(app, list(args), input=stdin)
    assert result.exit_code == code, result.output
    return result.stdout, result.stderr


LAUNCH_TOTAL = {"launches": 2, "header_launch": 2, "header_first_line": 10, "header_buckets": default_buckets(4096), "buckets": "union"}


def test_the_header_describes_the_last_launch_and_says_the_table_is_the_launches_total(tmp_path):
    path = restart_to_cp2_log(tmp_path)  # launch 1: cp 1, 58 buckets 4..8192, chunk 8192; launch 2 (line 10): cp 2, 50 buckets 4..4096, chunk 4096
    out, _ = run("plan", "-t", str(path), "--no-recommend", "-f", "json")
    doc = orjson.loads(out)
    assert doc["launch_total"] == LAUNCH_TOTAL
    assert (doc["cp_size"], doc["align_size"], doc["server"]["chunked_prefill_size"]["value"]) == (2, 4, 4096)  # launch 2's server
    assert [len(one["buckets"]) for one in doc["launches"]] == [58, 50]
    # the main table: both launches' hits over the union of the lists; C(B) the last launch's where it has the bucket (cp 2)
    rows = dict(zip(doc["buckets"], doc["capacity_rows"]))
    assert doc["buckets"] == default_buckets(8192) and (rows[4096], rows[8192]) == (2048, 8192)
    assert sorted(doc["bucket_hits"]) == sorted(str(b) for b in doc["buckets"]) and doc["graph_batches"] == 4
    text = " ".join(run("plan", "-t", str(path), "--no-recommend")[0].split())
    assert "| 2 launches: this table and the bucket hits are their total, over the union of their lists (58 buckets 4..8192) | " \
           "launch 2 (line 10), the server as it runs now: cp_size 2 zigzag, align 4, max_padding_factor 2, 50 buckets 4..4096 | " \
           "SGLang 0.5.23" in text
    assert "cp_size 1 zigzag" not in text and "chunked_prefill_size 4096: log line 10" in text
    assert f"by the log {path} (launch 1, line 1; each launch's total is in the Launches table), total 2.37 GiB" in text  # the capture table's
    piped, _ = run("plan", "-t", "-", "--no-recommend", "-f", "json", stdin=path.read_bytes())
    assert orjson.loads(piped)["launch_total"] == LAUNCH_TOTAL  # standard input equals the file


def test_the_start_up_lines_say_which_launch_they_describe(tmp_path):
    path = restart_to_cp2_log(tmp_path)
    for args in (("plan", "-t", str(path), "--no-recommend"), ("plan", "-t", str(path), "-f", "json"),
                 ("replay-check", "-t", str(path), "--report-only")):
        _, err = run(*args)
        lines = err.splitlines()
        assert lines[0] == "cpbcg: from the log (launch 1, line 1): cp_size 1 (server_args.attn_cp_size, line 2)"
        assert "cpbcg: from the log (launch 1, line 1): scheduler.chunked_prefill_size 8192 (server_args.chunked_prefill_size, line 2)" in lines
        assert not [line for line in lines if line.startswith("cpbcg: from the log:")]  # none unlabelled
        assert f"cpbcg: note: {path}: launch 2 (line 10) is compared under its own settings: cp_size 2 (server_args.attn_cp_size, " \
               "line 10)" in err


def test_a_single_launch_log_reports_as_before(tmp_path):
    path = cp1_log(tmp_path / "a.log", [1, 700, 9000, 3000])
    out, err = run("plan", "-t", str(path), "--no-recommend", "-f", "json")
    assert "launch_total" not in orjson.loads(out) and "(launch" not in err
    assert err.splitlines()[0] == "cpbcg: from the log: cp_size 1 (server_args.attn_cp_size, line 2)"  # first, as they come
    text = " ".join(run("plan", "-t", str(path), "--no-recommend")[0].split())
    assert "| cp_size 1 zigzag, align 1, max_padding_factor 2 | 58 buckets 4..8192 | SGLang 0.5.23" in text and "launches:" not in text
    assert f"by the log {path}, total 2.37 GiB" in text
    out, err = run("replay-check", "-t", str(path), "--report-only", "-f", "json")
    checked = orjson.loads(out)
    assert "launch_total" not in checked and "launches" not in checked and "(launch" not in err


def test_a_refusal_after_the_logs_start_up_lines_is_the_first_line(tmp_path):
    path = restart_to_cp2_log(tmp_path)  # a server log has no extend lengths to replay: refused after its start-up lines
    _, err = run("replay-check", "-t", str(path), "--replay", "1", code=2)
    lines = err.splitlines()
    # one refusal path (issue 43): the notes held for the launch are dropped, the error is what the user reads
    assert lines[0].startswith(f"cpbcg: error: {path}: ") and "nothing to replay through graphs" in lines[0]
    assert not any(line.startswith("cpbcg: from the log:") for line in lines)


def test_replay_check_reports_the_same_header_and_gates_the_launches_total(tmp_path):
    path = restart_to_cp2_log(tmp_path)
    out, _ = run("replay-check", "-t", str(path), "--min-coverage", "0.7", "-f", "json", code=1)
    checked = orjson.loads(out)
    assert checked["launch_total"] == LAUNCH_TOTAL
    assert (checked["cp_size"], checked["server"]["chunked_prefill_size"]["value"]) == (2, 4096)  # launch 2's, as plan's header
    assert [(one["launch"], one["cp_size"], len(one["buckets"]), one["evaluation"]["graph_batches"]) for one in checked["launches"]] == [
        (1, 1, 58, 2), (2, 2, 50, 2)]
    assert (checked["batches"], checked["graph_batches"], checked["passed"]) == (6, 4, False)  # 66.67% < 70% over both launches
    text = " ".join(run("replay-check", "-t", str(path), "--report-only")[0].split())
    assert "2 launches: this table and the bucket hits are their total" in text and "launch 2 (line 10), the server as it runs now: cp_size 2" in text
    assert "Main table by launch" in text and "chunked_prefill_size 4096: log line 10" in text


def test_several_logs_label_the_start_up_lines_of_the_one_with_several_launches(tmp_path):
    restarted, single = restart_to_cp2_log(tmp_path), cp1_log(tmp_path / "a.log", [1, 700, 9000, 3000])
    _, err = run("plan", "-t", str(restarted), "-t", str(single), "--no-recommend")
    assert f"cpbcg: from {restarted} (launch 1, line 1): cp_size 1 (server_args.attn_cp_size, line 2)" in err.splitlines()
    assert f"cpbcg: from {single}: cp_size 1 (server_args.attn_cp_size, line 2)" in err.splitlines()
