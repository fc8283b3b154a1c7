"""Follow logs as they grow: files like `tail -F` (rotation and truncation survive) and standard input.

A follower's `poll()` returns the whole lines that arrived since the last call, as
`(first_line_number, blob)` pieces (line numbers restart at 1 in each new file), reading at most
`READ_BYTES` a call so memory stays bounded whatever the log's length. A file:

* not there yet, or gone between a rotation's rename and the new file: waited for;
* rotated (the path names a new file, `logrotate`'s create mode): the old file is read to its
  end, then the new one from its start (`rotations`);
* truncated in place (`copytruncate`, `> log`), seen by its size below the read offset or, when it
  was regrown past that offset between two polls, by a changed fingerprint: its first
  `HEAD_BYTES` or the `TAIL_BYTES` just before the offset (`truncations`). The bytes written after
  the last read are looked for in the copy `copytruncate` left beside it (`LOG.1`, `LOG-DATE`: the
  sibling whose head and bytes before the offset match) and read from there; then the file is read
  again from its start. A line the copy ends in the middle of is joined with its rest at the start
  of the truncated file; without a copy, a partial line cut by the truncation is dropped, never
  handed over torn. NUL bytes at the start of a truncated file (the hole a writer without
  O_APPEND leaves) are skipped.
  Each event is a note (`notes`, drained by the session).

ANSI terminal escapes (colour codes Ray's actor prefixes and coloured log handlers add) are
stripped before anything else reads a line (`plan` reads such a log as text too).

`StartAt` (`--from-end`, `--since`) keeps the start-up output (settings, restarts) of lines before
the start and blanks their `Prefill batch` lines, so line numbers and settings stay those of the file.

Standard input ends at its end (`eof`); a partial last line is handed over at the end, as the
reader `plan` uses reads it. A line longer than `MAX_LINE_BYTES` is refused (`TraceError`), as `plan`
refuses it.
"""

from __future__ import annotations

import os
import re
import select
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from cpbcg.errors import TraceError
from cpbcg.engines.sglang.logs.settings import TIMESTAMP
from cpbcg.planner.traces.stdin import stdin_buffer
from cpbcg.planner.traces.text import MAX_LINE_BYTES, binary_error, long_line, looks_binary

BINARY_CHECK_BYTES = 4096
"""Bytes of a newline-less start checked for binary data."""
READ_BYTES = 4 << 20
"""Most bytes read from one source in one `poll` (bounded memory, fair between sources)."""
HEAD_BYTES = 1024
"""Bytes of a file's head kept as its fingerprint (a truncated and regrown file has another head)."""
TAIL_BYTES = 64
"""Bytes before the read offset kept to tell a regrown file whose head is the same."""
ANSI_ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
"""CSI sequences (colours, cursor), OSC sequences (titles, links) and two-byte escapes; never a newline."""
_PREFILL = re.compile(rb"^[^\n]*Prefill batch[^\n]*$", re.MULTILINE)
_STAMP = re.compile(TIMESTAMP)
"""A log line's timestamp (the log readers' one pattern): its date is bytes 0-10, its time 11-19."""


def strip_escapes(data: bytes) -> bytes:
    """`data` without terminal escapes (`ANSI_ESCAPE`); line breaks untouched."""
    return ANSI_ESCAPE.sub(b"", data) if b"\x1b" in data else data


class _Lines:
    """Whole lines out of arbitrary reads (as read: the follower strips escapes after `StartAt`);
    the partial last line carried to the next read."""

    def __init__(self, name: str, offset: int = 0):
        self.name, self.carry, self.line_no = name, b"", 1
        self.offset = offset
        """File offset of the carry's first byte (where the next blob begins)."""
        self.checked = False
        """The first line was checked for binary data (`looks_binary`, as `plan` checks a trace's first line)."""

    def take(self, data: bytes, final: bool = False) -> list[tuple[int, bytes]]:
        block = self.carry + data
        cut = len(block) if final else block.rfind(b"\n") + 1
        blob, self.carry = block[:cut], block[cut:]
        if not self.checked and block:
            self._check_text(strip_escapes(block), final)
        if len(self.carry) > MAX_LINE_BYTES:
            raise long_line(self.name, self.line_no + blob.count(b"\n"))
        if len(blob) > MAX_LINE_BYTES:  # a whole line over the bound inside one read: refused as plan refuses it
            ends = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == 10)
            lengths = np.diff(ends, prepend=-1) - 1
            if len(blob) - 1 - (ends[-1] if len(ends) else -1) > MAX_LINE_BYTES:  # a final unterminated line (`final`)
                lengths = np.append(lengths, MAX_LINE_BYTES + 1)
            over = np.flatnonzero(lengths > MAX_LINE_BYTES)
            if len(over):
                raise long_line(self.name, self.line_no + int(over[0]))
        if not blob:
            return []
        first = self.line_no
        self.line_no += blob.count(b"\n")
        self.offset += len(blob)
        return [(first, blob)]

    def _check_text(self, block: bytes, final: bool) -> None:
        """`TraceError` (`FILE:LINE: not a text trace ...`, as `plan` says) when the source's first
        line, or its first `BINARY_CHECK_BYTES` while no newline came, is not text."""
        end = block.find(b"\n")
        if end >= 0 or final:
            head = block[:end] if end >= 0 else block
        elif len(block) >= BINARY_CHECK_BYTES:
            head = block[:BINARY_CHECK_BYTES]
            cut = len(head)
            while cut > len(head) - 3 and cut > 0 and head[cut - 1] >= 0x80:  # a UTF-8 character cut by the window
                cut -= 1
            head = head[:cut] if cut > len(head) - 3 else head
        else:
            return
        self.checked = True
        if looks_binary(head):
            raise binary_error(self.name, self.line_no, head)


@dataclass
class StartAt:
    """Where judging starts (`--from-end`: the file's size when first opened; `--since`: the first
    line stamped at or after a time): the `Prefill batch` lines before it are blanked (module doc)."""

    offset: int | None = None
    """File offset: lines beginning before it are before the start (None: no offset)."""
    since: bytes | None = None
    """`YYYY-MM-DD HH:MM:SS`: lines before the first stamped at or after it are before the start."""

    def apply(self, blob: bytes, blob_offset: int) -> bytes:
        """`blob` (whole lines starting at file offset `blob_offset`) with the lines before the start blanked."""
        cut = 0
        if self.offset is not None:
            before = self.offset - blob_offset
            if before <= 0:
                self.offset = None
            else:
                nl = blob.find(b"\n", before - 1)
                cut = len(blob) if nl < 0 else nl + 1
        if self.since is not None:
            for m in _STAMP.finditer(blob):
                if m.group()[:10] + b" " + m.group()[11:19] >= self.since:
                    cut = max(cut, blob.rfind(b"\n", 0, m.start()) + 1)
                    self.since = None
                    break
            else:
                cut = len(blob)
        if not cut:
            return blob
        return _PREFILL.sub(b"", blob[:cut]) + blob[cut:]


def parse_since(text: str) -> bytes:
    """`--since TIME` (`YYYY-MM-DD HH:MM[:SS]`, `T` or a space between) -> the log's stamp form. Raises `ValueError`."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d)(:\d\d)?", text.strip())
    if m is None:
        raise ValueError(f"--since {text[:40]!r}: expected YYYY-MM-DD HH:MM[:SS] in the log's own clock (its line prefixes)")
    return f"{m.group(1)} {m.group(2)}{m.group(3) or ':00'}".encode()


class FileFollower:
    """One log file followed like `tail -F` (module doc)."""

    def __init__(self, path: str, start: StartAt | None = None, from_end: bool = False):
        self.path = path
        self.name = path
        self.rotations = 0
        self.truncations = 0
        self.lines_read = 0
        self.bytes_read = 0
        self.at_end = False
        """The last poll read up to the end of the file (the reader keeps up)."""
        self.notes: list[str] = []
        """What happened to the file (rotations, truncations, dropped partial lines), one line each; the session drains it."""
        self.eof = False
        """Always False: a file is followed until the run stops."""
        self._handle: BinaryIO | None = None
        self._inode: tuple[int, int] | None = None
        self._pos = 0
        self._head = b""
        self._tail = b""
        self._copy: str | None = None
        """The copy of a copytruncate being read (its rest) before the file is read again from its start."""
        self._lines = _Lines(path)
        self._start = start or StartAt()
        self._from_end = from_end
        self._skip_nul = False
        """Leading NUL bytes are skipped (the file was just truncated: a non-appending writer leaves a hole)."""
        self.appeared = False
        """The file existed at some point of the run (a bounded run ends in an error when it never did)."""
        self._open()

    def _open(self) -> bool:
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise TraceError(f"{self.path}: {exc.strerror or exc}") from None
        st = os.fstat(handle.fileno())
        if self.appeared:  # a new file (rotation, truncation): judged whole, from its start
            self._start.offset = None
        self._handle, self._inode, self._pos, self._head, self._tail = handle, (st.st_dev, st.st_ino), 0, b"", b""
        if self._from_end and not self.appeared:  # the file as found: judged from its end on
            self._start.offset = st.st_size
        self.appeared = True
        return True

    @property
    def unread_bytes(self) -> int:
        """Bytes of the file beyond what was read (0 before it appears)."""
        if self._handle is None:
            return 0
        try:
            return max(0, os.fstat(self._handle.fileno()).st_size - self._pos)
        except OSError:
            return 0

    def poll(self) -> list[tuple[int, bytes]]:
        """Whole lines that arrived since the last call (module doc)."""
        if self._handle is None:
            if not self._open():
                self.at_end = True  # nothing there to read: not behind
                return []
        assert self._handle is not None
        out: list[tuple[int, bytes]] = []
        if self._copy is None and self._replaced_in_place():
            out += self._truncated()
            if self._copy is not None:  # the copy's rest first: this poll reads it
                return out + self._take(self._read())
        data = self._read()
        if data and self._copy is None and self._head_changed():  # truncated and regrown while it was read: not this file's bytes
            self._pos -= len(data)
            out += self._truncated()
            data = self._read()
        if data:
            return out + self._take(data)
        self.at_end = True
        if self._copy is not None:  # the copy read to its end: the file again from its start
            return out + self._reopen_after_copy()
        if self._rotated():  # the old file read to its end: on to the new one
            self.rotations += 1
            self.notes.append(f"cpbcg: note: {self.path}: rotated (a new file at the path): the old one was read to its end, "
                              "the new one is read from its start")
            out += self._lines.take(b"", final=True)
            self._handle.close()
            self._handle, self._lines = None, _Lines(self.path)
            if self._open():
                out += self._take(self._read())
        return out

    def _take(self, data: bytes) -> list[tuple[int, bytes]]:
        self.at_end = len(data) < READ_BYTES
        if self._skip_nul and data:  # a writer without O_APPEND goes on at its old offset: the truncated file starts with a hole
            kept = data.lstrip(b"\0")
            if len(kept) < len(data):
                self.notes.append(f"cpbcg: note: {self.path}: {len(data) - len(kept):,} NUL bytes at the start of the truncated file "
                                  "skipped (its writer does not append: the hole copytruncate leaves)")
            data, self._skip_nul = kept, not kept
        offset = self._lines.offset
        got = self._lines.take(data)
        out = []
        for first, blob in got:
            self.lines_read += blob.count(b"\n")
            out.append((first, strip_escapes(self._start.apply(blob, offset))))
            offset += len(blob)
        return out

    def _read(self) -> bytes:
        assert self._handle is not None
        data = self._handle.read(READ_BYTES)
        if self._pos < HEAD_BYTES and self._copy is None:
            self._head += data[:HEAD_BYTES - self._pos]
        self._pos += len(data)
        self.bytes_read += len(data)
        if data:
            self._tail = (self._tail + data)[-TAIL_BYTES:]
        return data

    def _pread(self, size: int, offset: int, fd: int | None = None) -> bytes:
        assert self._handle is not None
        return os.pread(self._handle.fileno() if fd is None else fd, size, offset)

    def _head_changed(self) -> bool:
        return bool(self._head) and self._pread(len(self._head), 0) != self._head

    def _replaced_in_place(self) -> bool:
        """The file at the handle was truncated (shorter than the read offset) or truncated and
        regrown (its head or the bytes before the offset changed)."""
        assert self._handle is not None
        if os.fstat(self._handle.fileno()).st_size < self._pos:
            return True
        if not self._pos:
            return False
        return self._head_changed() or (bool(self._tail) and self._pread(len(self._tail), self._pos - len(self._tail)) != self._tail)

    def _find_copy(self) -> str | None:
        """The copy `copytruncate` left beside the file: a sibling named after it whose head and bytes
        before the read offset are the ones read (the newest such)."""
        folder, base = os.path.split(os.path.abspath(self.path))
        found: list[tuple[float, str]] = []
        try:
            names = os.listdir(folder)
        except OSError:
            return None
        for name in names:
            if name == base or not name.startswith(base) or name[len(base)] not in ".-_" or name.endswith((".gz", ".xz", ".bz2", ".zst")):
                continue
            candidate = os.path.join(folder, name)
            try:
                fd = os.open(candidate, os.O_RDONLY)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if (st.st_size >= self._pos and os.pread(fd, len(self._head), 0) == self._head
                        and os.pread(fd, len(self._tail), self._pos - len(self._tail)) == self._tail):
                    found.append((st.st_mtime, candidate))
            finally:
                os.close(fd)
        return max(found)[1] if found else None

    def _truncated(self) -> list[tuple[int, bytes]]:
        """The file was truncated in place: its copy's rest is read next when there is one, else the
        partial line cut is dropped and the file is read again from its start."""
        assert self._handle is not None
        self.truncations += 1
        copy = self._find_copy() if self._pos else None
        if copy is not None:
            handle = open(copy, "rb")
            handle.seek(self._pos)
            self._handle.close()
            self._handle, self._copy = handle, copy
            self.notes.append(f"cpbcg: note: {self.path}: truncated in place (copytruncate): the lines written since the last "
                              f"read are read from its copy {copy}, then the file from its start")
            return []
        self.notes.append(f"cpbcg: note: {self.path}: truncated in place at byte {self._pos:,} (no copy beside it): read again "
                          "from its start; lines written after the last read and before the truncation are not in any file")
        self._drop_partial("truncated in place")
        self._skip_nul = True
        self._handle.seek(0)
        self._start.offset = None
        self._pos, self._head, self._tail = 0, b"", b""
        self._lines = _Lines(self.path)
        return []

    def _drop_partial(self, why: str) -> None:
        if self._lines.carry:
            self.notes.append(f"cpbcg: note: {self.path}:{self._lines.line_no}: a partial line of {len(self._lines.carry):,} bytes "
                              f"cut when the file was {why} was dropped (never read torn)")
            self._lines.carry = b""

    def _reopen_after_copy(self) -> list[tuple[int, bytes]]:
        """The copy read to its end: the file from its start. A line the copy ends in the middle of
        goes on at the start of the truncated file (the writer finishes it there): joined, read once, whole."""
        assert self._handle is not None
        carry = self._lines.carry
        self._handle.close()
        self._handle, self._copy, self._lines = None, None, _Lines(self.path)
        self._lines.carry = carry
        self._skip_nul = True
        if not self._open():
            return []
        return self._take(self._read())

    def _rotated(self) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed away; the new file is not there yet: keep the old one
        return (st.st_dev, st.st_ino) != self._inode

    def finish(self) -> list[tuple[int, bytes]]:
        """The partial last line, when the run stops (`plan` on the file as it stands reads it)."""
        return self._lines.take(b"", final=True)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class StreamFollower:
    """Standard input (or any readable pipe): read as it arrives, until its end (module doc)."""

    def __init__(self, stream: BinaryIO | None = None, name: str = "<stdin>", start: StartAt | None = None):
        self.stream = stream if stream is not None else stdin_buffer()
        self.name = name
        self.rotations = self.truncations = 0
        self.lines_read = self.bytes_read = 0
        self.unread_bytes = 0
        self.at_end = False
        self.notes: list[str] = []
        self.eof = False
        self._lines = _Lines(name)
        self._start = start or StartAt()

    def poll(self, timeout: float = 0.0) -> list[tuple[int, bytes]]:
        """Whole lines available now (waiting at most `timeout` s for the first)."""
        if self.eof:
            return []
        fd = self.stream.fileno()
        out: list[tuple[int, bytes]] = []
        got = 0
        self.at_end = False
        while got < READ_BYTES:
            ready, _, _ = select.select([fd], [], [], timeout if not got else 0)
            if not ready:
                self.at_end = True
                break
            data = os.read(fd, min(1 << 20, READ_BYTES - got))
            if not data:
                self.eof = self.at_end = True
                return out + self._take(b"", final=True)
            got += len(data)
            self.bytes_read += len(data)
            out += self._take(data)
        return out

    def _take(self, data: bytes, final: bool = False) -> list[tuple[int, bytes]]:
        offset = self._lines.offset
        out = []
        for first, blob in self._lines.take(data, final):
            self.lines_read += blob.count(b"\n")
            out.append((first, strip_escapes(self._start.apply(blob, offset))))
            offset += len(blob)
        return out

    def finish(self) -> list[tuple[int, bytes]]:
        return self._take(b"", final=True)

    def close(self) -> None:
        pass
