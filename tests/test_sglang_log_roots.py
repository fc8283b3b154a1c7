"""Root fixes in the SGLang log reader (issue 39, deliver 5): a restart's start-up lines printed before its settings
dump (a capture line, weights loading) begin that launch, not the one before; standard input (and a file) that shows
only lines an SGLang server prints is read as a log whether or not its first `Prefill batch` line has come (no
"not valid JSON", no "unknown CSV trace"). The logs are SYNTHETIC (tests/sglang_log_fixtures.py)."""

import subprocess
import sys

import pytest

from cpbcg.engines.sglang.logs.log import LogReader
from sglang_log_fixtures import default_buckets, prefill_line, startup_lines, write_log


def _restart_capture_first(tmp_path):
    """Launch 1 (dump, capture of 58 buckets, forwards); launch 2 prints its capture (50 buckets up to 4096) and its
    weights before its dump."""
    first = startup_lines(cp=1) + "".join(prefill_line(n, 1) for n in (100, 200, 300))
    second = startup_lines(cp=1, max_bs=4096, chunk=4096, date="2026-11-03")
    dump, rest = second.split("\n", 1)
    return write_log(tmp_path / "restart.log", first + rest + dump + "\n" + prefill_line(4096, 1, prefix="[2026-11-03 10:00:00 TP0] "))


def test_a_capture_line_before_a_launchs_dump_belongs_to_that_launch(tmp_path):
    reader = LogReader(_restart_capture_first(tmp_path))
    chunks = list(reader)
    assert [c.launch for c in chunks] == [1, 2]
    first, second = reader.launches()
    assert first.captured == tuple(default_buckets(8192)) and second.captured == tuple(default_buckets(4096))
    assert second.setting("scheduler.chunked_prefill_size").value == 4096 and second.first_line < second.dump_line
    assert (first.capture.total_gb, second.capture.total_gb) == (2.37, 2.29)  # each launch its own measured capture


def _plan_stdin(text: str) -> str:
    run = subprocess.run([sys.executable, "-m", "cpbcg", "plan", "-t", "-"], input=text.encode(), capture_output=True, timeout=120)
    return run.stderr.decode().strip().splitlines()[-1]


def test_stdin_with_no_prefill_line_yet_is_a_log_not_a_csv_or_json_trace():
    start = startup_lines(cp=1)
    assert _plan_stdin(start) == ('cpbcg: error: <stdin>:1: no readable "Prefill batch" lines: an SGLang server log that has '
                                  "served no prefill yet, or logged below INFO")  # was: unknown CSV trace / not valid JSON
    http = "".join(f'[2026-11-02 09:58:{i % 60:02d}] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n' for i in range(40000))
    assert len(http) > 2 << 20  # past standard input's kept head: the first Prefill batch line comes late
    last = _plan_stdin(http + start + "".join(prefill_line(n, 1) for n in (2000, 3000)))
    assert not last.startswith("cpbcg: error"), last


def test_a_file_of_server_lines_without_a_prefill_line_says_so(tmp_path):
    path = write_log(tmp_path / "http.log", '[2026-11-02 09:58:00] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n')
    run = subprocess.run([sys.executable, "-m", "cpbcg", "plan", "-t", str(path)], capture_output=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.decode().strip().splitlines()[0] == (f'cpbcg: error: {path}:1: no readable "Prefill batch" lines: not an SGLang '
                                                            "server log, or logged below INFO")


def _restart_without_forwards(tmp_path):
    """Launch 1 at cp 1 (4 forwards), then a restart at cp 2 (chunk 4096, 50 buckets) that has served no forward yet."""
    first = startup_lines(cp=1) + "".join(prefill_line(n, 1) for n in (2000, 3000, 4000, 5000))
    second = startup_lines(cp=2, tp=2, chunk=4096, max_bs=4096, date="2026-11-03")
    return write_log(tmp_path / "restart.log", first + second)


def test_a_restart_that_has_served_no_forward_is_the_server_planned(tmp_path):
    import orjson
    from typer.testing import CliRunner

    from cpbcg.cli import app

    path = _restart_without_forwards(tmp_path)
    reader = LogReader(path)
    assert [(c.launch, len(c.num_tokens)) for c in reader] == [(1, 4), (2, 0)]  # the restart: one empty chunk
    result = CliRunner().invoke(app, ["plan", "-t", str(path), "--gpu", "B200", "-f", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    assert (doc["cp_size"], doc["server"]["attn_cp_size"], doc["server"]["chunked_prefill_size"]["value"]) == (2, 2, 4096)  # was cp 1
    assert ("launch 2 (line 11), which has served no forward yet: fitted on launch 1's 4 forwards, their worst cases taken under its "
            "CP layout (cp 2)") in result.stderr
    emit = tmp_path / "flags.txt"
    written = CliRunner().invoke(app, ["plan", "-t", str(path), "--gpu", "B200", "--emit", "sglang", "-o", str(emit)])
    assert written.exit_code == 0, written.output
    assert "--attn-cp-size 2" in emit.read_text() and "--chunked-prefill-size 4096" in emit.read_text()


@pytest.mark.parametrize("tags", [("DP0 TP0", "DP1 TP0"), ("DP0 ATTN_CP0 TP0", "DP1 ATTN_CP0 TP0"), ("DP0 PP0 TP0", "DP1 PP0 TP0")])
@pytest.mark.parametrize("bulk", [True, False])
def test_two_dp_ranks_printing_the_same_line_are_two_forwards(tmp_path, tags, bulk):
    """Attention-DP ranks run different forwards: identical lines from DP0 and DP1 are never folded as copies
    (each reader path; the prefix order 0.5.23's run_scheduler_process prints: DP, PP, ATTN_CP, TP)."""
    body = "".join(prefill_line(n, 1, prefix=f"[2026-11-02 10:00:00 {t}] ") for n in (512, 1024, 2048) * 400 for t in tags)
    reader = LogReader(write_log(tmp_path / "dp.log", startup_lines(dp=2, tp=2) + body), bulk=bulk)
    list(reader)
    assert (reader.summary.forwards, reader.summary.folded_copies, reader.summary.dp_ranks) == (2400, 0, (0, 1))


def test_a_recapture_without_a_restart_stays_in_its_launch(tmp_path):
    """Graphs captured again while the server runs (no settings dump follows, a forward does): one launch."""
    body = startup_lines(cp=1) + prefill_line(100, 1) + startup_lines(cp=1).split("\n", 1)[1] + prefill_line(200, 1)
    reader = LogReader(write_log(tmp_path / "recapture.log", body))
    assert [(c.launch, c.num_tokens.tolist()) for c in reader] == [(1, [100, 200])]
    assert len(reader.launches()) == 1 and reader.launches()[0].captured == tuple(default_buckets(8192))
