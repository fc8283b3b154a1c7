"""Request traces: one request per line (arrival time, prompt length, maybe prefix hashes).

Formats (`--trace-format`, auto-detected from the first line when `auto`):

* `mooncake`: JSONL `{"timestamp": ms, "input_length": int, "hash_ids": [...]}` (Mooncake FAST'25).
* `azure`: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock timestamps (Azure LLM 2023).
* `vidur`: CSV `num_prefill_tokens,...` (vidur / Sarathi-Serve); arrival times from an
  `arrived_at` column (seconds) when present, otherwise none (Poisson arrivals are drawn).
* `csv` / `jsonl`: any table with `--length-field` and optional `--time-field` (numbers are
  seconds, strings are wall-clock datetimes). JSONL records may carry `hash_ids`.
* `batches`: a batch trace (`extend_seq_lens` per line), read by `batch_trace.read_batch_trace`.

Readers stream `RequestChunk`s of a few MiB of lines each (numpy-vectorised on the common path,
a careful line-by-line pass naming the first bad line otherwise). Every malformed input raises
`TraceError` with `FILE:LINE: what is wrong`. The CSV parse is in `request_csv.py`.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterator

import numpy as np
import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.batch_trace import load_json_line, open_binary, read_errors
from cpbcg.planner.layout import MAX_TOKENS

HASH_FIELD = "hash_ids"
BLOCK_TOKENS = 512
"""Tokens per prefix-hash block (Mooncake `hash_ids`)."""
REQUEST_CHUNK_BYTES = 4 << 20
"""Bytes of lines parsed at once (bounds memory: a chunk's Python objects are ~10x its bytes)."""
MAX_REQUEST_TOKENS = MAX_TOKENS
"""Longest prompt accepted (tokens, 2**31 - 1, as for batch traces): no sum downstream can overflow int64."""
ACCEPTED_FORMATS = (
    "Mooncake JSONL (input_length), Azure CSV (ContextTokens), vidur/Sarathi CSV (num_prefill_tokens), "
    "batch trace JSONL (extend_seq_lens), or any CSV/JSONL with --length-field"
)
"""The formats `detect_format` recognises, for messages."""
EXCERPT_CHARS = 40
"""Most characters of file content quoted in a message."""
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Bytes that never occur in a text trace (control characters other than tab, CR, LF)."""


class TraceFormat(str, Enum):
    """What `--trace` holds (`--trace-format`)."""

    auto = "auto"
    batches = "batches"
    mooncake = "mooncake"
    azure = "azure"
    vidur = "vidur"
    csv = "csv"
    jsonl = "jsonl"


class TimeUnit(str, Enum):
    """How a timestamp column is read."""

    ms = "ms"
    s = "s"
    auto = "auto"
    """Numbers are seconds, strings are wall-clock datetimes."""


@dataclass(frozen=True)
class RequestSpec:
    """Where a request trace keeps each field."""

    label: str
    """Format name for messages (`mooncake`, `azure`, ...)."""
    is_json: bool
    """JSONL (True) or CSV with a header (False)."""
    length_field: str
    """Field holding the prompt (input) length in tokens."""
    time_field: str | None
    """Field holding the arrival time, or None (Poisson arrivals are drawn)."""
    time_unit: TimeUnit = TimeUnit.auto
    """Unit of `time_field`."""
    optional_time: bool = False
    """Use `time_field` only when the header has it (vidur's `arrived_at`)."""


@dataclass(frozen=True)
class RequestChunk:
    """Consecutive requests of a trace, in file order."""

    input_tokens: np.ndarray
    """[n] int64: prompt length of each request (tokens, >= 1)."""
    arrival_s: np.ndarray | None
    """[n] float64: arrival time (s, non-decreasing across the whole trace; any origin), or None."""
    hash_ids: list[list[int]] | None
    """[n] prefix-block hashes (512 tokens per block) per request, or None when the trace has none."""
    output_tokens: np.ndarray | None = None
    """[n] int64: output (generated) length of each request (tokens, >= 1), or None when not read."""

    @property
    def num_requests(self) -> int:
        return len(self.input_tokens)


def request_spec(fmt: TraceFormat, length_field: str | None = None, time_field: str | None = None) -> RequestSpec:
    """Field layout of a request-trace format; `length_field`/`time_field` override its defaults.

    The generic `csv`/`jsonl` formats need `length_field` (`read_requests` refuses them without).
    """
    if fmt is TraceFormat.mooncake:
        return RequestSpec("mooncake", True, length_field or "input_length", time_field or "timestamp", TimeUnit.ms)
    if fmt is TraceFormat.azure:
        return RequestSpec("azure", False, length_field or "ContextTokens", time_field or "TIMESTAMP")
    if fmt is TraceFormat.vidur:
        return RequestSpec("vidur", False, length_field or "num_prefill_tokens", time_field or "arrived_at", TimeUnit.s, time_field is None)
    if fmt in (TraceFormat.csv, TraceFormat.jsonl):
        return RequestSpec(fmt.value, fmt is TraceFormat.jsonl, length_field or "", time_field)
    raise ValueError(f"{fmt} is not a request-trace format")


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, printable quote of file content for messages: `ascii()` of at most `limit`
    characters (or bytes), with `...` when cut. Never prints raw binary."""
    cut = len(value) > limit if isinstance(value, (str, bytes)) else False
    return ascii(value[:limit] if cut else value) + ("..." if cut else "")


def line_excerpt(line: bytes) -> str:
    """`excerpt` of a text line (decoded, stripped)."""
    return excerpt(line.decode("utf-8", "replace").strip())


def show_names(names: list[str], limit: int = 8) -> str:
    """`a, b, c` for a header's columns or a record's keys; odd names quoted with `excerpt`."""
    shown = [n if n.isascii() and n.isprintable() and len(n) <= EXCERPT_CHARS else excerpt(n) for n in names[:limit]]
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(shown) + more


def iter_request_lines(path: Path, chunk_bytes: int = REQUEST_CHUNK_BYTES):
    """Yield `(first_line_number, lines)` chunks; corrupt gzip is a `TraceError` naming the line."""
    line_no = 1
    with open_binary(path) as handle:
        while True:
            with read_errors(path, line_no):
                lines = handle.readlines(chunk_bytes)
            if not lines:
                return
            yield line_no, lines
            line_no += len(lines)


def first_line(path: Path) -> tuple[int, bytes]:
    """`(line number, bytes)` of the first non-blank line. Raises `TraceError` for an empty,
    unreadable or corrupt (gzip) file."""
    for first, lines in iter_request_lines(path, 1 << 16):
        for line_no, line in enumerate(lines, start=first):
            if line.strip():
                return line_no, line.lstrip(b"\xef\xbb\xbf")
    raise TraceError(located(path, 1, "empty trace: no requests"))


def looks_binary(line: bytes) -> bool:
    """True when a line is not UTF-8 text (or holds control characters other than tab/CR/LF)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return CONTROL_BYTES.search(line) is not None


def binary_error(path: Path, line_no: int, line: bytes) -> TraceError:
    """`FILE:LINE: not a text trace ...` for a line of binary data."""
    return TraceError(located(path, line_no, (
        f"not a text trace: binary data {excerpt(line.strip(), 16)}{_gz_note(path)}; "
        "traces are JSONL or CSV text, optionally gzipped"
    )))


def csv_reason(exc: csv.Error) -> str:
    """The csv module's complaint without its advice (`new-line character seen in unquoted field`)."""
    return str(exc).split(" - ")[0]


def gzip_magic(path: Path) -> bool:
    """Whether the file starts with the gzip magic bytes (`.gz` names alone decide nothing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _gz_note(path: Path) -> str:
    if str(path).endswith(".gz") and not gzip_magic(path):
        return " (read as plain text: no gzip magic bytes despite the .gz name)"
    return ""


def header_columns(path: Path, line_no: int, line: bytes) -> list[str]:
    """Column names of a CSV header line; `TraceError` for binary data or an unparsable line."""
    if looks_binary(line):
        raise binary_error(path, line_no, line)
    try:
        return [c.strip() for c in next(csv.reader([line.decode("utf-8", "replace").strip()]), [])]
    except csv.Error as exc:
        raise TraceError(located(path, line_no, f"not a CSV header ({csv_reason(exc)}): {line_excerpt(line)}")) from None


def detect_format(path: Path, length_field: str | None = None) -> TraceFormat:
    """Guess the format from the first non-blank line (JSON keys or CSV header).

    Batch traces (`extend_seq_lens` or a bare list) are `batches`; `--length-field` selects the
    generic `csv`/`jsonl` readers. Raises `TraceError` when nothing matches.
    """
    line_no, line = first_line(path)
    if looks_binary(line):
        raise binary_error(path, line_no, line)
    if line.lstrip()[:1] in (b"{", b"["):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TraceError(located(path, line_no, f"not valid JSON ({exc.msg})")) from None
        if isinstance(record, list) or (isinstance(record, dict) and "extend_seq_lens" in record):
            return TraceFormat.batches
        if length_field:
            return TraceFormat.jsonl
        if isinstance(record, dict) and "input_length" in record:
            return TraceFormat.mooncake
        keys = show_names(list(record)) if isinstance(record, dict) else type(record).__name__
        raise _unknown(path, line_no, "JSONL", f"keys: {keys}")
    header = header_columns(path, line_no, line)
    if length_field:
        return TraceFormat.csv
    if "ContextTokens" in header:
        return TraceFormat.azure
    if "num_prefill_tokens" in header:
        return TraceFormat.vidur
    raise _unknown(path, line_no, "CSV", f"columns: {show_names(header)}")


def _unknown(path: Path, line_no: int, kind: str, names: str) -> TraceError:
    """`unknown KIND trace (NAMES[; read as plain text ...]); accepted: ...`."""
    plain = "; read as plain text: no gzip magic bytes despite the .gz name" if _gz_note(path) else ""
    return TraceError(located(path, line_no, f"unknown {kind} trace ({names}{plain}); accepted: {ACCEPTED_FORMATS}; see --trace-format"))


def read_requests(path: str | Path, spec: RequestSpec) -> Iterator[RequestChunk]:
    """Stream a request trace as `RequestChunk`s (bounded memory).

    Raises `TraceError` (`FILE:LINE: ...`) for a missing field or column, a length that is not a
    positive integer, an unreadable or decreasing timestamp, or a trace with no request.
    """
    path = Path(path)
    if not spec.length_field:
        raise TraceError(f"{path}: --trace-format {spec.label} needs --length-field (the prompt-length field)")
    from cpbcg.planner.request_csv import read_csv_requests

    chunks = _read_jsonl(path, spec) if spec.is_json else read_csv_requests(path, spec)
    order = _TimeOrder(path)
    seen_any = False
    for chunk, line_nos in chunks:
        order.check(chunk.arrival_s, line_nos)
        if chunk.num_requests:
            seen_any = True
            yield chunk
    if not seen_any:
        raise TraceError(located(path, 1, "empty trace: no requests"))


class _TimeOrder:
    """Refuses decreasing arrival times, naming the first offending line."""

    def __init__(self, path: Path):
        self.path, self.last_s = path, -np.inf

    def check(self, arrival_s: np.ndarray | None, line_nos) -> None:
        if arrival_s is None or not len(arrival_s):
            return
        previous = np.concatenate([[self.last_s], arrival_s[:-1]])
        bad = np.flatnonzero(arrival_s < previous)
        if len(bad):
            i = int(bad[0])
            raise TraceError(located(self.path, int(line_nos()[i]), "timestamp goes backwards (arrival times must not decrease)"))
        self.last_s = float(arrival_s[-1])


def parse_time_values(values: list, unit: TimeUnit) -> np.ndarray:
    """[n] float64 seconds from numbers or numeric strings (ms or s by `unit`), or, with
    `TimeUnit.auto`, wall-clock datetime strings (seconds since 1970).

    Raises `ValueError` or `TypeError` when a value cannot be read (callers locate it).
    """
    if values and isinstance(values[0], str):
        if any(type(v) is not str for v in values):
            raise TypeError("mixed timestamp types")
        try:
            numbers = np.array(values, dtype=np.float64)
        except ValueError:
            if unit is not TimeUnit.auto:
                raise
            return _datetime_seconds(values)
    else:
        if any(type(v) not in (int, float) for v in values):
            raise TypeError("not a number")
        numbers = np.array(values, dtype=np.float64)
    if not np.isfinite(numbers).all():
        raise ValueError("not a finite number")
    return numbers / 1000.0 if unit is TimeUnit.ms else numbers


def _datetime_seconds(values: list[str]) -> np.ndarray:
    stamps = np.array(values, dtype="datetime64[ns]")
    if np.isnat(stamps).any():
        raise ValueError("not a datetime")
    return stamps.astype(np.int64) / 1e9


def _read_jsonl(path: Path, spec: RequestSpec) -> Iterator[tuple[RequestChunk, object]]:
    line_no, line = first_line(path)
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        raise TraceError(located(path, line_no, f"not a JSON object: {spec.label} traces are JSONL, one request object per line (see --trace-format)"))
    with_hashes = HASH_FIELD in record
    for first, lines in iter_request_lines(path):
        fast = _jsonl_fast(first, lines, spec, with_hashes)
        if fast is None:
            fast = _jsonl_slow(path, first, lines, spec, with_hashes)
        yield fast


def _jsonl_fast(first: int, lines: list[bytes], spec: RequestSpec, with_hashes: bool):
    body = [line for line in lines if not line.isspace()]
    blob = b"[" + b",".join(body) + b"]"
    if b"true" in blob or b"false" in blob or b"null" in blob:
        return None
    try:
        records = orjson.loads(blob)
        lengths = np.array([r[spec.length_field] for r in records])
        times = [r[spec.time_field] for r in records] if spec.time_field else None
        hashes = [r.get(HASH_FIELD, []) for r in records] if with_hashes else None
        arrival = None if times is None else parse_time_values(times, spec.time_unit)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    if len(records) and (lengths.dtype != np.int64 or lengths.min() < 1 or lengths.max() > MAX_REQUEST_TOKENS):
        return None
    if hashes is not None and not _hashes_ok(hashes):
        return None
    chunk = RequestChunk(lengths.astype(np.int64).reshape(-1), arrival, hashes)
    return chunk, _nonblank_line_numbers(lines, first)


def _nonblank_line_numbers(lines: list[bytes], first: int):
    """Line of each request, as a thunk that keeps no reference to `lines`."""
    if not any(line.isspace() for line in lines):
        count = len(lines)
        return lambda: first + np.arange(count, dtype=np.int64)
    numbers = np.array([i for i, line in enumerate(lines, start=first) if not line.isspace()], dtype=np.int64)
    return lambda: numbers


def _hashes_ok(hashes: list) -> bool:
    if any(type(h) is not list for h in hashes):
        return False
    return all(type(x) is int for h in hashes for x in h)


def _jsonl_slow(path: Path, first: int, lines: list[bytes], spec: RequestSpec, with_hashes: bool):
    lengths, times, hashes, line_nos = [], [], [], []
    for line_no, line in enumerate(lines, start=first):
        if line.isspace():
            continue
        length, time_s, blocks = _jsonl_record(path, line_no, line, spec)
        lengths.append(length)
        times.append(time_s)
        hashes.append(blocks)
        line_nos.append(line_no)
    arrival = np.array(times, dtype=np.float64) if spec.time_field else None
    chunk = RequestChunk(np.array(lengths, dtype=np.int64), arrival, hashes if with_hashes else None)
    return chunk, lambda: np.array(line_nos, dtype=np.int64)


def _jsonl_record(path: Path, line_no: int, line: bytes, spec: RequestSpec) -> tuple[int, float, list[int]]:
    def fail(message: str) -> TraceError:
        return TraceError(located(path, line_no, message))

    record = load_json_line(path, line_no, line)
    if not isinstance(record, dict):
        raise fail(f"expected a JSON object, got {type(record).__name__}")
    for field in (spec.length_field, spec.time_field):
        if field and field not in record:
            raise fail(f'missing field "{field}"')
    length = record[spec.length_field]
    if (type(length) is int and length > MAX_REQUEST_TOKENS) or (type(length) is float and length.is_integer() and length > MAX_REQUEST_TOKENS):
        raise fail(length_too_large(spec.length_field, orjson.dumps(length).decode()))
    if type(length) is not int or length < 1:
        raise fail(f"{spec.length_field}: {_json_excerpt(length)} is not a positive integer")
    time_s = 0.0
    if spec.time_field:
        try:
            time_s = float(parse_time_values([record[spec.time_field]], spec.time_unit)[0])
        except (TypeError, ValueError, OverflowError):
            raise fail(f"{spec.time_field}: {_json_excerpt(record[spec.time_field])} is not a timestamp") from None
    blocks = record.get(HASH_FIELD, [])
    if type(blocks) is not list or not all(type(x) is int for x in blocks):
        raise fail(f"{HASH_FIELD}: expected a list of integers")
    return length, time_s, blocks


def length_too_large(field: str, text: str) -> str:
    """The message for a prompt length above `MAX_REQUEST_TOKENS`."""
    shown = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."
    return f"{field}: {shown} is above the largest supported length {MAX_REQUEST_TOKENS}"


def _json_excerpt(value: object) -> str:
    """A JSON value as written in the trace, cut to a short excerpt when long."""
    text = orjson.dumps(value).decode()
    if len(text) <= EXCERPT_CHARS and text.isascii():
        return text
    return excerpt(value) if isinstance(value, str) else excerpt(text)
