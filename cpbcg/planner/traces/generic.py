"""Generic request tables: any CSV (header line) or JSONL whose prompt-length field is named by
the `length_field` option (`--length-field`) or is one of the common names (`PROMPT_NAMES`),
with an optional arrival time (`time_field`, else one of `TIME_NAMES`; numbers are seconds,
strings wall-clock datetimes) and output length (`output_field`, else one of `OUTPUT_NAMES`).
JSONL records may carry Mooncake-style `hash_ids`. A field found by its name, not by an option,
is said in a note (`read input_tokens as prompt length`). One column holds one role: a column
an option names is not also read for another role by its name (said in a note)."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Iterator

import orjson

from cpbcg.errors import TraceError
from cpbcg.planner.traces.base import ReadOptions, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import header_columns, read_csv_requests
from cpbcg.planner.traces.jsonl_table import read_jsonl_requests
from cpbcg.planner.traces.records import RequestItem, RequestSpec
from cpbcg.planner.traces.text import TracePath, display, first_line

PROMPT_NAMES = ("input_tokens", "prompt_tokens", "input_len", "prompt_len")
"""Prompt-length columns recognised without `--length-field` (tokens), in order of preference."""
OUTPUT_NAMES = ("output_tokens", "completion_tokens", "output_len")
"""Output-length columns read without `--output-field` (tokens)."""
TIME_NAMES = ("arrival_time", "timestamp", "time")
"""Arrival-time columns read without `--time-field` (seconds, or wall-clock datetimes)."""
ROLES = ("prompt length", "arrival time (s)", "output length")


def _first(names: Iterable[str], wanted: tuple[str, ...]) -> str | None:
    present = set(names)
    return next((name for name in wanted if name in present), None)


def _found(path: TracePath, names: Iterable[str], wanted: tuple[str, ...], flag: str, role: str) -> str | None:
    """The one recognised column of `wanted` present in `names`, or None; `TraceError` when
    several are (reading one would silently drop the other: the option says which)."""
    present = set(names)
    both = [name for name in wanted if name in present]
    if len(both) > 1:
        verb = "both name" if len(both) == 2 else "all name"
        raise TraceError(f"{display(path)}:1: {' and '.join(both)} {verb} the {role}: pass {flag} to say which to read")
    return both[0] if both else None


def detects(names: Iterable[str], options: ReadOptions) -> bool:
    """Whether a table with these columns is a generic request table under `options`."""
    return bool(options.length_field) or _first(names, PROMPT_NAMES) is not None


def table_spec(path: TracePath, label: str, names: list[str], options: ReadOptions) -> tuple[RequestSpec, tuple[str, ...]]:
    """The spec of a generic table with columns `names`, and the notes naming every field found
    by its name rather than given by an option. `TraceError` (naming `--length-field`) when no
    prompt-length field is given or found."""
    given = [(f"--{role}", name) for role, name in (("length-field", options.length_field), ("time-field", options.time_field),
                                                     ("output-field", options.output_field)) if name]
    for i, (flag, name) in enumerate(given):
        earlier = next((f for f, n in given[:i] if n == name), None)
        if earlier is not None:  # one field cannot be the prompt length and the arrival time (or output) at once
            raise TraceError(f"{display(path)}: {flag} {name[:40]!r} is the {earlier} too: give each role its own field")
    taken = {name: flag for flag, name in given}
    free = [name for name in names if name not in taken]  # one role per column: a column an option names is not guessed for another
    dropped = [f"{name} is the {taken[name]}, so it is not read as {role}" for name, role, flag in zip(
        (_first(names, PROMPT_NAMES), _first(names, TIME_NAMES), _first(names, OUTPUT_NAMES)), ROLES,
        (options.length_field, options.time_field, options.output_field)) if name in taken and not flag]
    length = options.length_field or _found(path, free, PROMPT_NAMES, "--length-field", ROLES[0])
    if not length:
        raise TraceError(f"{display(path)}:1: trace format {label} needs --length-field (the prompt-length field; "
                         f"no column {'other than the ones the options name ' if dropped else ''}is named {', '.join(PROMPT_NAMES)})")
    time = options.time_field or _found(path, free, TIME_NAMES, "--time-field", ROLES[1])
    output = options.output_field or _found(path, free, OUTPUT_NAMES, "--output-field", ROLES[2])
    found = [(given, name, role) for given, name, role in zip(
        (options.length_field, options.time_field, options.output_field), (length, time, output), ROLES)]
    read = [f"{name} as {role}" for given, name, role in found if name and not given]
    spec = RequestSpec(label, length, time, output_field=output, optional_output=not options.output_field,
                       hash_field="hash_ids" if label == "jsonl" else None)
    return spec, ((f"read {', '.join(read)}",) if read else ()) + tuple(dropped)


def _noted(chunks: Iterable[RequestItem], notes: tuple[str, ...]) -> Iterator[RequestItem]:
    """The reader's `(chunk, line_numbers)` pairs, the first chunk carrying `notes`."""
    for i, (chunk, line_numbers) in enumerate(chunks):
        yield (replace(chunk, notes=chunk.notes + notes) if i == 0 and notes else chunk), line_numbers


def _read_csv(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    line_no, line = first_line(path)
    spec, notes = table_spec(path, "csv", header_columns(path, line_no, line), options)
    return _noted(read_csv_requests(path, spec), notes)


def _read_jsonl(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    _, line = first_line(path)
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        record = None  # the reader names the line
    spec, notes = table_spec(path, "jsonl", list(record) if isinstance(record, dict) else [], options)
    return _noted(read_jsonl_requests(path, spec), notes)


CSV_FORMAT = TraceFormatInfo(
    "csv", "CSV", TraceKind.requests,
    lambda sniff, options: sniff.columns is not None and detects(sniff.columns, options),
    _read_csv,
)
JSONL_FORMAT = TraceFormatInfo(
    "jsonl", "JSONL", TraceKind.requests,
    lambda sniff, options: isinstance(sniff.record, dict) and detects(sniff.keys, options),
    _read_jsonl,
)
