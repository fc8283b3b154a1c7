"""SGLang server logs' `Decode batch` lines: the running batch and the graph verdict of a sample
of decode steps.

0.5.23's `MetricsReporter.report_decode_stats` (`managers/scheduler_components/metrics_reporter.py`)
prints one line every `decode_log_interval` decode steps (default 40):

    [2026-10-30 12:00:05 TP0] Decode batch, #running-req: 37, #token: 9120, token usage: 0.04, cuda graph: True, gen throughput (token/s): 2311.52, #queue-req: 0

(`Decode batch.` before 2025-10; `Decode batch [N],` with `SGLANG_LOG_FORWARD_ITERS`; the verdict
`cuda|npu|cpu|musa|xpu graph: True|False`, absent from older releases). So the lines are a
1-in-`decode_log_interval` sample of the decode steps, not every step: `DecodeLines` keeps them
as arrays; the caller makes them `DecodeSteps` with `sampled_every` set. Each printing scheduler (one per attention-DP rank)
prints its own lines; they are counted as printed.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cpbcg.planner.arrays import Int64Array
from cpbcg.planner.traces.log_scan import decode_columns

DECODE_LOG_INTERVAL = 40
"""SGLang 0.5.23's default `--decode-log-interval` (decode steps per `Decode batch` line)."""
_LINE = re.compile(rb"Decode batch(?: \[\d+\])?[.,] #running-req: (\d{1,9}),([^\n]*)")
_VERDICT = re.compile(rb"\b(?:cuda|npu|cpu|musa|xpu) graph: (True|False)\b")


def _verdict(rest: bytes) -> int:
    found = _VERDICT.search(rest)
    return -1 if found is None else int(found.group(1) == b"True")


class DecodeLines:
    """The `Decode batch` lines of a log, fed blob by blob (`feed`): running batch and verdict."""

    def __init__(self) -> None:
        self._sizes: list[Int64Array] = []
        self._verdicts: list[np.ndarray] = []  # per blob: 1 graph, 0 eager, -1 not printed

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DecodeLines):
            return NotImplemented
        mine, theirs = self.arrays(), other.arrays()
        return bool(np.array_equal(mine[0], theirs[0]) and np.array_equal(mine[1], theirs[1]))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def feed(self, blob: bytes, newlines: Int64Array | None = None, block: Any = None, *, bulk: bool = True) -> int:
        """Read the lines of `blob` (whole lines; `newlines`: its newline offsets when the caller
        has them; `block`: its `log_scan.scan_block` when shared); returns how many it held. The common shape is read in bulk
        (`log_scan.decode_columns`), any other `Decode batch` line by `_LINE` (the same answer;
        `bulk` False: every line by `_LINE`, the reference the tests compare with)."""
        if not bulk:
            found = [(int(m.group(1)), _verdict(m.group(2))) for m in _LINE.finditer(blob)]
            self._sizes.append(np.array([f[0] for f in found], dtype=np.int64))
            self._verdicts.append(np.array([f[1] for f in found], dtype=np.int8))
            return len(found)
        marks, running, graph = decode_columns(blob, newlines, block)
        if not len(marks):
            return 0
        odd = np.flatnonzero(running < 0)
        keep = np.ones(len(marks), dtype=bool)
        for i in odd.tolist():
            m = _LINE.match(blob, int(marks[i]))
            if m is None:  # "Decode batch" in some other text: not a record
                keep[i] = False
                continue
            running[i] = int(m.group(1))
            graph[i] = _verdict(m.group(2))
        self._sizes.append(running[keep])
        self._verdicts.append(graph[keep])
        return int(keep.sum())

    @property
    def lines(self) -> int:
        """`Decode batch` lines read."""
        return sum(len(s) for s in self._sizes)

    def verdicts(self) -> tuple[int, int, int]:
        """Lines that printed `graph: True`, `graph: False`, and no verdict."""
        v = self.arrays()[1]
        return int((v == 1).sum()), int((v == 0).sum()), int((v == -1).sum())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """[L] int64 running batch and [L] int8 verdict (1, 0, -1) per line, in log order."""
        if len(self._sizes) > 1:  # concatenated once
            self._sizes, self._verdicts = [np.concatenate(self._sizes)], [np.concatenate(self._verdicts)]
        if not self._sizes:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8)
        return self._sizes[0].astype(np.int64), self._verdicts[0].astype(np.int8)
