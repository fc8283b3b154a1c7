"""The numpy byte parse agrees with a JSON parser on canonical lines and declines the rest."""

import json

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from cpbcg.planner.fastparse import parse_canonical


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
        b'{"extend_seq_lens": [1, 2], "timestamp": 3}\n',
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


def test_requires_trailing_newline():
    assert parse_canonical(b"[1, 2]") is None


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.lists(st.integers(0, 10**12), min_size=1, max_size=9),
            st.one_of(st.none(), st.integers(1, 10**6)),
            st.sampled_from(["dumps", "orjson", "bare"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_agrees_with_json_on_canonical_writers(rows):
    lines = []
    for seq, count, writer in rows:
        record = {"extend_seq_lens": seq} if count is None else {"extend_seq_lens": seq, "count": count}
        if writer == "bare":
            lines.append(json.dumps(seq).encode())
        elif writer == "dumps":
            lines.append(json.dumps(record).encode())
        else:
            lines.append(orjson.dumps(record))
    seqs, counts = as_lists(parse_canonical(b"\n".join(lines) + b"\n"))
    assert seqs == [seq for seq, _, _ in rows]
    assert counts == [1 if c is None or w == "bare" else c for _, c, w in rows]
