"""The numpy byte parse agrees with a JSON parser on canonical lines and declines the rest."""

import json

import orjson
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples

import numpy as np

from cpbcg.planner.traces import fastparse
from cpbcg.planner.traces.fastparse import parse_canonical


def as_lists(batches):
    return [batches.batch(i) for i in range(batches.num_batches)], batches.counts.tolist()


def test_all_canonical_shapes_in_one_chunk():
    blob = (
        b'{"extend_seq_lens": [1534, 161, 353]}\n'
        b'{"extend_seq_lens":[7,80],"count":12}\n'
        b'{"extend_seq_lens": [8192], "count": 3}\n'
        b"[100, 28]\n"
        b"[5,6,7]\n"
    )
    seqs, counts = as_lists(parse_canonical(blob))
    assert seqs == [[1534, 161, 353], [7, 80], [8192], [100, 28], [5, 6, 7]]
    assert counts == [1, 12, 3, 1, 1]


@pytest.mark.parametrize(
    "line",
    [
        b'{"extend_seq_lens": [1, -2]}\n',
        b'{"extend_seq_lens": [1, 2.5]}\n',
        b'{"extend_seq_lens": [1, "2"]}\n',
        b'{"extend_seq_lens": [1, 2], "timestamp": 3.5}\n',
        b'{"extend_seq_lens": [1, 2], "id": "a7"}\n',
        b'{"extend_seq_lens": [1, 2], "id": 7, "id": 8}\n',
        b'{"extend_seq_lens": [1, 2], "extend_seq_lens": [3]}\n',
        b"[0123]\n",
        b"[5, 00]\n",
        b"[,5]\n",
        b"[5], 6\n",
        b'{"extend_seq_lens": [1, 2], "x1": 7}\n',
        b'{"extend_seq_lens": [1, 2], 3}\n',
        b'{"extend_seq_lens": [1, 2], "count": 3, 4}\n',
        b'{"extend_seq_lens": [1, 2], "count":3,4}\n',
        b'{"extend_seq_lens": [1, 2], "id": 07}\n',
        b'{"count": 2, "extend_seq_lens": [1, 2]}\n',
        b'{"extend_seq_lens":  [1, 2]}\n',
        b'{"extend_seq_lens": [1,, 2]}\n',
        b'{"extend_seq_lens": [1, 2,]}\n',
        b'{"extend_seq_lens": []}\n',
        b'{"extend_seq_lens": [1, 2]}\r\n',
        b"\n",
        b"[1, 1e5]\n",
        b"[1234567890123456]\n",
    ],
)
def test_anything_else_is_declined(line):
    assert parse_canonical(b"[1, 2]\n" + line) is None


def test_extra_integer_keys_are_read_past():
    blob = (
        b'{"extend_seq_lens": [1534, 161, 353], "count": 2, "id": 7}\n'
        b'{"extend_seq_lens":[8],"request_id":12,"count":3}\n'
        b'{"extend_seq_lens": [100, 28], "arrival_ms": 1700000000000}\n'
        b'{"extend_seq_lens": [9], "countD": 4}\n'
        b"[5, 6]\n"
    )
    seqs, counts = as_lists(parse_canonical(blob))
    assert seqs == [[1534, 161, 353], [8], [100, 28], [9], [5, 6]]
    assert counts == [2, 3, 1, 1, 1]  # digits inside key names are not values


def test_zero_alone_is_a_number_leading_zeros_are_not():
    seqs, _ = as_lists(parse_canonical(b"[0, 10, 100]\n"))
    assert seqs == [[0, 10, 100]]  # zeros come back for the caller's range check
    assert parse_canonical(b"[10, 010]\n") is None


def test_requires_trailing_newline():
    assert parse_canonical(b"[1, 2]") is None


@settings(max_examples=examples(150), deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**12), min_size=1, max_size=9),
            st.one_of(st.none(), st.integers(1, 10**6)),
            st.sampled_from(["dumps", "orjson", "bare"]),
            st.dictionaries(st.sampled_from(["id", "arrival_ms", "rank"]), st.integers(0, 10**12), max_size=2),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_agrees_with_json_on_canonical_writers(rows):
    lines = []
    for seq, count, writer, extra in rows:
        record = {"extend_seq_lens": seq} if count is None else {"extend_seq_lens": seq, "count": count}
        record.update(extra)
        if writer == "bare":
            lines.append(json.dumps(seq).encode())
        elif writer == "dumps":
            lines.append(json.dumps(record).encode())
        else:
            lines.append(orjson.dumps(record))
    seqs, counts = as_lists(parse_canonical(b"\n".join(lines) + b"\n"))
    assert seqs == [seq for seq, _, _, _ in rows]
    assert counts == [1 if c is None or w == "bare" else c for _, c, w, _ in rows]


_CANONICAL_LINES = st.lists(st.integers(0, 10**6), min_size=1, max_size=6).flatmap(
    lambda seq: st.sampled_from([json.dumps({"extend_seq_lens": seq}).encode(), orjson.dumps({"extend_seq_lens": seq}), json.dumps(seq).encode()])
)


@settings(max_examples=examples(300), deadline=None)
@given(
    lines=st.lists(_CANONICAL_LINES, min_size=1, max_size=12),
    edits=st.lists(st.tuples(st.integers(0, 10**4), st.sampled_from(list(b' ,0123456789[]{}":\nax-.'))), max_size=3),
    kind=st.sampled_from(["replace", "insert", "delete"]),
)
def test_uniform_path_never_accepts_what_the_shape_check_refuses(lines, edits, kind):
    """The unfolded fast path (`_parse_uniform`) answers only where the folded shape check
    agrees, with the same batches; on edited bytes it must decline or match."""
    blob = bytearray(b"\n".join(lines) + b"\n")
    for at, byte in edits:
        at %= len(blob)
        if kind == "replace":
            blob[at] = byte
        elif kind == "insert":
            blob.insert(at, byte)
        elif len(blob) > 1:
            del blob[at]
    data = np.frombuffer(bytes(blob), np.uint8)
    fast = fastparse._parse_uniform(data, 1 << 20)
    if fast is not None:
        folded = fastparse._parse_folded(data, 1 << 20)
        assert folded is not None, bytes(blob)
        assert as_lists(fast) == as_lists(folded)


def test_uniform_path_takes_plain_chunks():
    blob = b'{"extend_seq_lens": [1534, 161, 353]}\n{"extend_seq_lens": [7]}\n'
    assert as_lists(fastparse._parse_uniform(np.frombuffer(blob, np.uint8), 1 << 20)) == ([[1534, 161, 353], [7]], [1, 1])
    mixed = b'{"extend_seq_lens": [1, 2]}\n{"extend_seq_lens":[3,4]}\n'  # two writers: the folded path reads it
    assert fastparse._parse_uniform(np.frombuffer(mixed, np.uint8), 1 << 20) is None
    assert as_lists(parse_canonical(mixed)) == ([[1, 2], [3, 4]], [1, 1])


@pytest.mark.parametrize(
    "body",
    [
        b"[1, 2,34 5]", b"[1,2, 34]", b"[1, 2 ,3]", b"[1 2, 3]", b"[1, 2]]", b"[[1, 2]", b"[1, 2]x",
        b"[1,, 2]", b"[1,,2]", b"[,1]", b"[1,]", b"[ 1, 2]", b"[1, 2 ]", b"[01, 2]", b"[1, -2]", b"[1, 2.0]", b"[]",
    ],
)
def test_uniform_path_declines_near_misses(body):
    for frame in (b'{"extend_seq_lens": %s}\n', b'{"extend_seq_lens":%s}\n', b"%s\n"):
        for first in (b"[7, 8]", b"[7,8]"):
            blob = frame % first + frame % body
            assert fastparse._parse_uniform(np.frombuffer(blob, np.uint8), 1 << 20) is None, blob


@pytest.mark.parametrize(
    "line",
    [b'{"extend_seq_lenz": [1, 2]}', b'{"extend_seq_lens": [1, 2]]', b'{"extend_seq_lens": [1, 2],', b"(1, 2]", b"[1, 2)"],
)
def test_uniform_path_checks_every_frame(line):
    for first in (b'{"extend_seq_lens": [7, 8]}', b"[7, 8]"):
        blob = first + b"\n" + line + b"\n"
        assert fastparse._parse_uniform(np.frombuffer(blob, np.uint8), 1 << 20) is None, blob


@pytest.mark.parametrize("frame", [b'{"extend_seq_lens": [%s]}\n', b"[%s]\n", b'{"extend_seq_lens": [%s], "count": 2}\n'])
def test_digit_runs_past_fifteen_digits_are_left_to_the_careful_path(frame):
    # 2**64 + 5 would wrap to 5 in int64 arithmetic: no fast path may read it as an in-range value
    for value in (b"18446744073709551621", b"1234567890123456", b"9" * 40):
        blob = frame % b"7, 8" + frame % (b"3, " + value)
        assert parse_canonical(blob) is None, blob
    fifteen = frame % b"123456789012345"
    assert as_lists(parse_canonical(fifteen))[0] == [[123456789012345]]
