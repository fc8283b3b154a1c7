"""Prefilter of SGLang server logs: the lines that can hold a record, and the common record
shape read in bulk, so that a log is read at disk speed.

A log is mostly lines no reader wants (`Decode batch`, HTTP access lines, warnings). This
module finds the lines that can matter by literal markers, in one pass over a block of whole
lines, keeping their exact line numbers:

* `marked_lines(blob, first, markers)`: `(line_number, line)` of every line holding one of
  `markers` (`RECORD_MARKERS` + `SETTINGS_MARKERS` are every marker the log readers look for);
* `prefill_columns(blob, first, ...)`: every `Prefill batch` mark of the block with, for the
  records printed in the common shape, their fields read with numpy (no Python object per
  record); a record not in that shape is flagged (`ok` False) and the caller reads its line
  with its own per-line parser, so the bulk path changes no answer, only the speed.

The common shape (0.5.23 `report_prefill_stats` and the releases before it, docs/traces.md):

    PREFIX Prefill batch[(mixed #running-req: R)][,.] #new-seq: K, #new-token: N, #cached-token: C ... [cuda graph: True] ...

with at most 12 digits per number, one `Prefill batch` per line, no carriage return and no
`#replay-token` in the line, and a rank prefix (everything before the mark) whose shape (digits aside) is shared with
other records of the block: the caller's prefix rule (`choose_prefix`, the reader's own) is run
once per distinct prefix shape and applies to every record of that shape, since the rule reads
digits only as `\\d`. The verdict is the first `cuda|npu|cpu|musa|xpu graph: True|False` after
the mark in the line, as the per-line reader's search finds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import numpy.typing as npt

from cpbcg.planner.arrays import BoolArray, Int64Array

RECORD_MARK = b"Prefill batch"
RECORD_MARKERS = (RECORD_MARK,)
"""Literal markers of forward records (`sglang_log`)."""
SETTINGS_MARKERS = (b"server_args", b"launch_server", b"sglang serve", b"Capture ", b"Capturing ", b"sglang", b"SGLang")
"""Literal markers of the lines `sglang_settings` reads (settings dump, launch command, capture
list/progress/end lines, the version). The settings reader reads only the start-up output;
a reader of settings further into the log keeps this tuple in step with its line patterns."""
VERDICT_LABELS = ("", "cuda graph", "npu graph", "cpu graph", "musa graph", "xpu graph")
"""`PrefillColumns.label` codes."""
MAX_DIGITS = 12
"""Longest number read in bulk (the per-line reader's `\\d{1,12}`)."""
MAX_PREFIX_SHAPES = 16
"""Distinct prefix shapes tried per prefix length; records beyond go to the per-line parser."""

_NL, _CR, _ZERO, _NINE = ord("\n"), ord("\r"), ord("0"), ord("9")
_GRAPH = b" graph: "
_MARK = re.compile(re.escape(RECORD_MARK))
_REPLAY = re.compile(rb"#replay-token")
_LABEL_CODE = {b"cuda": 1, b"npu": 2, b"cpu": 3, b"musa": 4, b"xpu": 5}

U8Array = npt.NDArray[np.uint8]


def marked_lines(blob: bytes, first: int, markers: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """`(line number, line without its newline)` of each line of `blob` (whole lines, the first
    numbered `first`) holding at least one of `markers`, in order, each line once. One pass
    of a compiled alternation of the literal markers; lines in between are never split."""
    pattern = re.compile(b"|".join(re.escape(m) for m in markers))
    line_no, at, last_start = first, 0, -1
    for match in pattern.finditer(blob):
        start = blob.rfind(b"\n", 0, match.start()) + 1
        if start == last_start:
            continue
        line_no += blob.count(b"\n", at, start)
        at = last_start = start
        end = blob.find(b"\n", match.start())
        yield line_no, blob[start:len(blob) if end < 0 else end]


@dataclass(frozen=True)
class PrefillColumns:
    """Every `Prefill batch` mark of a block, in order. Arrays are `[M]`, one per mark; the
    fields are meaningful only where `ok` (elsewhere 0)."""

    ok: BoolArray
    """The record was read in bulk; False: the caller parses `blob[line_start:line_end]` itself."""
    line_no: Int64Array
    """1-based line of the mark."""
    line_start: Int64Array
    """Byte offset in the block of the mark's line."""
    line_end: Int64Array
    """Byte offset of the line's end (its newline, or the block's end)."""
    new_seq: Int64Array
    new_token: Int64Array
    cached_token: Int64Array
    running_req: Int64Array
    """`(mixed #running-req: R)` decode rows, else 0."""
    graph: npt.NDArray[np.int8]
    """1 `True`, 0 `False`, -1 no verdict in the line after the mark."""
    label: npt.NDArray[np.int8]
    """Index into `VERDICT_LABELS` (0: no verdict)."""
    key: Int64Array
    """Index into `tags`: the rank prefix of the record."""
    tags: tuple[bytes, ...]
    """Tag text of each distinct rank prefix (`_PREFIX` group 2, e.g. b' DP0 TP0'; b'' without one)."""

    @property
    def num_marks(self) -> int:
        return len(self.ok)


def prefill_columns(blob: bytes, first: int, choose_prefix: Callable[[bytes], "re.Match[bytes] | None"],
                    newlines: Int64Array | None = None) -> PrefillColumns:
    """Every `Prefill batch` mark of `blob` (whole lines, the first numbered `first`), the
    common-shape records read in bulk (module doc). `choose_prefix(before)` is the caller's
    rule for the rank prefix of a record given the bytes of its line before the mark: a match
    whose group 2 is the tag text, or None (no prefix). `newlines`: the [L] offsets of the
    block's newlines when the caller has them. Never raises on odd content."""
    data = np.frombuffer(blob, dtype=np.uint8)
    marks = np.fromiter(map(re.Match.start, _MARK.finditer(blob)), dtype=np.int64)
    m = len(marks)
    if newlines is None:
        newlines = np.flatnonzero(data == _NL)
    li = np.searchsorted(newlines, marks)
    line_start = np.concatenate([[-1], newlines])[li] + 1
    line_end = np.concatenate([newlines, [len(blob)]])[li]
    ok = np.ones(m, dtype=bool)
    if m > 1:  # two marks on one line: the per-line reader splits them
        same = li[1:] == li[:-1]
        ok[1:] &= ~same
        ok[:-1] &= ~same
    if b"\r" in blob:  # the per-line reader reads a carriage return as a space
        cr_lines = np.unique(np.searchsorted(newlines, np.flatnonzero(data == _CR)))
        ok &= ~np.isin(li, cr_lines)

    if b"#replay-token" in blob:  # encoder replay (0.5.23) adds rows to the forward: the per-line reader reads it
        replay = np.fromiter(map(re.Match.start, _REPLAY.finditer(blob)), dtype=np.int64)
        ok &= ~np.isin(li, np.searchsorted(newlines, replay))

    block = _Block(blob)
    at = marks + len(RECORD_MARK)
    mixed = block.literal_at(at, b"(mixed #running-req: ")
    if mixed.any():
        running, end, read = block.uint_at(at + 21)
        mixed_ok = read & block.literal_at(end, b")")
        ok &= ~mixed | mixed_ok
        running = np.where(mixed & mixed_ok, running, 0)
        at = np.where(mixed, end + 1, at)
    else:
        running = np.zeros(m, dtype=np.int64)
    ok &= block.byte_in(at, b",.") & block.literal_at(at + 1, b" #new-seq: ")
    new_seq, end, read = block.uint_at(at + 12)
    ok &= read & block.literal_at(end, b", #new-token: ")
    new_token, end, read = block.uint_at(end + 14)
    ok &= read & block.literal_at(end, b", #cached-token: ")
    cached, end, read = block.uint_at(end + 17)
    ok &= read & ~block.word_at(end)

    graph, label, read = _verdicts(blob, block, np.minimum(end, line_end), line_end)
    ok &= read
    key, tags = _prefix_keys(blob, block, marks, line_start, ok, choose_prefix)
    ok &= key >= 0
    zero = np.zeros(m, dtype=np.int64)
    return PrefillColumns(ok, first + li, line_start, line_end, np.where(ok, new_seq, zero), np.where(ok, new_token, zero),
                          np.where(ok, cached, zero), np.where(ok, running, zero), graph, label, np.maximum(key, 0), tags)


class _Block:
    """A block's bytes, zero-padded at the end so that every read below stays inside (offsets a
    little before 0 wrap into the padding), seen as 8-byte words and 16-byte rows starting at
    every offset: one gather per record and field, no index matrix."""

    PAD = 64

    def __init__(self, blob: bytes):
        self.size = len(blob)
        self.data: U8Array = np.frombuffer(blob + bytes(self.PAD), dtype=np.uint8)
        self.words = np.ndarray(shape=(self.size + self.PAD - 8,), dtype="<u8", buffer=self.data, strides=(1,))
        self.rows: U8Array = np.lib.stride_tricks.as_strided(self.data, shape=(self.size + self.PAD - 16, 16), strides=(1, 1),
                                                            writeable=False)

    def inside(self, at: Int64Array) -> Int64Array:
        """Offsets clipped to the padding (a chain of reads past a failed match stays harmless)."""
        return np.clip(at, -(self.PAD // 2), self.size)

    def literal_at(self, at: Int64Array, literal: bytes) -> BoolArray:
        at = self.inside(at)
        same = np.ones(len(at), dtype=bool)
        for cut in range(0, len(literal), 8):
            piece = literal[cut:cut + 8]
            value = int.from_bytes(piece, "little")
            word = self.words[at + cut]
            if len(piece) < 8:
                word = word & np.uint64((1 << (8 * len(piece))) - 1)
            same &= word == np.uint64(value)
        return same

    def byte_in(self, at: Int64Array, choices: bytes) -> BoolArray:
        found: BoolArray = np.isin(self.data[self.inside(at)], np.frombuffer(choices, dtype=np.uint8))
        return found

    def word_at(self, at: Int64Array) -> BoolArray:
        """The byte at each offset is a regex word character (`[A-Za-z0-9_]`; False past the end)."""
        c = self.data[self.inside(at)]
        low = c | 32
        word: BoolArray = ((c >= _ZERO) & (c <= _NINE)) | ((low >= ord("a")) & (low <= ord("z"))) | (c == ord("_"))
        return word

    def uint_at(self, at: Int64Array) -> tuple[Int64Array, Int64Array, BoolArray]:
        """`(value, offset after the digits, read)` of the run of 1..MAX_DIGITS ASCII digits at
        each offset (`read` False: no digit, or more than MAX_DIGITS)."""
        win = self.rows[self.inside(at)][:, :MAX_DIGITS + 1]
        digit = (win >= _ZERO) & (win <= _NINE)
        count = np.where(digit.all(axis=1), MAX_DIGITS + 1, np.argmin(digit, axis=1))
        value = np.zeros(len(at), dtype=np.int64)
        values = win.astype(np.int64) - _ZERO
        for column in range(min(MAX_DIGITS, int(count.max(initial=0)))):
            value = np.where(column < count, value * 10 + values[:, column], value)
        return value, at + count, (count >= 1) & (count <= MAX_DIGITS)

    def prefix_rows(self, at: Int64Array, width: int) -> U8Array:
        """`[M, width]` bytes from each offset."""
        at = self.inside(at)
        parts = [self.rows[at + cut] for cut in range(0, width, 16)]
        return (np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0])[:, :width]


def _verdicts(blob: bytes, block: _Block, after: Int64Array, line_end: Int64Array) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8], BoolArray]:
    """`(graph, label, read)`: the verdict `LABEL graph: True|False` (word-bounded) at the first
    ` graph: ` from each offset `after` within its line. `read` False where that first ` graph: `
    is no verdict (a later one could be: the caller's per-line parser decides)."""
    find = blob.find
    g = np.fromiter((find(_GRAPH, a, e) for a, e in zip(after.tolist(), line_end.tolist())), dtype=np.int64, count=len(after))
    m = len(after)
    graph, label = np.full(m, -1, dtype=np.int8), np.zeros(m, dtype=np.int8)
    found = g >= 0
    codes = np.zeros(m, dtype=np.int8)
    for name, code in _LABEL_CODE.items():
        begin = g - len(name)
        hit = found & (codes == 0) & (begin >= after) & block.literal_at(begin, name) & ~block.word_at(begin - 1)
        codes[hit] = code
    tail = g + len(_GRAPH)
    true = block.literal_at(tail, b"True") & ~block.word_at(tail + 4)
    false = block.literal_at(tail, b"False") & ~block.word_at(tail + 5)
    valid = found & (codes > 0) & (true | false)
    graph[valid], label[valid] = true[valid], codes[valid]
    return graph, label, ~found | valid


def _prefix_keys(blob: bytes, block: _Block, marks: Int64Array, line_start: Int64Array, ok: BoolArray,
                 choose_prefix: Callable[[bytes], "re.Match[bytes] | None"]) -> tuple[Int64Array, tuple[bytes, ...]]:
    """Per mark, the index of its rank prefix's tag text in the returned tuple (-1: not read in
    bulk). Records are grouped by prefix length, then by shape (digits as one class); the
    caller's rule runs once per shape, on its first record."""
    key = np.full(len(marks), -1, dtype=np.int64)
    tags: dict[bytes, int] = {}
    length = marks - line_start
    for size in np.unique(length[ok]):
        rows = np.flatnonzero(ok & (length == size))
        if size == 0:
            key[rows] = tags.setdefault(b"", len(tags))
            continue
        win = block.prefix_rows(line_start[rows], int(size))
        shape = np.where((win >= _ZERO) & (win <= _NINE), ord("D"), win)
        left = np.ones(len(rows), dtype=bool)
        for _ in range(MAX_PREFIX_SHAPES):
            if not left.any():
                break
            first = int(np.argmax(left))
            same = left & (shape == shape[first]).all(axis=1)
            left &= ~same
            start = int(line_start[rows[first]])
            match = choose_prefix(blob[start:start + int(size)])
            if match is None:
                key[rows[same]] = tags.setdefault(b"", len(tags))
                continue
            a, b = match.span(2)
            if a == b:
                key[rows[same]] = tags.setdefault(match.group(2), len(tags))
                continue
            text = np.ascontiguousarray(win[same, a:b]).view(np.dtype((np.void, b - a))).ravel()
            distinct, inverse = np.unique(text, return_inverse=True)
            index = np.array([tags.setdefault(bytes(t), len(tags)) for t in distinct], dtype=np.int64)
            key[rows[same]] = index[inverse.ravel()]
    return key, tuple(tags)
