"""Mooncake JSONL (FAST'25 traces): `{"timestamp": ms, "input_length": n, "output_length": m,
"hash_ids": [...]}` per line; `hash_ids` name 512-token prefix blocks."""

from __future__ import annotations

from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.jsonl_table import read_jsonl_requests
from cpbcg.planner.traces.records import RequestSpec, TimeUnit

SPEC = RequestSpec("mooncake", "input_length", "timestamp", TimeUnit.ms, output_field="output_length", hash_field="hash_ids")


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return "input_length" in sniff.keys and "requests" not in sniff.keys


FORMAT = TraceFormatInfo(
    "mooncake", "Mooncake", TraceKind.requests, recognises,
    lambda path, options: read_jsonl_requests(path, SPEC)
)
