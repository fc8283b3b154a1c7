"""Issue 32 (hostile and odd input, round four): one test asset per cause, each failing without its fix."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from cpbcg.cli import app
from cpbcg.planner.traces import ReadOptions, open_trace

runner = CliRunner()
PINNED = ("--page-size", "1", "--chunked-prefill-size", "8192")
"""Deployment numbers these tests depend on, pinned (the defaults move with issue 29)."""


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"CPBCG_WIDTH": "200"})


def test_sglang_requests_unbounded_times_and_impossible_dates_are_skipped_counted_and_said(assets):
    """Cause 1 and 8: `e2e_latency` of 331 digits (inf), `entry_time` of 401 digits, a 401-digit
    queue duration and `[2026-13-45 ...]` were read with unbounded `float()` / `fromisoformat`
    (hang, OverflowError, ValueError traceback); now each such line is skipped, counted and said."""
    path = assets / "round4" / "sglang-requests-unbounded.log"
    opened = open_trace(path)
    chunks = list(opened.request_chunks())
    assert [c.input_tokens.tolist() for c in chunks] == [[1000, 1500]]
    assert chunks[0].arrival_s.tolist() == [0.0, 1.5]  # 00:00:05 - 1 s e2e; entry_time 1767225605.5
    assert opened.notes.notes == [f"skipped 4 unreadable request lines (no lengths, or an impossible time; first: {path}:1)"]
    result = invoke("batches", "-t", str(path), "-o", "-", *PINNED)
    assert result.exit_code == 0, result.output
    assert f"cpbcg: note: skipped 4 unreadable request lines (no lengths, or an impossible time; first: {path}:1)" in result.stderr
    strict = invoke("batches", "-t", str(path), "-o", "-", "--strict", *PINNED)
    assert strict.exit_code == 2 and strict.stderr.startswith(f"cpbcg: error: {path}:1: unreadable request line"), strict.output
    assert list(open_trace(path, options=ReadOptions()).request_chunks())[0].num_requests == 2


@pytest.mark.parametrize("args", [("plan", "-t", ""), ("plan", "-t", " "), ("batches", "-o", "-", "-t", ""), ("replay-check", "--report-only", "-t", ""),
                                  ("plan", "-t", "x.jsonl", "--fit-trace", "")])
def test_an_empty_trace_path_is_refused_not_read_as_the_current_directory(args, tmp_path, monkeypatch):
    """Cause 7: `-t ""` (an unset shell variable) planned every file of the current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("[100]\n")
    result = invoke(*args)
    assert result.exit_code == 2 and "an empty path (an unset shell variable?)" in result.stderr, result.output
    assert result.stdout == ""
    from cpbcg.api import trace_paths
    from cpbcg.errors import TraceError

    with pytest.raises(TraceError, match="an empty trace path"):
        trace_paths([""])


def test_fit_trace_naming_a_given_trace_another_way_plans_it_once(tmp_path, monkeypatch):
    """Cause 5: `--fit-trace sub/../a.jsonl` (or the absolute path) for `-t a.jsonl` planned it twice."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.jsonl").write_text("[100]\n[200, 300]\n[4000]\n")
    (tmp_path / "b.jsonl").write_text("[900]\n")
    for fit in ("sub/../a.jsonl", str(tmp_path / "a.jsonl"), "./a.jsonl"):
        result = invoke("plan", "--format", "json", "-t", "a.jsonl", "-t", "b.jsonl", "--fit-trace", fit, "-k", "3", *PINNED)
        assert result.exit_code == 0, result.output
        doc = orjson.loads(result.stdout)
        assert doc["batches"] == 4 and [t["trace"] for t in doc["traffic"]] == ["a.jsonl", "b.jsonl"]
        assert [t["fit"] for t in doc["traffic"]] == [True, False]
