"""BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.

`Timestamp` is seconds from the trace start. Options `model` (`ChatGPT`, `GPT-4`) and
`log_type` (`Conversation log`, `API log`) keep only the matching rows (exact match).
"""

from __future__ import annotations

from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import read_csv_requests
from cpbcg.planner.traces.records import RequestSpec, TimeUnit

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")


def spec(options: ReadOptions) -> RequestSpec:
    filters = tuple((field, value) for field, value in (("Model", options.model), ("Log Type", options.log_type)) if value is not None)
    return RequestSpec("burstgpt", "Request tokens", "Timestamp", TimeUnit.s, output_field="Response tokens", optional_output=False, filters=filters)


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.columns is not None and all(c in sniff.columns for c in COLUMNS)


FORMAT = TraceFormatInfo(
    "burstgpt", "BurstGPT", TraceKind.requests, recognises,
    lambda path, options: read_csv_requests(path, spec(options))
)
