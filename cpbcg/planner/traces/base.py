"""What a trace-format module provides to the registry, and what detection tells it.

A format module defines one `TraceFormatInfo` named `FORMAT`: its name, what it yields, how it
recognises a trace from the `Sniff` of its first line, and its reader. The registry
(`registry.py`) lists the modules; nothing else knows the formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from cpbcg.planner.traces.records import TraceItem
    from cpbcg.planner.traces.text import TracePath


class TraceKind(str, Enum):
    """What a reader yields."""

    batches = "batches"
    """`BatchSet` chunks: the forwards themselves (batch traces)."""
    requests = "requests"
    """`(RequestChunk, line_numbers)`: requests for the scheduler simulation."""
    forwards = "forwards"
    """`ForwardSizes` chunks: forward sizes and request counts only (a bound, not lengths)."""


@dataclass(frozen=True)
class Sniff:
    """The start of a trace, as format detection sees it."""

    line_no: int
    """Line number of `line` (1-based)."""
    line: bytes
    """The first non-blank line (BOM dropped), at most `MAX_LINE_BYTES`; cut if longer."""
    record: object | None
    """`line` parsed as JSON, or None when it is not JSON (or was cut)."""
    columns: list[str] | None
    """`line` read as a CSV header, or None when it is JSON or not a CSV row."""
    head: bytes
    """The first bytes of the trace (decompressed, up to 1 MiB)."""
    cut: bool
    """`line` was longer than `MAX_LINE_BYTES` (only whole-file formats may accept it)."""
    path: TracePath | None = None
    """The trace itself, for formats that look past `head` (SGLang logs); None when unknown."""

    @property
    def keys(self) -> set[str]:
        """Keys of a JSON-object first line (empty otherwise)."""
        return set(self.record) if isinstance(self.record, dict) else set()


@dataclass(frozen=True)
class ReadOptions:
    """Reader options (a plain object; the CLI and the config fill it)."""

    length_field: str | None = None
    """Prompt-length field of the generic `csv`/`jsonl` formats (tokens)."""
    time_field: str | None = None
    """Arrival-time field of the generic formats (seconds, or wall-clock datetimes)."""
    output_field: str | None = None
    """Output-length field of the generic formats (tokens), optional."""
    model: str | None = None
    """BurstGPT: keep only rows whose `Model` is this (e.g. `ChatGPT`, `GPT-4`)."""
    log_type: str | None = None
    """BurstGPT: keep only rows whose `Log Type` is this (`Conversation log`, `API log`)."""
    strict: bool = False
    """Refuse rows a format lets a reader skip (a prompt of 0 tokens) instead of skipping and
    counting them (`--strict`)."""


@dataclass(frozen=True)
class TraceFormatInfo:
    """One trace format: its `--trace-format` name, detection rule and reader."""

    name: str
    """Value of `--trace-format` (`mooncake`, `sglang-log`, ...)."""
    label: str
    """Name in notes and messages (`Mooncake JSONL`)."""
    kind: TraceKind
    """What `read` yields."""
    recognises: Callable[[Sniff, ReadOptions], bool]
    """Whether a trace starting like `Sniff` is in this format (auto-detection)."""
    read: Callable[[TracePath, ReadOptions], Iterable[TraceItem]]
    """Stream the trace (lazily); raises `TraceError` naming file and line."""
