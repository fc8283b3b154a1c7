"""Batch-trace reader: good inputs, weights, gzip, and every malformed input with FILE:LINE."""

import gzip

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.planner.traces.batches import read_batch_trace
from cpbcg.planner.layout import BatchSet


def read_all(path, **kw) -> BatchSet:
    return BatchSet.concat(read_batch_trace(path, **kw))


@pytest.mark.parametrize("name", ["good.jsonl", "good.jsonl.gz"])
def test_good_trace_with_counts_bare_lists_and_blank_lines(assets, name):
    batches = read_all(assets / "traces" / name)
    assert [batches.batch(i) for i in range(3)] == [[1534, 161, 353], [8192], [100, 28]]
    assert batches.counts.tolist() == [1, 3, 1]


@pytest.mark.parametrize(
    "name, message",
    [
        ("not-json.jsonl", ":2: not valid JSON"),
        ("negative-length.jsonl", ":2: extend_seq_lens[1]: -5 is not a positive integer"),
        ("zero-length.jsonl", ":2: extend_seq_lens[1]: 0 is not a positive integer"),
        ("float-length.jsonl", ":2: extend_seq_lens[1]: 2.5 is not a positive integer"),
        ("string-length.jsonl", ':2: extend_seq_lens[1]: "32" is not a positive integer'),
        ("bool-length.jsonl", ":2: extend_seq_lens[1]: true is not a positive integer"),
        ("missing-field.jsonl", ':2: missing field "extend_seq_lens"'),
        ("empty-batch.jsonl", ":2: extend_seq_lens: empty batch"),
        ("zero-count.jsonl", ":2: count: 0 is not a positive integer"),
        ("lens-not-list.jsonl", ":2: extend_seq_lens: expected a list of lengths, got int"),
        ("scalar-line.jsonl", ":2: expected {\"extend_seq_lens\": [...]} or a JSON list of lengths, got int"),
        ("empty.jsonl", ":1: empty trace: no batches"),
        ("blank-lines-only.jsonl", ":1: empty trace: no batches"),
        ("truncated.jsonl.gz", ":1: truncated or corrupt gzip"),
    ],
)
def test_malformed_inputs_name_file_and_line(assets, name, message):
    path = assets / "traces" / name
    with pytest.raises(TraceError) as info:
        read_all(path)
    assert str(info.value).startswith(f"{path}{message}")


@pytest.mark.parametrize("value", ["9223372036854775807", "9999999999", "2147483648"])
def test_lengths_above_the_supported_range_are_refused(tmp_path, value):
    path = tmp_path / "huge.jsonl"
    path.write_text('{"extend_seq_lens": [16]}\n{"extend_seq_lens": [16, %s]}\n' % value)
    with pytest.raises(TraceError, match=f"huge.jsonl:2: extend_seq_lens\\[1\\]: {value} is above the largest supported length 2147483647"):
        read_all(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot open: No such file or directory"):
        read_all(tmp_path / "nope.jsonl")


def test_line_numbers_stay_right_across_chunks(tmp_path):
    lines = [b'{"extend_seq_lens": [16, 16]}\n'] * 999 + [b'{"extend_seq_lens": [16, -1]}\n']
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"".join(lines))
    with pytest.raises(TraceError, match=r"long.jsonl:1000: extend_seq_lens\[1\]"):
        read_all(path, chunk_bytes=4096)


def test_chunked_read_equals_whole_read(tmp_path):
    rng = np.random.default_rng(3)
    rows = [rng.integers(1, 9000, rng.integers(1, 9)).tolist() for _ in range(3000)]
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        for i, row in enumerate(rows):
            handle.write(f'{{"extend_seq_lens": {row}, "count": {1 + i % 3}}}\n')
    small = read_all(path, chunk_bytes=2048)
    whole = read_all(path)
    assert [small.batch(i) for i in range(len(rows))] == rows
    assert np.array_equal(small.counts, whole.counts) and small.counts[:3].tolist() == [1, 2, 3]
