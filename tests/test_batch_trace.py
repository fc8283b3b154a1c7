"""Batch-trace reader: good inputs, weights, gzip, and every malformed input with FILE:LINE."""

import gzip

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.planner.traces.batches import read_batch_trace
from cpbcg.planner.model.layout import BatchSet
from cpbcg.errors import MAX_LIBRARY_MESSAGE_CHARS


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
        ("truncated.jsonl.gz", ": truncated gzip stream (after 0 lines)"),
        ("comma-joined-lists.jsonl", ":2: not valid JSON"),
        ("comma-joined-lists.jsonl.gz", ":2: not valid JSON"),
        ("comma-joined-objects.jsonl", ":2: not valid JSON"),
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


# Hostile inputs (one asset, one test per root cause).


def test_a_line_nested_1000_deep_is_one_clean_error(assets):
    path = assets / "traces" / "deep-nesting.jsonl"
    with pytest.raises(TraceError) as info:
        read_all(path)
    assert str(info.value) == f"{path}:1: list[0]: a deeply nested list is not a positive integer"


def test_a_line_nested_1000_deep_exits_2_from_the_cli(assets):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    result = CliRunner().invoke(app, ["plan", "-t", str(assets / "traces" / "deep-nesting.jsonl")])
    assert result.exit_code == 2 and result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"cpbcg: error: {assets / 'traces' / 'deep-nesting.jsonl'}:1: list[0]: a deeply nested list is not a positive integer"]


@pytest.mark.parametrize("name, line", [("leading-zero-line1.jsonl", 1), ("leading-zero-line2.jsonl", 2)])
def test_leading_zeros_are_refused_on_every_line(assets, name, line):
    path = assets / "traces" / name
    with pytest.raises(TraceError, match=f"^{path}:{line}: not valid JSON \\(number with leading zero is not allowed\\)$"):
        read_all(path)


def test_extra_keys_are_ignored_on_every_path(assets):
    batches = read_all(assets / "traces" / "extra-keys.jsonl")
    assert [batches.batch(i) for i in range(3)] == [[16, 32], [8], [4, 4]]
    assert batches.counts.tolist() == [2, 1, 1]


def test_extra_integer_keys_stay_on_the_fast_path(tmp_path, monkeypatch):
    import cpbcg.planner.traces.batches as reader

    path = tmp_path / "ids.jsonl"
    path.write_text("".join(f'{{"extend_seq_lens": [{i + 1}, 7], "count": 2, "id": {i}}}\n' for i in range(1000)))
    monkeypatch.setattr(reader, "_parse_fast", None)  # the orjson and line-by-line paths would fail
    monkeypatch.setattr(reader, "_parse_slow", None)
    batches = read_all(path)
    assert batches.num_batches == 1000 and batches.batch(999) == [1000, 7] and set(batches.counts.tolist()) == {2}


@pytest.mark.parametrize("fmt", ["auto", "batches", "mooncake", "azure", "sglang-log"])
def test_dev_zero_is_refused_before_it_is_read(fmt):
    from cpbcg.assembly.registry import open_trace

    with pytest.raises(TraceError, match=r"^/dev/zero: a pipe, FIFO or device, not a trace file"):
        list(open_trace("/dev/zero", fmt).items)


@pytest.mark.parametrize("fmt", ["auto", "batches", "mooncake", "azure", "sglang-log"])
def test_a_line_longer_than_1_mib_is_refused(fmt, tmp_path):
    from cpbcg.assembly.registry import open_trace

    path = tmp_path / "long.txt"
    path.write_bytes(b"[" + b"1," * (1 << 19) + b"1]\n")  # one line of 1 MiB + 3 bytes
    with pytest.raises(TraceError, match=r":1: line longer than 1048576 bytes \(1 MiB\)"):
        list(open_trace(path, fmt).items)


@pytest.mark.parametrize("fmt", ["vllm", "parquet"])
def test_dev_zero_is_refused_where_a_file_is_read_whole(fmt):
    from cpbcg.assembly.registry import open_trace

    with pytest.raises(TraceError, match=r"^/dev/zero: a pipe, FIFO or device, not a trace file"):
        list(open_trace("/dev/zero", fmt).items)


def test_a_long_line_inside_a_chunk_is_refused_on_every_path(tmp_path):
    path = tmp_path / "long.jsonl"
    long_list = ", ".join(["7"] * 400_000)  # 1.2 MB, canonical
    path.write_text('{"extend_seq_lens": [5]}\n{"extend_seq_lens": [%s]}\n' % long_list)
    with pytest.raises(TraceError, match=r"long.jsonl:2: line longer than 1048576 bytes"):
        read_all(path)


def test_error_messages_quote_a_short_excerpt(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"extend_seq_lens": [5]}\n{"extend_seq_lens": [5, "%s"]}\n' % ("x" * 500_000))
    with pytest.raises(TraceError) as info:
        read_all(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: extend_seq_lens[1]: ") and len(message) <= MAX_LIBRARY_MESSAGE_CHARS and "\n" not in message


def test_forwards_above_the_chunk_of_a_batch_trace_are_warned_about_with_their_count(tmp_path):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    trace = tmp_path / "batches.jsonl"
    trace.write_text('{"extend_seq_lens":[74]}\n{"extend_seq_lens":[290]}\n{"extend_seq_lens":[1402,2497]}\n'
                     '{"extend_seq_lens":[20000000]}\n')
    result = CliRunner().invoke(app, ["plan", "-t", str(trace), "--chunked-prefill-size", "100", "--no-recommend"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "exceed chunked_prefill_size" in line]
    assert said == [f"cpbcg: warning: {trace}: 3 of 4 forwards (75.00%) exceed chunked_prefill_size 100 (largest 20,000,000 "
                    "tokens): a batch trace states forwards as the server formed them, and a server with that chunk never forms "
                    "one above it, so the trace contradicts the chunk (set --chunked-prefill-size to the server's, or plan the "
                    "request trace, which the simulation chunks)"]
    # replay-check says it too, and counts them in its JSON
    import orjson

    result = CliRunner().invoke(app, ["replay-check", "-t", str(trace), "--chunked-prefill-size", "100", "--min-coverage", "0",
                                      "-f", "json"])
    assert result.exit_code == 0 and orjson.loads(result.stdout)["forwards_above_chunked_prefill_size"] == 3
    assert "3 of 4 forwards (75.00%) exceed chunked_prefill_size 100" in result.stderr
    # within the chunk: nothing said
    result = CliRunner().invoke(app, ["plan", "-t", str(trace), "--chunked-prefill-size", "-1", "--no-recommend"])
    assert result.exit_code == 0 and "exceed chunked_prefill_size" not in result.stderr


def test_a_chunk_above_the_largest_bucket_of_a_request_trace_is_warned_about(tmp_path):
    from typer.testing import CliRunner

    from cpbcg.cli import app

    trace = tmp_path / "requests.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 1000, "output_length": 1}}\n' for i in range(3)))
    # chunk 100: 0.5.23's list for it ends at 96 (no off-grid 100), so each 100-token chunk runs eagerly
    result = CliRunner().invoke(app, ["plan", "-t", str(trace), "--chunked-prefill-size", "100", "--cp-size", "1", "--no-recommend"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "above the largest bucket" in line]
    assert said == ["cpbcg: warning: 27 forwards (81.82%) are above the largest bucket, 96, which is below chunked_prefill_size 100: "
                    "every full chunk runs eagerly (SGLang 0.5.23's prefill list keeps its grid up to the chunk and appends no "
                    "off-grid size); a chunk on the grid, or a list that holds 100 (the recommendation), keeps them in graphs"]
    result = CliRunner().invoke(app, ["plan", "-t", str(trace), "--chunked-prefill-size", "96", "--cp-size", "1", "--no-recommend"])
    assert result.exit_code == 0 and "above the largest bucket" not in result.stderr
