"""AIBrix workload JSONL: `{"timestamp": ms, "requests": [{"prompt_length": n, "output_length": m, ...}]}`
per line; every request of a line arrives at that line's timestamp.

The timestamp is in milliseconds: AIBrix's benchmark client sends a line's requests at
`start + timestamp / 1000` seconds (`benchmarks/client/client.py`). `output_length` may be
null (unknown); then no output lengths are read, and a trace must not mix null and numbers.
Workloads from older AIBrix generators name the lengths `"Prompt Length"` and `"Output Length"`;
they are read the same way. A request of 0 prompt tokens is skipped and counted (`SkippedRows`).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.jsonl_table import REQUEST_CHUNK_BYTES, json_length, json_time, load_json_line
from cpbcg.planner.traces.records import RequestChunk, RequestItem, RequestSpec, TimeUnit, drop_empty_prompts, known_lines
from cpbcg.planner.traces.text import TracePath, iter_line_chunks

SPEC = RequestSpec("aibrix", "prompt_length", "timestamp", TimeUnit.ms, output_field="output_length")
LENGTH_KEYS = (("prompt_length", "output_length"), ("Prompt Length", "Output Length"))
"""(prompt, output) keys of a request object: AIBrix's own, then its older generators'."""


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return {"timestamp", "requests"} <= sniff.keys


def read(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    """Yield `(chunk, line_numbers)`: one request per entry of each line's `requests`."""
    with_outputs: bool | None = None
    for first, lines in iter_line_chunks(path, REQUEST_CHUNK_BYTES):
        lengths, outputs, times, line_nos = [], [], [], []
        for line_no, line in enumerate(lines, start=first):
            if line.isspace():
                continue
            time_s, group = _line(path, line_no, line)
            for i, request in enumerate(group):
                where = f"requests[{i}]."
                keys = _length_keys(path, line_no, where, request)
                if keys is None or not isinstance(request, dict):
                    raise TraceError(located(path, line_no, f'{where[:-1]}: expected an object with "prompt_length" (or "Prompt Length")'))
                prompt_key, output_key = keys
                lengths.append(json_length(path, line_no, where + prompt_key, request[prompt_key], 1, zero_ok=True))
                output = request.get(output_key)
                if with_outputs is None:
                    with_outputs = output is not None
                if (output is not None) != with_outputs:
                    raise TraceError(located(path, line_no, f"{where}{output_key}: null mixed with numbers in one trace"))
                if with_outputs:
                    outputs.append(json_length(path, line_no, where + output_key, output, 0))
                times.append(time_s)
                line_nos.append(line_no)
        chunk = RequestChunk(np.array(lengths, dtype=np.int64), np.array(times, dtype=np.float64), None,
                             np.array(outputs, dtype=np.int64) if with_outputs else None)
        numbers = np.array(line_nos, dtype=np.int64)
        yield drop_empty_prompts(chunk, known_lines(numbers), "prompt_length")


def _length_keys(path: TracePath, line_no: int, where: str, request: object) -> tuple[str, str] | None:
    """The (prompt, output) keys a request object uses, or None when it is not such an object.
    `TraceError` when it holds both spellings of a length (reading one would drop the other)."""
    if not isinstance(request, dict):
        return None
    for role in (0, 1):
        both = [keys[role] for keys in LENGTH_KEYS if keys[role] in request]
        if len(both) > 1:
            raise TraceError(located(path, line_no, f'{where[:-1]}: "{both[0]}" and "{both[1]}" both name the '
                                     f'{"prompt" if role == 0 else "output"} length: keep one'))
    return next((keys for keys in LENGTH_KEYS if keys[0] in request), None)


def _line(path: TracePath, line_no: int, line: bytes) -> tuple[float, list[object]]:
    record = load_json_line(path, line_no, line)
    if not isinstance(record, dict):
        raise TraceError(located(path, line_no, f'expected {{"timestamp": ..., "requests": [...]}}, got {type(record).__name__}'))
    for field in ("timestamp", "requests"):
        if field not in record:
            raise TraceError(located(path, line_no, f'missing field "{field}"'))
    if not isinstance(record["requests"], list):
        raise TraceError(located(path, line_no, "requests: expected a list of request objects"))
    return json_time(path, line_no, SPEC, record["timestamp"]), record["requests"]


FORMAT = TraceFormatInfo("aibrix", "AIBrix", TraceKind.requests, recognises, read)
