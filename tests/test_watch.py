"""`cpbcg watch` with real parts: a writer process appending log lines at a rate, rotation and
truncation on real files, standard input, a real HTTP scrape of the exporter and a stub SGLang
metrics endpoint on 127.0.0.1 (ephemeral ports). Every loop is bounded in count and time."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from cpbcg import api
from cpbcg.commands.watch import watch_options
from cpbcg.watching.options import WatchOptions
from cpbcg.cli import app
from cpbcg.engines.sglang.logs.log import LogReader
from cpbcg.assembly.window import ForwardRing, concat, forwards_of, size_histogram, take, total_variation
from cpbcg.watching.follow import FileFollower, StreamFollower
from cpbcg.engines.sglang.metrics import parse_metrics
from sglang_log_fixtures import default_buckets, prefill_line, startup_lines, write_log

ROOT = Path(__file__).resolve().parents[1]
WRITER = ROOT / "tests" / "watch_writer.py"
PINNED = ["--page-size", "1", "--chunked-prefill-size", "8192"]
"""Settings the synthetic logs state too (pinned: the defaults move with issue 29)."""
OVERRIDES = {"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192}
LIMIT_S = 60.0
"""No test waits longer than this for a writer (every session also has a --duration cap)."""
runner = CliRunner()


POD = "sglang-0"
"""The replica every test runs as ($POD_NAME): the `instance` label."""


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    monkeypatch.setenv("CPBCG_WIDTH", "200")
    monkeypatch.setenv("POD_NAME", POD)


def writer(path: Path, forwards: int, rate: float = 2000.0, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WRITER), str(path), "--forwards", str(forwards), "--rate", str(rate), *extra])


def options(**kw) -> WatchOptions:
    return watch_options(**{"interval_s": 0.2, "recommend_every_s": 0.0, "duration_s": LIMIT_S, "poll_s": 0.02, **kw})


def plan_json(path: Path) -> dict:
    result = runner.invoke(app, ["plan", "--trace", str(path), "--format", "json", "--no-recommend", *PINNED])
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)


def lines_log(tmp_path: Path, graphs: list[bool], name: str = "server.log", sizes: list[int] | None = None, **startup) -> Path:
    sizes = sizes or [1000 + 7 * i for i in range(len(graphs))]
    return write_log(tmp_path / name, startup_lines(**startup) + "".join(prefill_line(n, 2, graph=g) for n, g in zip(sizes, graphs)))


# -- following files and streams -------------------------------------------------------------


def test_a_file_followed_through_rotation_and_truncation(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("a\nb\npart")
    f = FileFollower(str(path))
    assert f.poll() == [(1, b"a\nb\n")]  # the partial line waits for its newline
    with open(path, "a") as h:
        h.write("ial\nc\n")
    assert f.poll() == [(3, b"partial\nc\n")]
    # logrotate (create): the old file gains a last line after the rename; the new file starts over at line 1
    os.replace(path, tmp_path / "server.log.1")
    with open(tmp_path / "server.log.1", "a") as h:
        h.write("d\n")
    assert f.poll() == [(5, b"d\n")]
    path.write_text("e\nf\n")
    got = f.poll() + f.poll()
    assert got == [(1, b"e\nf\n")] and f.rotations == 1
    # copytruncate: the file shrinks under the reader, which starts it again
    with open(path, "r+") as h:
        h.truncate(0)
    path.write_text("g\n")
    assert f.poll() == [(1, b"g\n")] and f.truncations == 1
    assert f.poll() == []
    f.close()


def test_a_missing_file_is_waited_for(tmp_path):
    path = tmp_path / "later.log"
    f = FileFollower(str(path))
    assert f.poll() == []
    path.write_text("x\n")
    assert f.poll() == [(1, b"x\n")]
    f.close()


def test_a_stream_ends_at_its_end_with_its_partial_last_line():
    read, write = os.pipe()
    os.write(write, b"one\ntw")
    stream = StreamFollower(os.fdopen(read, "rb"), "<pipe>")
    assert stream.poll(timeout=1.0) == [(1, b"one\n")]
    os.write(write, b"o")
    os.close(write)
    got: list = []
    for _ in range(50):  # bounded: the end arrives within a few polls
        got += stream.poll(timeout=0.1)
        if stream.eof:
            break
    assert got == [(2, b"two")] and stream.eof


# -- the pure parts ------------------------------------------------------------------------------


def test_the_ring_holds_the_last_forwards_only():
    ring = ForwardRing(1000)
    reader = LogReader(str(ROOT / "tests" / "assets" / "traces" / "sglang-server.log"))
    chunk = next(iter(reader))
    for i in range(300):  # 1,200 forwards into a ring of 1,000
        ring.add(chunk, float(i))
    assert len(ring) == 1000 and ring.total == 300 * chunk.num_forwards
    [last] = ring.last(6)
    assert last.num_tokens.tolist() == (chunk.num_tokens.tolist() * 2)[-6:]
    assert forwards_of(ring.since(299.0)) == chunk.num_forwards
    assert forwards_of(ring.since(0.0)) == 1000  # the ring bounds the time window too
    assert take(chunk, slice(1, 3)).num_requests.tolist() == chunk.num_requests[1:3].tolist()


def test_drift_is_the_total_variation_distance_over_the_buckets():
    buckets = [4, 8, 16]
    a = size_histogram(np.array([1, 5, 9, 17]), np.ones(4), buckets)
    assert a.tolist() == [1.0, 1.0, 1.0, 1.0]  # (0,4], (4,8], (8,16], above 16
    assert total_variation(a, a) == 0.0
    assert total_variation(size_histogram(np.array([1, 2]), np.ones(2), buckets), size_histogram(np.array([20]), np.ones(1), buckets)) == 1.0
    assert total_variation(a, size_histogram(np.array([3]), np.ones(1), buckets)) == pytest.approx(0.75)
    assert total_variation(a, np.zeros(4)) is None


# -- whole runs ----------------------------------------------------------------------------------


def test_a_growing_log_gives_the_totals_plan_gives_on_the_finished_file(tmp_path):
    path = tmp_path / "server.log"
    proc = writer(path, 3000, 3000.0, "--seed", "7")
    try:
        report = api.watch([str(path)], None, OVERRIDES, options(max_forwards=3000, window_forwards=500))
    finally:
        proc.wait(timeout=LIMIT_S)
    assert report.stopped_by == "max-forwards"
    server = report.snapshot.servers[0]
    planned = plan_json(path)
    ev = server.evaluation
    assert ev is not None and ev.batches == planned["batches"] == 3000
    for key in ("graph_batches", "tokens", "graph_tokens", "padded_tokens", "eager"):
        assert getattr(ev, key) == planned[key], key
    assert server.observed is not None
    assert (server.observed.forwards, server.observed.graph_forwards, server.observed.unexplained_eager) == (
        planned["observed"]["forwards"], planned["observed"]["graph_forwards"], planned["observed"]["unexplained_eager"])
    assert 0 < server.observed.graph_forwards < 3000
    window = server.windows["forwards"]["all"]
    assert window.forwards == 500 and window.last_line == 6 + 3000  # header, 5 start-up lines, 3,000 forwards


def test_a_server_restarted_into_its_log_is_judged_per_launch_with_the_totals_plan_gives(tmp_path):
    # 1,500 forwards under 58 buckets up to 8192, then a restart into the same file (a second launch: 50 buckets up to
    # 4096), 1,500 more whose verdicts follow the new list; a forwards window of 1,000 spans the restart at the end
    path = tmp_path / "server.log"
    proc = writer(path, 3000, 3000.0, "--seed", "11", "--restart-at", "1500")
    scraped: list[dict] = []
    notes: list[str] = []

    def on_snapshot(snap):
        if snap.final:
            scraped.append(scrape(next(n for n in notes if "serving metrics at" in n).rsplit(" ", 1)[1]))

    try:
        report = api.watch([str(path)], None, OVERRIDES, options(max_forwards=3000, window_forwards=2000), serve_metrics="127.0.0.1:0",
                           on_snapshot=on_snapshot, note=notes.append)
    finally:
        proc.wait(timeout=LIMIT_S)
    server = report.snapshot.servers[0]
    planned = plan_json(path)
    launch2_line = 1 + 5 + 1500 + 1  # header, launch 1's 5 start-up lines, 1,500 forwards; launch 2's dump
    # per launch: the forwards, each launch's own list, and plan's per-launch comparison (plan models each launch under its own settings)
    assert [(v.launch, v.first_line, v.forwards, len(v.buckets), max(v.buckets)) for v in server.launches] == [
        (1, 1, 1500, 58, 8192), (2, launch2_line, 1500, 50, 4096)]
    assert server.launch == 2 and server.buckets == server.launches[1].buckets
    for view, theirs in zip(server.launches, planned["observed"]["launches"], strict=True):
        assert view.evaluation.graph_batches == theirs["ranks"][0]["model_graph_forwards"]
        assert view.evaluation.batches == theirs["forwards"] == 1500
    assert server.launches[0].evaluation.graph_batches != server.launches[1].evaluation.graph_batches
    # the run: plan's forwards and tokens; modelled in graphs = plan's main table, which models each launch under its own list too
    ev, ob = server.evaluation, server.observed
    assert (ev.batches, ev.tokens) == (planned["batches"], planned["tokens"]) == (3000, planned["observed"]["ranks"][0]["tokens"])
    assert ev.graph_batches == planned["observed"]["ranks"][0]["model_graph_forwards"] == planned["graph_batches"]
    assert [one["evaluation"]["graph_batches"] for one in planned["launches"]] == [v.evaluation.graph_batches for v in server.launches]
    assert (ob.forwards, ob.graph_forwards, ob.unexplained_eager, ob.model_errors, ob.agreeing) == (
        planned["observed"]["forwards"], planned["observed"]["graph_forwards"], planned["observed"]["unexplained_eager"],
        planned["observed"]["model_errors"], planned["observed"]["agreeing"]) == (3000, ob.graph_forwards, 0, 0, 3000)
    # the window spanning the restart: each launch's forwards under its own list, so the model agrees with every verdict
    window = server.windows["forwards"]["all"]
    assert (window.forwards, window.launches, window.first_line, window.last_line) == (2000, (1, 2), 6 + 1001, launch2_line + 5 + 1500 - 1)
    assert window.observed.agreeing == 2000 and window.evaluation.graph_batches == window.observed.graph_forwards
    # JSON says the launch, its settings with their lines, and nothing assumed (the log states them all)
    doc = orjson.loads(orjson.dumps(report.to_dict(), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS))["servers"][0]
    assert (doc["launch"], [v["launch"] for v in doc["launches"]], doc["assumed"]) == (2, [1, 2], [])
    assert next(s for s in doc["launches"][1]["settings"] if s["key"] == "buckets")["source"] == f"capture lines, line {launch2_line + 2}"
    assert any(f"launch 2 (a restart at line {launch2_line})" in n for n in notes)
    assert f"{path}: 2 launches (restarts); forwards per launch 1,500, 1,500" in " ".join(report.notes)
    # the exporter's counters run on across the restart
    got = scraped[0]
    s = (("dp_rank", "0"), ("instance", POD), ("server", str(path)))
    assert got[("cpbcg_prefill_forwards_total", s)] == 3000
    assert got[("cpbcg_prefill_model_graph_forwards_total", s)] == ev.graph_batches
    assert got[("cpbcg_prefill_graph_forwards_total", s)] == ob.graph_forwards


def test_a_first_launch_without_forwards_leaves_the_second_to_judge(tmp_path):
    # launch 1 started and restarted before serving (no forward); an empty time window is judged under launch 2's list
    log = write_log(tmp_path / "crash.log", startup_lines() + startup_lines(max_bs=4096) + "".join(prefill_line(100 + i, 1) for i in range(3)))
    report = api.watch([str(log)], None, OVERRIDES, options(max_forwards=3, window_seconds=1e-6))
    server = report.snapshot.servers[0]
    assert (server.launch, [v.launch for v in server.launches], server.forwards, max(server.buckets)) == (2, [2], 3, 4096)
    assert server.windows["time"]["all"].forwards == 0 and server.windows["forwards"]["all"].launches == (2,)


def test_the_ring_keeps_each_forwards_launch_across_a_restart():
    reader = LogReader(str(ROOT / "tests" / "assets" / "traces" / "sglang-server.log"))
    chunk = next(iter(reader))  # 4 forwards of launch 1
    second = take(chunk, slice(0, 3))
    second = type(second)(**{**second.__dict__, "launch": 2})
    assert take(second, slice(1, 2)).launch == 2  # take keeps the launch
    ring = ForwardRing(6)
    ring.add(chunk, 0.0)
    ring.add(second, 1.0)  # 7 forwards into 6: the oldest falls out
    window = ring.last(6)
    assert [(c.launch, c.num_forwards) for c in window] == [(1, 3), (2, 3)]
    assert window[0].num_tokens.tolist() == chunk.num_tokens[1:].tolist() and window[1].num_tokens.tolist() == second.num_tokens.tolist()
    assert [(c.launch, c.num_forwards) for c in ring.since(1.0)] == [(2, 3)]
    assert [(c.launch, c.num_forwards) for c in ring.last(2)] == [(2, 2)]
    assert concat(window[:1] * 2).num_forwards == 6 and concat(window[:1]).launch == 1
    with pytest.raises(ValueError, match="a chunk holds one launch"):
        concat(window)


def test_a_rotated_log_is_followed_across_the_rotation(tmp_path):
    path = tmp_path / "server.log"
    proc = writer(path, 1000, 2000.0, "--rotate-at", "400")
    try:
        report = api.watch([str(path)], None, OVERRIDES, options(max_forwards=1000))
    finally:
        proc.wait(timeout=LIMIT_S)
    server = report.snapshot.servers[0]
    assert (server.forwards, server.rotations) == (1000, 1)
    assert (tmp_path / "server.log.1").read_text().count("Prefill batch") == 400


def test_a_copytruncated_log_loses_no_forward_against_plan_on_what_was_written(tmp_path):
    # logrotate's copytruncate halfway through a writer at 4,000 forwards/s: the lines written since the
    # last read are read from the copy, so watch gives plan's numbers on everything written
    path = tmp_path / "server.log"
    proc = writer(path, 4000, 4000.0, "--seed", "11", "--copytruncate-at", "2000")
    notes: list[str] = []
    try:
        report = api.watch([str(path)], None, OVERRIDES, options(max_forwards=4000, window_forwards=500), note=notes.append)
    finally:
        proc.wait(timeout=LIMIT_S)
    written = tmp_path / "written.log"
    written.write_bytes((tmp_path / "server.log.1").read_bytes() + path.read_bytes())
    planned = plan_json(written)
    server = report.snapshot.servers[0]
    assert (server.forwards, server.evaluation.graph_batches, server.observed.graph_forwards) == (
        planned["batches"], planned["graph_batches"], planned["observed"]["graph_forwards"]) and planned["batches"] == 4000
    assert server.truncations == 1 and any("truncated in place" in n for n in notes)


def test_standard_input_is_read_to_its_end(tmp_path):
    log = lines_log(tmp_path, [True, False, True, True])
    out = subprocess.run([sys.executable, "-m", "cpbcg", "watch", "-", "--format", "json", "--duration", "60", *PINNED],
                         stdin=open(log, "rb"), capture_output=True, timeout=LIMIT_S, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    result = orjson.loads(out.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["stopped_by"] == "end of input"
    server = result["servers"][0]
    assert server["server"] == "<stdin>" and server["forwards"] == 4
    assert server["observed"]["graph_forwards"] == 3
    assert server["buckets"] == default_buckets(8192)  # the capture line read from the stream, as plan reads it


# -- gates and refusals --------------------------------------------------------------------------


def canary(log: Path, *extra: str):
    return runner.invoke(app, ["watch", str(log), "--duration", "60", "--min-observed-coverage", "0.6", "--window-forwards", "100",
                               "--gate-step", "50", "--interval", "0.2", *PINNED, *extra])


def test_a_canary_fails_on_a_window_below_its_gate_and_passes_above(tmp_path):
    # 400 forwards in graphs, then 100 eager: the whole run is at 80% (passes 60%), the last window at 0%
    bad = lines_log(tmp_path, [True] * 400 + [False] * 100, "bad.log")
    result = canary(bad, "--max-forwards", "500")
    assert result.exit_code == 1, result.output
    assert "window.min_observed_coverage: observed cuda graph coverage 0.00% is below the minimum 60.00%" in result.stderr
    assert "lines 407-506 of" in result.stderr  # the failing window, named by its lines
    # the same with 40 eager forwards per 100 in every window: 60% everywhere, passes
    good = lines_log(tmp_path, ([True] * 60 + [False] * 40) * 5, "good.log")
    result = canary(good, "--max-forwards", "500")
    assert result.exit_code == 0, result.output
    assert "passed all 2 gates" in result.stderr


def test_a_window_gate_on_a_run_shorter_than_a_window_says_it_was_not_checked(tmp_path):
    result = canary(lines_log(tmp_path, [True] * 30), "--max-forwards", "30")
    assert result.exit_code == 0
    assert "fewer than one 100-forward window: the window gates were not checked" in result.stderr


@pytest.mark.parametrize("startup, expected", [
    ({"capture": False}, "no prefill capture line before the first Prefill batch"),
    ({"max_bs": 2}, "the prefill capture line lists 0 buckets"),
])
def test_a_server_without_prefill_graphs_is_refused_in_one_line(tmp_path, startup, expected):
    log = lines_log(tmp_path, [False] * 5, **startup)
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", *PINNED])
    assert result.exit_code == 1, result.output
    failed = [line for line in result.stderr.splitlines() if line.startswith("watch: FAILED:")]
    assert len(failed) == 1 and expected in failed[0]


def test_a_log_without_start_up_output_whose_every_forward_ran_eagerly_is_refused(tmp_path):
    # sglang #36081's shape: no settings dump, every Prefill batch line `cuda graph: False` at 8192 tokens
    log = write_log(tmp_path / "eager.log", "".join(prefill_line(8192, 1, graph=False) for _ in range(5)))
    result = runner.invoke(app, ["watch", str(log), "--duration", "1", *PINNED])
    assert result.exit_code == 1, result.output
    failed = [line for line in result.stderr.splitlines() if line.startswith("watch: FAILED:")]
    assert len(failed) == 1 and "0.00% of 5 forwards ran in graphs" in failed[0] and "prefill graphs appear off" in failed[0]
    assert "nothing to fail on" not in result.stderr
    result = runner.invoke(app, ["watch", str(log), "--duration", "1", "--format", "json", *PINNED])
    final = orjson.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 1 and final["passed"] is False and final["refusals"] == [final["servers"][0]["refusal"]]
    # one forward in a graph: the server runs graphs, nothing to fail on without gates
    log = write_log(tmp_path / "some.log", "".join(prefill_line(8192, 1, graph=i == 0) for i in range(5)))
    result = runner.invoke(app, ["watch", str(log), "--duration", "1", *PINNED])
    assert result.exit_code == 0 and "no gates configured: nothing to fail on" in result.stderr


def test_a_restart_into_a_launch_without_prefill_graphs_is_refused_there(tmp_path):
    body = startup_lines() + "".join(prefill_line(100 + i, 1) for i in range(5)) + startup_lines(capture=False)
    log = write_log(tmp_path / "restart.log", body + "".join(prefill_line(100 + i, 1, graph=False) for i in range(5)))
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--format", "json", *PINNED])
    assert result.exit_code == 1
    final = orjson.loads(result.stdout.splitlines()[-1])
    dump = 1 + 5 + 5 + 1  # header, launch 1's start-up lines and forwards; launch 2's dump
    assert final["refusals"] == [f"{log}:{dump}: no prefill capture line before the first Prefill batch: the server captured no "
                                 "prefill graph (every prefill forward runs eagerly)"]
    assert (final["servers"][0]["forwards"], final["servers"][0]["launch"]) == (5, 1)  # launch 1's forwards were judged


def test_prefill_graphs_resolved_disabled_are_refused(tmp_path):
    # as 0.5.23 prints it (`cuda_graph_hook` resolves the prefill backend disabled, nothing captured); capture lines would
    # say graphs ran whatever the flag (the reader's rule since issue 30)
    text = startup_lines(capture=False).replace("'disable_cuda_graph': False", "'disable_cuda_graph': True").replace(
        "'prefill': {'backend': 'breakable'", "'prefill': {'backend': 'disabled'")
    log = write_log(tmp_path / "off.log", text + prefill_line(100, 1, graph=False))
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--format", "json", *PINNED])
    assert result.exit_code == 1
    final = orjson.loads(result.stdout.splitlines()[-1])
    assert final["stopped_by"] == "refused" and "prefill graphs resolved disabled (disable_cuda_graph=True" in final["refusals"][0]


def test_a_refused_launch_replaced_by_a_restart_is_a_note_and_the_running_server_is_judged(tmp_path):
    # launch 1: prefill graphs resolved disabled, 4 eager forwards; launch 2 (the server running now): graphs on, 3 forwards
    off = startup_lines(capture=False).replace("'disable_cuda_graph': False", "'disable_cuda_graph': True").replace(
        "'prefill': {'backend': 'breakable'", "'prefill': {'backend': 'disabled'")
    body = (off + "".join(prefill_line(100 + i, 1, graph=False) for i in range(4)) + startup_lines()
            + "".join(prefill_line(200 + i, 1) for i in range(3)))
    log = write_log(tmp_path / "restart.log", body)
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "3", "--format", "json",
                                 "--min-observed-coverage", "0.9", *PINNED])
    assert result.exit_code == 0, result.output
    final = orjson.loads(result.stdout.splitlines()[-1])
    assert final["refusals"] == [] and final["passed"] is True and final["stopped_by"] == "max-forwards"
    server = final["servers"][0]
    assert (server["forwards"], server["launch"], server["refusal"]) == (3, 2, None)
    assert server["observed"]["graph_forwards"] == 3
    assert f"{log}:2: prefill graphs resolved disabled (disable_cuda_graph=True" in final["notes"][-1]
    assert "launch 1 was refused" in final["notes"][-1] and "its 4 forwards were not judged; launch 2 is the server as it runs now" in final["notes"][-1]
    assert "launch 2 (a restart at line 8) replaces refused launch 1" in result.stderr
    # a restart after the refused launch that has served no forward yet: the server is starting again, not refused
    starting = write_log(tmp_path / "starting.log", off + "".join(prefill_line(100 + i, 1, graph=False) for i in range(4)) + startup_lines())
    result = runner.invoke(app, ["watch", str(starting), "--duration", "60", "--format", "json", *PINNED])
    assert result.exit_code == 0, result.output
    final = orjson.loads(result.stdout.splitlines()[-1])
    assert (final["refusals"], final["stopped_by"], final["servers"][0]["launch"]) == ([], "end of input", 2)
    assert "no readable Prefill batch line" in result.stderr and "launch 1 was refused" in final["notes"][-1]
    # one launch refused alone: refused as before (exit 1, nothing judged)
    alone = write_log(tmp_path / "off.log", off + "".join(prefill_line(100 + i, 1, graph=False) for i in range(4)))
    result = runner.invoke(app, ["watch", str(alone), "--duration", "60", "--format", "json", *PINNED])
    assert result.exit_code == 1
    final = orjson.loads(result.stdout.splitlines()[-1])
    assert (final["stopped_by"], final["servers"][0]["forwards"], len(final["refusals"])) == ("refused", 0, 1)


def test_a_closed_stdout_pipe_exits_quietly_with_141(tmp_path):
    """`cpbcg watch LOG -f json | head -c 100`: exit 128 + SIGPIPE, no error line (as plan)."""
    log = lines_log(tmp_path, [True] * 5)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "cpbcg", "watch", str(log), "--duration", "1", "--format", "json", *PINNED],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=LIMIT_S, cwd=ROOT)
    finally:
        os.close(write_end)
    assert done.returncode == 141
    assert [line for line in done.stderr.splitlines() if "error" in line or "Traceback" in line] == []


def test_no_drift_is_shown_without_a_baseline_trace(tmp_path):
    log = lines_log(tmp_path, [True] * 5)
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "5", *PINNED])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the legend as one line, however the terminal wraps it
    assert "unexplained eager: the model replays, the server ran eagerly" in text
    assert "drift" not in text.split("observed: the server's", 1)[1] and "total variation" not in text
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "5", "--format", "json", *PINNED])
    windows = orjson.loads(result.stdout.splitlines()[-1])["servers"][0]["windows"]
    assert [w["drift"] for per in windows.values() for w in per.values()] == [None, None]
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "5", "--baseline-trace", str(log), *PINNED])
    assert result.exit_code == 0, result.output  # with a baseline: the legend says what drift is (the same sizes: 0)
    assert "drift: total variation from --baseline-trace (0 same sizes, 1 none in common)" in " ".join(result.stdout.split())


def test_a_metrics_address_in_use_names_the_option_and_the_address(tmp_path):
    import socket

    log = lines_log(tmp_path, [True] * 5)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--serve-metrics", f"127.0.0.1:{port}", *PINNED])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == f"cpbcg: error: --serve-metrics 127.0.0.1:{port}: address already in use"


def test_a_gzipped_log_is_refused_as_watch_follows_plain_text_only(tmp_path):
    import gzip

    log = lines_log(tmp_path, [True] * 5)
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(log.read_bytes()))
    result = runner.invoke(app, ["watch", str(packed), "--duration", "60", *PINNED])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"cpbcg: error: {packed}: gzip-compressed: watch follows plain-text server logs only (as the "
                                     "server writes them); give a compressed log to `cpbcg plan --trace` or `cpbcg replay-check`")


@pytest.mark.parametrize("args, message", [
    (["--serve-metrics", "nowhere"], "--serve-metrics 'nowhere': expected HOST:PORT"),
    (["--serve-metrics", "example.com:80"], "HOST must be an IP address or localhost"),
    (["--metrics-url", "ftp://x"], "--metrics-url 'ftp://x': expected http://HOST:PORT/metrics"),
    (["--baseline-trace", "missing.jsonl"], "--baseline-trace missing.jsonl: no such file"),
    (["--baseline-trace", "-"], "--baseline-trace -: standard input is for a followed log"),
    (["--since", "yesterday"], "--since 'yesterday': expected YYYY-MM-DD HH:MM[:SS] in the log's own clock"),
    (["--since", "2026-11-02 10:00", "--from-end"], "--from-end and --since: give one"),
    (["--instance", "a", "--instance", "b"], "--instance: 2 given for 1 logs (one per log, in order)"),
    (["--instance", " "], "--instance: a name of 1 to 200 printable characters"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, message):
    result = runner.invoke(app, ["watch", str(lines_log(tmp_path, [True])), "--duration", "5", *args])
    assert result.exit_code == 2 and message in result.stderr
    assert result.stderr.count("\n") == 1


# -- the exporter and SGLang's endpoint ----------------------------------------------------------

SGLANG_PAGE = """# HELP sglang:cuda_graph_passes_total Total number of forward passes categorized by CUDA graph.
# TYPE sglang:cuda_graph_passes_total counter
sglang:cuda_graph_passes_total{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",mode="prefill_cuda_graph"} 3.0
sglang:cuda_graph_passes_total{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",mode="prefill_none"} 1.0
sglang:cuda_graph_passes_total{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",mode="decode_cuda_graph"} 90.0
# HELP sglang:graph_memory_usage_gb Memory used by captured device graphs in GB.
# TYPE sglang:graph_memory_usage_gb gauge
sglang:graph_memory_usage_gb{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",phase="prefill"} 2.5
sglang:graph_memory_usage_gb{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",phase="decode"} 0.75
# HELP sglang:startup_cuda_graph_time_seconds CUDA graph capture duration by phase in seconds.
# TYPE sglang:startup_cuda_graph_time_seconds gauge
sglang:startup_cuda_graph_time_seconds{engine_type="unified",model_name="org/model",moe_ep_rank="0",pp_rank="0",tp_rank="0",phase="prefill"} 31.5
"""


class _Stub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        body = SGLANG_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def sglang_endpoint():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_sglang_page_is_read_by_its_0_5_23_names():
    m = parse_metrics(SGLANG_PAGE, "u")
    assert m.prefill_passes == {"": {"prefill_cuda_graph": 3.0, "prefill_none": 1.0}}  # decode passes apart
    assert m.decode_passes == {"": {"decode_cuda_graph": 90.0}}
    assert (m.graph_memory_gb, m.capture_s) == ({"prefill": 2.5, "decode": 0.75}, {"prefill": 31.5})


def test_the_exporter_serves_the_documented_metrics_over_http(tmp_path, sglang_endpoint):
    log = lines_log(tmp_path, [True, True, False, True, False], sizes=[100, 200, 9000, 300, 400])
    notes: list[str] = []
    scraped: list[dict] = []

    def on_snapshot(snap):
        if snap.final:  # the exporter has this snapshot already (it subscribes first)
            url = next(n for n in notes if "serving metrics at" in n).rsplit(" ", 1)[1]
            assert url.startswith("http://127.0.0.1:")
            scraped.append(scrape(url))

    report = api.watch([str(log)], None, OVERRIDES, options(max_forwards=5), metrics_urls=[sglang_endpoint],
                       serve_metrics="127.0.0.1:0", on_snapshot=on_snapshot, note=notes.append)
    assert report.passed and report.snapshot.servers[0].metrics is not None
    got = scraped[0]
    s = (("dp_rank", "0"), ("instance", POD), ("server", str(log)))
    assert got[("cpbcg_prefill_forwards_total", s)] == 5
    assert got[("cpbcg_prefill_verdict_forwards_total", s)] == 5
    assert got[("cpbcg_prefill_graph_forwards_total", s)] == 3
    assert got[("cpbcg_prefill_model_graph_forwards_total", s)] == 4  # 9000 is above the largest bucket, 400 the server ran eagerly
    assert got[("cpbcg_prefill_eager_forwards_total", (("dp_rank", "0"), ("instance", POD), ("reason", "above_largest_bucket"), ("server", str(log))))] == 1
    assert got[("cpbcg_prefill_tokens_total", s)] == 10000
    assert got[("cpbcg_window_observed_coverage_ratio", (("dp_rank", "all"), ("instance", POD), ("server", str(log)), ("window", "forwards")))] == 0.6
    assert got[("cpbcg_window_model_coverage_ratio", (("dp_rank", "all"), ("instance", POD), ("server", str(log)), ("window", "forwards")))] == 0.8
    assert got[("cpbcg_prefill_graphs_refused", (("instance", POD), ("server", str(log))))] == 0
    assert got[("cpbcg_sglang_prefill_passes_total", (("dp_rank", "0"), ("instance", POD), ("mode", "prefill_cuda_graph"), ("server", str(log))))] == 3
    assert got[("cpbcg_sglang_graph_memory_gb", (("instance", POD), ("phase", "prefill"), ("server", str(log))))] == 2.5
    # bytes (Prometheus' base unit): SGLang's "GB" is GiB (get_available_gpu_memory divides by 1 << 30); the GB name is deprecated
    assert got[("cpbcg_sglang_graph_memory_bytes", (("instance", POD), ("phase", "prefill"), ("server", str(log))))] == 2.5 * 2**30
    assert got[("cpbcg_log_lines_total", (("instance", POD), ("server", str(log))))] == log.read_bytes().count(b"\n") == 11
    assert got[("cpbcg_log_read_bytes_total", (("instance", POD), ("server", str(log))))] == log.stat().st_size
    assert got[("cpbcg_log_unread_bytes", (("instance", POD), ("server", str(log))))] == 0
    assert 0 <= got[("cpbcg_log_last_line_age_seconds", (("instance", POD), ("server", str(log))))] < 30
    assert 0 <= got[("cpbcg_sglang_scrape_age_seconds", (("instance", POD), ("server", str(log))))] < 30
    assert got[("cpbcg_sglang_startup_graph_seconds", (("instance", POD), ("phase", "prefill"), ("server", str(log))))] == 31.5
    assert got[("cpbcg_window_recommended_coverage_gain_ratio", (("instance", POD), ("server", str(log))))] == pytest.approx(0.2)


def test_the_cli_exporter_is_scraped_while_it_runs(tmp_path):
    path = tmp_path / "server.log"
    proc = writer(path, 100000, 200.0)
    watch = subprocess.Popen([sys.executable, "-m", "cpbcg", "watch", str(path), "--serve-metrics", "127.0.0.1:0", "--duration", "20",
                              "--interval", "0.2", "--recommend-every", "0", "--format", "json", *PINNED],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stderr is not None
        url = ""
        for _ in range(200):  # bounded: the note comes before any forward is read
            line = watch.stderr.readline()
            if "serving metrics at" in line:
                url = line.split()[-1]
                break
        assert url.startswith("http://127.0.0.1:")
        seen = 0.0
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and seen < 50:
            seen = sum(v for (name, _), v in scrape(url).items() if name == "cpbcg_prefill_forwards_total")
            time.sleep(0.2)
        assert seen >= 50
    finally:
        watch.terminate()
        watch.wait(timeout=LIMIT_S)
        proc.terminate()
        proc.wait(timeout=LIMIT_S)


def test_the_dashboard_and_the_alert_rules_use_only_exported_metrics():
    import re

    import yaml

    from cpbcg.watching.exporter import COUNTERS, GAUGES, PREFIX

    exported = {f"{PREFIX}{n}_total" for n in COUNTERS} | {PREFIX + n for n in GAUGES}
    dashboard = orjson.loads((ROOT / "deploy" / "grafana" / "cpbcg-watch.json").read_bytes())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "cpbcg-watch-rules.yaml").read_text())["groups"][0]["rules"]
    exprs += [r["expr"] for r in rules]
    used = {m for e in exprs for m in re.findall(r"\bcpbcg_[a-z_]+", e)}
    assert used and used <= exported, sorted(used - exported)
    assert {"cpbcg_prefill_forwards_total", "cpbcg_prefill_graph_forwards_total", "cpbcg_prefill_graphs_refused"} <= used
    assert {r["alert"] for r in rules} >= {"CpbcgPrefillGraphsOff", "CpbcgObservedCoverageLow"}
    documented = (ROOT / "docs" / "watch.md").read_text()
    assert all(f"`{name}`" in documented for name in exported), sorted(n for n in exported if f"`{n}`" not in documented)


def test_two_servers_with_attention_dp_are_judged_apart(tmp_path):
    dp = write_log(tmp_path / "dp.log", startup_lines(dp=2) + "".join(
        prefill_line(500 + i, 1, graph=(i % 2 == 0), prefix=f"[2026-11-02 10:00:01 DP{i % 2} TP0] ") for i in range(40)))
    plain = lines_log(tmp_path, [True] * 10, "plain.log")
    report = api.watch([str(dp), str(plain)], None, OVERRIDES, options(max_forwards=50, window_forwards=8),
                       baseline_trace=str(dp))
    first, second = report.snapshot.servers
    assert [(r.dp_rank, r.forwards, r.graph_forwards) for r in first.ranks] == [(0, 20, 20), (1, 20, 0)]
    assert set(first.windows["forwards"]) == {"all", "0", "1"}
    assert first.windows["forwards"]["1"].observed.coverage == 0.0 and first.windows["forwards"]["0"].observed.coverage == 1.0
    assert first.windows["time"]["all"].forwards == 40  # read well within the 60 s window
    assert first.windows["forwards"]["all"].drift is not None and first.windows["time"]["all"].drift == 0.0  # the whole log is its baseline
    assert (second.forwards, second.observed.graph_forwards) == (10, 10)


def test_an_unreachable_sglang_endpoint_is_a_line_not_a_failure(tmp_path):
    log = lines_log(tmp_path, [True] * 3)
    report = api.watch([str(log)], None, OVERRIDES, options(max_forwards=3), metrics_urls=["http://127.0.0.1:1/metrics"])
    server = report.snapshot.servers[0]
    assert report.passed and server.metrics is None and server.metrics_errors >= 1
    assert server.metrics_error.startswith("http://127.0.0.1:1/metrics: ")


def test_a_bad_window_in_the_middle_is_found_however_much_is_read_at_once(tmp_path):
    # the whole file arrives in one read: the gated windows are still those ending at 100, 150, ..., 500
    log = lines_log(tmp_path, [True] * 200 + [False] * 100 + [True] * 200)
    result = canary(log, "--max-forwards", "500")
    assert result.exit_code == 1, result.output
    assert "window.min_observed_coverage: observed cuda graph coverage 0.00% is below the minimum 60.00%" in result.stderr
    assert "lines 207-306 of" in result.stderr


def test_a_log_without_start_up_output_says_whose_settings_it_assumed(tmp_path):
    log = write_log(tmp_path / "tail.log", prefill_line(100, 1) + "[2026-11-02 10:00:02 TP0] Prefill batch, #new-seq: 1, oops\n")
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "1", *PINNED])
    assert result.exit_code == 0, result.output
    assert "no start-up output (settings dump, capture line) before the first Prefill batch" in result.stderr
    assert "cpbcg: note: " + str(log) + ": 1 unreadable Prefill batch line skipped (first: line 3: #new-token: missing or not an integer" in result.stderr
    # what the log does not state is said to be assumed, with the option that sets it (the reader's rule: cpbcg.engines.sglang.observed.assumed_settings)
    assert "cpbcg: assumed: buckets sglang-default:8192 (assumed: not in the log; --buckets sets it)" in result.stderr
    assert "assumed for launch 1: buckets sglang-default:8192 (assumed: not in the log; --buckets sets it)" in result.stdout
    out = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "1", "--format", "json", *PINNED])
    server = orjson.loads(out.stdout.splitlines()[-1])["servers"][0]
    assert (server["launch"], server["assumed"]) == (1, [{"key": "buckets", "value": "sglang-default:8192", "option": "--buckets"}])
    assert server["observed"]["launches"][0]["assumed"] == server["launches"][0]["assumed"] == server["assumed"]


def _stopped_by(signal_number: int, log: Path, min_observed_coverage: str) -> tuple[int, dict, str]:
    """A `watch --format json` run on `log` stopped by `signal_number` after its first update: its exit
    code, its final JSON line and its stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "cpbcg", "watch", str(log), "--duration", "30", "--interval", "0.2", "--format", "json",
                             "--min-observed-coverage", min_observed_coverage, *PINNED], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = orjson.loads(proc.stdout.readline())  # the first update: bounded by --duration 30
        assert first["type"] == "snapshot" and first["forwards"] == 20
        proc.send_signal(signal_number)
        out, err = proc.communicate(timeout=LIMIT_S)
    finally:
        proc.kill()
    return proc.returncode, orjson.loads(out.splitlines()[-1]), err.decode()


def test_ctrl_c_ends_the_run_with_its_report(tmp_path):
    import signal

    code, final, _ = _stopped_by(signal.SIGINT, lines_log(tmp_path, [True] * 20), "0.5")
    assert (code, final["type"], final["stopped_by"], final["passed"]) == (0, "result", "interrupted", True)


def test_sigterm_ends_a_gated_run_with_its_verdict_and_exits_with_it(tmp_path):
    import signal

    # half the forwards eager: --min-observed-coverage 0.9 fails on what was read; a pod's shutdown (SIGTERM) must say so
    code, final, err = _stopped_by(signal.SIGTERM, lines_log(tmp_path, [True, False] * 10), "0.9")
    assert (code, final["type"], final["stopped_by"], final["passed"]) == (1, "result", "terminated", False)
    assert final["forwards"] == 20 and final["servers"][0]["observed"]["graph_forwards"] == 10
    assert "watch: stopped by terminated; FAILED 1 of 1 gate" in err
    assert "min_observed_coverage: observed cuda graph coverage 50.00% is below the minimum 90.00%" in err


class _SlowStub(_Stub):
    def do_GET(self):  # noqa: N802 (http.server's name)
        time.sleep(1.5)  # a slow endpoint (1.5 s: inside the scrape's 2 s timeout with room for a loaded machine)
        super().do_GET()


def test_a_slow_metrics_endpoint_never_holds_up_the_reader(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "server.log"
    proc = writer(path, 3000, 1000.0, "--seed", "3")  # about 3 s of writing
    lags: list[float] = []

    def on_snapshot(snap):
        lags.append(snap.servers[0].freshness.reader_lag_s)

    try:
        started = time.monotonic()
        report = api.watch([str(path)], None, OVERRIDES, options(max_forwards=3000, interval_s=0.1),
                           metrics_urls=[f"http://127.0.0.1:{server.server_address[1]}/metrics"], on_snapshot=on_snapshot)
        took = time.monotonic() - started
    finally:
        proc.wait(timeout=LIMIT_S)
        server.shutdown()
        server.server_close()
    # the scrapes (1.5 s each) run on their own thread: scraped in the loop, every update would find the reader 1.5 s behind
    assert max(lags) < 2.0 and sorted(lags)[len(lags) // 2] < 1.0, lags
    assert report.snapshot.forwards == 3000 and len(lags) > 10
    assert took < 3.0 + 2.5 + 2.0, took  # the writer's 3 s, at most one final wait for a first scrape, slack
    assert report.snapshot.servers[0].metrics is not None  # the slow endpoint was still read


def test_a_scrape_failure_gate_fails_a_canary_on_an_unreachable_endpoint(tmp_path):
    log = lines_log(tmp_path, [True] * 3)
    args = ["watch", str(log), "--duration", "60", "--max-forwards", "3", "--metrics-url", "http://127.0.0.1:1/metrics", *PINNED]
    result = runner.invoke(app, [*args, "--max-scrape-errors", "0"])
    assert result.exit_code == 1, result.output
    assert "max_scrape_errors: failed scrapes of http://127.0.0.1:1/metrics" in result.stderr
    assert runner.invoke(app, args).exit_code == 0  # without the gate a failed scrape is a line, not a failure


def test_every_metric_names_its_replica(tmp_path, monkeypatch):
    monkeypatch.delenv("POD_NAME")
    monkeypatch.setenv("HOSTNAME", "node-7")
    a, b = lines_log(tmp_path, [True] * 2, "a.log"), lines_log(tmp_path, [False] * 2, "b.log")
    report = api.watch([str(a), str(b)], None, OVERRIDES, options(max_forwards=4), instances=["sglang-3"])
    assert [s.instance for s in report.snapshot.servers] == ["sglang-3", "sglang-3"]
    assert api.watch([str(a)], None, OVERRIDES, options(max_forwards=2)).snapshot.servers[0].instance == "node-7"
    result = runner.invoke(app, ["watch", str(a), str(b), "--instance", "x", "--instance", "y", "--instance", "z", *PINNED])
    assert result.exit_code == 2 and "--instance: 3 given for 2 logs" in result.stderr


def test_the_table_shows_the_run_and_the_windows(tmp_path):
    log = lines_log(tmp_path, [True, True, True, False], sizes=[100, 200, 9000, 300])
    result = runner.invoke(app, ["watch", str(log), "--duration", "60", "--max-forwards", "4", *PINNED])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip() + "/" + line.split("│")[2].strip(): [c.strip() for c in line.split("│")[3:-1]]
            for line in result.stdout.splitlines() if line.count("│") > 5}
    # forwards, observed, modelled, padding, > largest, unexplained eager, other eager, drift; padding by hand: 100, 200, 300 pad
    # to the default buckets 112, 208, 320: 40 tokens on 600; 9000 is above 8192; 300 the server ran eagerly, the model replays
    assert rows["run/all"][:6] == ["4", "75.00%", "75.00%", "6.67%", "1", "1"]
    assert rows["forwards/all"][:6] == rows["time/all"][:6] == rows["run/all"][:6]
    assert "refit on the forwards window: " in result.stdout


@pytest.mark.parametrize("capture", [True, False])  # without a capture line yet: a server still starting, not refused for it
def test_a_canary_on_a_server_that_printed_no_forward_fails(tmp_path, capture):
    log = write_log(tmp_path / "quiet.log", startup_lines(capture=capture))
    result = canary(log, "--duration", "0.5")
    assert result.exit_code == 1, result.output
    assert "watch: FAILED: " + str(log) + ": no readable Prefill batch line in " in result.stderr
    assert runner.invoke(app, ["watch", str(log), "--duration", "0.5", *PINNED]).exit_code == 0  # without gates: nothing to fail on


@pytest.mark.parametrize("data", [bytes(range(256)) * 20, b"\x7fELF\x02\x01\x01\x00" + bytes(5000)])
def test_a_binary_file_is_refused_as_plan_refuses_it(tmp_path, data):
    path = tmp_path / "bin.dat"
    path.write_bytes(data)
    result = runner.invoke(app, ["watch", str(path), "--duration", "2", *PINNED])
    assert result.exit_code == 2, result.output
    assert f"cpbcg: error: {path}:1: not a text trace: binary data" in result.output


def test_a_log_that_never_appeared_in_a_bounded_run_is_an_error(tmp_path):
    result = runner.invoke(app, ["watch", str(tmp_path / "none.log"), "--duration", "1", *PINNED])
    assert result.exit_code == 2, result.output
    assert f"cpbcg: error: {tmp_path / 'none.log'}: no such file (waited 1 s)" in result.output


def test_a_log_without_prefill_lines_is_warned_about_and_its_header_shows_the_assumed_list(tmp_path):
    path = tmp_path / "quiet.log"
    path.write_text("[2026-11-02 09:59:59] nothing but this\n")
    result = runner.invoke(app, ["watch", str(path), "--duration", "1", "--buckets", "64,128,8192", *PINNED])
    assert result.exit_code == 0, result.output
    assert f"cpbcg: warning: {path}: no readable Prefill batch line in 1 s" in result.output
    assert f"{path}: 0 forwards; 3 buckets up to 8,192" in result.output


def test_the_command_runs_the_library_defaults_declared_once():
    # `cpbcg watch`'s window, stop and gate options are the library's `WatchOptions` fields, declared
    # once (their flags on the fields): the command spreads them; its own options restate none
    import dataclasses

    from cpbcg.cli.watch_cmd import watch
    from cpbcg.commands.watch_options import WatchCommandOptions

    assert watch.option_groups["run"] is WatchOptions
    own = {f.name for f in dataclasses.fields(WatchCommandOptions)}
    assert own.isdisjoint(f.name for f in dataclasses.fields(WatchOptions))
    seen: list[WatchOptions] = []

    def fake_run(options, run_options, config, overrides, **kw):
        seen.append(run_options)
        raise SystemExit(0)

    import cpbcg.commands.watch as use_case

    original = use_case.run
    use_case.run = fake_run
    try:
        runner.invoke(app, ["watch", "x.log"])
        runner.invoke(app, ["watch", "x.log", "--window-forwards", "2000", "--interval", "0.5", "--max-scrape-errors", "0"])
    finally:
        use_case.run = original
    assert seen == [WatchOptions(), WatchOptions(window_forwards=2000, interval_s=0.5, max_scrape_errors=0)]


def test_a_log_that_never_appears_is_refused_first_without_the_notes(tmp_path):
    # the notes held until a log is read (assumed settings, no start-up output) are dropped: the error is the first line
    missing = tmp_path / "nowhere.log"
    result = runner.invoke(app, ["watch", str(missing), "--duration", "1"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"cpbcg: error: {missing}: no such file (waited 1 s)"]


def test_watch_says_when_the_servers_list_costs_more_than_sglangs_default_on_the_window(tmp_path):
    """The plan verdict's comparison, on the watched window: a server capturing only SGLang's list up to 2048
    leaves the 2049..8192 forwards eager where the default for the 8192 chunk replays them."""
    sizes = [300 + 97 * i for i in range(60)]  # 300..6023 tokens
    short = lines_log(tmp_path, [n <= 2048 for n in sizes], "short.log", sizes=sizes, max_bs=2048)
    gain = api.watch([str(short)], None, OVERRIDES, options(max_forwards=60)).snapshot.servers[0].gain
    assert not isinstance(gain, str) and gain is not None and len(gain.against_default) == 1
    said = gain.against_default[0]
    assert said.startswith("the configured list of 42 buckets costs more than SGLang's default list of 58 here: ")
    assert "against SGLang's default" in said and gain.to_dict()["against_default"] == [said]
    result = runner.invoke(app, ["watch", str(short), "--duration", "60", "--max-forwards", "60", *PINNED])
    assert result.exit_code == 0, result.output
    assert "warning: on the forwards window, the configured list of 42 buckets costs more" in " ".join(result.stdout.split())
    # a server on SGLang's default list: nothing to say
    default = lines_log(tmp_path, [True] * 60, "default.log", sizes=sizes)
    gain = api.watch([str(default)], None, OVERRIDES, options(max_forwards=60)).snapshot.servers[0].gain
    assert not isinstance(gain, str) and gain is not None and gain.against_default == ()
