"""The one list of trace formats, and format detection.

`FORMATS` is the registry: detection asks each format, in this order, whether it recognises the
trace's first line (`Sniff`); the first that does reads it. Adding a format is one module with
a `FORMAT` and one line here.
"""

from __future__ import annotations

import csv
import os
import stat
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.choices import TRACE_FORMAT_NAMES, TraceFormat, trace_format_name
import cpbcg.planner.traces.aibrix as aibrix
import cpbcg.planner.traces.azure as azure
import cpbcg.planner.traces.batches as batches
import cpbcg.planner.traces.burstgpt as burstgpt
import cpbcg.planner.traces.generic as generic
import cpbcg.planner.traces.mooncake as mooncake
import cpbcg.planner.traces.parquet as parquet
import cpbcg.engines.sglang.logs.log as sglang_log
import cpbcg.engines.sglang.logs.requests as sglang_requests
import cpbcg.planner.traces.splitwise as splitwise
import cpbcg.planner.traces.vidur as vidur
import cpbcg.planner.traces.vllm_bench as vllm_bench
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import header_columns
from cpbcg.planner.model.batches import BatchSet
from cpbcg.planner.traces.records import ForwardSizes, ReadNotes, RequestChunk, RequestItem, TraceItem
from cpbcg.planner.traces.stream import checked_requests
from cpbcg.planner.traces.text import (
    MAX_LINE_BYTES, TracePath, binary_error, display, file_of, gz_note, long_line, looks_binary, open_binary, read_errors, read_head, trace_path,
)

FORMATS: tuple[TraceFormatInfo, ...] = (
    batches.FORMAT,
    parquet.FORMAT,
    vllm_bench.FORMAT,
    generic.JSONL_FORMAT,
    generic.CSV_FORMAT,
    mooncake.FORMAT,
    aibrix.FORMAT,
    sglang_requests.FORMAT,
    sglang_log.FORMAT,
    azure.FORMAT,
    burstgpt.FORMAT,
    splitwise.FORMAT,
    vidur.FORMAT,
)
"""Every trace format, in detection order (generic formats only match with `length_field`)."""
BY_NAME = {f.name: f for f in FORMATS}
if tuple(BY_NAME) != TRACE_FORMAT_NAMES:
    raise ImportError(f"cpbcg.planner.choices.TRACE_FORMAT_NAMES {TRACE_FORMAT_NAMES} differ from the registry {tuple(BY_NAME)}")



@dataclass(frozen=True)
class OpenedTrace:
    """A trace opened for streaming: what it is and its (lazy) items."""

    format: TraceFormatInfo
    """The format read (never `auto`)."""
    items: Iterable[TraceItem | RequestChunk]
    """`BatchSet`, `RequestChunk` or `ForwardSizes` chunks by `format.kind` (reading happens while
    iterating); `batch_chunks`, `forward_chunks` and `request_chunks` give them typed."""
    notes: ReadNotes = field(default_factory=ReadNotes)
    """Rows skipped and the readers' notes (request traces; complete once `items` is exhausted)."""

    @property
    def kind(self) -> TraceKind:
        return self.format.kind

    @property
    def is_bound(self) -> bool:
        """True when the trace gives forward sizes only, so plans from it are worst-case bounds."""
        return self.format.kind is TraceKind.forwards

    def batch_chunks(self) -> Iterator[BatchSet]:
        """The items of a batch trace; `TraceError` on the first item of another kind."""
        return _only(self.items, BatchSet, self)

    def forward_chunks(self) -> Iterator[ForwardSizes]:
        """The items of a server log (forward sizes); `TraceError` on the first item of another kind."""
        return _only(self.items, ForwardSizes, self)

    def request_chunks(self) -> Iterator[RequestChunk]:
        """The items of a request trace; `TraceError` on the first item of another kind."""
        return _only(self.items, RequestChunk, self)


_Item = TypeVar("_Item", BatchSet, ForwardSizes, RequestChunk)


def _only(items: Iterable[object], kind: type[_Item], opened: OpenedTrace) -> Iterator[_Item]:
    """`items`, each checked to be a `kind` (one check per chunk)."""
    for item in items:
        if not isinstance(item, kind):
            raise TraceError(f"{opened.notes.trace or opened.format.label}: a {opened.format.label} gives {type(item).__name__} chunks, not {kind.__name__}")
        yield item


def _request_items(items: Iterable[TraceItem], fmt: TraceFormatInfo) -> Iterator[RequestItem]:
    """The `(chunk, line_numbers)` pairs of a request reader, each checked (one check per chunk)."""
    for item in items:
        if not isinstance(item, tuple):
            raise TraceError(f"{fmt.label}: the reader gives {type(item).__name__} chunks, not requests")
        yield item


def sniff(path: TracePath) -> Sniff:
    """The first non-blank line of `path` as JSON and as a CSV header, and its first bytes.

    Raises `TraceError` for an empty, unreadable or corrupt trace.
    """
    head = read_head(path, MAX_LINE_BYTES + 2)
    text = head.lstrip(b"\xef\xbb\xbf")
    skipped = 0
    first = len(text) - len(text.lstrip())  # the first non-blank byte
    if len(head) > MAX_LINE_BYTES and (first == len(text) or (text.rfind(b"\n", 0, first) >= 0 > text.find(b"\n", first))):
        # blank lines fill the head, or the first record's line starts in it and runs past it
        skipped, text = _after_blank_lines(path)
        head = text
    offset = 0
    while True:
        end = text.find(b"\n", offset)
        line = text[offset:] if end < 0 else text[offset:end + 1]
        if line.strip() or end < 0:
            break
        offset = end + 1
    if not line.strip():
        raise TraceError(located(display(path), 1, "empty trace: no requests"))
    line_no = skipped + text.count(b"\n", 0, offset) + 1
    cut = end < 0 and len(head) > MAX_LINE_BYTES
    return Sniff(line_no, line, _json(line) if not cut else None, _header(line) if not cut else None, head, cut, path)


MAX_BLANK_BYTES = 256 << 20
"""Most bytes of blank lines format detection reads past before the first record."""


def _after_blank_lines(path: TracePath) -> tuple[int, bytes]:
    """`(blank lines skipped, the bytes from the first non-blank line on)`, at most
    `MAX_LINE_BYTES + 2` of them, reading past up to `MAX_BLANK_BYTES` of blank lines (a
    `TraceError` beyond; an empty result when the trace holds nothing else)."""
    lines, seen = 0, 0
    with open_binary(path) as handle, read_errors(path, 1):
        rest = handle.read(3).removeprefix(b"\xef\xbb\xbf")  # a BOM, as `sniff` drops it
        while True:
            block = handle.read(1 << 20)
            if not block and not rest.strip():
                return lines, b""
            block = rest + block
            text = block.lstrip()
            if text:
                start = block.rfind(b"\n", 0, len(block) - len(text)) + 1  # the first record's line
                lines += block.count(b"\n", 0, start)
                data = block[start:]
                return lines, data + handle.read(max(0, MAX_LINE_BYTES + 2 - len(data)))
            cut = block.rfind(b"\n") + 1
            lines += block.count(b"\n", 0, cut)
            rest = block[cut:]
            if len(rest) > MAX_LINE_BYTES:  # a blank line longer than any line may be
                raise long_line(path, lines + 1)
            seen += len(block) - len(rest)
            if seen > MAX_BLANK_BYTES:
                raise TraceError(located(display(path), lines + 1, f"more than {MAX_BLANK_BYTES >> 20} MiB of blank lines before the first record"))


def _json(line: bytes) -> object | None:
    if line.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        value: object = orjson.loads(line)
        return value
    except orjson.JSONDecodeError:
        return None


def _header(line: bytes) -> list[str] | None:
    if line.lstrip()[:1] in (b"{", b"[") or looks_binary(line):
        return None
    try:
        return [c.strip() for c in next(csv.reader([line.decode("utf-8", "replace").strip()]), [])]
    except csv.Error:
        return None


def detect_format(path: TracePath | str, options: ReadOptions | str | None = None) -> Enum:
    """The `TraceFormat` of a trace (see `detect`); `options` may be just a `length_field`."""
    if not isinstance(options, ReadOptions):
        options = ReadOptions(length_field=options)
    return TraceFormat(detect(path, options).name)


def detect(path: TracePath | str, options: ReadOptions = ReadOptions()) -> TraceFormatInfo:
    """The first format in `FORMATS` that recognises the trace. Raises `TraceError` naming the
    first line when none does (binary data, invalid JSON, unknown keys or columns)."""
    where = trace_path(path)
    file = file_of(where)
    if file is not None:
        _require_file(file)
    first = sniff(where)
    for fmt in FORMATS:
        if fmt.recognises(first, options):
            return fmt
    raise _unknown(where, first)


def _unknown(path: TracePath, first: Sniff) -> TraceError:
    if first.cut:
        return long_line(path, first.line_no)
    if looks_binary(first.line):
        return binary_error(path, first.line_no, first.line)
    if first.line.lstrip()[:1] in (b"{", b"["):
        try:
            record = orjson.loads(first.line)
        except orjson.JSONDecodeError as exc:
            return TraceError(located(path, first.line_no, f"not valid JSON ({exc.msg[:80]})"))
        keys = ", ".join(str(k)[:40] for k in list(record)[:8]) if isinstance(record, dict) else type(record).__name__
        return _unknown_kind(path, first.line_no, "JSONL", f"keys: {keys}")
    names = header_columns(path, first.line_no, first.line)
    return _unknown_kind(path, first.line_no, "CSV", "columns: " + ", ".join(n[:40] for n in names[:8]))


def _unknown_kind(path: TracePath, line_no: int, kind: str, names: str) -> TraceError:
    plain = "; read as plain text: no gzip magic bytes despite the .gz name" if gz_note(path) else ""
    shown = names if len(names) <= 48 else names[:45] + "..."
    known = ", ".join(f.name for f in FORMATS if f.name not in ("csv", "jsonl"))
    return TraceError(located(path, line_no, f"unknown {kind} trace ({shown}{plain}); formats: {known}; or csv/jsonl with --length-field"))


def format_info(trace_format: str | Enum) -> TraceFormatInfo | None:
    """The registered format named `trace_format` (or an alias), or None for `auto`; `TraceError`
    for an unknown name."""
    try:
        name = trace_format_name(trace_format.value if isinstance(trace_format, Enum) else str(trace_format))
    except ValueError as exc:
        raise TraceError(f"--trace-format: {exc}") from None
    return None if name == "auto" else BY_NAME[name]


def open_trace(path: TracePath | str, trace_format: str | Enum = "auto", options: ReadOptions = ReadOptions()) -> OpenedTrace:
    """Open a trace (`-` = standard input) in `trace_format` (`auto` detects it) for streaming.

    Request formats yield `RequestChunk`s checked for time order and emptiness; batch traces
    `BatchSet`s; server logs `ForwardSizes` (a bound). Raises `TraceError` (`FILE:LINE: ...`).
    """
    where = trace_path(path)
    file = file_of(where)
    if file is not None:  # a FIFO or /dev/fd/N would block or be read once: detection reads the start twice
        _require_file(file)
    fmt = format_info(trace_format) or detect(where, options)
    read, notes = fmt.read(where, options), ReadNotes(display(where))
    if fmt.kind is TraceKind.requests:
        empty_note = _filter_note(options) if fmt is burstgpt.FORMAT else ""
        return OpenedTrace(fmt, checked_requests(where, _request_items(read, fmt), empty_note, options.strict, notes), notes)
    return OpenedTrace(fmt, read, notes)


def _require_file(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # a missing file is reported by the reader, with its own message
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, FIFO or device"
        raise TraceError(f"{display(path)}: {kind}, not a trace file; give a file, or stream it on standard input as '-'")


def _filter_note(options: ReadOptions) -> str:
    shown = [f"{key}={value[:40]!r}" for key, value in (("model", options.model), ("log_type", options.log_type)) if value]
    return f" (after the filters {', '.join(shown)})" if shown else ""


def read_requests(path: TracePath | str, trace_format: str | Enum = "auto", options: ReadOptions = ReadOptions()) -> Iterator[RequestChunk]:
    """The `RequestChunk` stream of a request trace; `TraceError` if the trace is of another kind."""
    opened = open_trace(path, trace_format, options)
    if opened.kind is not TraceKind.requests:
        raise TraceError(f"{display(path)}: a {opened.format.label}, not a request trace")
    return opened.request_chunks()
