"""Batch traces: one prefill forward per line.

Each line is `{"extend_seq_lens": [1534, 161, 353]}` with an optional integer `"count"` (how
many times that batch occurred), or a bare JSON list of lengths. Blank lines are skipped;
other keys are ignored. `.gz` files (detected by their magic bytes) are read transparently.

The parse is the hot path of `cpbcg plan` (a 1,000,000-line trace must plan in under 2 s), so
each chunk of plain lines is parsed by numpy (`fastparse.py`), others line by line with orjson
(one value per line, the careful path's rule) and validated with numpy. Anything unusual in a
chunk (a bad line, a float, a boolean) sends that chunk through a line-by-line parse that names the first offending line: `FILE:LINE: what is wrong`.
"""

from __future__ import annotations

import gc
import json
import re
from contextlib import contextmanager
from itertools import chain
from typing import Iterator, TypeGuard

import numpy as np
import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.arrays import Int64Array
from cpbcg.planner.model.batches import MAX_TOKENS, BatchSet
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.fastparse import parse_canonical
from cpbcg.planner.traces.jsonl_table import json_excerpt, load_json_line, load_json_records
from cpbcg.planner.traces.text import MAX_LINE_BYTES, TracePath, check_line_lengths, iter_blob_chunks, split_lines, trace_path

FIELD = "extend_seq_lens"
_LONG_INTEGER = re.compile(rb"\d{20}")
BATCH_CHUNK_BYTES = 1 << 20
"""Bytes of whole lines parsed at once: the byte parse's temporaries (a few arrays of the chunk's
length) then stay in cache, and memory stays small; `benchmarks/bench_plan.py` times this size
against 16 MiB chunks."""


def read_batch_trace(path: str | TracePath, chunk_bytes: int = BATCH_CHUNK_BYTES) -> Iterator[BatchSet]:
    """Stream a batch trace as `BatchSet` chunks.

    Raises `TraceError` (`FILE:LINE: ...`) for malformed lines and for a trace with no batch.
    """
    where = trace_path(path)
    seen_any = False
    for first_line, blob in iter_blob_chunks(where, chunk_bytes):
        if blob.isspace():  # only blank lines: nothing to parse (one C scan, not a list of lines)
            continue
        batches = _parse_canonical_checked(blob)
        if batches is None:
            lines = split_lines(blob)
            check_line_lengths(where, first_line, lines)
            batches = _parse_fast(lines)
        if batches is None:
            batches = _parse_slow(where, first_line, lines)
        if batches.num_batches:
            seen_any = True
            yield batches
    if not seen_any:
        raise TraceError(located(where, 1, "empty trace: no batches"))


def _parse_canonical_checked(blob: bytes) -> BatchSet | None:
    """The numpy byte parse (`cpbcg.planner.traces.fastparse`) when the chunk is canonical and in range."""
    batches = parse_canonical(blob if blob.endswith(b"\n") else blob + b"\n", MAX_LINE_BYTES)
    if batches is None or not _in_range(batches.extend_seq_lens) or not _in_range(batches.counts):
        return None
    return batches


def _parse_fast(lines: list[bytes]) -> BatchSet | None:
    """One-call parse of a chunk; `None` when anything needs the careful path.

    Each line is parsed on its own (`load_json_records`, the careful path's rule), so two
    records comma-joined on one line are refused here as there. Accepts only chunks whose
    every record is a batch (an object with `extend_seq_lens`, any
    other keys ignored, or a bare list) of integer lengths: numpy must type the flattened lengths
    and the counts as int64 (a float, string, nested list or huge integer does not), and no
    boolean or null may appear anywhere (numpy would read `true` as 1). The cyclic garbage
    collector is paused while millions of small objects are created (it would otherwise rescan
    them repeatedly and triple the parse time).
    """
    end = len(lines)
    while end and lines[end - 1].isspace():  # trailing blank lines; any other blank line fails the parse
        end -= 1
    body = lines[:end]
    if not body:
        return BatchSet(np.zeros(0, np.int64), np.zeros(1, np.int64))
    blob = b"".join(body)
    if b"true" in blob or b"false" in blob or b"null" in blob:
        return None
    with _gc_paused():  # the parsed records are freed when `_fast_arrays` returns, before the collector resumes
        try:
            arrays = _fast_arrays(body, counted=b'"count"' in blob or b"\\" in blob)  # a key may spell "count" with JSON escapes
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError):
            return None
    if arrays is None:
        return None
    sizes, flat, weights = arrays
    if flat.dtype != np.int64 or flat.ndim != 1 or weights.dtype != np.int64 or weights.ndim != 1:
        return None
    if not np.all(sizes > 0) or not _in_range(flat) or not _in_range(weights):
        return None
    return BatchSet.from_sizes(flat, sizes, weights)


def _fast_arrays(body: list[bytes], counted: bool) -> tuple[Int64Array, np.ndarray, np.ndarray] | None:
    """`(sizes, flat lengths, counts)` of JSON batch lines as numpy reads them (dtypes checked by
    the caller), or None when a record is not a list of lengths; raises what parsing raises."""
    records = load_json_records(body)
    seqs = [r[FIELD] if type(r) is dict else r for r in records]
    if any(type(seq) is not list for seq in seqs):
        return None
    sizes = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    flat = np.array(list(chain.from_iterable(seqs)))
    weights = np.array([r.get("count", 1) if type(r) is dict else 1 for r in records]) if counted else np.ones(len(seqs), np.int64)
    return sizes, flat, weights


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_slow(path: TracePath, first_line: int, lines: list[bytes]) -> BatchSet:
    seqs: list[list[int]] = []
    counts: list[int] = []
    for line_no, line in enumerate(lines, start=first_line):
        if line.isspace():
            continue
        seq, count = parse_batch_line(path, line_no, line)
        seqs.append(seq)
        counts.append(count)
    return BatchSet.from_lists(seqs, counts) if seqs else BatchSet(np.zeros(0, np.int64), np.zeros(1, np.int64))


def parse_batch_line(path: TracePath, line_no: int, line: bytes) -> tuple[list[int], int]:
    """Parse one batch line into `(extend_seq_lens, count)`; raises `TraceError` naming the line."""

    def fail(message: str) -> TraceError:
        return TraceError(located(path, line_no, message))

    record = load_json_line(path, line_no, line)
    if _LONG_INTEGER.search(line):  # orjson reads integers past 64 bits as floats: show what was written
        record = json.loads(line)
    count: object = 1
    if isinstance(record, dict):
        if FIELD not in record:
            raise fail(f'missing field "{FIELD}"')
        seq, count = record[FIELD], record.get("count", 1)
        where = FIELD
    elif isinstance(record, list):
        seq, where = record, "list"
    else:
        raise fail(f'expected {{"{FIELD}": [...]}} or a JSON list of lengths, got {type(record).__name__}')
    if not isinstance(seq, list):
        raise fail(f"{where}: expected a list of lengths, got {type(seq).__name__}")
    if not seq:
        raise fail(f"{where}: empty batch")
    lens: list[int] = []
    for i, value in enumerate(seq):
        if not _is_positive_int(value):
            raise fail(f"{where}[{i}]: {_shown(value)} is not a positive integer")
        if value > MAX_TOKENS:
            raise fail(f"{where}[{i}]: {value} is above the largest supported length {MAX_TOKENS}")
        lens.append(value)
    if not _is_positive_int(count) or count > MAX_TOKENS:
        raise fail(f"count: {_shown(count)} is not a positive integer up to {MAX_TOKENS}")
    return lens, count


def _is_positive_int(value: object) -> TypeGuard[int]:
    return type(value) is int and value > 0


def _in_range(values: np.ndarray) -> bool:
    return values.size == 0 or bool(values.min() >= 1 and values.max() <= MAX_TOKENS)


def _shown(value: object) -> str:
    """A JSON value as the user wrote it (big integers in full, not as floats), cut short."""
    return str(value) if type(value) is int else json_excerpt(value)


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    """A bare JSON list, or an object with `extend_seq_lens`."""
    return isinstance(sniff.record, list) or FIELD in sniff.keys


FORMAT = TraceFormatInfo(
    "batches", "batch trace", TraceKind.batches, recognises,
    lambda path, options: read_batch_trace(path)
)
