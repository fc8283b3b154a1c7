"""CSV request traces (Azure, vidur / Sarathi, generic): header line, then one request per line.

The common path converts a whole chunk's column at once with numpy; any problem in a chunk
sends it through a line-by-line pass that names the first bad line (`FILE:LINE: ...`).
Quoted fields are allowed, fields spanning several lines are not.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterator

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.requests import (
    CONTROL_BYTES, MAX_REQUEST_TOKENS, RequestChunk, RequestSpec, csv_reason, excerpt, first_line,
    header_columns, iter_request_lines, length_too_large, line_excerpt, looks_binary, parse_time_values,
    show_names,
)


def read_csv_requests(path: Path, spec: RequestSpec) -> Iterator[tuple[RequestChunk, object]]:
    """Yield `(chunk, line_numbers)` per chunk of lines; `line_numbers()` gives the [n] int64
    line of each request (computed only when needed, for messages)."""
    header_line, header = first_line(path)
    columns = _columns(path, header_line, header, spec)
    for first, lines in iter_request_lines(path):
        if first <= header_line:
            skip = header_line - first + 1
            lines, first = lines[skip:], first + skip
        rows = _split_rows(path, first, lines)
        chunk = _chunk_fast(rows, columns, spec)
        if chunk is None:
            chunk = _chunk_slow(path, first, rows, columns, spec)
        yield chunk, _line_numbers(rows, first)


def _split_rows(path: Path, first: int, lines: list[bytes]) -> list[list[str]]:
    """Fields of each line (`[]` for a blank line); plain `split` unless the chunk has quotes.

    Raises `TraceError` naming the first line that is binary data or not a CSV row.
    """
    blob = b"".join(lines)
    text = blob.decode("utf-8", "replace")
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    if "\ufffd" in text or CONTROL_BYTES.search(blob):
        for line_no, line in enumerate(lines, start=first):
            if looks_binary(line):
                raise TraceError(located(path, line_no, f"binary data, not a CSV row: {excerpt(line.strip(), 16)}"))
    if '"' in text or len(parts) != len(lines):
        return [_csv_row(path, line_no, line) for line_no, line in enumerate(lines, start=first)]
    return [line.rstrip("\r").split(",") if line.strip() else [] for line in parts]


def _csv_row(path: Path, line_no: int, line: bytes) -> list[str]:
    try:
        return next(csv.reader([line.decode("utf-8", "replace")]), [])
    except csv.Error as exc:
        raise TraceError(located(path, line_no, f"not a CSV row ({csv_reason(exc)}): {line_excerpt(line)}")) from None


def _columns(path: Path, line_no: int, header: bytes, spec: RequestSpec) -> tuple[int, int, int | None]:
    """`(number of columns, length column, time column or None)` from the header."""
    if header.lstrip()[:1] in (b"{", b"["):
        raise TraceError(located(path, line_no, f"not a CSV header: {spec.label} traces are CSV with a header line (see --trace-format)"))
    names = header_columns(path, line_no, header)
    wanted = [spec.length_field] + ([spec.time_field] if spec.time_field and not spec.optional_time else [])
    for name in wanted:
        if name not in names:
            raise TraceError(located(path, line_no, f'missing column "{name}" (header has: {show_names(names)})'))
    time_col = names.index(spec.time_field) if spec.time_field in names else None
    return len(names), names.index(spec.length_field), time_col


def _chunk_fast(rows: list[list[str]], columns: tuple[int, int, int | None], spec: RequestSpec) -> RequestChunk | None:
    width, length_col, time_col = columns
    body = [row for row in rows if row]
    if any(len(row) != width for row in body):
        return None
    try:
        lengths = np.array([row[length_col] for row in body], dtype=np.int64)
        arrival = None if time_col is None else parse_time_values([row[time_col] for row in body], spec.time_unit)
    except (ValueError, TypeError, OverflowError):
        return None
    if len(lengths) and (lengths.min() < 1 or lengths.max() > MAX_REQUEST_TOKENS):
        return None
    return RequestChunk(lengths, arrival, None)


def _chunk_slow(path: Path, first: int, rows: list[list[str]], columns, spec: RequestSpec) -> RequestChunk:
    width, length_col, time_col = columns
    lengths, times = [], []
    for line_no, row in enumerate(rows, start=first):
        if not row:
            continue
        if len(row) != width:
            raise TraceError(located(path, line_no, f"expected {width} fields, got {len(row)}"))
        lengths.append(_length(path, line_no, row[length_col], spec.length_field))
        if time_col is not None:
            try:
                times.append(float(parse_time_values([row[time_col]], spec.time_unit)[0]))
            except (ValueError, TypeError, OverflowError):
                raise TraceError(located(path, line_no, f"{spec.time_field}: {excerpt(row[time_col])} is not a timestamp")) from None
    arrival = None if time_col is None else np.array(times, dtype=np.float64)
    return RequestChunk(np.array(lengths, dtype=np.int64), arrival, None)


def _length(path: Path, line_no: int, text: str, field: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is not None and value > MAX_REQUEST_TOKENS:
        raise TraceError(located(path, line_no, length_too_large(field, str(value))))
    if value is None or value < 1:
        raise TraceError(located(path, line_no, f"{field}: {excerpt(text)} is not a positive integer"))
    return value


def _line_numbers(rows: list[list[str]], first: int):
    """Line of each request, as a thunk that keeps no reference to `rows`."""
    if all(rows):
        count = len(rows)
        return lambda: first + np.arange(count, dtype=np.int64)
    numbers = np.array([i for i, row in enumerate(rows, start=first) if row], dtype=np.int64)
    return lambda: numbers
