"""Byte-level numpy parse of plain batch-trace lines (the hot path of `cpbcg plan`).

A chunk is taken here only if every line has one of the shapes `line_shape_ok` accepts once
each run of digits is replaced by `D` and each list of numbers is folded to one `D`, e.g.

    {"extend_seq_lens": [1534, 161, 353], "count": 3, "id": 7}  ->  {"extend_seq_lens": [D], "count": D, "id": D}

That is what `json.dumps`, `orjson.dumps` and `cpbcg batches` write, plus any number of extra
integer-valued keys after the list (ids, timestamps in ms). Anything else (other key orders or
values, floats, signs, strings, leading zeros, blank lines inside the chunk) returns `None`, and
the caller parses the chunk with orjson, and line by line for error messages: one rule for
every path. The numbers are read with numpy: digit runs located with shifted comparisons,
values built by Horner's rule one digit column at a time. No Python object per request.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.model.batches import BatchSet

_SHAPE = re.compile(rb'\[D\]|\{"extend_seq_lens": ?\[D\]((?:, ?"[A-Za-z_]+": ?D)*)\}')
_KEY = re.compile(rb'"([A-Za-z_]+)"')
_PLAIN_SHAPES = frozenset({b"[D]", b'{"extend_seq_lens": [D]}', b'{"extend_seq_lens":[D]}'})
_NEWLINE, _ZERO, _MARK, _CLOSE = ord("\n"), ord("0"), ord("D"), ord("]")
_COMMA, _SPACE = ord(","), ord(" ")
_COUNT_KEYS = (np.frombuffer(b'"count": ', np.uint8), np.frombuffer(b'"count":', np.uint8))
MAX_DIGITS = 15
"""Longer digit runs are left to the careful path (they could overflow int64 or mean a typo)."""


@lru_cache(maxsize=256)
def line_shape_ok(shape: bytes) -> bool:
    """Whether a folded line shape is a batch this parser reads: a bare list, or the
    `extend_seq_lens` object with distinct extra integer keys (letters and `_` only) after it."""
    match = _SHAPE.fullmatch(shape)
    if match is None:
        return False
    keys = _KEY.findall(match.group(1) or b"")
    return len(set(keys)) == len(keys) and b"extend_seq_lens" not in keys


def parse_canonical(blob: bytes, max_line_bytes: int = 1 << 20) -> BatchSet | None:
    """Parse `blob` (whole lines, each ending in a newline) or return None if any line is not
    plain or is longer than `max_line_bytes`.

    Returns batches with lengths and counts as int64; zero values are returned as they are
    (the caller's range check sends such chunks to the careful path for a precise message).
    """
    data = np.frombuffer(blob, dtype=np.uint8)
    uniform = _parse_uniform(data, max_line_bytes)
    return uniform if uniform is not None else _parse_folded(data, max_line_bytes)


def _parse_folded(data: np.ndarray, max_line_bytes: int) -> BatchSet | None:
    """Every shape `line_shape_ok` accepts, checked by folding each line to its shape."""
    is_digit = _digit(data)
    run_start = is_digit.copy()
    run_start[1:] &= ~is_digit[:-1]
    shape = np.where(is_digit, np.uint8(_MARK), data)[~is_digit | run_start]
    shapes = _shapes(shape.tobytes())
    if shapes is None:
        return None
    run_end = is_digit
    run_end[:-1] &= ~is_digit[1:]
    starts, ends = np.flatnonzero(run_start), np.flatnonzero(run_end)
    digits = ends - starts + 1
    if len(starts) == 0 or digits.max() > MAX_DIGITS or ((data[starts] == _ZERO) & (digits > 1)).any():
        return None  # leading zeros are not JSON: refused here as orjson refuses them
    newlines = np.flatnonzero(data == _NEWLINE)
    if np.diff(newlines, prepend=-1).max() > max_line_bytes + 1:
        return None
    close = np.flatnonzero(data == _CLOSE)  # exactly one `]` per line (the shapes have one)
    values = _run_values(data, ends)
    if values is None:  # a run past MAX_DIGITS (refused above already)
        return None
    if shapes <= _PLAIN_SHAPES:
        last = np.searchsorted(starts, newlines) - 1  # index of each line's last number
        if (starts[last] > close).any():
            return None  # a number after the list (`[5], 6`), hidden by the `, D` fold
        return BatchSet.from_sizes(values, np.diff(last, prepend=-1), np.ones(len(newlines), dtype=np.int64))
    num_keys = (int(np.count_nonzero(data == ord('"'))) - 2 * int(np.count_nonzero(data == ord("{")))) // 2  # quotes of the keys after each list
    return _with_keys(data, starts, values, newlines, close, num_keys)


def _with_keys(data: np.ndarray, starts: np.ndarray, values: np.ndarray, newlines: np.ndarray, close: np.ndarray, num_keys: int) -> BatchSet | None:
    """Lines with integer keys after the list: numbers after a line's `]` are key values; the
    one right after `"count":` is the line's weight, the others are ignored.

    Every key of a checked shape holds a number, so a line has at least as many numbers after
    its `]` as keys; equal totals (`num_keys`, from the quotes) mean exactly one per key: a
    stray `, 4` hidden by the fold, or a digit inside a key name, is left to the careful path.
    """
    before_close = np.searchsorted(starts, close)  # numbers before each line's `]`
    before_end = np.searchsorted(starts, newlines)  # numbers before each line's end
    sizes = before_close - np.concatenate([[0], before_end[:-1]])
    if int((before_end - before_close).sum()) != num_keys:
        return None
    edges = np.bincount(before_close, minlength=len(starts) + 1) - np.bincount(before_end, minlength=len(starts) + 1)
    tail = np.cumsum(edges[:-1]) > 0
    tail_at = np.flatnonzero(tail)
    is_count = np.zeros(len(tail_at), dtype=bool)
    for key in _COUNT_KEYS:
        window = data[starts[tail_at][:, None] - len(key) + np.arange(len(key))]
        is_count |= (window == key).all(axis=1)
    counted = tail_at[is_count]
    counts = np.ones(len(newlines), dtype=np.int64)
    counts[np.searchsorted(newlines, starts[counted])] = values[counted]
    return BatchSet.from_sizes(values[~tail], sizes, counts)


def _shapes(shape: bytes) -> frozenset[bytes] | None:
    """The distinct folded line shapes, or None if one is not accepted or the blob does not end
    with a newline."""
    lines = shape.replace(b", D", b"").replace(b",D", b"").split(b"\n")
    if lines[-1] != b"":
        return None
    distinct = frozenset(lines[:-1])
    return distinct if all(line_shape_ok(s) for s in distinct) else None


_UNIFORM = tuple(
    (prefix, suffix, prefix.count(b" "))
    for prefix, suffix in ((b'{"extend_seq_lens": [', b"]}"), (b'{"extend_seq_lens":[', b"]}"), (b"[", b"]"))
)
"""Line frames of the uniform fast path: (prefix, suffix, spaces in the prefix)."""


def _parse_uniform(data: np.ndarray, max_line_bytes: int) -> BatchSet | None:
    """The commonest chunk, checked without folding shapes: every line is one frame of `_UNIFORM`
    (the first line's) around a list `D(SEP D)*` whose separator is `", "` or `","` throughout.

    Why the checks below prove that shape: the frame bytes are compared at every line's ends,
    and they hold no digit or comma (and spaces only where counted), so the digits, commas and
    other spaces of the chunk all lie in the list bodies; their count equal to the bodies'
    total length means a body holds nothing else. Every comma follows a digit and is followed
    by the separator's rest and a digit, and with `", "` the spaces are exactly one per comma
    (so no body starts or ends with a comma or a space). None when anything differs (the
    general path decides). Each number is then the digit run that ends before its terminator
    (a comma, or the frame's suffix before the newline), read leftwards (`_run_values`).
    """
    stops = np.flatnonzero((data == _COMMA) | (data == _NEWLINE))  # each number's terminator, in order
    at_newline = data[stops] == _NEWLINE
    newlines, commas = stops[at_newline], stops[~at_newline]
    n = len(newlines)
    if n == 0 or newlines[-1] != len(data) - 1:
        return None
    line_start = np.empty(n, dtype=np.int64)
    line_start[0], line_start[1:] = 0, newlines[:-1] + 1
    line_bytes = newlines - line_start
    for prefix, suffix, prefix_spaces in _UNIFORM:
        if data[: len(prefix)].tobytes() == prefix:
            break
    else:
        return None
    body_start, body_end = line_start + len(prefix), newlines - len(suffix)  # body: [start, end)
    if line_bytes.min() < len(prefix) + len(suffix) + 1 or line_bytes.max() > max_line_bytes:
        return None
    if not (_bytes_at(data, line_start, prefix) and _bytes_at(data, body_end, suffix)):
        return None
    wide = len(commas) > 0 and data[commas[0] + 1] == _SPACE  # the separator is ", "
    body_spaces = int(np.count_nonzero(data == _SPACE)) - n * prefix_spaces
    if body_spaces != (len(commas) if wide else 0):
        return None
    digits = int(np.count_nonzero(_digit(data)))
    if digits + len(commas) + body_spaces != int((body_end - body_start).sum()):
        return None
    after = commas + 1 + wide  # first digit of the number after each comma
    if not (_digit(data[commas - 1]).all() and _digit(data[after]).all()):
        return None
    if wide and not (data[commas + 1] == _SPACE).all():
        return None
    for first in (after, body_start):  # leading zeros are not JSON: refused as orjson refuses them
        if ((data[first] == _ZERO) & _digit(data[first + 1])).any():
            return None
    values = _run_values(data, stops - 1 - len(suffix) * at_newline)
    if values is None:
        return None
    return BatchSet.from_sizes(values, np.diff(np.flatnonzero(at_newline), prepend=-1), np.ones(n, dtype=np.int64))


def _run_values(data: np.ndarray, ends: np.ndarray) -> Int64Array | None:
    """[num_numbers] int64 values of the digit runs ending at `ends` (each a digit; `data[0]` is
    not one: every accepted line starts with `[` or `{`), one pass per digit column right to left
    while any run goes on; None when a run is longer than `MAX_DIGITS`. Summed in int32 up to
    nine digits."""
    values: npt.NDArray[np.int32 | np.int64] = (data[ends] - np.uint8(_ZERO)).astype(np.int32)
    going = np.ones(len(ends), dtype=bool)
    at = ends.copy()
    scale = 1
    for column in range(1, MAX_DIGITS + 1):
        at -= 1
        column_digit = np.take(data, at, mode="clip")  # before the data: its first byte, not a digit
        column_digit -= np.uint8(_ZERO)  # uint8, wraps if not a digit
        going &= column_digit < 10
        if not going.any():
            return values.astype(np.int64, copy=False)
        if column == 9:
            values = values.astype(np.int64)
        scale *= 10
        column_digit *= going
        values += column_digit * values.dtype.type(scale)
    return None  # a run longer than MAX_DIGITS


def _bytes_at(data: np.ndarray, positions: np.ndarray, pattern: bytes) -> bool:
    """Whether `pattern` occurs at every position (each `len(pattern)` bytes inside `data`);
    patterns of 8 bytes or more are compared as unaligned 64-bit words."""
    if len(pattern) < 8:
        window = data[positions[:, None] + np.arange(len(pattern))]
        return bool((window == np.frombuffer(pattern, np.uint8)).all())
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    offsets = sorted({*range(0, len(pattern) - 8, 8), len(pattern) - 8})
    return all(
        bool((words[positions + off] == np.frombuffer(pattern[off : off + 8], "<u8")[0]).all()) for off in offsets
    )


def _digit(values: np.ndarray) -> BoolArray:
    """[n] bool: which bytes (uint8) are ASCII digits (one comparison: below `0` wraps high)."""
    digits: BoolArray = (values - np.uint8(_ZERO)) < 10
    return digits
