"""SplitwiseSim request CSV:
`request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size`.

`arrival_timestamp` is seconds; `prompt_size` is the prompt, `token_size` the output length.
"""

from __future__ import annotations

from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.csv_table import read_csv_requests
from cpbcg.planner.traces.records import RequestSpec, TimeUnit

SPEC = RequestSpec("splitwise", "prompt_size", "arrival_timestamp", TimeUnit.s, output_field="token_size", optional_output=False)


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.columns is not None and {"prompt_size", "token_size", "arrival_timestamp"} <= set(sniff.columns)


FORMAT = TraceFormatInfo(
    "splitwise", "SplitwiseSim", TraceKind.requests, recognises,
    lambda path, options: read_csv_requests(path, SPEC)
)
