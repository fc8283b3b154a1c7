"""Generic request tables: any CSV (header line) or JSONL with a prompt-length field named by
the `length_field` option, and optional `time_field` (numbers are seconds, strings wall-clock
datetimes) and `output_field`. JSONL records may carry Mooncake-style `hash_ids`."""

from __future__ import annotations

from pathlib import Path

from cpbcg.errors import TraceError
from cpbcg.planner.traces.base import ReadOptions, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import read_csv_requests
from cpbcg.planner.traces.jsonl_table import read_jsonl_requests
from cpbcg.planner.traces.records import RequestSpec
from cpbcg.planner.traces.text import display


def spec(path: Path, label: str, options: ReadOptions) -> RequestSpec:
    if not options.length_field:
        raise TraceError(f"{display(path)}: trace format {label} needs length_field (the prompt-length field)")
    return RequestSpec(label, options.length_field, options.time_field, output_field=options.output_field,
                       optional_output=False, hash_field="hash_ids" if label == "jsonl" else None)


CSV_FORMAT = TraceFormatInfo(
    "csv", "CSV", TraceKind.requests,
    lambda sniff, options: bool(options.length_field) and sniff.columns is not None,
    lambda path, options: read_csv_requests(path, spec(path, "csv", options))
)
JSONL_FORMAT = TraceFormatInfo(
    "jsonl", "JSONL", TraceKind.requests,
    lambda sniff, options: bool(options.length_field) and isinstance(sniff.record, dict),
    lambda path, options: read_jsonl_requests(path, spec(path, "jsonl", options))
)
