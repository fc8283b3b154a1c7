"""Byte-level numpy parse of canonical batch-trace lines (the hot path of `cpbcg plan`).

A chunk is taken here only if every line has one of the shapes in `CANONICAL_SHAPES` once each
run of digits is replaced by `D` and the list separators `, D` / `,D` are folded away, e.g.

    {"extend_seq_lens": [1534, 161, 353], "count": 3}   →   {"extend_seq_lens": [D], "count": D}

That is what `json.dumps`, `orjson.dumps` and `cpbcg batches` write. Anything else (other keys,
other spacing, floats, signs, strings, blank lines inside the chunk) returns `None`, and the
caller parses the chunk with orjson, and line by line for error messages. The numbers are then
read with numpy: digit runs located with shifted comparisons, values built by Horner's rule one
digit column at a time. No Python object is created per request.
"""

from __future__ import annotations

import numpy as np

from cpbcg.planner.layout import BatchSet

CANONICAL_SHAPES = frozenset(
    {
        b'{"extend_seq_lens": [D]}',
        b'{"extend_seq_lens":[D]}',
        b'{"extend_seq_lens": [D], "count": D}',
        b'{"extend_seq_lens":[D],"count":D}',
        b"[D]",
    }
)
_NEWLINE, _ZERO, _NINE, _MARK, _U = ord("\n"), ord("0"), ord("9"), ord("D"), ord("u")
MAX_DIGITS = 15
"""Longer digit runs are left to the careful path (they could overflow int64 or mean a typo)."""


def parse_canonical(blob: bytes) -> BatchSet | None:
    """Parse `blob` (whole lines, each ending in a newline) or return None if any line is not canonical.

    Returns batches with lengths and counts as int64; zero values are returned as they are
    (the caller's range check sends such chunks to the careful path for a precise message).
    """
    data = np.frombuffer(blob, dtype=np.uint8)
    is_digit = (data >= _ZERO) & (data <= _NINE)
    run_start = is_digit.copy()
    run_start[1:] &= ~is_digit[:-1]
    shape = np.where(is_digit, np.uint8(_MARK), data)[~is_digit | run_start]
    if not _shapes_ok(shape.tobytes()):
        return None
    run_end = is_digit
    run_end[:-1] &= ~is_digit[1:]
    starts, ends = np.flatnonzero(run_start), np.flatnonzero(run_end)
    digits = ends - starts + 1
    if len(starts) == 0 or digits.max() > MAX_DIGITS:
        return None
    values = _right_aligned_values(data, ends, int(digits.max()), digits)
    newlines = np.flatnonzero(data == _NEWLINE)
    last = np.searchsorted(starts, newlines) - 1  # index of each line's last number
    per_line = np.diff(last, prepend=-1)
    has_count = np.zeros(len(newlines), dtype=bool)
    has_count[np.searchsorted(newlines, np.flatnonzero(data == _U))] = True
    counts = np.ones(len(newlines), dtype=np.int64)
    counts[has_count] = values[last[has_count]]
    keep = np.ones(len(values), dtype=bool)
    keep[last[has_count]] = False
    sizes = per_line - has_count
    return BatchSet.from_sizes(values[keep], sizes, counts)


def _right_aligned_values(data: np.ndarray, ends: np.ndarray, width: int, digits: np.ndarray) -> np.ndarray:
    """[num_numbers] int64 values of the digit runs ending at `ends` (`digits` long, <= `width`).

    One pass per digit column, right to left: the byte `column` places before each run's end,
    counted only for runs at least that long, times its power of ten.
    """
    values = (data[ends] - _ZERO).astype(np.int64)
    scale = 1
    for column in range(1, width):
        scale *= 10
        column_digit = data[np.maximum(ends - column, 0)] - np.uint8(_ZERO)  # uint8, wraps if not a digit
        column_digit[digits <= column] = 0
        values += column_digit.astype(np.int64) * scale
    return values


def _shapes_ok(shape: bytes) -> bool:
    folded = shape.replace(b", D", b"").replace(b",D", b"")
    lines = folded.split(b"\n")
    if lines[-1] != b"":
        return False  # the blob must end with a newline
    return set(lines[:-1]) <= CANONICAL_SHAPES
