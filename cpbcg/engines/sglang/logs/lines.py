"""The one adapter between `cpbcg watch` and the SGLang log reader: new whole lines in, forwards out.

A followed log arrives a few lines at a time. `LogLines.feed` hands each blob of whole lines to
the parser `plan` reads a log with (`cpbcg.engines.sglang.logs.log.LogParser`, its `feed`:
the same line prefilter, launches and folding of PP-stage / attention-CP copies kept across
blobs; `LogParser.chunks`): `ObservedForwards` chunks, one per launch the blob touches (a
chunk never spans a restart: `ObservedForwards.launch`). Each launch's settings are the
parser's (`LogParser.scan`, `sglang_settings.LaunchScan.launch`), complete before the launch's
first forward. So a log followed to its end gives exactly the forwards, skips, launches and
per-launch settings `plan` reads from the finished file. Nothing else in `cpbcg.watching` touches
the reader.
"""

from __future__ import annotations

from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.engines.sglang.logs.log import LogParser, LogSummary
from cpbcg.engines.sglang.logs.settings import LogSettings


class LogLines:
    """One server's log, fed whole lines as they arrive (module doc)."""

    def __init__(self, name: str):
        self.name = name
        """How the log is named in messages (its path, `<stdin>`)."""
        self._parser = LogParser(name)

    @property
    def summary(self) -> LogSummary:
        """What the parser kept, folded and skipped so far (launches included)."""
        return self._parser.summary

    @property
    def launch(self) -> int:
        """1-based launch being read (a restart into the same log begins the next)."""
        return self._parser.scan.current

    def settings(self, launch: int | None = None) -> LogSettings:
        """Launch `launch`'s settings (1-based; None: the one being read) as read so far: complete
        before the launch's first forward. Settings it does not state are absent (the caller's
        resolution says them assumed)."""
        return self._parser.scan.launch(self.launch if launch is None else launch)

    def feed(self, first_line: int, blob: bytes) -> list[ObservedForwards]:
        """The forwards of `blob` (whole lines, the first numbered `first_line`), one chunk per
        launch, in log order (empty when the blob holds none): `LogParser.chunks`."""
        return self._parser.chunks(first_line, blob)
