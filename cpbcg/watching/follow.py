"""Follow logs as they grow: files like `tail -F` (rotation and truncation survive) and standard input.

A follower's `poll()` returns the whole lines that arrived since the last call, as
`(first_line_number, blob)` pieces (line numbers restart at 1 in each new file), reading at most
`READ_BYTES` a call so memory stays bounded whatever the log's length. A file:

* not there yet, or gone between a rotation's rename and the new file: waited for;
* rotated (the path names a new file, `logrotate`'s create mode): the old file is read to its
  end, then the new one from its start (`rotations`);
* truncated in place (`copytruncate`, `> log`): read again from its start (`truncations`).

Standard input ends at its end (`eof`); a partial last line is handed over at the end, as the
reader `plan` uses reads it. A line longer than `MAX_LINE_BYTES` is refused (`TraceError`), as `plan`
refuses it.
"""

from __future__ import annotations

import os
import select
from typing import BinaryIO

import numpy as np

from cpbcg.errors import TraceError
from cpbcg.planner.traces.stdin import stdin_buffer
from cpbcg.planner.traces.text import MAX_LINE_BYTES, binary_error, long_line, looks_binary

BINARY_CHECK_BYTES = 4096
"""Bytes of a newline-less start checked for binary data."""
READ_BYTES = 4 << 20
"""Most bytes read from one source in one `poll` (bounded memory, fair between sources)."""


class _Lines:
    """Whole lines out of arbitrary reads; the partial last line carried to the next read."""

    def __init__(self, name: str):
        self.name, self.carry, self.line_no = name, b"", 1
        self.checked = False
        """The first line was checked for binary data (`looks_binary`, as `plan` checks a trace's first line)."""

    def take(self, data: bytes, final: bool = False) -> list[tuple[int, bytes]]:
        block = self.carry + data
        if not self.checked and block:
            self._check_text(block, final)
        cut = len(block) if final else block.rfind(b"\n") + 1
        blob, self.carry = block[:cut], block[cut:]
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


class FileFollower:
    """One log file followed like `tail -F` (module doc)."""

    def __init__(self, path: str):
        self.path = path
        self.name = path
        self.rotations = 0
        self.truncations = 0
        self.eof = False
        """Always False: a file is followed until the run stops."""
        self._handle: BinaryIO | None = None
        self._inode: tuple[int, int] | None = None
        self._pos = 0
        self._lines = _Lines(path)
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
        self._handle, self._inode, self._pos = handle, (st.st_dev, st.st_ino), 0
        self.appeared = True
        return True

    def poll(self) -> list[tuple[int, bytes]]:
        """Whole lines that arrived since the last call (module doc)."""
        if self._handle is None:
            if not self._open():
                return []
        assert self._handle is not None
        out: list[tuple[int, bytes]] = []
        if os.fstat(self._handle.fileno()).st_size < self._pos:  # truncated in place: from the start again
            self.truncations += 1
            self._handle.seek(0)
            self._pos = 0
            out += self._lines.take(b"", final=True)
            self._lines = _Lines(self.path)
        data = self._read()
        if data:
            return out + self._lines.take(data)
        if self._rotated():  # the old file read to its end: on to the new one
            self.rotations += 1
            out += self._lines.take(b"", final=True)
            self._handle.close()
            self._handle, self._lines = None, _Lines(self.path)
            if self._open():
                out += self._lines.take(self._read())
        return out

    def _read(self) -> bytes:
        assert self._handle is not None
        data = self._handle.read(READ_BYTES)
        self._pos += len(data)
        return data

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

    def __init__(self, stream: BinaryIO | None = None, name: str = "<stdin>"):
        self.stream = stream if stream is not None else stdin_buffer()
        self.name = name
        self.rotations = self.truncations = 0
        self.eof = False
        self._lines = _Lines(name)

    def poll(self, timeout: float = 0.0) -> list[tuple[int, bytes]]:
        """Whole lines available now (waiting at most `timeout` s for the first)."""
        if self.eof:
            return []
        fd = self.stream.fileno()
        out: list[tuple[int, bytes]] = []
        got = 0
        while got < READ_BYTES:
            ready, _, _ = select.select([fd], [], [], timeout if not got else 0)
            if not ready:
                break
            data = os.read(fd, min(1 << 20, READ_BYTES - got))
            if not data:
                self.eof = True
                return out + self._lines.take(b"", final=True)
            got += len(data)
            out += self._lines.take(data)
        return out

    def finish(self) -> list[tuple[int, bytes]]:
        return self._lines.take(b"", final=True)

    def close(self) -> None:
        pass
