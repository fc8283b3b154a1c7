"""`cpbcg watch`'s follower through every rotation and truncation, between two polls: logrotate's
create mode, copytruncate (the lines written since the last read are in the copy), a file truncated
and regrown past the read offset (its head, or the bytes before the offset, changed), a partial
line cut by a truncation (dropped, never handed over torn). What the follower hands over is
compared, byte for byte and through `cpbcg plan`, with what was written. Also: terminal escapes
stripped, `--from-end` and `--since`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.watching.follow import FileFollower, StartAt, StreamFollower, parse_since, strip_escapes
from sglang_log_fixtures import prefill_line, startup_lines

PINNED = ["--page-size", "1", "--chunked-prefill-size", "8192"]
runner = CliRunner()


def forwards(first: int, count: int) -> str:
    """`count` distinct Prefill batch lines (sizes `first`, `first + 1`, ...; every 3rd eager)."""
    return "".join(prefill_line(first + i, 1, graph=(i % 3 != 0)) for i in range(count))


def truncate_in_place(path: Path, text: str = "") -> None:
    """The same inode emptied (`> server.log`, logrotate's copytruncate), then `text` written from its start."""
    with open(path, "r+") as h:
        h.truncate(0)
        h.write(text)


def drain(f: FileFollower, polls: int = 20) -> bytes:
    """Everything the follower hands over in `polls` polls (bounded), as one text."""
    return b"".join(blob for _ in range(polls) for _, blob in f.poll())


def plan_totals(path: Path) -> tuple[int, int, int]:
    result = runner.invoke(app, ["plan", "--trace", str(path), "--format", "json", "--no-recommend", *PINNED])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    return doc["batches"], doc["observed"]["forwards"], doc["observed"]["graph_forwards"]


def same_as_plan(tmp_path: Path, read: bytes, written: bytes) -> None:
    """What was read is what was written, and `plan` gives the same forwards on both."""
    assert read == written
    (tmp_path / "read.log").write_bytes(read)
    (tmp_path / "written.log").write_bytes(written)
    assert plan_totals(tmp_path / "read.log") == plan_totals(tmp_path / "written.log")


def test_copytruncate_between_two_polls_loses_no_forward(tmp_path):
    path = tmp_path / "server.log"
    first = startup_lines() + forwards(100, 120)
    path.write_text(first + prefill_line(999, 1)[:40])  # a line being written when the reader polls
    f = FileFollower(str(path))
    read = drain(f)
    assert read == first.encode()  # the partial line waits
    # the rest of that line and 80 forwards more arrive, then logrotate's copytruncate, then the server goes on
    more = prefill_line(999, 1)[40:] + forwards(300, 80)
    with open(path, "a") as h:
        h.write(more)
    shutil.copyfile(path, tmp_path / "server.log.1")
    truncate_in_place(path)
    after = forwards(500, 60)
    with open(path, "a") as h:
        h.write(after)
    read += drain(f)
    assert f.truncations == 1 and f.rotations == 0
    assert any("copytruncate" in n and "server.log.1" in n for n in f.notes)
    same_as_plan(tmp_path, read, (first + prefill_line(999, 1) + forwards(300, 80) + after).encode())
    assert plan_totals(tmp_path / "read.log")[0] == 120 + 1 + 80 + 60
    f.close()


def test_a_line_cut_by_the_copy_is_joined_with_its_rest_in_the_truncated_file(tmp_path):
    # logrotate copies while the server is mid-line; the server (O_APPEND) finishes the line at the start of the truncated file
    path = tmp_path / "server.log"
    line = prefill_line(777, 1)
    head = startup_lines() + forwards(100, 20)
    path.write_text(head)
    f = FileFollower(str(path))
    read = drain(f)
    with open(path, "a") as h:
        h.write(forwards(200, 5) + line[:50])
    shutil.copyfile(path, tmp_path / "server.log.1")
    truncate_in_place(path)
    with open(path, "a") as h:
        h.write(line[50:] + forwards(300, 5))
    read += drain(f)
    same_as_plan(tmp_path, read, (head + forwards(200, 5) + line + forwards(300, 5)).encode())


def test_the_hole_a_non_appending_writer_leaves_after_copytruncate_is_skipped(tmp_path):
    # `python -m sglang.launch_server ... > server.log` (no O_APPEND): after the truncation the shell's
    # descriptor writes at its old offset, and the file starts with NUL bytes up to there
    path = tmp_path / "server.log"
    head = startup_lines() + forwards(100, 20)
    with open(path, "w") as writer:
        writer.write(head)
        writer.flush()
        f = FileFollower(str(path))
        read = drain(f)
        shutil.copyfile(path, tmp_path / "server.log.1")
        os.truncate(path, 0)
        writer.write(forwards(400, 10))
        writer.flush()
        read += drain(f)
    assert read == (head + forwards(400, 10)).encode()
    assert any("NUL bytes at the start of the truncated file skipped" in n for n in f.notes)
    same_as_plan(tmp_path, read, (head + forwards(400, 10)).encode())


def test_a_file_truncated_and_regrown_past_the_offset_is_read_from_its_start(tmp_path):
    path = tmp_path / "server.log"
    before = startup_lines() + forwards(100, 50)
    path.write_text(before)
    f = FileFollower(str(path))
    read = drain(f)
    # `> server.log` and a restarted server writing 150 forwards before the next poll: longer than the old offset
    regrown = startup_lines(date="2026-11-03") + forwards(1000, 150)
    assert len(regrown) > len(before)
    truncate_in_place(path, regrown)
    got = f.poll()
    assert got[0][0] == 1  # line numbers start over with the new content
    read += b"".join(b for _, b in got) + drain(f)
    assert f.truncations == 1
    same_as_plan(tmp_path, read, (before + regrown).encode())


def test_a_regrown_file_with_the_same_head_is_told_by_the_bytes_before_the_offset(tmp_path):
    path = tmp_path / "server.log"
    head = startup_lines()  # the same start-up output (a restart with the same settings, same second)
    path.write_text(head + forwards(100, 40))
    f = FileFollower(str(path))
    read = drain(f)
    truncate_in_place(path, head + forwards(2000, 100))
    read += drain(f)
    assert f.truncations == 1
    same_as_plan(tmp_path, read, (head + forwards(100, 40) + head + forwards(2000, 100)).encode())


def test_a_partial_line_cut_by_a_truncation_is_dropped_not_read_torn(tmp_path):
    path = tmp_path / "server.log"
    whole = forwards(100, 10)
    path.write_text(whole + prefill_line(555, 1)[:30])
    f = FileFollower(str(path))
    read = drain(f)
    truncate_in_place(path, forwards(700, 30))  # regrown past the old offset
    read += drain(f)
    assert read == (whole + forwards(700, 30)).encode()  # the 30 bytes of line 11 never handed over
    assert any("partial line of 30 bytes" in n and "dropped" in n for n in f.notes)


def test_rotation_then_copytruncate_then_regrow_between_polls(tmp_path):
    path = tmp_path / "server.log"
    written = startup_lines() + forwards(10, 30)
    path.write_text(written)
    f = FileFollower(str(path))
    read = drain(f)
    # logrotate create mode: the old file gains lines after the rename, then a new file
    os.replace(path, tmp_path / "server.log.1")
    with open(tmp_path / "server.log.1", "a") as h:
        h.write(forwards(40, 5))
    path.write_text(forwards(50, 20))
    read += drain(f)
    written += forwards(40, 5) + forwards(50, 20)
    assert f.rotations == 1
    # copytruncate of the new file (the newest matching copy is read: server.log-2 beside an older server.log.1)
    with open(path, "a") as h:
        h.write(forwards(80, 15))
    shutil.copyfile(path, tmp_path / "server.log-2")
    truncate_in_place(path, forwards(100, 10))
    read += drain(f)
    written += forwards(80, 15) + forwards(100, 10)
    same_as_plan(tmp_path, read, written.encode())
    assert (f.rotations, f.truncations) == (1, 1)


def test_terminal_escapes_are_stripped_as_plan_reads_the_log(tmp_path):
    colour = "\x1b[36m(SchedulerActor pid=123)\x1b[0m "
    text = startup_lines() + "".join(colour + prefill_line(100 + i, 1) for i in range(20))
    path = tmp_path / "ray.log"
    path.write_text(text)
    f = FileFollower(str(path))
    read = drain(f)
    assert b"\x1b" not in read and read.count(b"\n") == text.count("\n")
    result = runner.invoke(app, ["watch", str(path), "--duration", "60", "--max-forwards", "20", "--format", "json", *PINNED])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout.splitlines()[-1])["forwards"] == 20
    assert plan_totals(path)[0] == 20
    assert strip_escapes(b"\x1b]0;title\x07a\x1b[1;31mb\x1b[0m\n") == b"ab\n"


def test_from_end_judges_only_new_forwards_with_the_settings_of_the_head(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(startup_lines(max_bs=4096) + forwards(100, 50))
    f = FileFollower(str(path), StartAt(), from_end=True)
    read = drain(f)
    assert b"Prefill batch" not in read and b"server_args" in read  # the settings are read; the old forwards blanked
    assert read.count(b"\n") == path.read_bytes().count(b"\n")  # line numbers kept
    with open(path, "a") as h:
        h.write(forwards(300, 7))
    assert drain(f).count(b"Prefill batch") == 7


def test_since_judges_the_forwards_stamped_from_a_time_on():
    assert parse_since("2026-11-02T10:00") == b"2026-11-02 10:00:00"
    with pytest.raises(ValueError, match="YYYY-MM-DD HH:MM"):
        parse_since("yesterday")
    read_fd, write_fd = os.pipe()
    lines = (startup_lines() + "".join(prefill_line(100 + i, 1, prefix=f"[2026-11-02 10:0{i}:00 TP0] ") for i in range(6)))
    os.write(write_fd, lines.encode())
    os.close(write_fd)
    stream = StreamFollower(os.fdopen(read_fd, "rb"), "<pipe>", StartAt(since=parse_since("2026-11-02 10:03")))
    got = b"".join(b for _ in range(20) for _, b in stream.poll(timeout=0.1))
    assert [line[:20] for line in got.splitlines() if b"Prefill batch" in line] == [
        b"[2026-11-02 10:03:00", b"[2026-11-02 10:04:00", b"[2026-11-02 10:05:00"]


def test_from_end_through_the_library_judges_what_is_written_after_the_start(tmp_path):
    import threading
    import time

    from cpbcg import api
    from cpbcg.commands.watch import watch_options

    path = tmp_path / "server.log"
    path.write_text(startup_lines(max_bs=4096) + "".join(prefill_line(100 + i, 1, graph=False) for i in range(50)))
    notes: list[str] = []

    def append_later():
        time.sleep(0.5)
        with open(path, "a") as h:
            h.write("".join(prefill_line(200 + i, 1, graph=True) for i in range(10)))

    thread = threading.Thread(target=append_later)
    thread.start()
    report = api.watch([str(path)], None, {"scheduler.page_size": 1, "scheduler.chunked_prefill_size": 8192},
                       watch_options(max_forwards=10, duration_s=30.0, interval_s=0.1, recommend_every_s=0.0, poll_s=0.02),
                       from_end=True, note=notes.append, instances=["sglang-1"])
    thread.join()
    server = report.snapshot.servers[0]
    assert (report.stopped_by, server.forwards, server.observed.graph_forwards) == ("max-forwards", 10, 10)  # the 50 eager ones were before
    assert max(server.buckets) == 4096  # the settings are the head's start-up output
    assert server.windows["forwards"]["all"].first_line == 5 + 50 + 1  # line numbers stay the file's
    assert server.instance == "sglang-1" and server.to_dict()["instance"] == "sglang-1"
