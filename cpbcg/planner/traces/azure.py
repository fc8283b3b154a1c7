"""Azure LLM inference traces (2023, 2024, 2025): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`
with wall-clock timestamps; the 2025 release adds `NumImages` (read into `num_images`: a
multimodal request keeps an interleave forward out of CP graphs in SGLang 0.5.23)."""

from __future__ import annotations

from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import read_csv_requests
from cpbcg.planner.traces.records import RequestSpec

SPEC = RequestSpec("azure", "ContextTokens", "TIMESTAMP", output_field="GeneratedTokens", images_field="NumImages")


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.columns is not None and "ContextTokens" in sniff.columns


FORMAT = TraceFormatInfo(
    "azure", "Azure", TraceKind.requests, recognises,
    lambda path, options: read_csv_requests(path, SPEC)
)
