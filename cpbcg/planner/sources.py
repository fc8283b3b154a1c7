"""Where batch streams come from: a trace file (batch or request trace) or the embedded default.

Every source yields `BatchSet` chunks, so `plan`, `layout`, `batches` and `replay-check` work on
any of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from cpbcg.planner.batch_trace import read_batch_trace
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.synthetic import synthetic_batches

EMBEDDED_DEFAULT = "embedded default (seeded synthetic chat workload, 20,000 forwards)"


def open_batches(trace: Path | None, **options) -> Iterator[BatchSet]:
    """Batch stream of `trace`, or of the embedded default workload when `trace` is None.

    Raises `TraceError` (`FILE:LINE: ...`) for malformed traces.
    """
    if trace is None:
        return iter([synthetic_batches()])
    return read_batch_trace(trace)


def describe_source(trace: Path | None) -> str:
    """One-line description of the source for report headers."""
    return EMBEDDED_DEFAULT if trace is None else str(trace)
