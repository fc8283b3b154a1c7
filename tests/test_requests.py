"""Request-trace readers: formats, auto-detection, gzip, and every malformed input refused."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.planner.traces import ReadOptions, TraceFormat
from cpbcg.assembly.registry import detect_format, read_requests

ASSETS = Path(__file__).parent / "assets" / "requests"
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def read_chunks(name: str | Path, fmt: TraceFormat = TraceFormat.auto, **options):
    path = ASSETS / name if isinstance(name, str) else name
    return list(read_requests(path, fmt, ReadOptions(**options)))


def read_all(name: str | Path, fmt: TraceFormat = TraceFormat.auto, length_field=None, time_field=None):
    chunks = read_chunks(name, fmt, length_field=length_field, time_field=time_field)
    lengths = np.concatenate([c.input_tokens for c in chunks])
    times = None if chunks[0].arrival_s is None else np.concatenate([c.arrival_s for c in chunks])
    hashes = None if chunks[0].hash_ids is None else [h for c in chunks for h in c.hash_ids]
    return lengths.tolist(), times, hashes


def outputs_of(name: str | Path, fmt: TraceFormat = TraceFormat.auto, **options):
    chunks = read_chunks(name, fmt, **options)
    return None if chunks[0].output_tokens is None else np.concatenate([c.output_tokens for c in chunks]).tolist()


@pytest.mark.parametrize(
    "name, length_field, expected",
    [
        ("mooncake.jsonl", None, TraceFormat.mooncake),
        ("azure.csv", None, TraceFormat.azure),
        ("vidur.csv", None, TraceFormat.vidur),
        ("vidur-arrived-at.csv", None, TraceFormat.vidur),
        ("generic.csv", "prompt_tokens", TraceFormat.csv),
        ("generic.jsonl", "prompt", TraceFormat.jsonl),
    ],
)
def test_detect_format(name, length_field, expected):
    assert detect_format(ASSETS / name, length_field) is expected


def test_detect_batch_trace(tmp_path):
    (tmp_path / "lens.jsonl").write_text('{"extend_seq_lens": [1534, 161, 353]}\n')
    (tmp_path / "bare.jsonl").write_text("[5, 6]\n")
    assert detect_format(tmp_path / "lens.jsonl") is TraceFormat.batches
    assert detect_format(tmp_path / "bare.jsonl") is TraceFormat.batches


def test_mooncake_reader():
    lengths, times, hashes = read_all("mooncake.jsonl")
    assert lengths == [1200, 600, 1100, 1200]
    assert times.tolist() == [0.0, 0.0, 3.0, 6.0]  # ms → s
    assert hashes == [[1, 2, 3], [4, 5], [1, 2, 9], [1, 2, 3]]


def test_azure_reader_wall_clock():
    lengths, times, hashes = read_all("azure.csv")
    assert lengths == [374, 396, 879, 91]
    assert np.allclose(times - times[0], [0.0, 0.314579, 4.541877, 4.541877], atol=1e-6)
    assert hashes is None


def test_vidur_reader_without_and_with_timestamps():
    lengths, times, _ = read_all("vidur.csv")
    assert lengths == [3772, 2015, 3858] and times is None
    lengths, times, _ = read_all("vidur-arrived-at.csv")
    assert lengths == [100, 200, 300] and times.tolist() == [0.0, 0.5, 2.25]


def test_generic_readers():
    lengths, times, _ = read_all("generic.csv", TraceFormat.csv, "prompt_tokens", "sent_at")
    assert lengths == [100, 200, 300] and times.tolist() == [1.5, 2.0, 4.0]
    lengths, times, _ = read_all("generic.jsonl", TraceFormat.jsonl, "prompt", "t")
    assert lengths == [50, 70] and (times - times[0]).tolist() == [0.0, 2.5]
    lengths, times, _ = read_all("generic.csv", TraceFormat.csv, "prompt_tokens")
    assert lengths == [100, 200, 300] and times is None


def test_gzip_is_read_transparently(tmp_path):
    packed = tmp_path / "mooncake.jsonl.gz"
    with open(ASSETS / "mooncake.jsonl", "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert read_all(packed)[0] == [1200, 600, 1100, 1200]


@pytest.mark.parametrize(
    "name, fmt, options, message",
    [
        ("missing-column.csv", TraceFormat.azure, {}, 'missing-column.csv:1: missing column "ContextTokens"'),
        ("missing-field.jsonl", TraceFormat.auto, {}, 'missing-field.jsonl:3: missing field "input_length"'),
        ("negative-length.csv", TraceFormat.auto, {}, "negative-length.csv:3: num_prefill_tokens: '-5' is not a positive integer"),
        ("non-integer-length.csv", TraceFormat.auto, {}, "non-integer-length.csv:4: ContextTokens: '12.5' is not a positive integer"),
        ("non-integer-length.jsonl", TraceFormat.auto, {}, "non-integer-length.jsonl:2: input_length: 99.5 is not a positive integer"),
        ("non-monotonic-timestamps.csv", TraceFormat.auto, {}, "non-monotonic-timestamps.csv:4: timestamp goes backwards"),
        ("non-monotonic-timestamps.jsonl", TraceFormat.auto, {}, "non-monotonic-timestamps.jsonl:4: timestamp goes backwards"),
        ("bad-timestamp.csv", TraceFormat.auto, {}, "bad-timestamp.csv:3: TIMESTAMP: 'yesterday' is not a timestamp"),
        ("short-row.csv", TraceFormat.auto, {}, "short-row.csv:3: expected 3 fields, got 2"),
        ("bad-hash-ids.jsonl", TraceFormat.auto, {}, "bad-hash-ids.jsonl:2: hash_ids: expected a list of integers"),
        ("bad-json.jsonl", TraceFormat.auto, {}, "bad-json.jsonl:2: not valid JSON"),
        ("empty.csv", TraceFormat.auto, {}, "empty.csv:1: empty trace: no requests"),
        ("header-only.csv", TraceFormat.auto, {}, "header-only.csv:1: empty trace: no requests"),
        ("unknown-columns.csv", TraceFormat.auto, {}, "unknown-columns.csv:1: unknown CSV trace (columns: when, tokens); formats: batches, parquet, vllm"),
        ("unknown-keys.jsonl", TraceFormat.auto, {}, "unknown-keys.jsonl:1: unknown JSONL trace (keys: when, tokens)"),
        ("azure.csv", TraceFormat.mooncake, {}, "azure.csv:1: not a JSON object: mooncake traces are JSONL"),
        ("mooncake.jsonl", TraceFormat.azure, {}, "mooncake.jsonl:1: not a CSV header: azure traces are CSV"),
        ("azure.csv", TraceFormat.vidur, {}, 'azure.csv:1: missing column "num_prefill_tokens"'),
        ("azure.csv", TraceFormat.csv, {}, "azure.csv:1: trace format csv needs --length-field (the prompt-length field; no column is named input_tokens, prompt_tokens"),
        ("generic.jsonl", TraceFormat.jsonl, {"length_field": "prompt", "time_field": "nope"}, 'generic.jsonl:1: missing field "nope"'),
        ("binary.jsonl", TraceFormat.auto, {}, "binary.jsonl:1: not a text trace: binary data b'"),
        ("binary.jsonl", TraceFormat.azure, {}, "binary.jsonl:1: not a text trace: binary data b'"),
        ("cut-header.jsonl.gz", TraceFormat.auto, {}, "cut-header.jsonl.gz: truncated gzip stream (after 0 lines)"),
        ("cut-header.jsonl.gz", TraceFormat.mooncake, {}, "cut-header.jsonl.gz: truncated gzip stream (after 0 lines)"),
        ("not-gzip.jsonl.gz", TraceFormat.auto, {}, "not-gzip.jsonl.gz:1: unknown CSV trace (columns: not gzip; read as plain text: no gzip magic bytes despite the .gz name); formats: "),
        ("cr-in-header.csv", TraceFormat.auto, {}, "cr-in-header.csv:1: not a CSV header (new-line character seen in unquoted field): 'when\\rtokens,x'"),
        ("cr-in-header.csv", TraceFormat.vidur, {}, "cr-in-header.csv:1: not a CSV header (new-line character seen in unquoted field)"),
        ("huge-length.jsonl", TraceFormat.auto, {}, "huge-length.jsonl:2: input_length: 2147483648 is above the largest supported length 2147483647"),
        ("huge-length.csv", TraceFormat.auto, {}, "huge-length.csv:3: num_prefill_tokens: 99999999999999999999999 is above the largest supported length 2147483647"),
        ("mooncake-comma-joined.jsonl", TraceFormat.auto, {}, "mooncake-comma-joined.jsonl:2: not valid JSON"),
        ("generic-comma-joined.jsonl", TraceFormat.jsonl, {"length_field": "prompt"}, "generic-comma-joined.jsonl:2: not valid JSON"),
        ("azure-plus-sign.csv", TraceFormat.auto, {}, "azure-plus-sign.csv:3: ContextTokens: '+100' is not a positive integer"),
        ("azure-minus-zero-output.csv", TraceFormat.auto, {}, "azure-minus-zero-output.csv:3: GeneratedTokens: '-0' is not a non-negative integer"),
        ("vidur-plus-sign.csv", TraceFormat.auto, {}, "vidur-plus-sign.csv:3: num_prefill_tokens: '+7' is not a positive integer"),
    ],
)
def test_malformed_inputs_name_file_and_line(name, fmt, options, message):
    with pytest.raises(TraceError) as info:
        read_all(name, fmt, **options)
    text, expected = str(info.value), f"{ASSETS}/{message}"  # FILE:LINE: what is wrong
    head = text.split(" ... ")[0]  # a long checkout path makes the message long: its middle is cut
    assert text.startswith(expected) or (" ... " in text and expected.startswith(head) and len(head) > len(str(ASSETS)) + 20)


@pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces not present (../shared/traces)")
@pytest.mark.parametrize(
    "rel, fmt, count, first, first_output",
    [
        ("mooncake-fast25/conversation_trace.jsonl", TraceFormat.mooncake, 12031, 6758, 500),
        ("azure-llm-2023/AzureLLMInferenceTrace_conv.csv", TraceFormat.azure, 19366, 374, 44),
        ("vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", TraceFormat.vidur, 28257, 3772, 54),
        ("sarathi-serve/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", TraceFormat.vidur, 30731, 74, 918),
    ],
)
def test_real_traces(rel, fmt, count, first, first_output):
    assert detect_format(TRACES / rel) is fmt
    lengths, _, _ = read_all(TRACES / rel)
    assert len(lengths) == count and lengths[0] == first
    outputs = outputs_of(TRACES / rel)
    assert len(outputs) == count and outputs[0] == first_output and min(outputs) >= 0


def test_largest_supported_length_is_accepted(tmp_path):
    trace = tmp_path / "max.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 2147483647}\n')
    assert read_all(trace)[0] == [2**31 - 1]
    csv_trace = tmp_path / "max.csv"
    csv_trace.write_text("num_prefill_tokens\n2147483647\n")
    assert read_all(csv_trace)[0] == [2**31 - 1]


@pytest.mark.parametrize("line", ['{"timestamp": 0, "input_length": 1e30}', '{"timestamp": 0, "input_length": 99999999999999999999999}'])
def test_lengths_beyond_int64_are_refused(tmp_path, line):
    trace = tmp_path / "big.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5}\n' + line + "\n")
    with pytest.raises(TraceError, match=r"big.jsonl:2: input_length: \S+ is above the largest supported length 2147483647"):
        read_all(trace)


def _message(path: Path, fmt: TraceFormat = TraceFormat.auto) -> str:
    with pytest.raises(TraceError) as info:
        read_all(path, fmt)
    return str(info.value)


@pytest.mark.parametrize("fmt", [TraceFormat.auto, TraceFormat.vidur, TraceFormat.mooncake])
@pytest.mark.parametrize("seed", range(8))
def test_random_bytes_plain_or_gzipped_give_a_short_printable_message(tmp_path, seed, fmt):
    data = np.random.default_rng(seed).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    plain, packed = tmp_path / "rnd.jsonl", tmp_path / "rnd.jsonl.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    for path in (plain, packed):
        message = _message(path, fmt)
        assert message.startswith(f"{path}:") and message.isprintable() and message.isascii()
        assert len(message) < 400 + len(str(path)), message


@pytest.mark.parametrize("text", ["ContextTokens,TIMESTAMP\n5,1\n6,\x00\x01\n", 'ContextTokens,TIMESTAMP\n5,1\n6,"' + "x" * 200_000 + '"\n'])
def test_binary_or_unparsable_csv_rows_name_their_line(tmp_path, text):
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    message = _message(trace)
    assert message.startswith(f"{trace}:3: ") and len(message) < 200 + len(str(trace)), message


def test_long_values_are_quoted_as_short_excerpts(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": "' + "z" * 500 + '"}\n')
    assert _message(trace) == f"{trace}:1: input_length: '{'z' * 40}'... is not a positive integer"
    trace = tmp_path / "t.csv"
    trace.write_text("ContextTokens,TIMESTAMP\n5," + "y" * 500 + "\n")
    assert _message(trace) == f"{trace}:2: TIMESTAMP: '{'y' * 40}'... is not a timestamp"


def test_corrupt_gzip_anywhere_is_one_trace_error(tmp_path):
    body = b"".join(b'{"timestamp": %d, "input_length": 5}\n' % i for i in range(100_000))
    packed = gzip.compress(body)
    cases = {
        "cut-stream.jsonl.gz": packed[: len(packed) // 2],  # ends before the end-of-stream marker
        "bad-block.jsonl.gz": packed[:5000] + b"\xff" * 64 + packed[5064:],  # zlib.error mid-stream
        "bad-method.jsonl.gz": b"\x1f\x8b" + bytes(range(40)),  # BadGzipFile in the header
        "trailing-garbage.jsonl.gz": packed + b"garbage",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        for fmt in (TraceFormat.auto, TraceFormat.mooncake):
            message = _message(tmp_path / name, fmt)
            if name == "cut-stream.jsonl.gz":  # an early end: the lines it held, not line 1
                lines = int(message.removeprefix(f"{tmp_path / name}: truncated gzip stream (after ").removesuffix(" lines)"))
                assert 40_000 < lines < 60_000, message  # about half of the 100,000 lines
            else:
                assert message.startswith(f"{tmp_path / name}:") and message.endswith(": truncated or corrupt gzip"), message


def test_a_list_where_a_length_belongs_is_refused_not_flattened():
    with pytest.raises(TraceError, match=r"mooncake-list-length.jsonl:1: input_length: \[100,200\] is not a positive integer$"):
        read_all("mooncake-list-length.jsonl")


def test_dates_beyond_2199_are_refused_not_wrapped():
    with pytest.raises(TraceError, match=r"azure-year-3000.csv:3: TIMESTAMP: '3000-01-01 00:00:00' is outside the supported dates \(years 1970..2199\)"):
        read_all("azure-year-3000.csv")


@pytest.mark.parametrize("value", ["1_000", "\u0663", " 5"])
def test_csv_lengths_follow_one_rule_on_both_paths(tmp_path, value):
    trace = tmp_path / "t.csv"
    trace.write_text(f"num_prefill_tokens\n5\n{value}\n")
    if value == " 5":
        assert read_all(trace)[0] == [5, 5]  # surrounding spaces are fine on both paths
        return
    with pytest.raises(TraceError, match=r"t.csv:3: num_prefill_tokens: .* is not a positive integer"):
        read_all(trace)


@pytest.mark.parametrize("options, message", [
    ({"length_field": "len", "time_field": "len"}, "--time-field 'len' is the --length-field too"),
    ({"length_field": "len", "time_field": "t", "output_field": "t"}, "--output-field 't' is the --time-field too"),
])
def test_one_field_in_two_roles_is_refused(tmp_path, options, message):
    path = tmp_path / "g.jsonl"
    path.write_text('{"t": 1, "len": 5}\n')
    with pytest.raises(TraceError, match=message):
        list(read_requests(path, TraceFormat.jsonl, ReadOptions(**options)))


@pytest.mark.parametrize("stamp, part", [("2023-13-45 10:00:00", "month 13 (1..12)"), ("2023-02-30 10:00:00", "day 30 (past the month's last day)"),
                                         ("2023-01-01 25:00:00", "hour 25 (0..23)"), ("2023-01-01 10:61:00", "minute 61 (0..59)")])
@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_an_impossible_date_is_called_invalid_not_out_of_the_supported_years(tmp_path, stamp, part, suffix):
    trace = tmp_path / f"t.{suffix}"
    if suffix == "csv":
        trace.write_text(f"TIMESTAMP,ContextTokens\n2023-01-01 10:00:00,100\n{stamp},100\n")
        where, shown = 3, f"'{stamp}'"
    else:
        trace.write_text(f'{{"timestamp": "2023-01-01 10:00:00", "prompt_len": 100}}\n{{"timestamp": "{stamp}", "prompt_len": 100}}\n')
        where, shown = 2, f'"{stamp}"'
    with pytest.raises(TraceError) as err:
        read_all(trace)
    assert str(err.value).endswith(f"t.{suffix}:{where}: {'TIMESTAMP' if suffix == 'csv' else 'timestamp'}: {shown} is not a valid date: {part}")


def test_a_quoted_field_may_hold_newlines(tmp_path):
    trace = tmp_path / "q.csv"
    trace.write_text('prompt_len,prompt\n100,"hello\nworld"\n200,"x"\n')
    assert read_all(trace)[0] == [100, 200]


@pytest.mark.parametrize("chunk", [16, 37, 256, 4 << 20])
def test_quoted_newlines_across_chunk_boundaries_read_as_the_csv_module_reads_them(tmp_path, monkeypatch, chunk):
    """Records whose quoted prompt spans chunk boundaries (one prompt of ~900 bytes over many
    16-byte chunks) give the lengths and line numbers Python's csv module gives."""
    import csv
    import io

    from cpbcg.planner.traces import csv_table

    monkeypatch.setattr(csv_table, "REQUEST_CHUNK_BYTES", chunk)
    rows = ["prompt_len,prompt,note"]
    for i in range(60):
        text = "line\n" * (i % 7) + ('say ""hi""\n' * 80 if i == 30 else "") + f"req {i}"
        rows.append(f'{i + 1},"{text}",{5 if i % 3 else ""}')
        if i % 11 == 0:
            rows.append("")
    data = "\n".join(rows) + "\n"
    trace = tmp_path / "q.csv"
    trace.write_text(data)
    reader = csv.reader(io.StringIO(data, newline=""))
    expected, lines, start = [], [], 0  # lengths and first lines of the requests
    for row in reader:
        if row and row[0] != "prompt_len":
            expected.append(int(row[0]))
            lines.append(start + 1)
        start = reader.line_num
    chunks = read_chunks(trace, TraceFormat.auto)
    assert np.concatenate([c.input_tokens for c in chunks]).tolist() == expected == list(range(1, 61))
    assert lines[:3] == [2, 4, 6]  # line 3 is blank, request 2 spans lines 4-5
    bad = data + 'x,"a\nb",5\n'  # a bad length after them all: its line is the record's first, as the csv module counts
    trace.write_text(bad)
    with pytest.raises(TraceError) as err:
        read_all(trace)
    assert f"q.csv:{data.count(chr(10)) + 1}: prompt_len: 'x' " in str(err.value)


@pytest.mark.parametrize("data, message", [
    ('prompt_len,prompt\n100,"hello\nworld"\n200,"x\n300,"y"\n', "q.csv:5: not a CSV row (',' expected after '\"'): '300,\"y\"'"),
    ('prompt_len,prompt\n100,"hello\nworld"\n200,"x\n', 'q.csv:4: a quoted field (") is not closed before the end of the file'),
    ('prompt_len,prompt\n100,"hello\nworld"\n200,"x",3\n', "q.csv:4: expected 2 fields, got 3"),
])
def test_quoted_field_errors_name_the_right_line(tmp_path, data, message):
    trace = tmp_path / "q.csv"
    trace.write_text(data)
    with pytest.raises(TraceError) as err:
        read_all(trace)
    assert str(err.value).endswith(message)
