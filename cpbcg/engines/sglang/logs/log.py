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
it behind the `INTERESTING` prefilter with `bulk=False`. By default (`bulk`) a blob is read in
log order as segments between its settings lines (`sglang_settings.settings_lines`), the common
record shape of each segment in bulk (`log_scan.prefill_columns`, `LogParser._take_block`, the
same rule as `_take`), anything else record by record: the same answer (tests/test_log_scan.py).

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
from typing import Any, Iterable, Iterator, NamedTuple

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.arrays import Int64Array
from cpbcg.planner.model.batches import MAX_TOKENS
from cpbcg.planner.traces.log_scan import VERDICT_LABELS, PrefillColumns, prefill_columns, scan_block
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.engines.sglang.logs.decode_lines import DecodeLines
from cpbcg.engines.sglang.logs.settings import DETECT_BYTES, INTERESTING, MARK, RANK_TAG, TIMESTAMP, VERDICT as _VERDICT, LaunchScan, LogSettings, settings_lines
from cpbcg.planner.traces.text import TracePath, check_blob_lines, display, is_stdin, iter_blob_chunks, newline_offsets, open_binary, read_errors

__all__ = ["DETECT_BYTES", "MARK", "LogEvent", "LogParser", "LogReader", "LogSummary", "Record", "parse_log_lines", "parse_records"]
COPY_CHECK_FORWARDS = 4096
"""Recent kept forwards per DP rank whose sizes a later copy is checked against."""
MIN_BULK_RUN = 64
"""Fewest consecutive common-shape records of one printer read in bulk (`LogParser._take_columns`)."""

_PREFIX = re.compile(rb"\[(" + TIMESTAMP + rb")?((?:\s*[A-Z][A-Z_]*\d+)*)\s*\]")
_HEAD = re.compile(rb"Prefill batch(?: \[\d+\])?(?:\(mixed #running-req: (\d{1,12})\))?")
_SEQ = re.compile(rb"#new-seq: (-?\d{1,12}),")  # a sign read, so a negative count is named, not "missing"
_TOKEN = re.compile(rb"#new-token: (-?\d{1,12}),")
_CACHED = re.compile(rb"#cached-token: (\d{1,12})\b")
_REPLAY = re.compile(rb"#replay-token: (\d{1,12}),")
_LOGGISH = re.compile(TIMESTAMP + rb"|server_args|sglang|\bTP\d+\]")
_SERVERISH = re.compile(rb"server_args|(?i:sglang)|\[" + TIMESTAMP + rb"(?: [A-Z][A-Z_]*\d+)+\]")
"""Standard input whose head shows an SGLang server (it cannot be searched ahead): read as a log."""
_SERVER_LINES = re.compile(rb"(?m)^\[" + TIMESTAMP + rb"(?: [A-Z][A-Z_]*\d+)*\] |server_args\s*=")
"""Lines only an SGLang server prints (its `[date time RANKS] ` prefix at a line's start, its settings dump): a trace
that shows them is a server log even before its first `Prefill batch` line (a late one, or none yet)."""


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
        prefix = _last_prefix(before) or first_prefix
        if i == 0:
            first_prefix = prefix
        body = line[at:marks[i + 1] if i + 1 < len(marks) else len(line)]
        records.append(_record(prefix, body))
    return records


def _last_prefix(before: bytes) -> re.Match[bytes] | None:
    """The rank prefix of a record: the last `[date TAGS]` before its mark with a date or a tag."""
    found = None
    for m in _PREFIX.finditer(before):
        if m.group(1) or m.group(2).strip():
            found = m
    return found


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
    first_unreadable_why: str = ""
    """Why the first unreadable line was skipped: `KEY: value ...` (`unreadable_why`)."""
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
    decode: DecodeLines = field(default_factory=DecodeLines)
    """The `Decode batch` lines (a 1-in-`decode_log_interval` sample of decode steps)."""

    def skipped_note(self, path: str) -> str | None:
        """One line on what was skipped, or None when nothing was."""
        parts = []
        if self.unreadable:
            why = f": {self.first_unreadable_why}" if self.first_unreadable_why else ""
            parts.append(f"{self.unreadable:,} unreadable Prefill batch line{'s' if self.unreadable != 1 else ''} skipped (first: line "
                         f"{self.first_unreadable_line}{why}; --strict refuses them)")
        if self.nonprefill:
            parts.append(f"{self.nonprefill:,} with #new-token: 0 skipped (first: line {self.first_nonprefill_line})")
        return f"{path}: " + "; ".join(parts) if parts else None

    def skipped_document(self) -> dict[str, object]:
        """The skipped lines as JSON keys (replay-check's JSON header and JUnit properties): the
        unreadable `Prefill batch` lines, the first of them (line, why) and the `#new-token: 0` ones."""
        return {"unreadable_prefill_lines": self.unreadable, "first_unreadable_prefill_line": self.first_unreadable_line or None,
                "first_unreadable_prefill_why": self.first_unreadable_why or None, "nonprefill_lines": self.nonprefill}

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
    """The one parser of SGLang server logs (module doc): settings lines go to its `LaunchScan`
    (`scan`: every launch's `LogSettings`), `Prefill batch` records are folded within their
    launch; `line` and `feed` return the `LogEvent`s, `chunks` the forwards of a blob, and
    `summary` counts as it goes. `bulk` (default): `chunks` reads the common record shape in
    bulk (`log_scan.prefill_columns`, `_take_block`), the same answer as `bulk=False` (every
    line through `line`, the reference the tests compare with), faster."""

    def __init__(self, path: str = "", *, bulk: bool = True, strict: bool = False):
        self.bulk = bulk
        self.strict = strict
        """Refuse the first unreadable `Prefill batch` line (`TraceError`, `FILE:LINE: KEY: ...`) instead of skipping it."""
        self.path = path
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

    def chunks(self, first: int, blob: bytes, newlines: Int64Array | None = None) -> list[ObservedForwards]:
        """The forwards of `blob` (whole lines from line `first`, as `feed`) as `ObservedForwards`
        chunks, one per launch the blob touches, in log order (empty when it holds none): what
        `LogReader` yields, blob by blob, and what a followed log (`cpbcg watch`) is fed.
        `newlines`: the [L] offsets of the blob's newlines when the caller has them.

        In bulk, the blob is walked in log order as segments between its settings lines
        (`sglang_settings.settings_lines`, never visiting a `Prefill batch` line): each segment's
        records under the current launch's folding state (`_take_columns`), then the settings
        line, which may begin a new launch (a new chunk, folding state reset)."""
        out: list[ObservedForwards] = []
        if not self.bulk:
            self.summary.decode.feed(blob, bulk=False)
            rows: list[Row] = []
            launch = self.scan.current
            for event in self.feed(first, blob):
                if event.kind == "launch":
                    if rows:
                        out.append(_chunk(np.array(rows, dtype=np.int64), launch))
                    rows, launch = [], event.launch
                elif event.row is not None:
                    rows.append(event.row)
            if rows:
                out.append(_chunk(np.array(rows, dtype=np.int64), launch))
            return out
        if newlines is None:
            newlines = newline_offsets(blob)
        block = scan_block(blob)
        self.summary.decode.feed(blob, newlines, block)
        cols = prefill_columns(blob, first, _last_prefix, newlines, block)
        parts: list[Int64Array] = []  # [N, 7] kept rows of the launch being read
        launch, done = self.scan.current, 0
        for start, line in settings_lines(blob):
            upto = int(np.searchsorted(cols.line_start, start))
            parts.append(self._take_columns(cols, done, upto, blob))
            done = upto
            if self.scan.line(line, first + int(np.searchsorted(newlines, start))):
                _close(out, parts, launch)
                parts = []
                self._new_launch()
                self.summary.launches = launch = self.scan.current
        parts.append(self._take_columns(cols, done, cols.num_marks, blob))
        _close(out, parts, launch)
        return out

    def _take_columns(self, cols: PrefillColumns, lo: int, hi: int, blob: bytes) -> Int64Array:
        """Kept rows `[N, 7]` (`Row`) of marks `lo:hi` of `cols` (no settings line among them), in
        log order: each run of at least `MIN_BULK_RUN` common-shape records of one printer in bulk
        (`_take_block`; a printer's first record of the launch by `_take`, since its prefix tells
        the launch's layout), every other record by itself (`_take_records`: a line outside the
        common shape is read by `parse_records`). A segment of mostly shorter runs (printers
        interleaved line by line) goes record by record."""
        if lo >= hi:
            return _NO_ROWS
        ok, key = cols.ok[lo:hi], cols.key[lo:hi]
        cuts = (np.flatnonzero((ok[1:] != ok[:-1]) | (key[1:] != key[:-1])) + 1).tolist()
        if len(cuts) * MIN_BULK_RUN > hi - lo:
            return self._take_records(cols, lo, hi, blob)
        parts, pending = [], lo
        for a, b in zip([lo, *(lo + c for c in cuts)], [*(lo + c for c in cuts), hi]):
            if b - a < MIN_BULK_RUN or not cols.ok[a]:
                continue  # read record by record with the records before the next bulk run
            dp, printer = _ranks(cols.tags[int(cols.key[a])])
            first = a if (dp, printer) in self._printed else a + 1
            parts += [self._take_records(cols, pending, first, blob), self._take_block(cols, first, b, dp, printer)]
            pending = b
        parts.append(self._take_records(cols, pending, hi, blob))
        rows = [p for p in parts if len(p)]
        return rows[0] if len(rows) == 1 else np.concatenate(rows) if rows else _NO_ROWS

    def _take_records(self, cols: PrefillColumns, lo: int, hi: int, blob: bytes) -> Int64Array:
        """`_take_columns` record by record."""
        key = cols.key[lo:hi]
        rows: list[Row] = []
        ranks = [_ranks(t) for t in cols.tags]
        fields = zip(cols.ok[lo:hi].tolist(), cols.line_no[lo:hi].tolist(), cols.line_start[lo:hi].tolist(),
                     cols.line_end[lo:hi].tolist(), key.tolist(), cols.new_seq[lo:hi].tolist(), cols.new_token[lo:hi].tolist(),
                     cols.cached_token[lo:hi].tolist(), cols.running_req[lo:hi].tolist(), cols.graph[lo:hi].tolist(),
                     cols.label[lo:hi].tolist())
        last_line = -1
        for ok, line_no, start, end, k_, k, n, cached, running, graph, label in fields:
            if ok and ranks[k_] in self._printed:
                dp, printer = ranks[k_]
                records = [Record(dp, printer, "", k, n, cached, running, graph, VERDICT_LABELS[label])]
            elif line_no != last_line:
                records = parse_records(blob[start:end].replace(b"\r", b" "))
            else:
                continue  # a second mark on a line already read
            last_line = line_no
            for rec in records:
                row = self._take(rec, line_no)
                if row is not None:
                    rows.append(row)
        return np.array(rows, dtype=np.int64).reshape(-1, 7)

    def _take_block(self, cols: PrefillColumns, lo: int, hi: int, dp: int, printer: tuple[tuple[bytes, int], ...]) -> Int64Array:
        """`_take` for marks `lo:hi` of `cols`, common-shape records of one printer already seen
        in this launch, in numpy: kept rows `[N, 7]` (`Row`)."""
        s, m = self.summary, hi - lo
        s.records += m
        j0 = self._printed[(dp, printer)]
        self._printed[(dp, printer)] = j0 + m
        kept = self._kept.get(dp, 0)
        recent = self._recent.setdefault(dp, {})
        copies = max(0, min(m, kept - j0))
        s.folded_copies += copies
        new_token, new_seq = cols.new_token[lo:hi], cols.new_seq[lo:hi]
        for i in range(copies):
            j = j0 + i
            if j in recent and recent[j] != (int(new_token[i]), int(new_seq[i])):
                s.copy_mismatches += 1
        if copies == m:
            return _NO_ROWS
        self._kept[dp] = j0 + m
        low = j0 + m - COPY_CHECK_FORWARDS  # the window of kept forwards a later copy is checked against
        for j in [j for j in recent if j < low]:
            del recent[j]
        tail = max(copies, m - COPY_CHECK_FORWARDS)
        recent.update(zip(range(j0 + tail, j0 + m), zip(new_token[tail:].tolist(), new_seq[tail:].tolist())))
        at = slice(lo + copies, hi)
        n, k, running, line_no, label = cols.new_token[at], cols.new_seq[at], cols.running_req[at], cols.line_no[at], cols.label[at]
        nonprefill = n == 0  # `k` is read and no `#replay-token` (such a line is read per line)
        good = ~nonprefill & _readable(n, k, running)
        unreadable = ~nonprefill & ~good
        if nonprefill.any():
            s.nonprefill += int(nonprefill.sum())
            s.first_nonprefill_line = s.first_nonprefill_line or int(line_no[np.argmax(nonprefill)])
        if unreadable.any():
            i = int(np.argmax(unreadable))
            self._unreadable(int(line_no[i]), unreadable_why(int(n[i]), int(k[i]), int(running[i])), int(unreadable.sum()))
        if not good.any():
            return _NO_ROWS
        labelled = label[good & (label > 0)]
        in_graph = good & (cols.graph[at] == 1)
        self._count_kept(int(good.sum()), [VERDICT_LABELS[c] for c in np.unique(labelled).tolist()],
                         VERDICT_LABELS[int(labelled[-1])] if len(labelled) else "",
                         int(line_no[np.argmax(in_graph)]) if in_graph.any() else 0, VERDICT_LABELS[int(label[np.argmax(in_graph)])])
        return np.stack([n[good], k[good], cols.cached_token[at][good], running[good], line_no[good],
                         np.full(int(good.sum()), dp, dtype=np.int64), cols.graph[at][good].astype(np.int64)], axis=1)

    def _unreadable(self, line_no: int, why: str, count: int = 1) -> None:
        """Count `count` unreadable lines, the first at `line_no` (`why`: `unreadable_why`); with
        `strict`, refuse it: `TraceError` `FILE:LINE: KEY: ...`."""
        s = self.summary
        if self.strict:
            raise TraceError(located(self.path or "log", line_no, f"{why} (--strict refuses an unreadable Prefill batch line)"))
        s.unreadable += count
        if not s.first_unreadable_line:
            s.first_unreadable_line, s.first_unreadable_why = line_no, why

    def _count_kept(self, count: int, labels: Iterable[str], last_label: str, graph_line: int = 0, graph_label: str = "") -> None:
        """Bookkeeping of `count` distinct forwards kept in the current launch, the verdict labels
        they printed and the last one ('' none), the first of them whose verdict says it ran in a
        graph (`graph_line`, 0 none; `graph_label` its label): one rule for `_take` and `_take_block`."""
        s = self.summary
        s.forwards += count
        launch = self.scan.current
        s.launch_forwards[launch] = s.launch_forwards.get(launch, 0) + count
        self.scan.forward(count, graph_line, graph_label)
        if last_label:
            s.graph_label = last_label
        s.labels.update(labels)
        s.dp_ranks = tuple(sorted(self._dp))

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
        if n is None or k is None or not _readable(n, k, rec.running_req):
            self._unreadable(line_no, unreadable_why(n, k, rec.running_req))
            return None
        self._count_kept(1, (rec.graph_label,) if rec.graph_label else (), rec.graph_label, line_no if rec.graph == 1 else 0, rec.graph_label)
        return n, k, max(rec.cached_token - rec.replay_token, 0), rec.running_req, line_no, rec.dp_rank, rec.graph


def parse_log_lines(lines: Iterable[bytes], parser: LogParser | None = None, first_line: int = 1) -> Iterator[LogEvent]:
    """`LogEvent`s of log lines as they come (a followed log: `parser` carries launches and folding
    from one call to the next); each line with or without its newline, numbered from `first_line`."""
    parser = parser if parser is not None else LogParser()
    for i, line in enumerate(lines):
        yield from parser.line(line.rstrip(b"\n"), first_line + i)


class LogReader:
    """Iterate for `ObservedForwards` chunks (in log order, one launch each; a restart that has served no forward yet,
    after the last launch that has, gets one empty chunk); `summary` is
    complete afterwards, `launches()` gives every launch's settings. Raises `TraceError`
    (`FILE:1: ...`) when the log has no readable `Prefill batch` record at all."""

    def __init__(self, path: TracePath | str, *, bulk: bool = True, strict: bool = False):
        self.path = path
        self.parser = LogParser(display(path), bulk=bulk, strict=strict)
        """`bulk`: read common-shape records in bulk (`log_scan`); False: every line by the
        per-line parser (same answer, slower; the tests compare the two)."""
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
            newlines = check_blob_lines(self.path, first, blob)
            yield from self.parser.chunks(first, blob, newlines)
        s = self.summary
        if not s.forwards and s.unreadable and not s.nonprefill:  # every Prefill batch line unreadable: the first, named
            raise TraceError(located(display(self.path), s.first_unreadable_line, f"{s.first_unreadable_why}: the log's only "
                                     f"Prefill batch line{'s are' if s.unreadable > 1 else ' is'} unreadable ({s.unreadable:,})"))
        if not s.forwards:
            what = f" ({s.unreadable + s.nonprefill:,} Prefill batch lines, none readable)" if s.records else ""
            shown = any(one.args_line or one.architecture or one.version or one.ranks for one in self.launches())  # a server's start-up
            why = ("an SGLang server log that has served no prefill yet, or logged below INFO" if shown and not s.records
                   else "not an SGLang server log, or logged below INFO")
            raise TraceError(located(display(self.path), 1, f'no readable "Prefill batch" lines{what}: {why}'))
        served = max(s.launch_forwards, default=1)
        for launch in range(served + 1, len(self.launches()) + 1):  # restarts that have served no forward yet: the server now
            yield _chunk(_NO_ROWS, launch)  # an empty chunk each, so a plan knows the launch that runs now


_NO_ROWS: Int64Array = np.zeros((0, 7), dtype=np.int64)


def unreadable_why(n: int | None, k: int | None, running: int) -> str:
    """Why a `Prefill batch` line's sizes are no prefill forward (`_readable` false), as `KEY: value: rule`."""
    if n is None or k is None:
        return f"#new-{'token' if n is None else 'seq'}: missing or not an integer: a Prefill batch line gives both #new-seq and #new-token"
    if n < 1:
        return f"#new-token: {n}: a forward's new tokens are a positive count"
    if k < 1:
        return f"#new-seq: {k}: a forward extends at least one request"
    if k > n:
        return f"#new-seq: {k} > #new-token: {n}: each request extends at least one token"
    rows = f" less {running:,} decode rows" if running else ""
    return f"#new-token: {n}: above cpbcg's limit of {MAX_TOKENS:,} tokens{rows} in a forward"


def _readable(n: Any, k: Any, running: Any) -> Any:
    """The sizes read as a prefill forward: `1 <= #new-seq <= rows <= MAX_TOKENS - decode rows`
    (ints, or `[M]` arrays elementwise): the one rule of `_take` and `_take_block`."""
    return (1 <= k) & (k <= n) & (n <= MAX_TOKENS - running)


def _chunk(a: Int64Array, launch: int) -> ObservedForwards:
    """Kept rows `[N, 7]` (`Row`) as one chunk of launch `launch`."""
    n, k, cached, decode = a[:, 0] + a[:, 3], a[:, 1] + a[:, 3], a[:, 2], a[:, 3]
    return ObservedForwards(n, k, np.ones(len(a), dtype=np.int64), cached, decode_requests=decode, line_no=a[:, 4].copy(),
                            dp_rank=a[:, 5].copy(), graph=a[:, 6].astype(np.int8), launch=launch)


def _close(out: list[ObservedForwards], parts: list[Int64Array], launch: int) -> None:
    """Append the kept rows `parts` of launch `launch` to `out` as one chunk (none when empty)."""
    rows = [p for p in parts if len(p)]
    if rows:
        out.append(_chunk(rows[0] if len(rows) == 1 else np.concatenate(rows), launch))


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
        return MARK in head or (not complete and _SERVERISH.search(head) is not None) or _SERVER_LINES.search(head) is not None
    if path is None or _LOGGISH.search(sniff.head) is None:
        return False
    return _SERVER_LINES.search(sniff.head) is not None or find_mark(path) is not None


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
    return LogReader(path, strict=options.strict)


FORMAT = TraceFormatInfo("sglang-log", "SGLang server log (bound)", TraceKind.forwards, recognises, read)
