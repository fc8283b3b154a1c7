"""Prefilter of SGLang server logs: the lines that can hold a record, and the common record
shape read in bulk, so that a log is read at disk speed.

A log is mostly lines no reader wants (`Decode batch`, HTTP access lines, warnings). This
module finds the lines that can matter by literal markers, in one pass over a block of whole
lines, keeping their exact line numbers:

* `lines_with(blob, literals, folded)`: the start of every line holding one of `literals` (or
  of `folded`, in any letter case), each line once: the settings reader's search
  (`engines/sglang/logs/settings.py` `settings_lines`) and the `#replay-token` check below. A literal is found
  from its rarest byte (an anchor found with `bytes.find`, a `memchr`) where the block holds
  few of them, else from the block's byte pairs (`_Block.pair_occurrences`, numpy; `bytes.find`
  for a literal under 3 bytes): the same lines either way;
* `prefill_columns(blob, first, ...)`: every `Prefill batch` mark of the block with, for the
  records printed in the common shape, their fields read with numpy (no Python object per
  record); a record not in that shape is flagged (`ok` False) and the caller reads its line
  with its own per-line parser, so the bulk path changes no answer, only the speed.

The common shape (0.5.23 `report_prefill_stats` and the releases before it, docs/traces.md):

    PREFIX Prefill batch[(mixed #running-req: R)][,.] #new-seq: K, #new-token: N, #cached-token: C ... [cuda graph: True] ...

with at most 12 digits per number, one `Prefill batch` per line, no carriage return but one
ending the line (CRLF: the per-line reader reads it as a space, which no field rule sees), no
`#replay-token` in the line, and a rank prefix (everything before the mark) whose shape
(digits aside) is shared with other records of the block: the caller's prefix rule
(`choose_prefix`, the reader's own) is run once per distinct prefix shape and applies to every
record of that shape, since the rule reads digits only as `\\d`. The verdict is the first
`cuda|npu|cpu|musa|xpu graph: True|False` after the mark in the line, as the per-line reader's
search finds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import numpy.typing as npt

from cpbcg.planner.arrays import BoolArray, Int64Array
from cpbcg.planner.traces.text import newline_offsets

RECORD_MARK = b"Prefill batch"
VERDICT_LABELS = ("", "cuda graph", "npu graph", "cpu graph", "musa graph", "xpu graph")
"""`PrefillColumns.label` codes."""
MAX_DIGITS = 12
"""Longest number read in bulk (the per-line reader's `\\d{1,12}`)."""
MAX_PREFIX_SHAPES = 16
"""Distinct prefix shapes tried per prefix length; records beyond go to the per-line parser."""
ANCHOR_SAMPLE_BYTES = 1 << 18
"""Bytes at the head of a block whose byte counts choose each literal's anchor (`lines_with`)."""
SLICE_BYTES = 1 << 20
"""Bytes of a block compared at once when a literal is searched for with numpy (`_Block.occurrences`)."""
MAX_ANCHOR_HITS = 1 << 12
"""Most anchor bytes a block may be expected to hold (from the sample) for a literal to be found
from its anchor; a block holding 4x as many searches the rest by the whole literal."""

_NL, _CR, _ZERO, _NINE = ord("\n"), ord("\r"), ord("0"), ord("9")
_GRAPH = b" graph: "
_MARK = re.compile(re.escape(RECORD_MARK))
_REPLAY = b"#replay-token"
_LABEL_CODE = {b"cuda": 1, b"npu": 2, b"cpu": 3, b"musa": 4, b"xpu": 5}

U8Array = npt.NDArray[np.uint8]


def byte_sample(blob: bytes) -> npt.NDArray[np.float64]:
    """[256] float64: how often each byte value occurs in `blob`, estimated from its first
    `ANCHOR_SAMPLE_BYTES` (counts scaled to the blob's length): what chooses the anchors."""
    n = min(len(blob), ANCHOR_SAMPLE_BYTES)
    counts = np.bincount(np.frombuffer(blob, dtype=np.uint8, count=n), minlength=256)
    return np.asarray(counts * (len(blob) / max(n, 1)), dtype=np.float64)


def lines_with(blob: bytes, literals: Iterable[bytes], folded: Iterable[bytes] = ()) -> list[int]:
    """Ascending byte offsets of the start of every line of `blob` holding one of `literals`
    (exact bytes) or one of `folded` (lowercase literals, matched in any ASCII letter case), each
    line once. A literal whose rarest byte `byte_sample` expects at most `MAX_ANCHOR_HITS` times
    is found from each occurrence of that byte (`bytes.find` of one byte, then a comparison),
    others from the blob's byte pairs (`_Block.pair_occurrences`: about 3x `bytes.find` of a short
    literal of common letters such as `sglang`; `bytes.find` for a literal under 3 bytes), the
    rest of a block the sample misjudged by `bytes.find` of the literal. A
    folded literal is found as written and from each of its letters in upper case (an occurrence
    in another case holds one), or, where one of those is common, in `blob.lower()`."""
    starts: set[int] = set()
    sample = byte_sample(blob)
    anchors: dict[int, list[tuple[bytes, int, bool]]] = {}  # anchor byte -> (literal, its index in the literal, folded)
    lowered: list[bytes] = []
    exact = list(literals)
    for literal in folded:
        letters = [(c, j) for j, c in enumerate(literal.upper()) if c != literal[j]]
        if all(sample[c] <= MAX_ANCHOR_HITS for c, _ in letters):
            exact.append(literal)
            for c, j in letters:
                anchors.setdefault(c, []).append((literal, j, True))
        else:
            lowered.append(literal)
    block: _Block | None = None
    for literal in exact:
        byte = min(literal, key=lambda c: float(sample[c]))
        if sample[byte] <= MAX_ANCHOR_HITS:
            anchors.setdefault(byte, []).append((literal, literal.index(byte), False))
        elif len(literal) >= 3:
            block = _Block(blob) if block is None else block
            _pair_lines(blob, block.pair_occurrences(literal), starts)
        else:
            _find_lines(blob, blob, literal, 0, starts)
    low: bytes | None = None
    for byte, members in anchors.items():
        anchor, hits = bytes([byte]), 0
        at = blob.find(anchor)
        while at >= 0:
            hits += 1
            if hits > 4 * MAX_ANCHOR_HITS:  # the sample misjudged the block: every occurrence from here by the whole literal
                for literal, j, fold in members:
                    if fold and low is None:
                        low = blob.lower()
                    _find_lines(blob, low if fold and low is not None else blob, literal, max(0, at - j), starts)
                break
            for literal, j, fold in members:
                if at >= j and (blob[at - j:at - j + len(literal)].lower() == literal if fold else blob.startswith(literal, at - j)):
                    starts.add(blob.rfind(b"\n", 0, at) + 1)
            at = blob.find(anchor, at + 1)
    if lowered:
        low = blob.lower() if low is None else low
        for literal in lowered:
            _find_lines(blob, low, literal, 0, starts)
    return sorted(starts)


def _pair_lines(blob: bytes, hits: Int64Array, starts: set[int]) -> None:
    """Add to `starts` the line start of each line of `blob` holding one of `hits` (ascending
    offsets of a literal without a newline), one line at a time."""
    i = 0
    while i < len(hits):
        at = int(hits[i])
        starts.add(blob.rfind(b"\n", 0, at) + 1)
        end = blob.find(b"\n", at)
        if end < 0:
            return
        i = int(np.searchsorted(hits, end))


def _find_lines(blob: bytes, text: bytes, literal: bytes, at: int, starts: set[int]) -> None:
    """Add to `starts` the line start of every occurrence of `literal` in `text` (`blob` or its
    lowercase copy, the same offsets) from offset `at`, one search per line."""
    at = text.find(literal, at)
    while at >= 0:
        starts.add(blob.rfind(b"\n", 0, at) + 1)
        end = blob.find(b"\n", at)
        at = -1 if end < 0 else text.find(literal, end)


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
                    newlines: Int64Array | None = None, block: "_Block | None" = None) -> PrefillColumns:
    """Every `Prefill batch` mark of `blob` (whole lines, the first numbered `first`), the
    common-shape records read in bulk (module doc). `choose_prefix(before)` is the caller's
    rule for the rank prefix of a record given the bytes of its line before the mark: a match
    whose group 2 is the tag text, or None (no prefix). `newlines`: the [L] offsets of the
    block's newlines when the caller has them; `block`: the blob's `scan_block`, shared with
    `decode_columns` (what one found, the other reuses). Never raises on odd content."""
    block = _Block(blob) if block is None else block
    data = block.data[:block.size]
    sample = byte_sample(blob)
    marks = block.occurrences(RECORD_MARK, RECORD_MARK.index(min(RECORD_MARK, key=lambda c: int(sample[c]))))
    m = len(marks)
    if newlines is None:
        newlines = newline_offsets(blob)
    li = np.searchsorted(newlines, marks)
    line_start = np.concatenate([[-1], newlines])[li] + 1
    line_end = np.concatenate([newlines, [len(blob)]])[li]
    ok = ~block.near_end(marks, line_end)
    if m > 1:  # two marks on one line: the per-line reader splits them
        same = li[1:] == li[:-1]
        ok[1:] &= ~same
        ok[:-1] &= ~same
    if b"\r" in blob:  # the per-line reader reads a carriage return as a space: only one ending the line (CRLF) changes no field
        cr = np.flatnonzero(data == _CR)
        inner = cr[(cr + 1 < len(blob)) & (block.data[cr + 1] != _NL)]
        ok &= ~np.isin(li, np.searchsorted(newlines, inner))
    replay = lines_with(blob, (_REPLAY,))  # encoder replay (0.5.23) adds rows to the forward: the per-line reader reads it
    if replay:
        ok &= ~np.isin(li, np.searchsorted(newlines, np.array(replay, dtype=np.int64)))

    at = marks + len(RECORD_MARK)
    mixed = block.data[block.inside(at)] == ord("(")  # one byte first: most records hold none
    if mixed.any():
        mixed &= block.literal_at(at, b"(mixed #running-req: ")
    if mixed.any():
        running, end, read = block.uint_at(at + 21)
        mixed_ok = read & block.literal_at(end, b")")
        ok &= ~mixed | mixed_ok
        running = np.where(mixed & mixed_ok, running, 0)
        at = np.where(mixed, end + 1, at)
    else:
        running = np.zeros(m, dtype=np.int64)
    sep = block.data[block.inside(at)]
    ok &= ((sep == ord(",")) | (sep == ord("."))) & block.literal_at(at + 1, b" #new-seq: ")
    new_seq, end, read = block.uint_at(at + 12)
    ok &= read & block.literal_at(end, b", #new-token: ")
    new_token, end, read = block.uint_at(end + 14)
    ok &= read & block.literal_at(end, b", #cached-token: ")
    cached, end, read = block.uint_at(end + 17)
    ok &= read & ~block.word_at(end)

    graph, label, read = _verdicts(block, np.minimum(end, line_end), line_end, sample)
    ok &= read
    key, tags = _prefix_keys(blob, block, marks, line_start, ok, choose_prefix)
    ok &= key >= 0
    zero = np.zeros(m, dtype=np.int64)
    return PrefillColumns(ok, first + li, line_start, line_end, np.where(ok, new_seq, zero), np.where(ok, new_token, zero),
                          np.where(ok, cached, zero), np.where(ok, running, zero), graph, label, np.maximum(key, 0), tags)


DECODE_MARK = b"Decode batch"
_DECODE_RUNNING = b" #running-req: "


def scan_block(blob: bytes) -> "_Block":
    """The bulk view of `blob` that `prefill_columns` and `decode_columns` can share (each
    literal's occurrences found once)."""
    return _Block(blob)


def decode_columns(blob: bytes, newlines: Int64Array | None = None, block: "_Block | None" = None
                   ) -> tuple[Int64Array, Int64Array, npt.NDArray[np.int8]]:
    """Every `Decode batch` mark of `blob` (whole lines) read in bulk when its line is in the
    common shape `Decode batch[,.] #running-req: N, ... [LABEL graph: True|False] ...`:
    `(marks, running, graph)` ([D] int64 offsets, [D] int64 `#running-req` (-1: not in the common
    shape, the caller reads that line itself), [D] int8 verdict 1/0, -1 when the line prints none).
    The verdict is the first ` graph: ` after the number within the line (`_verdicts`). `block`:
    the blob's `scan_block` when shared. Never raises."""
    block = _Block(blob) if block is None else block
    sample = byte_sample(blob)
    marks = block.occurrences(DECODE_MARK, DECODE_MARK.index(min(DECODE_MARK, key=lambda c: int(sample[c]))))
    if not len(marks):
        return marks, marks.copy(), np.zeros(0, dtype=np.int8)
    if newlines is None:
        newlines = newline_offsets(blob)
    li = np.searchsorted(newlines, marks)
    line_end = np.concatenate([newlines, [len(blob)]])[li]
    at = marks + len(DECODE_MARK)
    ok = ~block.near_end(marks, line_end)
    sep = block.data[block.inside(at)]
    ok &= ((sep == ord(",")) | (sep == ord("."))) & block.literal_at(at + 1, _DECODE_RUNNING)
    running, end, read = block.uint_at(at + 1 + len(_DECODE_RUNNING))
    ok &= read & (running < 10**9) & block.literal_at(end, b",")  # at most 9 digits, as the per-line reader
    graph, _, read = _verdicts(block, np.minimum(end, line_end), line_end, sample)
    ok &= read
    return marks, np.where(ok, running, -1), graph


class _Block:
    """A block's bytes seen as 8-byte words and 16-byte rows starting at every offset: one gather
    per record and field, no index matrix, no copy of the block. Every read offset is clipped
    into the block (`inside`), so a chain of reads past a failed match stays harmless; a read
    clipped at the end would see the wrong bytes, so the records that could read that far (a
    mark within `TAIL` bytes of the end: `near_end`) go to the per-line parser. A block shorter
    than `SMALL` is copied with zero padding instead (nothing near its end is clipped)."""

    WIDEST = 32
    """Most bytes one `window` reads."""
    TAIL = 256
    """Bytes after a mark within which every bulk read of its record lies (its fields, at most
    12 digits each, and its verdict when the line ends within `TAIL` of the block's end too)."""
    SMALL = 4096

    def __init__(self, blob: bytes):
        self.blob, self.size = blob, len(blob)
        self.padded = self.size < self.SMALL
        self.data: U8Array = np.frombuffer(blob + bytes(self.TAIL) if self.padded else blob, dtype=np.uint8)
        span = len(self.data)
        self.limit = span - self.WIDEST
        """Largest offset a read starts at (a window of `WIDEST` bytes from it stays inside)."""
        self._items: dict[int, np.ndarray] = {}
        self._pairs: npt.NDArray[np.uint16] | None = None
        self._pair_counts: Int64Array = np.zeros(0, dtype=np.int64)
        self._found: dict[tuple[bytes, int], Int64Array] = {}

    def near_end(self, marks: Int64Array, line_end: Int64Array) -> BoolArray:
        """[M] bool: records whose reads could be clipped at the block's end."""
        if self.padded:
            return np.zeros(len(marks), dtype=bool)
        far: BoolArray = (marks + self.TAIL <= self.limit) & (line_end + 64 <= self.limit)
        return ~far

    def inside(self, at: Int64Array) -> Int64Array:
        """Offsets clipped into the block (class doc)."""
        return np.clip(at, 0, self.limit)

    def window(self, at: Int64Array, width: int) -> U8Array:
        """`[M, W]` uint8: the `W` bytes from each offset (clipped, `inside`), `W` = `width` rounded
        up to a multiple of 8 (at most `WIDEST`). One gather of opaque `W`-byte items starting at
        every offset (a `V<W>` view of the block with a 1-byte stride): numpy copies whole items,
        several times faster than a gather of unaligned words or of a strided byte matrix."""
        w = -(-width // 8) * 8
        items = self._items.get(w)
        if items is None:
            items = self._items[w] = np.ndarray(shape=(len(self.data) - w + 1,), dtype=f"V{w}", buffer=self.data, strides=(1,))
        rows: U8Array = items[self.inside(at)].view(np.uint8).reshape(len(at), w)
        return rows

    def literal_at(self, at: Int64Array, literal: bytes) -> BoolArray:
        """[M] bool: `literal` (at most `WIDEST` bytes) starts at each offset."""
        return _holds(self.window(at, len(literal)), 0, literal)

    def word_at(self, at: Int64Array) -> BoolArray:
        """The byte at each offset is a regex word character (`[A-Za-z0-9_]`)."""
        return _word(self.data[self.inside(at)])

    def uint_at(self, at: Int64Array) -> tuple[Int64Array, Int64Array, BoolArray]:
        """`(value, offset after the digits, read)` of the run of 1..MAX_DIGITS ASCII digits at
        each offset (`read` False: no digit, or more than MAX_DIGITS)."""
        return _uint(self.window(at, 16), at)

    def occurrences(self, literal: bytes, anchor: int) -> Int64Array:
        """[K] ascending start offsets of every occurrence of `literal` (overlapping ones included),
        each found from its byte `literal[anchor]`, `SLICE_BYTES` of the block at a time (small
        temporaries, no regex); each literal searched once per block."""
        known = self._found.get((literal, anchor))
        if known is not None:
            return known
        self._found[(literal, anchor)] = out = self._occurrences(literal, anchor)
        return out

    def _occurrences(self, literal: bytes, anchor: int) -> Int64Array:
        found = []
        for lo in range(0, self.size, SLICE_BYTES):
            at = np.flatnonzero(self.data[lo:min(lo + SLICE_BYTES, self.size)] == literal[anchor]) + (lo - anchor)
            at = at[(at >= 0) & (at + len(literal) <= self.size)]
            if anchor + 1 < len(literal):  # the byte after the anchor first (a one-byte gather), then the whole literal
                at = at[self.data[at + anchor + 1] == literal[anchor + 1]]  # inside: at + len(literal) <= size
            hit = self.literal_at(at, literal)
            if len(at) and at[-1] > self.limit:  # reads clipped at the block's end: compared as bytes
                late = at > self.limit
                hit[late] = [self.blob.startswith(literal, a) for a in at[late].tolist()]
            found.append(at[hit])
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def pair_occurrences(self, literal: bytes) -> Int64Array:
        """`occurrences` of a literal of 3 bytes or more, found from the block's byte pairs at even
        offsets (a `<u2` view: two bytes per comparison, and far fewer candidates than any one
        byte gives): an occurrence at `o` holds `literal[j:j + 2]` at the even offset `o + j` when
        `o + j` is even, else `literal[j + 1:j + 3]` at `o + j + 1`. `j` is where the block's head
        (`ANCHOR_SAMPLE_BYTES`) holds the fewest of the two pairs."""
        n = len(literal)
        if self._pairs is None:
            self._pairs = np.ndarray(shape=(self.size // 2,), dtype="<u2", buffer=self.data)
            self._pair_counts = np.bincount(self._pairs[:ANCHOR_SAMPLE_BYTES // 2], minlength=1 << 16)
        pairs, counts = self._pairs, self._pair_counts
        codes = [int.from_bytes(literal[i:i + 2], "little") for i in range(n - 1)]
        j = min(range(n - 2), key=lambda i: int(counts[codes[i]]) + int(counts[codes[i + 1]]))
        even, odd = np.uint16(codes[j]), np.uint16(codes[j + 1])
        found = []
        step = SLICE_BYTES // 2
        for lo in range(0, len(pairs), step):
            part = pairs[lo:lo + step]
            found += [np.flatnonzero(part == even) * 2 + (2 * lo - j), np.flatnonzero(part == odd) * 2 + (2 * lo - j - 1)]
        at = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        at = at[(at >= 0) & (at + n <= self.size)]
        hit = self.literal_at(at, literal)
        late = at > self.limit
        if late.any():  # reads clipped at the block's end: compared as bytes
            hit[late] = [self.blob.startswith(literal, a) for a in at[late].tolist()]
        ordered: Int64Array = np.sort(at[hit], kind="stable")  # the even and odd runs of each slice, merged
        return ordered

    def prefix_rows(self, at: Int64Array, width: int) -> U8Array:
        """`[M, W]` bytes from each offset, C-contiguous, `W` = `width` rounded up to a multiple
        of 8; the columns from `width` on are zero."""
        parts = [self.window(at + cut, min(self.WIDEST, width - cut)) for cut in range(0, width, self.WIDEST)]
        rows = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        rows[:, width:] = 0
        return rows


def _holds(win: U8Array, col: int, literal: bytes) -> BoolArray:
    """[M] bool: row `i` of `win` holds `literal` at column `col` (compared as words when the
    literal starts on a word of a contiguous window)."""
    if not win.flags.c_contiguous or (col % 8 and col % 8 + len(literal) > 8):
        same: BoolArray = (win[:, col:col + len(literal)] == np.frombuffer(literal, dtype=np.uint8)).all(axis=1)
        return same
    words = win.view("<u8")
    if col % 8:  # within one word: shifted down
        word = (words[:, col // 8] >> np.uint64(8 * (col % 8))) & np.uint64((1 << (8 * len(literal))) - 1)
        same = word == np.uint64(int.from_bytes(literal, "little"))
        return same
    same = np.ones(len(win), dtype=bool)
    for cut in range(0, len(literal), 8):
        piece = literal[cut:cut + 8]
        word = words[:, (col + cut) // 8]
        if len(piece) < 8:
            word = word & np.uint64((1 << (8 * len(piece))) - 1)
        same &= word == np.uint64(int.from_bytes(piece, "little"))
    return same


def _word(c: U8Array) -> BoolArray:
    """Bytes that are a regex word character (`[A-Za-z0-9_]`)."""
    low = c | 32
    word: BoolArray = ((c >= _ZERO) & (c <= _NINE)) | ((low >= ord("a")) & (low <= ord("z"))) | (c == ord("_"))
    return word


_ASCII_ZEROS = np.uint64(0x3030303030303030)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_TEN_UP = np.uint64(0x7676767676767676)
_HIGH = np.uint64(0x8080808080808080)
_POW10 = np.array([10 ** i for i in range(9)], dtype=np.uint64)


def _uint(win: U8Array, at: Int64Array) -> tuple[Int64Array, Int64Array, BoolArray]:
    """`_Block.uint_at(at)` from the `[M, 16]` window of bytes from each offset, eight bytes at a
    time (SWAR): `x = word ^ '00000000'` holds a digit's value in each byte that was a digit; the
    high bit of `((x & 0x7f..) + 0x76..) | x` marks the bytes that were not (x >= 10); the digits
    lead up to the lowest marked byte; they are shifted to the word's top and summed in pairs,
    quads and octets (`_octet`)."""
    words = win.view("<u8")
    x0, x1 = words[:, 0] ^ _ASCII_ZEROS, words[:, 1] ^ _ASCII_ZEROS
    c0, c1 = _leading(x0), _leading(x1)
    count = np.minimum(np.where(c0 == 8, 8 + c1, c0), MAX_DIGITS + 1)
    more = np.clip(count - 8, 0, 8)
    head = _octet(x0, np.minimum(count, 8))
    value = np.where(count > 8, head * _POW10[more] + _octet(x1, more), head).astype(np.int64)
    return value, at + count, (count >= 1) & (count <= MAX_DIGITS)


def _leading(x: npt.NDArray[np.uint64]) -> Int64Array:
    """[M] int64: digit bytes (values 0..9 in `x`) before the first other byte, 0..8."""
    other = (((x & _LOW7) + _TEN_UP) | x) & _HIGH
    lowest = other & (~other + np.uint64(1))  # its lowest marked bit (0: every byte a digit)
    below = ((lowest - np.uint64(1)) & _HIGH) >> np.uint64(7)  # a 1 in each byte below it (in all 8 when none)
    lead: Int64Array = ((below * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)  # their sum, in the top byte
    return lead


def _octet(x: npt.NDArray[np.uint64], count: Int64Array) -> npt.NDArray[np.uint64]:
    """[M] uint64: the number written by the first `count` (0..8) digit bytes of each word, the
    first byte the most significant."""
    v = np.where(count > 0, x << (np.uint64(8) * (np.uint64(8) - count.astype(np.uint64))), np.uint64(0))
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    octet: npt.NDArray[np.uint64] = (v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return octet


def _digits_as_d(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """`words` (little-endian 8-byte words of text) with every ASCII digit byte replaced by `D`:
    the shape of a rank prefix (`_prefix_keys`). Digits are found as in `_leading`."""
    x = words ^ _ASCII_ZEROS
    digit = ~((((x & _LOW7) + _TEN_UP) | x)) & _HIGH
    spread = (digit >> np.uint64(7)) * np.uint64(0xFF)  # 0xff in each digit byte
    shape: npt.NDArray[np.uint64] = (words & ~spread) | (np.uint64(0x4444444444444444) & spread)
    return shape


def _verdicts(block: _Block, after: Int64Array, line_end: Int64Array,
              sample: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8], BoolArray]:
    """`(graph, label, read)`: the verdict `LABEL graph: True|False` (word-bounded) at the first
    ` graph: ` from each offset `after` within its line (`bytes.find(b" graph: ", after, line_end)`:
    every ` graph: ` of the block is found from its rarest byte but the last, by `sample`).
    `read` False where that first ` graph: ` is no verdict (a later one could be: the caller's
    per-line parser decides)."""
    anchor = min(range(len(_GRAPH) - 1), key=lambda i: float(sample[_GRAPH[i]]))  # `p` or `h` in a log
    graphs = block.occurrences(_GRAPH, anchor)  # [G] ascending starts of every ` graph: `
    nearest = np.append(graphs, -1)[np.searchsorted(graphs, after)]
    g = np.where((nearest >= 0) & (nearest + len(_GRAPH) <= line_end), nearest, -1)
    m = len(after)
    graph, label = np.full(m, -1, dtype=np.int8), np.zeros(m, dtype=np.int8)
    found = g >= 0
    codes = np.zeros(m, dtype=np.int8)
    head = block.window(g - 6, 8)  # the 6 bytes before each ` graph: `: a label of up to 4 letters and the byte before it
    for name, code in _LABEL_CODE.items():
        begin = g - len(name)
        hit = found & (codes == 0) & (begin >= after) & _holds(head, 6 - len(name), name) & ~_word(head[:, 5 - len(name)])
        codes[hit] = code
    tail = block.window(g + len(_GRAPH), 8)
    true = _holds(tail, 0, b"True") & ~_word(tail[:, 4])
    false = _holds(tail, 0, b"False") & ~_word(tail[:, 5])
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
    lengths = length[ok]
    for size in lengths[:1] if (lengths == lengths[:1]).all() else np.unique(lengths):  # one prefix length: the common case
        rows = np.flatnonzero(ok & (length == size))
        if size == 0:
            key[rows] = tags.setdefault(b"", len(tags))
            continue
        win = block.prefix_rows(line_start[rows], int(size))
        shape = _digits_as_d(win.view("<u8"))  # [R, W / 8] words of the prefix, every digit written as `D`
        left = np.ones(len(rows), dtype=bool)
        for _ in range(MAX_PREFIX_SHAPES):
            if not left.any():
                break
            first = int(np.argmax(left))
            same = left.copy()
            for column in range(shape.shape[1]):
                same &= shape[:, column] == shape[first, column]
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
            if (win[same, a:b] == win[first, a:b]).all():  # one printer: one tag
                key[rows[same]] = tags.setdefault(bytes(win[first, a:b]), len(tags))
                continue
            text = np.ascontiguousarray(win[same, a:b]).view(np.dtype((np.void, b - a))).ravel()
            distinct, inverse = np.unique(text, return_inverse=True)
            index = np.array([tags.setdefault(bytes(t), len(tags)) for t in distinct], dtype=np.int64)
            key[rows[same]] = index[inverse.ravel()]
    return key, tuple(tags)
