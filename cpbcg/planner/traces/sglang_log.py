"""SGLang server logs: each `Prefill batch` line is one real prefill forward.

SGLang's scheduler logs every prefill forward it runs (`log_prefill_stats` in
`scheduler_metrics_mixin.py`, earlier in `scheduler.py`) as

    [2025-06-01 12:00:00 TP0] Prefill batch, #new-seq: 3, #new-token: 2048, #cached-token: 512, token usage: 0.10, ...

(older releases write `Prefill batch.` or `Prefill batch(mixed #running-req: 2).`). `#new-seq`
is the number of requests `k` in the forward (the in-progress chunk included), `#new-token` its
extend tokens `n` (prefix-cache hits excluded: `#cached-token`). The extend lengths inside are
not logged, so these forwards can be planned only by the worst case over `k` requests of `n`
tokens: a bound (`ForwardSizes`). Other log lines are skipped; a `Prefill batch` line that does
not parse is refused, naming its line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.model.layout import MAX_TOKENS
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.records import ForwardSizes
from cpbcg.planner.traces.text import check_blob_lines, iter_blob_chunks, line_excerpt, split_lines

MARK = b"Prefill batch"
_LINE = re.compile(rb"Prefill batch\b[^\n]*?#new-seq: (\d{1,12}), #new-token: (\d{1,12}), #cached-token: (\d{1,12})")
_MARK_SEEN = re.compile(rb"Prefill batch[.,( ]")


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    return sniff.record is None and _MARK_SEEN.search(sniff.head) is not None


def read(path: Path, options: ReadOptions) -> Iterator[ForwardSizes]:
    """Yield `ForwardSizes` chunks (every forward with count 1, in log order). Raises
    `TraceError` for a `Prefill batch` line that does not parse, `#new-token` 0 or above
    2**31 - 1, `#new-seq` 0 or above `#new-token`, and for a log without any such line."""
    seen = 0
    for first, blob in iter_blob_chunks(path):
        check_blob_lines(path, first, blob)
        matches = list(_LINE.finditer(blob))
        if blob.count(MARK) != len(matches):
            _refuse_unparsed(path, first, blob)
        if not matches:
            continue
        values = np.array([m.groups() for m in matches], dtype=np.int64)  # [N, 3]: k, n, cached
        k, n, cached = values[:, 0], values[:, 1], values[:, 2]
        bad = np.flatnonzero((n < 1) | (n > MAX_TOKENS) | (k < 1) | (k > n))
        if len(bad):
            m = matches[int(bad[0])]
            line_no = first + blob.count(b"\n", 0, m.start())
            raise TraceError(located(path, line_no, _why(int(k[bad[0]]), int(n[bad[0]]))))
        seen += len(matches)
        yield ForwardSizes(n, k, np.ones(len(n), dtype=np.int64), cached)
    if not seen:
        raise TraceError(located(path, 1, 'no "Prefill batch" lines: not an SGLang server log, or logged below INFO'))


def _why(k: int, n: int) -> str:
    if n < 1 or n > MAX_TOKENS:
        return f"#new-token: {n} is not a forward size in 1..{MAX_TOKENS}"
    return f"#new-seq: {k} is not a request count in 1..#new-token ({n})"


def _refuse_unparsed(path: Path, first: int, blob: bytes) -> None:
    for line_no, line in enumerate(split_lines(blob), start=first):
        if MARK in line and _LINE.search(line) is None:
            raise TraceError(located(path, line_no, f"a Prefill batch line without #new-seq, #new-token, #cached-token: {line_excerpt(line[line.find(MARK):])}"))
        if line.count(MARK) > 1:
            raise TraceError(located(path, line_no, "two Prefill batch records on one line"))


FORMAT = TraceFormatInfo("sglang-log", "SGLang server log (bound)", TraceKind.forwards, recognises, read)
