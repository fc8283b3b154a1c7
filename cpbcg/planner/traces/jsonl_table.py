"""JSONL request tables (Mooncake, generic JSONL): one JSON object per request per line.

The common path parses a chunk of lines (each line on its own: `load_json_records`) and checks
the columns with numpy; anything unusual sends the chunk through a line-by-line pass that names the first bad
line (`FILE:LINE: ...`). Both paths apply the same rules (`records.py`).
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np
import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.records import (
    MAX_REQUEST_TOKENS, LineNumbers, RequestChunk, RequestItem, RequestSpec, drop_empty_prompts, known_lines, lengths_ok, parse_time_values,
)
from cpbcg.planner.traces.text import EXCERPT_CHARS, TracePath, excerpt, first_line, iter_line_chunks, single_byte_hint, time_problem

REQUEST_CHUNK_BYTES = 4 << 20
"""Bytes of lines parsed at once (bounds memory: a chunk's Python objects are ~10x its bytes)."""


def load_json_line(path: TracePath, line_no: int, line: bytes) -> object:
    """`orjson.loads(line)`, or `TraceError` `FILE:LINE: not valid JSON (...)` (also for nesting
    beyond orjson's depth limit), or `FILE:LINE: KEY: duplicate key` for an object that names a
    key twice (orjson would keep the last silently; configs and bucket files refuse it too)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        hint = single_byte_hint(line) if "UTF-8" in exc.msg else None  # a Latin-1 export: say how to convert it
        raise TraceError(located(path, line_no, f"not UTF-8 text: {hint}" if hint is not None
                                 else f"not valid JSON ({exc.msg[:80]})")) from None
    key = repeated_key(line, record)
    if key is not None:
        raise TraceError(located(path, line_no, "duplicate key: a JSON object names each key once", excerpt(key)[1:-1]))
    return record


def load_json_records(lines: list[bytes]) -> list[Any]:
    """Each line parsed on its own as one JSON value (`orjson.loads`), the rule of every
    JSONL reader's fast and careful paths alike: a line holding two comma-joined values
    (`[5], [6]`) is not valid JSON on any path, nor an object that repeats a key. Raises
    `ValueError` (`orjson.JSONDecodeError` for bad JSON; the careful path then names the line)."""
    records = list(map(orjson.loads, lines))
    blob = b"".join(lines)
    if b":" in blob:  # no key anywhere (bare lists): nothing can repeat
        objects = sum(len(r) for r in records if type(r) is dict)
        if blob.count(b"{") != sum(type(r) is dict for r in records) or blob.count(b":") != objects:
            if any(repeated_key(line, record) is not None for line, record in zip(lines, records)):
                raise ValueError("a JSON object repeats a key")
    return records


def repeated_key(text: bytes, value: object) -> str | None:
    """The first key a JSON object in `text` (already parsed as `value`) names twice, at any
    depth, or None. Cheap when it cannot happen: one flat object whose colons are its keys."""
    if b":" not in text or type(value) is dict and text.count(b"{") == 1 and text.count(b":") == len(value):
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):  # orjson read it: only the stdlib's own limits can fail here
        return None
    return found[0] if found else None


def read_jsonl_requests(path: TracePath, spec: RequestSpec) -> Iterator[RequestItem]:
    """Yield `(chunk, line_numbers)`; `line_numbers()` gives the [n] int64 line of each request."""
    line_no, line = first_line(path)
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        raise TraceError(located(path, line_no, f"not a JSON object: {spec.label} traces are JSONL, one request object per line (see --trace-format)"))
    hashes = spec.hash_field if spec.hash_field and spec.hash_field in record else None
    output = spec.output_field if spec.output_field and (spec.output_field in record or not spec.optional_output) else None
    for first, lines in iter_line_chunks(path, REQUEST_CHUNK_BYTES):
        chunk = _fast(first, lines, spec, hashes, output)
        requests, line_numbers = chunk if chunk is not None else _slow(path, first, lines, spec, hashes, output)
        yield drop_empty_prompts(requests, line_numbers, spec.length_field)


def _fast(first: int, lines: list[bytes], spec: RequestSpec, hash_field: str | None, output_field: str | None) -> RequestItem | None:
    body = [line for line in lines if not line.isspace()]
    blob = b"".join(body)
    if b"true" in blob or b"false" in blob or b"null" in blob:
        return None
    try:
        records = load_json_records(body)
        lengths = np.array([r[spec.length_field] for r in records])
        outputs = np.array([r[output_field] for r in records]) if output_field else None
        times = [r[spec.time_field] for r in records] if spec.time_field else None
        hashes = [r.get(hash_field, []) for r in records] if hash_field else None
        arrival = None if times is None else parse_time_values(times, spec.time_unit)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None
    if records and (lengths.ndim != 1 or not lengths_ok(lengths, 0)):  # 0-token prompts: skipped by the caller
        return None  # a list where a length belongs is refused by the careful path, never flattened
    if outputs is not None and records and (outputs.ndim != 1 or not lengths_ok(outputs, 0)):
        return None
    if hashes is not None and not _hashes_ok(hashes):
        return None
    empty = np.zeros(0, np.int64)
    chunk = RequestChunk(
        lengths.astype(np.int64) if records else empty, arrival, hashes,
        None if outputs is None else (outputs.astype(np.int64) if records else empty),
    )
    return chunk, _nonblank_line_numbers(lines, first)


def _nonblank_line_numbers(lines: list[bytes], first: int) -> LineNumbers:
    """Line of each request, as a thunk that keeps no reference to `lines`."""
    if not any(line.isspace() for line in lines):
        count = len(lines)
        return lambda: first + np.arange(count, dtype=np.int64)
    numbers = np.array([i for i, line in enumerate(lines, start=first) if not line.isspace()], dtype=np.int64)
    return known_lines(numbers)


def _hashes_ok(hashes: list[object]) -> bool:
    return all(type(h) is list and all(type(x) is int for x in h) for h in hashes)


def _slow(path: TracePath, first: int, lines: list[bytes], spec: RequestSpec, hash_field: str | None, output_field: str | None) -> RequestItem:
    lengths: list[int] = []
    outputs: list[int] = []
    times: list[float] = []
    hashes: list[list[int]] = []
    line_nos: list[int] = []
    for line_no, line in enumerate(lines, start=first):
        if line.isspace():
            continue
        record = load_json_line(path, line_no, line)
        if not isinstance(record, dict):
            raise TraceError(located(path, line_no, f"expected a JSON object, got {type(record).__name__}"))
        for field in (spec.length_field, spec.time_field, output_field):
            if field and field not in record:
                raise TraceError(located(path, line_no, f'missing field "{field}"'))
        lengths.append(json_length(path, line_no, spec.length_field, record[spec.length_field], 1, zero_ok=True))
        if output_field:
            outputs.append(json_length(path, line_no, output_field, record[output_field], 0))
        if spec.time_field:
            times.append(json_time(path, line_no, spec, record[spec.time_field]))
        if hash_field:
            hashes.append(_json_hashes(path, line_no, hash_field, record.get(hash_field, [])))
        line_nos.append(line_no)
    chunk = RequestChunk(
        np.array(lengths, dtype=np.int64),
        np.array(times, dtype=np.float64) if spec.time_field else None,
        hashes if hash_field else None,
        np.array(outputs, dtype=np.int64) if output_field else None,
    )
    return chunk, known_lines(np.array(line_nos, dtype=np.int64))


def json_length(path: TracePath, line_no: int, field: str, value: object, minimum: int, zero_ok: bool = False) -> int:
    """A JSON token count: an integer in [minimum, MAX_REQUEST_TOKENS] (or 0 with `zero_ok`: a
    row the caller skips), else `TraceError`."""
    integral = type(value) is int or (type(value) is float and value.is_integer())
    if integral and value > MAX_REQUEST_TOKENS:  # type: ignore[operator]
        raise TraceError(located(path, line_no, length_too_large(field, json_excerpt(value))))
    if type(value) is not int or (value < minimum and not (zero_ok and value == 0)):
        what = "a positive integer" if minimum == 1 else "a non-negative integer"
        raise TraceError(located(path, line_no, f"{field}: {json_excerpt(value)} is not {what}"))
    return value


def json_time(path: TracePath, line_no: int, spec: RequestSpec, value: object) -> float:
    """One JSON timestamp in seconds, else `TraceError` naming the field."""
    try:
        return float(parse_time_values([value], spec.time_unit)[0])
    except (TypeError, ValueError, OverflowError) as exc:
        raise TraceError(located(path, line_no, time_problem(spec.time_field or "", json_excerpt(value), exc))) from None


def _json_hashes(path: TracePath, line_no: int, field: str, blocks: object) -> list[int]:
    if type(blocks) is not list or not all(type(x) is int for x in blocks):
        raise TraceError(located(path, line_no, f"{field}: expected a list of integers"))
    return blocks


def length_too_large(field: str, text: str) -> str:
    """The message for a length above `MAX_REQUEST_TOKENS`."""
    shown = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."
    return f"{field}: {shown} is above the largest supported length {MAX_REQUEST_TOKENS}"


def json_excerpt(value: object) -> str:
    """A JSON value as written in the trace, cut to a short excerpt when long."""
    try:
        text = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # nested beyond orjson's depth limit
        return f"a deeply nested {type(value).__name__}"
    if len(text) <= EXCERPT_CHARS and text.isascii():
        return text
    return excerpt(value) if isinstance(value, str) else excerpt(text)
