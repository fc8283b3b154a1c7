"""Standard input as a trace (`--trace -`).

Format detection reads the first line, then the reader opens the trace again from its start. A
pipe cannot rewind, so the first `STDIN_HEAD_BYTES` are kept: any number of openers may read
them, and one (the last) reads on past them. Input that fits in the kept bytes can be re-read
freely; opening again after the stream went past them is a `TraceError`.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

from cpbcg.errors import TraceError

STDIN_HEAD_BYTES = 2 << 20
"""Bytes of stdin kept so that format detection and the reader both see the start."""


def stdin_buffer() -> BinaryIO:
    """Standard input's binary stream; `TraceError` (`-: standard input is closed`) when the
    process was started with fd 0 closed (`<&-`: Python then sets `sys.stdin` to None)."""
    if sys.stdin is None:
        raise TraceError("-: standard input is closed")
    return sys.stdin.buffer


class _StdinTap:
    """Standard input with its first `STDIN_HEAD_BYTES` kept for re-reading."""

    def __init__(self) -> None:
        self.stream = stdin_buffer()
        self.head = self.stream.read(STDIN_HEAD_BYTES)
        self.complete = len(self.head) < STDIN_HEAD_BYTES
        """The whole input fits in `head`: it can be re-read any number of times."""
        self.passed_head = False

    def open(self, name: str) -> "_TapReader":
        if self.passed_head:
            raise TraceError(f"{name}: standard input was already read; give the trace as a file")
        return _TapReader(self)


class _TapReader(io.RawIOBase):
    def __init__(self, tap: _StdinTap):
        self.tap, self.pos = tap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        head = self.tap.head
        if self.pos < len(head) or self.tap.complete:
            data = head[self.pos : self.pos + len(view)]
        else:
            self.tap.passed_head = True
            data = self.tap.stream.read(len(view))
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)


_tap: _StdinTap | None = None


def open_stdin(name: str) -> io.BufferedReader:
    """Standard input as a buffered binary reader, from its first byte (`TraceError` naming
    `name` once it was read past `STDIN_HEAD_BYTES`)."""
    global _tap
    if _tap is None or _tap.stream is not stdin_buffer():
        _tap = _StdinTap()
    return io.BufferedReader(_tap.open(name), 1 << 16)




def stdin_head() -> tuple[bytes, bool]:
    """The kept first bytes of standard input (at most `STDIN_HEAD_BYTES`) and whether they are
    all of it; reading them never passes the head, so the trace's reader still sees every byte."""
    global _tap
    if _tap is None or _tap.stream is not stdin_buffer():
        _tap = _StdinTap()
    return _tap.head, _tap.complete
