"""A trace is detected once and opened once per use (issue 28): `plan` and `replay-check` detect
its format at the input edge (`cpbcg.assembly.sources.detect_input`) and pass the
detected `TraceInput` along; a server log's start-up output is read once. Counted by wrapping
the detector (`registry.sniff`, which every detection calls) and `open` on the trace's path."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from cpbcg.cli import main
from cpbcg.assembly import registry
from sglang_log_fixtures import prefill_line, startup_lines, write_log


@pytest.fixture()
def counted(monkeypatch):
    """`counts(path)` -> (detections, opens of `path`) since the fixture started."""
    detections: list[object] = []
    opened: list[str] = []
    real_open, real_sniff = builtins.open, registry.sniff

    def sniff(path):
        detections.append(path)
        return real_sniff(path)

    def counting_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(registry, "sniff", sniff)
    monkeypatch.setattr(builtins, "open", counting_open)
    return lambda path: (len(detections), opened.count(str(path)))


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.fixture()
def log(tmp_path) -> Path:
    return write_log(tmp_path / "server.log", startup_lines(cp=4) + "".join(prefill_line(2048, 3, 512) for _ in range(5)))


def test_plan_of_a_server_log_detects_it_once_and_opens_it_three_times(log, counted, capsys):
    # before: 2 detections and 5 opens (the start-up output read twice, the format sniffed twice)
    assert run(["plan", "-t", str(log), "--no-recommend"]) == 0
    # one detection (its first line), one read of the start-up output, one pass over the forwards
    assert counted(log) == (1, 3)


def test_plan_with_the_recommendation_opens_the_log_no_more(log, counted, capsys):
    assert run(["plan", "-t", str(log)]) == 0
    assert counted(log) == (1, 3)


def test_replay_check_of_a_server_log_detects_it_once(log, counted, capsys):
    # before: 2 detections and 5 opens
    assert run(["replay-check", "-t", str(log), "--report-only"]) == 0
    assert counted(log) == (1, 3)


def test_a_request_trace_at_two_loads_is_detected_once(tmp_path, counted, capsys):
    # before: 6 detections (input edge, the ignored-option check, the first open, the rate
    # profile and once per load factor as each job reopened the trace with `auto`)
    trace = tmp_path / "azure.csv"
    rows = "".join(f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,{100 + 37 * i % 4000},{10 + i % 200}\n" for i in range(200))
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    argv = ["plan", "-t", str(trace), "--time-scale", "1,2", "--jobs", "1", "--page-size", "1", "--chunked-prefill-size", "8192",
            "--rate", "3", "--no-recommend"]
    assert run(argv) == 0
    assert counted(trace)[0] == 1


def test_a_csv_request_trace_is_read_in_one_pass(tmp_path, counted, capsys):
    # before: 8 opens, the CSV reader opening the file twice per pass (its header, then its body)
    trace = tmp_path / "azure.csv"
    rows = "".join(f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,{100 + 37 * i % 4000},{10 + i % 200}\n" for i in range(200))
    trace.write_text("\n\nTIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    argv = ["plan", "-t", str(trace), "--jobs", "1", "--page-size", "1", "--chunked-prefill-size", "8192", "--no-recommend"]
    assert run(argv) == 0
    assert counted(trace) == (1, 5)  # the detection, then one open per pass of the reader
