"""The one adapter between `cpbcg watch` and the SGLang log reader: new whole lines in, forwards out.

A followed log arrives a few lines at a time. `LogLines.feed` hands each blob of whole lines to
the reader `plan` uses (`cpbcg.planner.traces.sglang_log.LogReader`, one blob at a time, with its
folding of PP-stage / attention-CP copies kept across blobs), and the start-up lines before the
first `Prefill batch` to the settings scan `read_log_settings` runs
(`cpbcg.planner.traces.sglang_settings`). So a log followed to its end gives exactly the forwards,
skips and settings `plan` reads from the finished file. Nothing else in `cpbcg.watch` touches the
reader: when the reader changes (launches, per-launch settings, incremental parsing), this module
is the one to re-point.
"""

from __future__ import annotations

from dataclasses import replace

from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.planner.traces.sglang_log import DETECT_BYTES, MARK, LogReader, LogSummary
from cpbcg.planner.traces.sglang_settings import LogSettings, _Scan


class LogLines:
    """One server's log, fed whole lines as they arrive (module doc)."""

    def __init__(self, name: str):
        self.name = name
        """How the log is named in messages (its path, `<stdin>`)."""
        self._reader = LogReader(name)
        self._scan: _Scan | None = _Scan()
        self._head_bytes = 0
        self.settings: LogSettings | None = None
        """The start-up settings, once the first `Prefill batch` line arrived (None before)."""
        self.zero_buckets_line = 0
        """Line of a prefill capture line that listed no bucket (`num_tokens=[]`), else 0."""

    @property
    def summary(self) -> LogSummary:
        """What the reader kept, folded and skipped so far (`printers`/`dp_ranks` are not filled)."""
        return self._reader.summary

    def feed(self, first_line: int, blob: bytes) -> ObservedForwards | None:
        """The forwards of `blob` (whole lines, the first numbered `first_line`), or None.
        Raises `TraceError` for a line longer than the reader's limit."""
        if self._scan is not None:
            stop = blob.find(MARK)
            if self._head_bytes < DETECT_BYTES:
                self._scan.scan(first_line, blob if stop < 0 else blob[:stop])
                self._head_bytes += len(blob)
            if stop >= 0:
                self.resolve()
        return self._reader._read_blob(first_line, blob)

    def resolve(self) -> LogSettings:
        """The settings read so far, fixed (at the first `Prefill batch` line, or at the end)."""
        if self._scan is not None:
            scan, self._scan = self._scan, None
            self.zero_buckets_line = scan.captured_line if scan.captured_line and not scan.captured else 0
            self.settings = replace(scan.result(), path=self.name)
        assert self.settings is not None
        return self.settings
