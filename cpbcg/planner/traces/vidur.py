"""vidur / Sarathi-Serve request CSVs: `num_prefill_tokens,num_decode_tokens,...`; arrival times
from an `arrived_at` column (seconds) when present, otherwise none (Poisson arrivals are drawn)."""

from __future__ import annotations

from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import read_csv_requests
from cpbcg.planner.traces.records import RequestSpec, TimeUnit

SPEC = RequestSpec("vidur", "num_prefill_tokens", "arrived_at", TimeUnit.s, optional_time=True, output_field="num_decode_tokens")


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.columns is not None and "num_prefill_tokens" in sniff.columns


FORMAT = TraceFormatInfo(
    "vidur", "vidur", TraceKind.requests, recognises,
    lambda path, options: read_csv_requests(path, SPEC)
)
