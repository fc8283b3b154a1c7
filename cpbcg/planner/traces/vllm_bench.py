"""vLLM `bench serve` result JSON (`--save-result --save-detailed`): one JSON object with the
arrays `input_lens` and `output_lens` (tokens) and, in recent releases, `start_times` (s, the
client's send time of each request). Without `start_times` arrivals are drawn (Poisson).

The file is one JSON document, so it is read whole: a regular file (or `-`) of at most 2 GiB.
"""

from __future__ import annotations

import re
from typing import Iterator

import numpy as np
import orjson

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.jsonl_table import repeated_key
from cpbcg.planner.traces.records import MAX_REQUEST_TOKENS, RequestChunk, RequestItem, drop_empty_prompts, known_lines
from cpbcg.planner.traces.text import TracePath, display, excerpt, read_whole

CHUNK_REQUESTS = 1 << 16
"""Requests per yielded chunk."""


_INPUT_LENS = re.compile(rb'"input_lens"\s*:\s*\[')


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    """A JSON object whose first 1 MiB holds an `"input_lens": [` array (`output_lens` follows
    it in vLLM's files, possibly beyond the first MiB)."""
    head = sniff.head.lstrip()
    return head[:1] == b"{" and _INPUT_LENS.search(head) is not None


def read(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    """Yield `(chunk, line_numbers)`; every request is on line 1 (the document's), so errors
    name the line of the array's key and the index: `result.json:3: input_lens[17]: ...` (line
    1 for the document's shape)."""
    raw = read_whole(path)
    try:
        result = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(located(display(path), exc.lineno, f"not valid JSON ({exc.msg[:80]})")) from None
    if not isinstance(result, dict):
        raise TraceError(located(display(path), 1, f"expected a vLLM bench result object, got {type(result).__name__}"))
    where = _Where(path, raw)
    repeated = repeated_key(raw, result)
    if repeated is not None:
        raise where(repeated, "duplicate key: a JSON object names each key once")
    inputs = _array(where, result, "input_lens", 0)  # 0-token prompts: skipped below
    outputs = _array(where, result, "output_lens", 0, len(inputs))
    starts = _times(where, result, len(inputs)) if "start_times" in result else None
    if starts is not None and np.any(np.diff(starts) < 0):  # concurrency-limited sends: in time order
        order = np.argsort(starts, kind="stable")
        inputs, outputs, starts = inputs[order], outputs[order], starts[order]
    for lo in range(0, len(inputs), CHUNK_REQUESTS):
        hi = min(lo + CHUNK_REQUESTS, len(inputs))
        chunk = RequestChunk(inputs[lo:hi], None if starts is None else starts[lo:hi], None, outputs[lo:hi])
        yield drop_empty_prompts(chunk, known_lines(np.ones(hi - lo, dtype=np.int64)), "input_lens")  # one JSON document: line 1


class _Where:
    """`FILE:LINE: KEY:` of a top-level key of the document (line 1 when it is missing)."""

    def __init__(self, path: TracePath, raw: bytes):
        self.path, self.raw = path, raw

    def __call__(self, key: str, message: str, item: int | None = None) -> TraceError:
        at = self.raw.find(b'"' + key.encode() + b'"')
        line = 1 + self.raw.count(b"\n", 0, at) if at >= 0 else 1
        return TraceError(located(display(self.path), line, message, key if item is None else f"{key}[{item}]"))


def _array(where: _Where, result: dict[str, object], key: str, minimum: int, length: int | None = None) -> np.ndarray:
    if key not in result:
        raise where(key, "missing key (saved with --save-detailed?)")
    values = result[key]
    if not isinstance(values, list):
        raise where(key, "expected a list of token counts")
    if length is not None and len(values) != length:
        raise where(key, f"{len(values)} entries, input_lens has {length}")
    for i, value in enumerate(values):
        if type(value) is not int or not minimum <= value <= MAX_REQUEST_TOKENS:
            what = "a positive integer" if minimum else "a non-negative integer"
            raise where(key, f"{excerpt(str(value))} is not {what} up to {MAX_REQUEST_TOKENS}", i)
    return np.array(values, dtype=np.int64).reshape(-1)


def _times(where: _Where, result: dict[str, object], length: int) -> np.ndarray:
    values = result["start_times"]
    if not isinstance(values, list) or len(values) != length:
        raise where("start_times", f"expected {length} numbers, one per input_lens entry")
    for i, value in enumerate(values):
        if type(value) not in (int, float) or not np.isfinite(value):
            raise where("start_times", f"{excerpt(str(value))} is not a time in seconds", i)
    return np.array(values, dtype=np.float64)


FORMAT = TraceFormatInfo("vllm-bench", "vLLM bench", TraceKind.requests, recognises, read)
