"""SGLang server logs with per-request lines: exact lengths, as a request trace.

With `--enable-request-time-stats-logging` the scheduler prints each finished request
(`Req.log_time_stats`, `managers/schedule_batch.py` in 0.5.23):

    ReqTimeStats(rid=abc, input_len=2048, cached_input_len=512, output_len=100, attempts=1, type=unified): queue_duration=1.23ms, forward_duration=456.78ms, entry_time=1793000000.123

and with `--log-requests` the tokenizer manager prints `Finish: obj=..., out={... 'id': 'abc',
'prompt_tokens': 2048, 'completion_tokens': 100, 'cached_tokens': 512, 'e2e_latency': 1.23, ...}`.
Each request once (by `rid`: copies from other ranks and a `Finish` line for a request already
read are dropped): prompt length `input_len - cached_input_len` (the tokens the server computed;
its own prefix-cache hits are already taken off, so plan with `prefix_cache: off`), output
length, arrival `entry_time` (wall clock, s), else the line's time minus the queue and forward
durations (`Finish`: minus `e2e_latency`). Requests are sorted by arrival (they finish out of
order), so the trace is held as four numbers per request. Lines that cannot be read are skipped
and counted like the `Prefill batch` reader's.

A PD decode instance prints `ReqTimeStats(..., type=decode)` for requests it only decoded (their
prefill ran on the prefill instance): no prefill demand, so they are skipped and counted in a
note. A file that also holds `Prefill batch` lines with the server's graph verdicts is read as
requests (exact lengths) and a note says so and how to compare the verdicts instead
(`--trace-format sglang-log`).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Iterator, Literal

import numpy as np

from cpbcg.errors import TraceError, located
from cpbcg.planner.traces.base import ReadOptions, Sniff, TraceFormatInfo, TraceKind
from cpbcg.engines.sglang.logs.settings import TIMESTAMP
from cpbcg.planner.traces.records import LAST_SECOND as MAX_SECONDS, MAX_REQUEST_TOKENS, RequestChunk, RequestItem, known_lines
from cpbcg.planner.traces.text import TracePath, display, iter_blob_chunks

CHUNK_REQUESTS = 65536
_STATS = re.compile(rb"ReqTimeStats\(rid=([^,\s]+)[^)]*?input_len=(\d{1,12}), cached_input_len=(\d{1,12}), output_len=(\d{1,12})[^\n]*")
_FINISH = re.compile(rb"Finish: obj=[^\n]*")
_WHEN = re.compile(rb"(" + TIMESTAMP + rb")")
_ENTRY = re.compile(rb"entry_time=(\d+(?:\.\d+)?)")
_MS = re.compile(rb"(queue|forward)_duration=(\d+(?:\.\d+)?)ms")
_META = {key: re.compile(rb"'" + key.encode() + rb"': (\d+(?:\.\d+)?)") for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency")}
_ID = re.compile(rb"'id': '([^']+)'")
_DECODE = re.compile(rb"\btype=decode\b")
_VERDICT_LINE = re.compile(rb"Prefill batch[^\n]*\b(?:cuda|npu|cpu|musa|xpu) graph: (?:True|False)")


def recognises(sniff: Sniff, options: ReadOptions) -> bool:
    """A non-JSON log whose first 1 MiB holds a `ReqTimeStats(rid=` or `Finish: obj=` line with lengths."""
    return sniff.record is None and (b"ReqTimeStats(rid=" in sniff.head or (b"Finish: obj=" in sniff.head and b"'prompt_tokens': " in sniff.head))


def _seconds(stamp: bytes) -> float | None:
    """Seconds since 1970 of the line's `YYYY-MM-DD HH:MM:SS[.f]` (UTC), or None for an impossible
    date (`2026-13-45`) or one outside 1970..2199."""
    text = stamp.decode().replace(",", ".").replace("T", " ")
    try:
        seconds = datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None
    return seconds if 0.0 <= seconds < MAX_SECONDS else None


def _number(digits: bytes) -> float | None:
    """A time or duration in seconds (`\\d+(\\.\\d+)?`), or None unless finite and within `MAX_SECONDS`
    (`1` and 330 zeros is inf as a float)."""
    value = float(digits)
    return value if value < MAX_SECONDS else None


def read(path: TracePath, options: ReadOptions) -> Iterator[RequestItem]:
    """`(RequestChunk, line numbers)` sorted by arrival (module doc). Raises `TraceError` when no
    request line reads."""
    seen: set[bytes] = set()
    rows: list[tuple[float, int, int]] = []  # arrival s, prompt tokens, output tokens
    lines: list[int] = []
    skipped, first_skipped = 0, 0
    decode, first_decode, verdicts = 0, 0, 0
    for first, blob in iter_blob_chunks(path):
        verdicts += len(_VERDICT_LINE.findall(blob)) if b"Prefill batch" in blob else 0
        if b"ReqTimeStats(" not in blob and b"Finish: obj=" not in blob:
            continue
        line_no = first
        for line in blob.split(b"\n"):
            if b"ReqTimeStats(" in line and _DECODE.search(line):
                decode += 1
                first_decode = first_decode or line_no
                line_no += 1
                continue
            row = _stats_row(line, seen) if b"ReqTimeStats(" in line else _finish_row(line, seen) if b"Finish: obj=" in line else None
            if row is False:
                skipped += 1
                first_skipped = first_skipped or line_no
            elif row is not None:
                rows.append(row)
                lines.append(line_no)
            line_no += 1
    if not rows:
        what = f" ({decode:,} type=decode lines of a PD decode instance: no prefill)" if decode else ""
        raise TraceError(located(display(path), first_skipped or first_decode or 1, f"no readable ReqTimeStats or Finish request lines{what}"))
    if skipped and options.strict:
        raise TraceError(located(display(path), first_skipped, "unreadable request line: no lengths, or a time that is no date or "
                                 "finite number of seconds (--strict refuses it)"))
    notes = []
    if skipped:
        notes.append(f"skipped {skipped:,} unreadable request line{'s' if skipped != 1 else ''} (no lengths, or an impossible time; "
                     f"first: {display(path)}:{first_skipped})")
    if decode:
        notes.append(f"{display(path)}: skipped {decode:,} ReqTimeStats lines of type=decode (first: line {first_decode}): requests a PD "
                     "decode instance only decoded, no prefill demand")
    if verdicts:
        notes.append(f"{display(path)} also has {verdicts:,} Prefill batch lines with the server's graph verdicts: read here as requests "
                     "(exact lengths, simulated); --trace-format sglang-log compares the verdicts with the model instead")
    a = np.array(rows, dtype=np.float64)
    order = np.argsort(a[:, 0], kind="stable")
    arrival, prompt, output = a[order, 0] - a[order[0], 0], a[order, 1].astype(np.int64), a[order, 2].astype(np.int64)
    line_nos = np.array(lines, dtype=np.int64)[order]
    for start in range(0, len(a), CHUNK_REQUESTS):
        end = start + CHUNK_REQUESTS
        yield (RequestChunk(prompt[start:end], arrival[start:end], None, output[start:end], notes=tuple(notes) if start == 0 else ()),
               known_lines(line_nos[start:end]))


def _stats_row(line: bytes, seen: set[bytes]) -> tuple[float, int, int] | None | Literal[False]:
    m = _STATS.search(line)
    if m is None:
        return False
    if m.group(1) in seen:
        return None
    entry, when = _ENTRY.search(line), _WHEN.search(line)
    arrival: float | None = None
    if entry is not None:
        arrival = _number(entry.group(1))
    elif when is not None:
        stamp, durations = _seconds(when.group(1)), [_number(d.group(2)) for d in _MS.finditer(line)]
        if stamp is not None and None not in durations:
            arrival = stamp - sum(d for d in durations if d is not None) / 1000.0
    if arrival is None:
        return False
    return _row(seen, m.group(1), arrival, int(m.group(2)) - int(m.group(3)), int(m.group(4)))


def _finish_row(line: bytes, seen: set[bytes]) -> tuple[float, int, int] | None | Literal[False]:
    values = {key: rx.search(line) for key, rx in _META.items()}
    prompt, completion, cached, e2e = (values[key] for key in _META)
    rid, when = _ID.search(line), _WHEN.search(line)
    if prompt is None or completion is None or e2e is None or when is None or rid is None:
        return False
    if rid.group(1) in seen:
        return None
    cached_tokens = int(cached.group(1)) if cached else 0
    stamp, latency = _seconds(when.group(1)), _number(e2e.group(1))
    if stamp is None or latency is None:
        return False
    arrival = stamp - latency
    return _row(seen, rid.group(1), arrival, int(prompt.group(1)) - cached_tokens, int(completion.group(1)))


def _row(seen: set[bytes], rid: bytes, arrival: float, prompt: int, output: int) -> tuple[float, int, int] | Literal[False]:
    if not (1 <= max(prompt, 1) <= MAX_REQUEST_TOKENS and 0 <= output <= MAX_REQUEST_TOKENS) or prompt < 0:
        return False
    seen.add(rid)
    return arrival, max(prompt, 1), output


FORMAT = TraceFormatInfo("sglang-requests", "SGLang server log (per-request lines)", TraceKind.requests, recognises, read)
