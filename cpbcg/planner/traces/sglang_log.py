"""SGLang server logs: one forward per distinct `Prefill batch` record, with the server's verdict.

SGLang's scheduler prints every prefill forward it runs (`report_prefill_stats` in
`managers/scheduler_components/metrics_reporter.py` in 0.5.23, `log_prefill_stats` in
`scheduler_metrics_mixin.py` and `scheduler.py` before) as

    [2026-10-30 12:00:00 DP0 PP1 ATTN_CP2 TP2] Prefill batch, #new-seq: 3, #new-token: 2048, #cached-token: 512, ..., cuda graph: True, ...

Variants read (docs/traces.md): `Prefill batch.` (until 2025-10), `Prefill batch,`,
`Prefill batch [N],` (`SGLANG_LOG_FORWARD_ITERS`), `Prefill batch(mixed #running-req: N).`
(a mixed-chunk forward: its `N` decode rows of one token are part of the forward), any fields
around the three counts (`cache hit rate`, `token usage`, `full`/`swa`/`mamba usage`,
`#pending-token`, `#bootstrap-req`, `#inflight-req`, throughput, TFLOPS), the verdict
`cuda graph|npu graph|cpu graph|musa graph: True|False` before or after the throughput, rank
prefixes `[date TP0]`, `[date DP1 TP0]`, `[date DP0 PP1 ATTN_CP2 MOE_DP0 TP2 EP2]`, and anything
before the prefix (docker `name  | `, dashboard timestamps).

Copies. Only attention-TP rank 0 prints, but every pipeline stage, every attention-CP rank and
every attention-DP rank has one. DP ranks run distinct forwards (kept apart: `dp_rank`); PP
stages and CP ranks print copies of the same forward, in the same order. So within a DP rank,
the `j`-th record of every printer (its rank prefix without `DP`) is the same forward: the
first copy read is kept, later ones are folded (counted; a copy whose sizes differ from the
kept one is counted as a mismatch). Two `Prefill batch` records on one physical line (two
processes writing at once) are split: each is read with the rank prefix written just before it
(the line's first prefix when it has none), then folded like any other copy.

`#replay-token: r` (0.5.23, encoder replay) adds `r` recomputed tokens to the forward (its rows
are `#new-token + #replay-token`, `PrefillAdder._update_prefill_budget`; they leave the cached
prefix); `waiting-image-req`, `#optimistic-req` and any other field are passed over.

A log is a sequence of launches (`sglang_settings`): folding never crosses a launch, and the
chunks of one launch carry its number (`ObservedForwards.launch`). `LogParser` is the one
per-line parser (lines in, `LogEvent`s out, incrementally: `parse_log_lines`); the reader runs
it behind the `INTERESTING` prefilter.

Lines that cannot be read are skipped and counted, never fatal: a record without a complete
`#new-seq: k,` and `#new-token: n,` (a cut paste without `#cached-token` still reads), `k` not
in `1..n`, and `#new-token: 0` (a non-prefill row, counted apart). `#new-token` counts the new
extend tokens of the forward (`PrefillAdder.log_input_tokens`: raw in 0.5.23, page-rounded
before SGLang PR #38566).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Iterator, NamedTuple

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.model.batches import MAX_TOKENS
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.planner.traces.sglang_settings import DETECT_BYTES, INTERESTING, MARK, RANK_TAG, LaunchScan, LogSettings
from cpbcg.planner.traces.text import TracePath, check_blob_lines, display, is_stdin, iter_blob_chunks, open_binary, read_errors

__all__ = ["DETECT_BYTES", "MARK", "LogEvent", "LogParser", "LogReader", "LogSummary", "Record", "parse_log_lines", "parse_records"]
COPY_CHECK_FORWARDS = 4096
"""Recent kept forwards per DP rank whose sizes a later copy is checked against."""

_PREFIX = re.compile(rb"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)?((?:\s*[A-Z][A-Z_]*\d+)*)\s*\]")
_HEAD = re.compile(rb"Prefill batch(?: \[\d+\])?(?:\(mixed #running-req: (\d{1,12})\))?")
_SEQ = re.compile(rb"#new-seq: (\d{1,12}),")
_TOKEN = re.compile(rb"#new-token: (\d{1,12}),")
_CACHED = re.compile(rb"#cached-token: (\d{1,12})\b")
_REPLAY = re.compile(rb"#replay-token: (\d{1,12}),")
_VERDICT = re.compile(rb"\b(cuda|npu|cpu|musa|xpu) graph: (True|False)\b")
_LOGGISH = re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|server_args|sglang|\bTP\d+\]")
_SERVERISH = re.compile(rb"server_args|(?i:sglang)|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z][A-Z_]*\d+)+\]")
"""Standard input whose head shows an SGLang server (it cannot be searched ahead): read as a log."""


class Record(NamedTuple):
    """One `Prefill batch` record as printed (before folding)."""

    dp_rank: int
    """`DP` of the rank prefix (0 without one)."""
    printer: tuple[tuple[bytes, int], ...]
    """The rank prefix's other tags (`PP`, `ATTN_CP`, `TP`, ...): who printed it."""
    timestamp: str
    """The prefix's date and time, or '' without one."""
    new_seq: int | None
    new_token: int | None
    cached_token: int
    running_req: int
    """Decode rows of a mixed-chunk forward (`(mixed #running-req: N)`), else 0."""
    graph: int
    """1 `True`, 0 `False`, -1 not printed."""
    graph_label: str = ""
    """`cuda graph`, `npu graph`, ... as printed ('' without a verdict)."""
    replay_token: int = 0
    """`#replay-token` (0.5.23): cached tokens encoder replay recomputes, run by the forward beside `#new-token`."""


def parse_records(line: bytes) -> list[Record]:
    """Every `Prefill batch` record of one physical line, split at each mark (module doc)."""
    marks = [m.start() for m in re.finditer(re.escape(MARK), line)]
    records: list[Record] = []
    first_prefix: re.Match[bytes] | None = None
    for i, at in enumerate(marks):
        before = line[marks[i - 1] + len(MARK) if i else 0:at]
        prefixes = [m for m in _PREFIX.finditer(before) if m.group(1) or m.group(2).strip()]
        prefix = prefixes[-1] if prefixes else first_prefix
        if i == 0:
            first_prefix = prefix
        body = line[at:marks[i + 1] if i + 1 < len(marks) else len(line)]
        records.append(_record(prefix, body))
    return records


@lru_cache(maxsize=4096)
def _ranks(tags_text: bytes) -> tuple[int, tuple[tuple[bytes, int], ...]]:
    """`(DP rank, the other tags)` of a rank prefix's tags (`DP1 PP0 TP0`)."""
    tags = [(m.group(1), int(m.group(2))) for m in RANK_TAG.finditer(tags_text.strip())]
    return next((v for name, v in tags if name == b"DP"), 0), tuple((name, v) for name, v in tags if name != b"DP")


def _record(prefix: re.Match[bytes] | None, body: bytes) -> Record:
    dp, printer = _ranks(prefix.group(2)) if prefix else (0, ())
    head = _HEAD.match(body)
    seq, token = _SEQ.search(body), _TOKEN.search(body)
    cached, verdict, replay = _CACHED.search(body), _VERDICT.search(body), _REPLAY.search(body)
    return Record(
        dp, printer, (prefix.group(1) or b"").decode() if prefix else "",
        int(seq.group(1)) if seq else None, int(token.group(1)) if token else None,
        int(cached.group(1)) if cached else 0,
        int(head.group(1)) if head and head.group(1) else 0,
        -1 if verdict is None else int(verdict.group(2) == b"True"),
        "" if verdict is None else verdict.group(1).decode() + " graph",
        int(replay.group(1)) if replay else 0,
    )


@dataclass
class LogSummary:
    """What reading a log kept, folded and skipped (complete once the reader is exhausted)."""

    records: int = 0
    """`Prefill batch` records read (copies included)."""
    forwards: int = 0
    """Distinct forwards kept."""
    folded_copies: int = 0
    """Records folded as copies from other PP stages or attention-CP ranks."""
    copy_mismatches: int = 0
    """Copies whose `#new-token`/`#new-seq` differ from the kept forward's."""
    unreadable: int = 0
    """Distinct forwards skipped: no complete `#new-seq`/`#new-token`, or `#new-seq` not in 1..n."""
    first_unreadable_line: int = 0
    nonprefill: int = 0
    """Distinct records with `#new-token: 0` (no prefill tokens), skipped."""
    first_nonprefill_line: int = 0
    printers: int = 0
    """Distinct rank prefixes that printed (PP stages x CP ranks x DP ranks), the most of any launch."""
    dp_ranks: tuple[int, ...] = ()
    """Attention-DP ranks seen, ascending."""
    graph_label: str = "cuda graph"
    """How the log names the verdict (`cuda graph`, `npu graph`, `cpu graph`)."""
    launches: int = 1
    """Launches read (`sglang_settings`)."""
    launch_forwards: dict[int, int] = field(default_factory=dict)
    """Distinct forwards kept per launch (1-based)."""
    labels: set[str] = field(default_factory=set)
    """Every verdict label printed (`cuda graph`, `npu graph`)."""

    def skipped_note(self, path: str) -> str | None:
        """One line on what was skipped, or None when nothing was."""
        parts = []
        if self.unreadable:
            parts.append(f"{self.unreadable:,} unreadable Prefill batch line{'s' if self.unreadable != 1 else ''} skipped (first: line {self.first_unreadable_line})")
        if self.nonprefill:
            parts.append(f"{self.nonprefill:,} with #new-token: 0 skipped (first: line {self.first_nonprefill_line})")
        return f"{path}: " + "; ".join(parts) if parts else None

    def folded_note(self, path: str) -> str | None:
        """One line on folded copies, or None when there were none."""
        if not self.folded_copies:
            return None
        bad = f"; {self.copy_mismatches:,} copies disagree with the forward kept" if self.copy_mismatches else ""
        return (f"{path}: {self.records:,} Prefill batch records from {self.printers} rank prefixes: {self.forwards:,} distinct forwards "
                f"kept, {self.folded_copies:,} copies from PP stages / attention-CP ranks folded{bad}")

    def launches_note(self, path: str) -> str | None:
        """One line on the launches of a log holding more than one, or None."""
        if self.launches < 2:
            return None
        each = ", ".join(f"{self.launch_forwards.get(i, 0):,}" for i in range(1, self.launches + 1))
        return f"{path}: {self.launches} launches (restarts); forwards per launch {each}; copies are folded within a launch only"


Row = tuple[int, int, int, int, int, int, int]
"""A kept forward: `(num_tokens, num_requests, cached, decode rows, line, dp rank, graph)`."""


class LogEvent(NamedTuple):
    """What one line of a log gave the parser: a launch began, or a distinct forward was kept."""

    kind: str
    """`launch` (a new launch begins on this line) or `forward`."""
    launch: int
    """1-based launch the event belongs to."""
    line_no: int
    row: Row | None = None
    """The forward (`kind == 'forward'`), else None."""


class LogParser:
    """The one per-line parser of SGLang server logs (module doc): settings lines go to its
    `LaunchScan` (`scan`: every launch's `LogSettings`), `Prefill batch` lines are folded within
    their launch; `line` and `feed` return the `LogEvent`s, `summary` counts as it goes."""

    def __init__(self, path: str = ""):
        self.summary = LogSummary()
        self.scan = LaunchScan(path)
        self._printers: set[tuple[int, tuple[tuple[bytes, int], ...]]] = set()
        self._dp: set[int] = set()
        self._new_launch()

    def _new_launch(self) -> None:
        self._printed: dict[tuple[int, tuple[tuple[bytes, int], ...]], int] = {}
        self._kept: dict[int, int] = {}
        self._recent: dict[int, dict[int, tuple[int | None, int | None]]] = {}

    def line(self, line: bytes, line_no: int) -> list[LogEvent]:
        """The events of one physical line (no newline)."""
        if MARK not in line:
            if self.scan.line(line, line_no):
                self._new_launch()
                self.summary.launches = self.scan.current
                return [LogEvent("launch", self.scan.current, line_no)]
            return []
        out = []
        for rec in parse_records(line.replace(b"\r", b" ")):
            row = self._take(rec, line_no)
            if row is not None:
                out.append(LogEvent("forward", self.scan.current, line_no, row))
        return out

    def feed(self, first: int, blob: bytes) -> Iterator[LogEvent]:
        """The events of `blob` (whole lines from line `first`), its lines prefiltered by `INTERESTING`."""
        line_no, at = first, 0
        for m in INTERESTING.finditer(blob):
            start = blob.rfind(b"\n", 0, m.start()) + 1
            if start < at:
                continue  # a later match on a line already read
            end = blob.find(b"\n", m.start())
            end = len(blob) if end < 0 else end
            line_no += blob.count(b"\n", at, start)
            at = end
            yield from self.line(blob[start:end], line_no)

    def chunks(self, first: int, blob: bytes) -> list[ObservedForwards]:
        """The forwards of `blob` (whole lines from line `first`, as `feed`) as `ObservedForwards`
        chunks, one per launch the blob touches, in log order (empty when it holds none): what
        `LogReader` yields, blob by blob, and what a followed log (`cpbcg watch`) is fed."""
        out: list[ObservedForwards] = []
        rows: list[Row] = []
        launch = self.scan.current
        for event in self.feed(first, blob):
            if event.kind == "launch":
                if rows:
                    out.append(_chunk(rows, launch))
                rows, launch = [], event.launch
            elif event.row is not None:
                rows.append(event.row)
        if rows:
            out.append(_chunk(rows, launch))
        return out

    def _take(self, rec: Record, line_no: int) -> Row | None:
        """The kept row of a record, or None (a folded copy or a skipped line, counted)."""
        s = self.summary
        s.records += 1
        key = (rec.dp_rank, rec.printer)
        j = self._printed.get(key, 0)
        if not j and key not in self._printed:
            self._printers.add(key)
            self._dp.add(rec.dp_rank)
            if rec.printer or rec.timestamp:  # a scheduler's prefix: what its tags show of the layout (module doc of sglang_settings)
                tags = [(b"DP", rec.dp_rank)] if rec.dp_rank else []
                self.scan.prefix(b" ".join(name + str(v).encode() for name, v in (*tags, *rec.printer)), line_no)
        self._printed[key] = j + 1
        s.printers = max(s.printers, len(self._printed))
        kept = self._kept.get(rec.dp_rank, 0)
        recent = self._recent.setdefault(rec.dp_rank, {})
        if j < kept:
            s.folded_copies += 1
            if j in recent and recent[j] != (rec.new_token, rec.new_seq):
                s.copy_mismatches += 1
            return None
        self._kept[rec.dp_rank] = j + 1
        recent[j] = (rec.new_token, rec.new_seq)
        recent.pop(j - COPY_CHECK_FORWARDS, None)
        n, k = rec.new_token, rec.new_seq
        if n == 0 and k is not None and not rec.replay_token:
            s.nonprefill += 1
            s.first_nonprefill_line = s.first_nonprefill_line or line_no
            return None
        if n is not None:
            n += rec.replay_token
        if n is None or k is None or not (1 <= k <= n <= MAX_TOKENS - rec.running_req):
            s.unreadable += 1
            s.first_unreadable_line = s.first_unreadable_line or line_no
            return None
        s.forwards += 1
        launch = self.scan.current
        s.launch_forwards[launch] = s.launch_forwards.get(launch, 0) + 1
        self.scan.forward()
        if rec.graph_label:
            s.graph_label = rec.graph_label
            s.labels.add(rec.graph_label)
        s.dp_ranks = tuple(sorted(self._dp))
        return n, k, max(rec.cached_token - rec.replay_token, 0), rec.running_req, line_no, rec.dp_rank, rec.graph


def parse_log_lines(lines: Iterable[bytes], parser: LogParser | None = None, first_line: int = 1) -> Iterator[LogEvent]:
    """`LogEvent`s of log lines as they come (a followed log: `parser` carries launches and folding
    from one call to the next); each line with or without its newline, numbered from `first_line`."""
    parser = parser if parser is not None else LogParser()
    for i, line in enumerate(lines):
        yield from parser.line(line.rstrip(b"\n"), first_line + i)


class LogReader:
    """Iterate for `ObservedForwards` chunks (in log order, one launch each); `summary` is
    complete afterwards, `launches()` gives every launch's settings. Raises `TraceError`
    (`FILE:1: ...`) when the log has no readable `Prefill batch` record at all."""

    def __init__(self, path: TracePath | str):
        self.path = path
        self.parser = LogParser(display(path))
        self.summary = self.parser.summary
        self._started = False

    def launches(self) -> list[LogSettings]:
        """Every launch's settings read so far (all of them once the reader is exhausted)."""
        return self.parser.scan.launches()

    def launch(self, index: int) -> LogSettings:
        """Launch `index`'s settings (1-based) as read so far: complete before its first forward."""
        return self.parser.scan.launch(index)

    def __iter__(self) -> Iterator[ObservedForwards]:
        if self._started:
            raise TraceError(f"{display(self.path)}: a log is read once")
        self._started = True
        for first, blob in iter_blob_chunks(self.path):
            check_blob_lines(self.path, first, blob)
            yield from self.parser.chunks(first, blob)
        s = self.summary
        if not s.forwards:
            what = f" ({s.unreadable + s.nonprefill:,} Prefill batch lines, none readable)" if s.records else ""
            raise TraceError(located(display(self.path), 1, f'no readable "Prefill batch" lines{what}: not an SGLang server log, or logged below INFO'))


def _chunk(rows: list[Row], launch: int) -> ObservedForwards:
    a = np.array(rows, dtype=np.int64)  # [N, 7]
    n, k, cached, decode = a[:, 0] + a[:, 3], a[:, 1] + a[:, 3], a[:, 2], a[:, 3]
    return ObservedForwards(n, k, np.ones(len(a), dtype=np.int64), cached, decode_requests=decode, line_no=a[:, 4].copy(),
                            dp_rank=a[:, 5].copy(), graph=a[:, 6].astype(np.int8), launch=launch)


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    """A non-JSON trace with a `Prefill batch` line in its first 1 MiB, or, when the start looks
    like a log (dates, `server_args`, `sglang`, `TP0]`), in its first `DETECT_BYTES`. Standard
    input cannot be searched ahead past its kept head (`STDIN_HEAD_BYTES`): a `Prefill batch` in
    it, or a head cut there that shows an SGLang server (`server_args`, `sglang`, a rank prefix),
    is read as a log (the reader refuses it if no `Prefill batch` line follows)."""
    if sniff.record is not None:
        return False
    if MARK in sniff.head:
        return True
    path = sniff.path
    if path is not None and is_stdin(path):  # a pipe: its kept head, then (cut there) what it shows of the server
        from cpbcg.planner.traces.stdin import stdin_head

        head, complete = stdin_head()
        return MARK in head or (not complete and _SERVERISH.search(head) is not None)
    if path is None or _LOGGISH.search(sniff.head) is None:
        return False
    return find_mark(path) is not None


def find_mark(path: TracePath | str, limit: int = DETECT_BYTES) -> int | None:
    """Byte offset (decompressed) of the first `Prefill batch` within `limit` bytes, or None;
    reads 4 MiB at a time (bounded memory)."""
    seen, tail = 0, b""
    with open_binary(path) as handle, read_errors(path, 1):
        while seen < limit:
            block = handle.read(min(4 << 20, limit - seen))
            if not block:
                return None
            at = (tail + block).find(MARK)
            if at >= 0:
                return seen - len(tail) + at
            seen += len(block)
            tail = block[-(len(MARK) - 1):]
    return None


def read(path: TracePath, options: ReadOptions) -> LogReader:
    """The log's distinct forwards as `ObservedForwards` chunks (a `LogReader`)."""
    return LogReader(path)


FORMAT = TraceFormatInfo("sglang-log", "SGLang server log (bound)", TraceKind.forwards, recognises, read)
