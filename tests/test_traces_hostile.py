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
from cpbcg.assembly.registry import FORMATS, open_trace
from cpbcg.errors import MAX_LIBRARY_MESSAGE_CHARS

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
            assert message.startswith(str(path)) and "\n" not in message and len(message) <= MAX_LIBRARY_MESSAGE_CHARS, (fmt, message)


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
    from cpbcg.assembly import registry

    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n \n" * (1 << 20))
    with pytest.raises(TraceError, match=f"^{path}:1: empty trace: no requests$"):
        list(open_trace(path).items)
    monkeypatch.setattr(registry, "MAX_BLANK_BYTES", 1 << 20)
    with pytest.raises(TraceError, match=f"^{path}:\\d+: more than 1 MiB of blank lines before the first record$"):
        list(open_trace(path).items)


def test_a_blank_line_longer_than_any_line_is_refused_while_detecting(tmp_path):
    # detection stops at the limit instead of holding an endless line of spaces in memory
    from cpbcg.assembly.registry import sniff

    path = tmp_path / "spaces.jsonl"
    path.write_bytes(b"\n" + b" " * (3 << 20) + b"\n[5]\n")
    with pytest.raises(TraceError, match=f"^{path}:2: line longer than"):
        sniff(path)


def test_chunks_of_blank_lines_are_skipped_and_counted(tmp_path):
    # 3 MiB of blank lines (whole 1 MiB chunks of nothing) between batches: skipped, and the
    # line numbers after them stay right
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"[5]\n" + b"\n \t\r\n" * (3 << 18) + b"[7]\n[-1]\n")
    with pytest.raises(TraceError, match=f"^{path}:{2 + (3 << 19) + 1}: list\\[0\\]: -1 is not a positive integer$"):
        _batches(path)


@pytest.mark.parametrize("key", [rb'"c\u006funt"', rb'"\u0063ount"', rb'"\u0063\u006f\u0075\u006e\u0074"'])
def test_a_count_key_spelled_with_json_escapes_still_counts(tmp_path, key):
    path = tmp_path / "escaped.jsonl"
    path.write_bytes(b"{" + key + b': 4, "extend_seq_lens": [100]}\n[7]\n')
    items = list(open_trace(path).items)
    assert [int(b.counts.sum()) for b in items] == [5] and [int((b.counts * b.num_tokens).sum()) for b in items] == [407]
    path.write_bytes(b"{" + key + b': 0, "extend_seq_lens": [100]}\n')
    with pytest.raises(TraceError, match=r":1: count: 0 is not a positive integer"):
        _batches(path)


@pytest.mark.parametrize("written,said", [
    (b"[18446744073709551621]", "list[0]: 18446744073709551621 is above the largest supported length 2147483647"),
    (b'{"extend_seq_lens": [-99999999999999999999]}', "extend_seq_lens[0]: -99999999999999999999 is not a positive integer"),
    (b'{"extend_seq_lens": [5], "count": 123456789012345678901}', "count: 123456789012345678901 is not a positive integer up to 2147483647"),
    (b"[1e20]", "list[0]: 1e+20 is not a positive integer"),
])
def test_integers_past_64_bits_are_quoted_as_written(tmp_path, written, said):
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"[5]\n" + written + b"\n")
    with pytest.raises(TraceError, match=f"^{path}:2: " + said.replace("[", r"\[").replace("]", r"\]").replace("+", r"\+") + "$"):
        _batches(path)


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b""])
def test_the_line_limit_is_the_same_for_every_line_ending(tmp_path, end):
    from cpbcg.planner.traces.text import MAX_LINE_BYTES

    path = tmp_path / "long.jsonl"
    for extra in (0, 1):  # a line of exactly the limit (ending excluded) reads; one byte more is refused
        line = b"[5" + b" " * (MAX_LINE_BYTES + extra - 3) + b"]"
        path.write_bytes(b"[7]\n" + line + end)
        if extra:
            with pytest.raises(TraceError, match=f"^{path}:2: line longer than {MAX_LINE_BYTES} bytes"):
                _batches(path)
        else:
            assert _batches(path) == (2, 12)


@pytest.mark.parametrize("name, body, message", [
    ("b.jsonl", '[5]\n{"extend_seq_lens": [5], "extend_seq_lens": [6]}\n', "b.jsonl:2: extend_seq_lens: duplicate key"),
    ("c.jsonl", '{"extend_seq_lens": [5], "count": 2, "count": 3}\n', "c.jsonl:1: count: duplicate key"),
    ("n.jsonl", '{"extend_seq_lens": [5], "x": {"a": 1, "a": 2}}\n', "n.jsonl:1: a: duplicate key"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 100, "output_length": 1}\n{"timestamp": 1, "input_length": 100, "input_length": 5, "output_length": 1}\n',
     "m.jsonl:2: input_length: duplicate key"),
    ("v.json", '{"input_lens": [5, 6],\n "output_lens": [1, 2],\n "input_lens": [7]}', "v.json:1: input_lens: duplicate key"),
])
def test_a_repeated_json_key_is_refused_by_every_reader(tmp_path, name, body, message):
    # orjson keeps the last value silently; configs and bucket files refuse a repeated key, so traces do too
    (tmp_path / name).write_text(body)
    with pytest.raises(TraceError) as info:
        list(open_trace(tmp_path / name).items)
    assert message in str(info.value), str(info.value)


def test_a_colon_inside_a_string_is_no_repeated_key(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"extend_seq_lens": [5], "note": "a:b"}\n{"extend_seq_lens": [6], "x": {"a": 1}, "y": {"a": 2}}\n')
    assert len(list(open_trace(path).items)) == 1
