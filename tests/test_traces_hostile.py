"""Mutated fixtures of every format: a reader either reads them or raises one short `TraceError`
naming the file (never another exception, never a multi-line or huge message).

Fast by default (300 seeded cases); `CPBCG_TRACE_FUZZ_CASES=20000 pytest tests/test_traces_hostile.py`
runs the long mode.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from cpbcg.errors import TraceError
from cpbcg.planner.traces import FORMATS, open_trace

ASSETS = Path(__file__).parent / "assets"
SEEDS = sorted(p for d in ("requests", "traces") for p in (ASSETS / d).iterdir() if p.is_file())
TOKENS = [
    b"0", b"-1", b"1e400", b"99999999999999999999", b"[", b"]", b"{", b"}", b",", b'"', b"\n", b"\r\n",
    b"\x00", b"\xff", b"null", b"true", b"NaN", b"[[[[[[[[", b'"input_length": [1,2]', b"\xef\xbb\xbf",
    b"2023-13-45 99:99:99", b"9999-01-01 00:00:00", b"Prefill batch, #new-seq: 0, #new-token: 5, #cached-token: 0",
    b"PAR1", b"\x1f\x8b", b"0123", b'"count": 0', b', "id": 7',
]
CASES = int(os.environ.get("CPBCG_TRACE_FUZZ_CASES", "300"))


def mutate(rng: random.Random) -> bytes:
    data = bytearray(rng.choice(SEEDS).read_bytes())
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(data))
        if data and rng.random() < 0.5:
            del data[pos : pos + rng.randint(1, 8)]
        data[pos:pos] = rng.choice(TOKENS)
    return bytes(data)


@pytest.mark.parametrize("block", range(10))
def test_mutated_traces_read_or_fail_with_one_short_line(tmp_path, block):
    rng = random.Random(block)
    names = ["auto"] * 4 + [f.name for f in FORMATS]
    for case in range(CASES // 10):
        path = tmp_path / f"case{case}.trace"
        path.write_bytes(mutate(rng))
        fmt = rng.choice(names)
        try:
            for _ in open_trace(path, fmt).items:
                pass
        except TraceError as exc:
            message = str(exc)
            assert message.startswith(str(path)) and "\n" not in message and len(message) <= 300, (fmt, message)


def test_a_duplicate_column_is_refused():
    path = ASSETS / "requests" / "duplicate-column.csv"
    with pytest.raises(TraceError, match=f'^{path}:1: column "ContextTokens" appears 2 times in the header$'):
        list(open_trace(path).items)


def _batches(path):
    items = list(open_trace(path).items)
    return sum(b.num_batches for b in items), sum(int(b.extend_seq_lens.sum()) for b in items)


def test_millions_of_blank_lines_read_in_linear_time(tmp_path):
    # 17 MiB of newlines between two batches: a chunk of nothing but blank lines (this took
    # quadratic time, minutes, when trailing blank lines were dropped one list copy at a time)
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"[5]\n" + b"\n" * (17 << 20) + b"[7]\n")
    assert _batches(path) == (2, 12)


@pytest.mark.parametrize("blank", [(1 << 20) - 1, 1 << 20, 5 << 20])
def test_leading_blank_lines_longer_than_the_detection_head(tmp_path, blank):
    path = tmp_path / "lead.jsonl"
    path.write_bytes(b"\n" * blank + b'{"extend_seq_lens":[5]}\n{"extend_seq_lens":[7]}\n')
    assert _batches(path) == (2, 12)


def test_only_blank_lines_say_so(tmp_path, monkeypatch):
    from cpbcg.planner.traces import registry

    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n \n" * (1 << 20))
    with pytest.raises(TraceError, match=f"^{path}:1: empty trace: no requests$"):
        list(open_trace(path).items)
    monkeypatch.setattr(registry, "MAX_BLANK_BYTES", 1 << 20)
    with pytest.raises(TraceError, match=f"^{path}:\\d+: more than 1 MiB of blank lines before the first record$"):
        list(open_trace(path).items)


def test_a_blank_line_longer_than_any_line_is_refused_while_detecting(tmp_path):
    # detection stops at the limit instead of holding an endless line of spaces in memory
    from cpbcg.planner.traces.registry import sniff

    path = tmp_path / "spaces.jsonl"
    path.write_bytes(b"\n" + b" " * (3 << 20) + b"\n[5]\n")
    with pytest.raises(TraceError, match=f"^{path}:2: line longer than"):
        sniff(path)
