"""Batch traces: one prefill forward per line.

Each line is `{"extend_seq_lens": [1534, 161, 353]}` with an optional integer `"count"` (how
many times that batch occurred), or a bare JSON list of lengths. Blank lines are skipped;
other keys are ignored. `.gz` files (detected by their magic bytes) are read transparently.

The parse is the hot path of `cpbcg plan` (a 1,000,000-line trace must plan in under 2 s), so
each chunk of lines is parsed in one `orjson.loads` call over the joined lines and validated with
numpy. Anything unusual in a chunk (a bad line, a float, a boolean) sends that chunk through a
line-by-line parse that names the first offending line: `FILE:LINE: what is wrong`.
"""

from __future__ import annotations

import gc
import gzip
import zlib
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import IO, Iterator

import numpy as np
import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.fastparse import parse_canonical
from cpbcg.planner.layout import MAX_TOKENS, BatchSet

CHUNK_BYTES = 16 << 20
"""Bytes of lines parsed at once (bounds memory on huge traces)."""
FIELD = "extend_seq_lens"


def open_binary(path: Path) -> IO[bytes]:
    """Open a trace for reading bytes, gunzipping when it starts with the gzip magic.

    Raises `TraceError` when the file cannot be opened.
    """
    try:
        handle = open(path, "rb")
        if handle.read(2) == b"\x1f\x8b":
            handle.close()
            return gzip.open(path, "rb")
        handle.seek(0)
        return handle
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from exc


@contextmanager
def read_errors(path: Path, line_no: int) -> Iterator[None]:
    """Turn decompression and read errors into `TraceError` (`FILE:LINE: ...`)."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise TraceError(located(path, line_no, "truncated or corrupt gzip")) from None
    except OSError as exc:
        raise TraceError(located(path, line_no, f"cannot read: {exc.strerror or exc}")) from None


def iter_blob_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield `(first_line_number, blob)`: about `chunk_bytes` of whole lines at a time (the last
    line may lack its newline). Raises `TraceError` on unreadable or corrupt input."""
    line_no, carry = 1, b""
    with open_binary(path) as handle:
        while True:
            with read_errors(path, line_no):
                block = handle.read(chunk_bytes)
            if not block:
                if carry:
                    yield line_no, carry
                return
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            blob, carry = block[:cut], block[cut:]
            yield line_no, blob
            line_no += blob.count(b"\n")


def read_batch_trace(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[BatchSet]:
    """Stream a batch trace as `BatchSet` chunks.

    Raises `TraceError` (`FILE:LINE: ...`) for malformed lines and for a trace with no batch.
    """
    path = Path(path)
    seen_any = False
    for first_line, blob in iter_blob_chunks(path, chunk_bytes):
        batches = _parse_canonical_checked(blob)
        if batches is None:
            lines = blob.splitlines(keepends=True)
            batches = _parse_fast(lines)
        if batches is None:
            batches = _parse_slow(path, first_line, lines)
        if batches.num_batches:
            seen_any = True
            yield batches
    if not seen_any:
        raise TraceError(located(path, 1, "empty trace: no batches"))


def _parse_canonical_checked(blob: bytes) -> BatchSet | None:
    """The numpy byte parse (`cpbcg.planner.fastparse`) when the chunk is canonical and in range."""
    batches = parse_canonical(blob if blob.endswith(b"\n") else blob + b"\n")
    if batches is None or not _in_range(batches.extend_seq_lens) or not _in_range(batches.counts):
        return None
    return batches


def _parse_fast(lines: list[bytes]) -> BatchSet | None:
    """One-call parse of a chunk; `None` when anything needs the careful path.

    Accepts only chunks whose every record is a batch with integer lengths: no strings other than
    the two known keys (checked by counting quotes), no floats, booleans or nulls. The cyclic
    garbage collector is paused while millions of small objects are created (it would otherwise
    rescan them repeatedly and triple the parse time).
    """
    body = lines
    while body and body[-1].isspace():  # trailing blank lines; any other blank line fails the parse
        body = body[:-1]
    if not body:
        return BatchSet(np.zeros(0, np.int64), np.zeros(1, np.int64))
    blob = b"[" + b",".join(body) + b"]"
    if b"true" in blob or b"false" in blob or b"null" in blob or b"." in blob or b"E" in blob:
        return None
    num_count_keys = blob.count(b'"count"')
    with _gc_paused():
        try:
            records = orjson.loads(blob)
            try:
                seqs = [r[FIELD] for r in records]
                num_dicts = len(records)
            except TypeError:  # some lines are bare lists
                seqs = [r[FIELD] if type(r) is dict else r for r in records]
                num_dicts = sum(type(r) is dict for r in records)
            # Only key names may hold quotes, and "e" appears only in the field name: so no other
            # key, no string and no exponent-notation number hides among the lengths or counts.
            if blob.count(b'"') != 2 * (num_dicts + num_count_keys) or blob.count(b"e") != FIELD.count("e") * num_dicts:
                return None
            if num_count_keys:
                counts = [r.get("count", 1) if type(r) is dict else 1 for r in records]
                weights = np.fromiter(counts, dtype=np.int64, count=len(counts))
            else:
                weights = np.ones(len(seqs), dtype=np.int64)
            sizes = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
            flat = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(sizes.sum()))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, OverflowError):
            return None
        finally:
            records = seqs = None  # free before the collector resumes
    if not np.all(sizes > 0) or not _in_range(flat) or not _in_range(weights):
        return None
    return BatchSet.from_sizes(flat, sizes, weights)


@contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_slow(path: Path, first_line: int, lines: list[bytes]) -> BatchSet:
    seqs: list[list[int]] = []
    counts: list[int] = []
    for line_no, line in enumerate(lines, start=first_line):
        if line.isspace():
            continue
        seq, count = parse_batch_line(path, line_no, line)
        seqs.append(seq)
        counts.append(count)
    return BatchSet.from_lists(seqs, counts) if seqs else BatchSet(np.zeros(0, np.int64), np.zeros(1, np.int64))


def load_json_line(path: Path, line_no: int, line: bytes) -> object:
    """`orjson.loads(line)`, or `TraceError` `FILE:LINE: not valid JSON (...)`."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise TraceError(located(path, line_no, f"not valid JSON ({exc.msg})")) from None


def parse_batch_line(path: Path, line_no: int, line: bytes) -> tuple[list[int], int]:
    """Parse one batch line into `(extend_seq_lens, count)`; raises `TraceError` naming the line."""

    def fail(message: str) -> TraceError:
        return TraceError(located(path, line_no, message))

    record = load_json_line(path, line_no, line)
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
    for i, value in enumerate(seq):
        if not _is_positive_int(value):
            raise fail(f"{where}[{i}]: {_shown(value)} is not a positive integer")
        if value > MAX_TOKENS:
            raise fail(f"{where}[{i}]: {value} is above the largest supported length {MAX_TOKENS}")
    if not _is_positive_int(count) or count > MAX_TOKENS:
        raise fail(f"count: {_shown(count)} is not a positive integer up to {MAX_TOKENS}")
    return seq, count  # type: ignore[return-value]


def _is_positive_int(value: object) -> bool:
    return type(value) is int and value > 0


def _in_range(values: np.ndarray) -> bool:
    return values.size == 0 or (values.min() >= 1 and values.max() <= MAX_TOKENS)


def _shown(value: object) -> str:
    """A JSON value as the user wrote it (big integers in full, not as floats)."""
    return str(value) if type(value) is int else orjson.dumps(value).decode()
