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

import numpy as np

DECODE_LOG_INTERVAL = 40
"""SGLang 0.5.23's default `--decode-log-interval` (decode steps per `Decode batch` line)."""
_LINE = re.compile(rb"Decode batch(?: \[\d+\])?[.,] #running-req: (\d{1,9}),([^\n]*)")
_VERDICT = re.compile(rb"\b(?:cuda|npu|cpu|musa|xpu) graph: (True|False)\b")


class DecodeLines:
    """The `Decode batch` lines of a log, fed blob by blob (`feed`): running batch and verdict."""

    def __init__(self) -> None:
        self._sizes: list[int] = []
        self._verdicts: list[int] = []  # 1 graph, 0 eager, -1 not printed

    def feed(self, blob: bytes) -> int:
        """Read the lines of `blob` (whole lines); returns how many it held."""
        found = 0
        for m in _LINE.finditer(blob):
            verdict = _VERDICT.search(m.group(2))
            self._sizes.append(int(m.group(1)))
            self._verdicts.append(-1 if verdict is None else int(verdict.group(1) == b"True"))
            found += 1
        return found

    @property
    def lines(self) -> int:
        """`Decode batch` lines read."""
        return len(self._sizes)

    def verdicts(self) -> tuple[int, int, int]:
        """Lines that printed `graph: True`, `graph: False`, and no verdict."""
        v = np.asarray(self._verdicts, dtype=np.int64)
        return int((v == 1).sum()), int((v == 0).sum()), int((v == -1).sum())

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """[L] int64 running batch and [L] int8 verdict (1, 0, -1) per line, in log order."""
        return np.asarray(self._sizes, dtype=np.int64), np.asarray(self._verdicts, dtype=np.int8)
