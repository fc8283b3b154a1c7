"""Trace readers: one module per format behind one registry (`registry.FORMATS`).

`open_trace(path, format, options)` detects the format (unless given) and streams the trace:
batch traces as `BatchSet`s, request traces as `RequestChunk`s (for the scheduler simulation),
SGLang server logs as `ForwardSizes` (a bound). `docs/traces.md` lists every format.
"""

from cpbcg.planner.choices import TraceFormat
from cpbcg.planner.traces.base import ReadOptions, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.batches import read_batch_trace
from cpbcg.planner.traces.records import BLOCK_TOKENS, ForwardSizes, RequestChunk
from cpbcg.planner.traces.registry import FORMATS, OpenedTrace, detect, detect_format, open_trace, read_requests

__all__ = [
    "BLOCK_TOKENS", "FORMATS", "ForwardSizes", "OpenedTrace", "ReadOptions", "RequestChunk", "TraceFormat",
    "TraceFormatInfo", "TraceKind", "detect", "detect_format", "open_trace", "read_batch_trace", "read_requests",
]
