"""Trace readers: one module per format; the registry that detects and opens them, SGLang
0.5.23's server logs and request logs included, sits above the engines (`cpbcg.assembly.registry`:
`open_trace(path, format, options)` streams batch traces as `BatchSet`s, request traces as
`RequestChunk`s for the scheduler simulation, server logs as `ForwardSizes`, a bound).
`docs/traces.md` lists every format.
"""

from cpbcg.planner.choices import TraceFormat
from cpbcg.planner.traces.base import ReadOptions, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.batches import read_batch_trace
from cpbcg.planner.traces.records import BLOCK_TOKENS, ForwardSizes, RequestChunk

__all__ = ["BLOCK_TOKENS", "ForwardSizes", "ReadOptions", "RequestChunk", "TraceFormat", "TraceFormatInfo", "TraceKind", "read_batch_trace"]
