"""Reading trace bytes safely: files, gzip, stdin (`-`), bounded lines, short quotes in messages.

Every reader opens its input here, so one set of rules holds for every format:

* `.gz` is decided by the gzip magic bytes, not the name; corrupt gzip is a `TraceError`
  naming the line reached;
* a line longer than `MAX_LINE_BYTES` is refused (a file without newlines, `/dev/zero`,
  cannot exhaust memory);
* formats read whole (`read_whole`) accept only regular files (or `-`) up to `MAX_WHOLE_BYTES`;
* the path `-` is standard input (`stdin.py`: it may be opened again after format detection);
* messages quote at most `EXCERPT_CHARS` characters of file content (`excerpt`).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.stdin import open_stdin

STDIN = "-"
"""The path that means standard input."""
CHUNK_BYTES = 16 << 20
"""Bytes of whole lines handed to a parser at once (bounds memory on huge traces)."""
MAX_LINE_BYTES = 1 << 20
"""Longest line accepted (1 MiB, newline excluded) in every line-based format."""
MAX_WHOLE_BYTES = 2 << 30
"""Largest file a whole-file format (vLLM result JSON) reads (2 GiB, decompressed)."""
EXCERPT_CHARS = 40
"""Most characters of file content quoted in a message."""
CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Bytes that never occur in a text trace (control characters other than tab, CR, LF)."""


class _StdinPath:
    """The trace path `-`: standard input, shown as `<stdin>` in messages."""

    def __str__(self) -> str:
        return "<stdin>"

    __repr__ = __str__


STDIN_PATH = _StdinPath()
TracePath = Union[Path, _StdinPath]
"""A trace as the readers hold it: a file, or `STDIN_PATH`."""


def trace_path(path: Path | str | _StdinPath) -> TracePath:
    """`Path(path)`, or `STDIN_PATH` for `-`: what every reader holds and names in messages."""
    if isinstance(path, _StdinPath) or str(path) == STDIN:
        return STDIN_PATH
    return Path(path)


def file_of(path: TracePath | str) -> Path | None:
    """The file `path` names, or None for standard input (`-`)."""
    where = trace_path(path)
    return None if isinstance(where, _StdinPath) else where


def is_stdin(path: object) -> bool:
    return path is STDIN_PATH or str(path) == STDIN


def display(path: object) -> str:
    """How a trace is named in messages (`<stdin>` for `-`)."""
    return str(STDIN_PATH) if is_stdin(path) else str(Path(str(path)))


def open_binary(path: TracePath | str) -> io.BufferedIOBase:
    """Open a trace (`-` = stdin) for reading bytes, gunzipping when it starts with the gzip magic.

    Raises `TraceError` when it cannot be opened or is a directory.
    """
    file = file_of(path)
    try:
        if file is None:
            stdin = open_stdin(display(path))
            if stdin.peek(2)[:2] == b"\x1f\x8b":
                return _without_bom(gzip.GzipFile(fileobj=stdin, mode="rb"))
            return _without_bom(stdin)
        handle = open(file, "rb")
        if handle.read(2) == b"\x1f\x8b":
            handle.close()
            return _without_bom(gzip.GzipFile(file, mode="rb"))
        handle.seek(0)
        return _without_bom(handle)
    except IsADirectoryError:
        raise TraceError(f"{display(path)}: is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceError(f"{display(path)}: cannot open: {exc.strerror or exc}") from exc


UTF8_BOM = b"\xef\xbb\xbf"


def _without_bom(handle: io.BufferedIOBase) -> io.BufferedIOBase:
    """`handle` past a leading UTF-8 byte order mark, if any: every text reader (JSONL, JSON,
    CSV, logs; plain, gzip or stdin) then sees the same bytes (RFC 8259 lets a JSON parser
    ignore it; spreadsheet CSV exports write one)."""
    try:
        head = handle.peek(3)[:3]  # type: ignore[attr-defined]
    except (EOFError, OSError, zlib.error):
        return handle  # the reader reports a corrupt stream where it reads
    if head == UTF8_BOM:
        handle.read(3)
    return handle


@contextmanager
def read_errors(path: TracePath | str, line_no: int) -> Iterator[None]:
    """Turn decompression and read errors into `TraceError` (`FILE:LINE: ...`)."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile):
        raise TraceError(located(display(path), line_no, "truncated or corrupt gzip")) from None
    except OSError as exc:
        raise TraceError(located(display(path), line_no, f"cannot read: {exc.strerror or exc}")) from None


def read_counted(handle: io.BufferedIOBase, size: int, path: TracePath | str, line_no: int) -> bytes:
    """Up to `size` bytes of `handle` (fewer only at its end), read piece by piece so that a gzip
    stream that ends early (`EOFError`) is reported after the lines it did hold: `TraceError`
    `FILE: truncated gzip stream (after N lines)`, N counted from `line_no` (the first line of
    this read)."""
    parts: list[bytes] = []
    got = 0
    try:
        while got < size:
            part = handle.read1(size - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    except EOFError:
        done = b"".join(parts)
        raise TraceError(f"{display(path)}: truncated gzip stream (after {line_no - 1 + count_newlines(done)} lines)") from None
    return b"".join(parts)


def long_line(path: TracePath | str, line_no: int) -> TraceError:
    return TraceError(located(display(path), line_no, f"line longer than {MAX_LINE_BYTES} bytes (1 MiB), the longest a trace line may be"))


def iter_blob_chunks(path: TracePath | str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield `(first_line_number, blob)`: about `chunk_bytes` of whole lines at a time (the last
    line may lack its newline). Raises `TraceError` on unreadable or corrupt input and on a
    line longer than `MAX_LINE_BYTES` (checked by the parsers for lines inside a blob, here for
    a line that spans reads)."""
    line_no, carry = 1, b""
    with open_binary(path) as handle:
        while True:
            with read_errors(path, line_no):
                block = read_counted(handle, chunk_bytes, path, line_no)
            if not block:
                if carry:
                    yield line_no, carry
                return
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry += block
                if len(carry) > MAX_LINE_BYTES:
                    raise long_line(path, line_no)
                continue
            # one copy of the block at most: the carried line's head and the whole lines of this read joined
            blob = block if not carry and cut == len(block) else b"".join((carry, memoryview(block)[:cut]))
            carry = block[cut:]
            if len(carry) > MAX_LINE_BYTES:
                raise long_line(path, line_no + count_newlines(blob))
            yield line_no, blob
            line_no += count_newlines(blob)


NEWLINE = ord("\n")


SLICE_BYTES = 1 << 20
"""Bytes of a blob compared at once by `count_newlines` and `newline_offsets`: small temporaries,
reused and in cache, instead of one as long as a 16 MiB blob."""


def count_newlines(blob: bytes) -> int:
    """`blob.count(b"\\n")`, in numpy (several times faster on megabyte chunks)."""
    data = np.frombuffer(blob, dtype=np.uint8)
    return sum(int(np.count_nonzero(data[lo:lo + SLICE_BYTES] == NEWLINE)) for lo in range(0, len(data), SLICE_BYTES))


def newline_offsets(blob: bytes) -> np.ndarray:
    """[L] int64 ascending offsets of the newlines of `blob` (numpy, `SLICE_BYTES` at a time)."""
    data = np.frombuffer(blob, dtype=np.uint8)
    parts = [np.flatnonzero(data[lo:lo + SLICE_BYTES] == NEWLINE) + lo for lo in range(0, len(data), SLICE_BYTES)]
    return np.concatenate(parts) if len(parts) > 1 else parts[0] if parts else np.zeros(0, dtype=np.int64)


def split_lines(blob: bytes) -> list[bytes]:
    """Lines of a blob, each keeping its `\\n` (only `\\n` ends a line, as for `readlines`)."""
    lines = blob.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


def check_line_lengths(path: TracePath | str, first: int, lines: list[bytes]) -> None:
    """`TraceError` naming the first line longer than `MAX_LINE_BYTES`."""
    if max(map(len, lines), default=0) <= MAX_LINE_BYTES + 1:  # a CRLF line of the limit is checked below
        return
    for line_no, line in enumerate(lines, start=first):
        if len(line.rstrip(b"\r\n")) > MAX_LINE_BYTES:
            raise long_line(path, line_no)


def check_blob_lines(path: TracePath | str, first: int, blob: bytes) -> np.ndarray | None:
    """`check_line_lengths` for a blob of whole lines, without splitting it. Returns the [L]
    int64 offsets of the blob's newlines when it had to find them (a blob longer than
    `MAX_LINE_BYTES`), else None."""
    if len(blob) <= MAX_LINE_BYTES:
        return None
    ends = newline_offsets(blob)
    lengths = np.diff(np.concatenate([[-1], ends, [len(blob)]])) - 1
    long = np.flatnonzero(lengths > MAX_LINE_BYTES + 1)
    if len(long):
        raise long_line(path, first + int(long[0]))
    return ends


def iter_line_chunks(path: TracePath | str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, list[bytes]]]:
    """Yield `(first_line_number, lines)` chunks, every line bounded by `MAX_LINE_BYTES`."""
    for first, blob in iter_blob_chunks(path, chunk_bytes):
        lines = split_lines(blob)
        check_line_lengths(path, first, lines)
        yield first, lines


def first_line(path: TracePath | str) -> tuple[int, bytes]:
    """`(line number, bytes)` of the first non-blank line (a leading UTF-8 BOM dropped).

    Raises `TraceError` for an empty, unreadable or corrupt (gzip) file or an over-long line.
    """
    for first, lines in iter_line_chunks(path, 1 << 16):
        for line_no, line in enumerate(lines, start=first):
            if line.strip():
                return line_no, line.lstrip(b"\xef\xbb\xbf")
    raise no_requests(path)


def no_requests(path: TracePath | str) -> TraceError:
    """The error of a request table without a non-blank line."""
    return TraceError(located(display(path), 1, "empty trace: no requests"))


def read_head(path: TracePath | str, limit: int = MAX_LINE_BYTES) -> bytes:
    """The first `limit` bytes (decompressed), for format detection."""
    with open_binary(path) as handle, read_errors(path, 1):
        return read_counted(handle, limit, path, 1)


def require_regular(path: Path | str) -> None:
    """`TraceError` unless `path` is a regular file (formats read whole or by seeking)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise TraceError(f"{path}: cannot open: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise TraceError(f"{path}: not a regular file (this format is read whole)")


_DATE_PARTS = re.compile(r'(Month|Day|Hours|Minutes|Seconds) out of range in datetime string "\s*[+-]?\d+-(\d+)(?:-(\d+))?(?:[ T](\d+)(?::(\d+)(?::(\d+))?)?)?')
"""numpy's message for a calendar part out of range (`Month out of range in datetime string "2023-13-45"`)."""
_PART_RANGES = {"Month": (2, "month", "1..12"), "Day": (3, "day", "past the month's last day"),
                "Hours": (4, "hour", "0..23"), "Minutes": (5, "minute", "0..59"), "Seconds": (6, "second", "0..59")}


def time_problem(field: str, text: str, exc: Exception) -> str:
    """`FIELD: 'VALUE' is not a timestamp`; `... is not a valid date: month 13 (1..12)` for a
    calendar part out of range (numpy's `datetime64` message); `... is outside ...` for a real
    date outside 1970..2199 (`datetime_seconds`)."""
    if "seconds out of range" in str(exc):
        return f"{field}: {text} is beyond 2200 as seconds since 1970 (a timestamp in µs or ns?): not a time in seconds"
    part = _DATE_PARTS.search(str(exc))
    if part is not None:
        group, name, allowed = _PART_RANGES[part.group(1)]
        value = part.group(group)
        return f"{field}: {text} is not a valid date: {name} {value if value is not None else 'out of range'} ({allowed})"
    if "out of range" in str(exc):
        return f"{field}: {text} is outside the supported dates (years 1970..2199)"
    return f"{field}: {text} is not a timestamp"


def read_whole(path: TracePath | str, limit: int = MAX_WHOLE_BYTES) -> bytes:
    """All bytes of a trace read whole. Refuses anything but a regular file or `-` (a device
    or FIFO could be endless) and more than `limit` bytes."""
    file = file_of(path)
    if file is not None:
        require_regular(file)
    with open_binary(path) as handle, read_errors(path, 1):
        data = read_counted(handle, limit + 1, path, 1)
    if len(data) > limit:
        raise TraceError(f"{display(path)}: larger than {limit >> 30} GiB, the most a whole-file trace may hold")
    return data


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, printable quote of file content for messages: `ascii()` of at most `limit`
    characters (or bytes), with `...` when cut. Never prints raw binary."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        return ascii(value[:limit]) + "..."
    return ascii(value)


def line_excerpt(line: bytes) -> str:
    """`excerpt` of a text line (decoded, stripped)."""
    return excerpt(line[: 4 * EXCERPT_CHARS].decode("utf-8", "replace").strip())


def show_names(names: list[str], limit: int = 8) -> str:
    """`a, b, c` for a header's columns or a record's keys; odd names quoted with `excerpt`."""
    shown = [n if n.isascii() and n.isprintable() and len(n) <= 24 else excerpt(n, 20) for n in names[:limit]]
    text = ", ".join(shown)
    if len(text) > 100:
        text = text[:97] + "..."
    return text + (f" ({len(names)} in all)" if len(names) > limit or text.endswith("...") else "")


def looks_binary(line: bytes) -> bool:
    """True when a line is not UTF-8 text (or holds control characters other than tab/CR/LF)."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return CONTROL_BYTES.search(line) is not None


def gzip_magic(path: TracePath | str) -> bool:
    """Whether the file starts with the gzip magic bytes (`.gz` names alone decide nothing)."""
    file = file_of(path)
    if file is None:
        return False
    try:
        with open(file, "rb") as handle:
            return bool(handle.read(2) == b"\x1f\x8b")
    except OSError:
        return False


def gz_note(path: TracePath | str) -> str:
    if str(path).endswith(".gz") and not gzip_magic(path):
        return " (read as plain text: no gzip magic bytes despite the .gz name)"
    return ""


def binary_error(path: TracePath | str, line_no: int, line: bytes) -> TraceError:
    """`FILE:LINE: not a text trace ...` for a line of binary data (with the encoding it looks
    like, `encoding_hint`, when it is UTF-16 or UTF-32 text)."""
    hint = encoding_hint(line)
    if hint is not None:
        return TraceError(located(display(path), line_no, f"not UTF-8 text: {hint}"))
    return TraceError(located(display(path), line_no, (
        f"not a text trace: binary data {excerpt(line.strip(), 16)}{gz_note(path)}; "
        "traces are JSONL or CSV text, optionally gzipped"
    )))


_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32 LE"), (b"\x00\x00\xfe\xff", "UTF-32 BE"), (b"\xff\xfe", "UTF-16 LE"), (b"\xfe\xff", "UTF-16 BE"))


def encoding_hint(data: bytes) -> str | None:
    """`it looks like UTF-16 LE text ...: convert it` when `data` (a file's first bytes) starts
    with a UTF-16/32 byte-order mark or is ASCII text with a NUL after (or before) every
    character, else None. The one encoding guess of every input reader (traces, configs)."""
    name = next((n for bom, n in _BOMS if data.startswith(bom)), None)
    sample = data[:64]
    if name is None and len(sample) >= 4:
        even, odd = sample[0::2], sample[1::2]
        if not odd.strip(b"\x00") and even.strip(b"\x00").isascii() and even.strip(b"\x00"):
            name = "UTF-16 LE"
        elif not even.strip(b"\x00") and odd.strip(b"\x00").isascii() and odd.strip(b"\x00"):
            name = "UTF-16 BE"
    if name is None:
        return None
    return f"it looks like {name} text; convert it to UTF-8 (e.g. iconv -f {name.replace(' ', '')} -t UTF-8 FILE > FILE.utf8)"


def single_byte_hint(line: bytes) -> str | None:
    """`encoding_hint` of one trace line, or else `byte 0xe9 at column N ...: it looks like Latin-1`
    when the line is text without control bytes whose non-ASCII bytes are not UTF-8 (`caf` + 0xe9: a
    Latin-1 or Windows-1252 export), else None."""
    hint = encoding_hint(line)
    if hint is not None:
        return hint
    data = line.rstrip(b"\r\n")
    if CONTROL_BYTES.search(data):
        return None
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:  # a whole line: a character cut at its end is not UTF-8 either
        at = exc.start
    return (f"byte 0x{data[at]:02x} at column {at + 1} ({data[at:at + 1].decode('cp1252', 'replace')!r} in Windows-1252): it looks "
            "like Latin-1 or Windows-1252 text; convert it to UTF-8 (e.g. iconv -f WINDOWS-1252 -t UTF-8 FILE > FILE.utf8)")
