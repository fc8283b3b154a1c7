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

Lines that cannot be read are skipped and counted, never fatal: a record without a complete
`#new-seq: k,` and `#new-token: n,` (a cut paste without `#cached-token` still reads), `k` not
in `1..n`, and `#new-token: 0` (a non-prefill row, counted apart). `#new-token` counts the new
extend tokens of the forward (`PrefillAdder.log_input_tokens`: raw in 0.5.23, page-rounded
before SGLang PR #38566).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, NamedTuple

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.model.layout import MAX_TOKENS
from cpbcg.planner.traces.log_scan import VERDICT_LABELS, PrefillColumns, prefill_columns
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.planner.traces.records import ObservedForwards
from cpbcg.planner.traces.text import TracePath, check_blob_lines, display, is_stdin, iter_blob_chunks, open_binary, read_errors

MARK = b"Prefill batch"
DETECT_BYTES = 256 << 20
"""Format detection looks this far (bytes, decompressed) for the first `Prefill batch` line."""
COPY_CHECK_FORWARDS = 4096
"""Recent kept forwards per DP rank whose sizes a later copy is checked against."""

_PREFIX = re.compile(rb"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)?((?:\s*[A-Z][A-Z_]*\d+)*)\s*\]")
_TAG = re.compile(rb"([A-Z][A-Z_]*?)(\d+)(?=\s|$)")
_HEAD = re.compile(rb"Prefill batch(?: \[\d+\])?(?:\(mixed #running-req: (\d{1,12})\))?")
_SEQ = re.compile(rb"#new-seq: (\d{1,12}),")
_TOKEN = re.compile(rb"#new-token: (\d{1,12}),")
_CACHED = re.compile(rb"#cached-token: (\d{1,12})\b")
_VERDICT = re.compile(rb"\b(cuda|npu|cpu|musa|xpu) graph: (True|False)\b")
_LOGGISH = re.compile(rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|server_args|sglang|\bTP\d+\]")


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
    tags = [(m.group(1), int(m.group(2))) for m in _TAG.finditer(tags_text.strip())]
    return next((v for name, v in tags if name == b"DP"), 0), tuple((name, v) for name, v in tags if name != b"DP")


def _record(prefix: re.Match[bytes] | None, body: bytes) -> Record:
    dp, printer = _ranks(prefix.group(2)) if prefix else (0, ())
    head = _HEAD.match(body)
    seq, token = _SEQ.search(body), _TOKEN.search(body)
    cached, verdict = _CACHED.search(body), _VERDICT.search(body)
    return Record(
        dp, printer, (prefix.group(1) or b"").decode() if prefix else "",
        int(seq.group(1)) if seq else None, int(token.group(1)) if token else None,
        int(cached.group(1)) if cached else 0,
        int(head.group(1)) if head and head.group(1) else 0,
        -1 if verdict is None else int(verdict.group(2) == b"True"),
        "" if verdict is None else verdict.group(1).decode() + " graph",
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
    """Distinct rank prefixes that printed (PP stages x CP ranks x DP ranks)."""
    dp_ranks: tuple[int, ...] = ()
    """Attention-DP ranks seen, ascending."""
    graph_label: str = "cuda graph"
    """How the log names the verdict (`cuda graph`, `npu graph`, `cpu graph`)."""

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


class LogReader:
    """Iterate for `ObservedForwards` chunks (one per read block, in log order); `summary` is
    complete afterwards. Raises `TraceError` (`FILE:1: ...`) when the log has no readable
    `Prefill batch` record at all."""

    def __init__(self, path: TracePath | str, *, bulk: bool = True):
        self.path = path
        self.bulk = bulk
        """Read common-shape records in bulk (`log_scan`); False: every `Prefill batch` line by
        the per-line parser (same answer, slower; the tests compare the two)."""
        self.summary = LogSummary()
        self._printed: dict[tuple[int, tuple[tuple[bytes, int], ...]], int] = {}
        self._kept: dict[int, int] = {}
        self._recent: dict[int, dict[int, tuple[int | None, int | None]]] = {}
        self._started = False

    def __iter__(self) -> Iterator[ObservedForwards]:
        if self._started:
            raise TraceError(f"{display(self.path)}: a log is read once")
        self._started = True
        for first, blob in iter_blob_chunks(self.path):
            chunk = self._read_blob(first, blob)
            if chunk is not None:
                yield chunk
        s = self.summary
        s.printers = len(self._printed)
        s.dp_ranks = tuple(sorted(self._kept))
        if not s.forwards:
            what = f" ({s.unreadable + s.nonprefill:,} Prefill batch lines, none readable)" if s.records else ""
            raise TraceError(located(display(self.path), 1, f'no readable "Prefill batch" lines{what}: not an SGLang server log, or logged below INFO'))

    def _read_blob(self, first: int, blob: bytes) -> ObservedForwards | None:
        newlines = check_blob_lines(self.path, first, blob)
        if self.bulk:
            return self._read_columns(prefill_columns(blob, first, _last_prefix, newlines), blob)
        rows: list[tuple[int, int, int, int, int, int, int]] = []  # n, k, cached, decode, line, dp, graph
        line_no, at = first, 0
        pos = blob.find(MARK)
        while pos >= 0:
            start = blob.rfind(b"\n", 0, pos) + 1
            end = blob.find(b"\n", pos)
            end = len(blob) if end < 0 else end
            line_no += blob.count(b"\n", at, start)
            at = start
            for rec in parse_records(blob[start:end].replace(b"\r", b" ")):
                row = self._take(rec, line_no)
                if row is not None:
                    rows.append(row)
            pos = blob.find(MARK, end)
        return _forwards(rows)

    def _read_columns(self, cols: PrefillColumns, blob: bytes) -> ObservedForwards | None:
        """The block's records from `log_scan.prefill_columns`: one printer and every record in
        the common shape are taken in bulk (`_take_block`), else record by record in log order,
        a line outside the common shape read by `parse_records` (the same rule either way)."""
        if cols.num_marks and len(cols.tags) == 1 and cols.ok.all():
            return self._take_block(cols)
        rows: list[tuple[int, int, int, int, int, int, int]] = []
        ranks = [_ranks(t) for t in cols.tags]
        fields = zip(cols.ok.tolist(), cols.line_no.tolist(), cols.line_start.tolist(), cols.line_end.tolist(), cols.key.tolist(),
                     cols.new_seq.tolist(), cols.new_token.tolist(), cols.cached_token.tolist(), cols.running_req.tolist(),
                     cols.graph.tolist(), cols.label.tolist())
        last_line = -1
        for ok, line_no, start, end, key, k, n, cached, running, graph, label in fields:
            if ok:
                dp, printer = ranks[key]
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
        return _forwards(rows)

    def _take_block(self, cols: PrefillColumns) -> ObservedForwards | None:
        """`_take` for a block of common-shape records of one printer, in numpy."""
        s, m = self.summary, cols.num_marks
        dp, printer = _ranks(cols.tags[0])
        s.records += m
        j0 = self._printed.get((dp, printer), 0)
        self._printed[(dp, printer)] = j0 + m
        kept = self._kept.get(dp, 0)
        recent = self._recent.setdefault(dp, {})
        copies = max(0, min(m, kept - j0))
        s.folded_copies += copies
        for i in range(copies):
            j = j0 + i
            if j in recent and recent[j] != (int(cols.new_token[i]), int(cols.new_seq[i])):
                s.copy_mismatches += 1
        if copies == m:
            return None
        self._kept[dp] = j0 + m
        low = j0 + m - COPY_CHECK_FORWARDS  # the window of kept forwards a later copy is checked against
        for j in [j for j in recent if j < low]:
            del recent[j]
        tail = max(copies, m - COPY_CHECK_FORWARDS)
        recent.update(zip(range(j0 + tail, j0 + m), zip(cols.new_token[tail:].tolist(), cols.new_seq[tail:].tolist())))
        n, k, running = cols.new_token[copies:], cols.new_seq[copies:], cols.running_req[copies:]
        line_no, label = cols.line_no[copies:], cols.label[copies:]
        nonprefill = n == 0
        good = ~nonprefill & (1 <= k) & (k <= n) & (n <= MAX_TOKENS - running)
        unreadable = ~nonprefill & ~good
        if nonprefill.any():
            s.nonprefill += int(nonprefill.sum())
            s.first_nonprefill_line = s.first_nonprefill_line or int(line_no[np.argmax(nonprefill)])
        if unreadable.any():
            s.unreadable += int(unreadable.sum())
            s.first_unreadable_line = s.first_unreadable_line or int(line_no[np.argmax(unreadable)])
        labelled = np.flatnonzero(good & (label > 0))
        if len(labelled):
            s.graph_label = VERDICT_LABELS[int(label[labelled[-1]])]
        if not good.any():
            return None
        s.forwards += int(good.sum())
        n, k, running = n[good], k[good], running[good]
        return ObservedForwards(n + running, k + running, np.ones(len(n), dtype=np.int64), cols.cached_token[copies:][good],
                                decode_requests=running, line_no=line_no[good], dp_rank=np.full(len(n), dp, dtype=np.int64),
                                graph=cols.graph[copies:][good].copy())

    def _take(self, rec: Record, line_no: int) -> tuple[int, int, int, int, int, int, int] | None:
        """The kept row of a record, or None (a folded copy or a skipped line, counted)."""
        s = self.summary
        s.records += 1
        key = (rec.dp_rank, rec.printer)
        j = self._printed.get(key, 0)
        self._printed[key] = j + 1
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
        if n == 0 and k is not None:
            s.nonprefill += 1
            s.first_nonprefill_line = s.first_nonprefill_line or line_no
            return None
        if n is None or k is None or not (1 <= k <= n <= MAX_TOKENS - rec.running_req):
            s.unreadable += 1
            s.first_unreadable_line = s.first_unreadable_line or line_no
            return None
        s.forwards += 1
        if rec.graph_label:
            s.graph_label = rec.graph_label
        return n, k, rec.cached_token, rec.running_req, line_no, rec.dp_rank, rec.graph


def _forwards(rows: list[tuple[int, int, int, int, int, int, int]]) -> ObservedForwards | None:
    """Kept rows `(n, k, cached, decode, line, dp, graph)` as one chunk, or None."""
    if not rows:
        return None
    a = np.array(rows, dtype=np.int64)  # [N, 7]
    n, k, cached, decode = a[:, 0] + a[:, 3], a[:, 1] + a[:, 3], a[:, 2], a[:, 3]
    return ObservedForwards(n, k, np.ones(len(a), dtype=np.int64), cached, decode_requests=decode, line_no=a[:, 4].copy(),
                            dp_rank=a[:, 5].copy(), graph=a[:, 6].astype(np.int8))


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    """A non-JSON trace with a `Prefill batch` line in its first 1 MiB, or, when the start looks
    like a log (dates, `server_args`, `sglang`, `TP0]`), in its first `DETECT_BYTES`."""
    if sniff.record is not None:
        return False
    if MARK in sniff.head:
        return True
    path = sniff.path
    if path is None or is_stdin(path) or _LOGGISH.search(sniff.head) is None:
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
