"""The log prefilter (`cpbcg/planner/traces/log_scan.py`, issue 34): the bulk read of SGLang logs
gives the same forwards, the same counts and the same located lines and errors as the per-line
reader (`LogReader(bulk=False)`), on real-shaped logs with odd lines in between, in blocks small
enough that copies, folds and the copy-check window cross block boundaries. Every log here is
SYNTHETIC (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.planner.traces import sglang_log
from cpbcg.planner.traces.log_scan import RECORD_MARKERS, SETTINGS_MARKERS, marked_lines, prefill_columns
from cpbcg.planner.traces.sglang_log import LogReader
from cpbcg.planner.traces.text import iter_blob_chunks
from sglang_log_fixtures import prefill_line, startup_lines, write_log

FIELDS = ("num_tokens", "num_requests", "cached_tokens", "decode_requests", "line_no", "dp_rank", "graph")


def read(path, bulk: bool):
    reader = LogReader(path, bulk=bulk)
    try:
        chunks = list(reader)
    except TraceError as e:
        return "error", str(e)
    got = {name: np.concatenate([getattr(c, name) for c in chunks]).tolist() for name in FIELDS}
    return reader.summary, got


@pytest.fixture(params=[1 << 10, 1 << 14, 16 << 20], ids=["1KiB", "16KiB", "16MiB"])
def blocks(request, monkeypatch):
    """Read in blocks of this many bytes (small blocks: many block boundaries)."""
    monkeypatch.setattr(sglang_log, "iter_blob_chunks", functools.partial(iter_blob_chunks, chunk_bytes=request.param))


ODD = [
    "[2026-11-02 10:00:01 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 512, #cac\n",  # cut paste
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 9, #new-token: 5, #cached-token: 0, cuda graph: True\n",  # k > n
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 0, #cached-token: 0, cuda graph: False\n",  # no prefill
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 1234567890123, #cached-token: 0, cuda graph: True\n",  # 13 digits
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 12abc, cuda graph: True\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, xcuda graph: True, cuda graph: False\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, no graph: True, npu graph: False\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: Truex\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, musa graph: False, more\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: True\r\n",  # CRLF
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 2, #new-token: 64, #cached-token: 0\r[2026-11-02 10:00:01 PP1 TP0] tqdm\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: True[2026-11-02 10:00:01 PP1 TP0] "
    "Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: False\n",  # two writers on one line
    "Prefill batch, #new-seq: 3, #new-token: 300, #cached-token: 1\n",  # no prefix at all
    "[TP0] Prefill batch, #new-seq: 3, #new-token: 300, #cached-token: 1, cpu graph: True\n",
    "[2026-11-02 10:00:01 TP0]  Prefill batch, #new-seq: 3, #new-token: 300, #cached-token: 1\n",  # two spaces
    "[2026-11-02 10:00:01 TP0] Prefill batch #new-seq: 3, #new-token: 300, #cached-token: 1\n",  # no separator
    "[2026-11-02 10:00:01 TP0] Prefill batch. #new-seq: 3, #new-token: 300, #cached-token: 1, #new-seq: 4,\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch(mixed #running-req: 1234567890123), #new-seq: 1, #new-token: 64, #cached-token: 0\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch(mixed #running-req: 2147483647), #new-seq: 1, #new-token: 64, #cached-token: 0\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 2147483647, #cached-token: 0, cuda graph: False\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 01, #new-token: 064, #cached-token: 00, cuda graph: True\n",
    "[2026-11-02 10:00:01 TP0] server_args: Prefill batch is what we log\n",
    "\n",
    "garbage \x00\x01 line\n",
    "[2026-13-99 99:99:99 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: True\n",  # odd date, still a prefix
    "name-1  | [2026-11-02 10:00:01.123 DP1 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: True\n",
    "[2026-11-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 0, cuda graph: True",  # no final newline
]


def common_line(rng: random.Random, printer: str, dp: int) -> str:
    n = rng.choice([1, 7, 64, 511, 2048, 8192, 9000, rng.randint(1, 20000)])
    k = rng.randint(1, min(n, 16))
    style = rng.choice(["0.5.23", "0.5.23", "0.5.23", "old", "2026-02"])
    mixed = rng.choice([0, 0, 0, rng.randint(1, 40)]) if style != "2026-02" else 0
    graph = rng.choice([True, False, None])
    label = rng.choice(["cuda graph", "cuda graph", "npu graph", "xpu graph"])
    prefix = f"[2026-11-02 {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} {'DP%d ' % dp if dp >= 0 else ''}{printer}] "
    return prefill_line(n, k, rng.randint(0, 4096), graph=graph, prefix=prefix, label=label, style=style, mixed=mixed)


def random_log(seed: int, lines: int = 3000) -> str:
    """A start-up dump, then forwards printed by 1-3 printers per DP rank (PP stages / CP ranks
    printing copies, sometimes with a different size), interleaved with decode and odd lines."""
    rng = random.Random(seed)
    printers = rng.choice([["TP0"], ["TP0"], ["PP0 TP0", "PP1 TP0"], ["ATTN_CP0 TP0", "ATTN_CP1 TP0", "ATTN_CP2 TP0"]])
    dps = rng.choice([[-1], [0, 1]])
    body = [startup_lines()]
    queued: dict[tuple[int, str], list[str]] = {(dp, p): [] for dp in dps for p in printers}
    for _ in range(lines):
        r = rng.random()
        if r < 0.08:
            body.append(rng.choice(ODD[:-1]))
            continue
        dp = rng.choice(dps)
        line = common_line(rng, printers[0], dp)
        queued[(dp, printers[0])].append(line)
        for p in printers[1:]:
            copy = line.replace(printers[0], p) if rng.random() > 0.01 else common_line(rng, p, dp)
            queued[(dp, p)].append(copy)
        # flush some queued copies in an order that keeps each printer's own order
        for key in rng.sample(list(queued), len(queued)):
            take = rng.randint(0, len(queued[key]))
            body.extend(queued[key][:take])
            del queued[key][:take]
    for key in queued:
        body.extend(queued[key])
    if rng.random() < 0.5:
        body.append(ODD[-1])
    return "".join(body)


@pytest.mark.parametrize("seed", range(12))
def test_bulk_read_equals_the_per_line_reader(tmp_path, blocks, seed):
    path = write_log(tmp_path / "s.log", random_log(seed))
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    assert plain[0].forwards > 1000 and plain[0].folded_copies + plain[0].unreadable > 0  # common and odd lines


def test_odd_lines_alone_equal_and_counted(tmp_path, blocks):
    path = write_log(tmp_path / "s.log", "".join(ODD))
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    summary, got = plain
    assert (summary.records, summary.forwards, summary.unreadable, summary.nonprefill, summary.folded_copies) == (26, 19, 4, 1, 2)
    assert (summary.first_unreadable_line, summary.first_nonprefill_line, summary.dp_ranks) == (4, 5, (0, 1))
    assert got["line_no"][:3] == [3, 7, 8] and got["graph"][:4] == [-1, 1, 0, 0]  # a cut paste reads; `xcuda graph` is no verdict


def test_no_readable_line_same_error(tmp_path, blocks):
    path = write_log(tmp_path / "s.log", "".join(ODD[2:5]) + ODD[0] * 5)
    assert read(path, True) == read(path, False) == ("error", f'{path}:1: no readable "Prefill batch" lines (3 Prefill batch lines, none readable): '
                                                     "not an SGLang server log, or logged below INFO")


def test_copy_check_window_across_blocks(tmp_path, blocks):
    """A PP stage printing its copies 5,000 forwards late: copies older than the window are not
    checked, newer ones are, the same in both readers."""
    rng = random.Random(5)
    first = [common_line(rng, "PP0 TP0", -1) for _ in range(6000)]
    second = [line.replace("PP0 TP0", "PP1 TP0") for line in first]
    second[100] = common_line(rng, "PP1 TP0", -1)  # outside the window when it comes
    second[5500] = prefill_line(3, 1, prefix="[2026-11-02 10:00:00 PP1 TP0] ")  # inside
    path = write_log(tmp_path / "s.log", "".join(first[:5000] + second[:5000] + first[5000:] + second[5000:]))
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    assert plain[0].folded_copies == 6000 and plain[0].copy_mismatches == 1


def test_columns_flag_what_they_cannot_read_in_bulk():
    blob = (prefill_line(64, 2, prefix="[2026-11-02 10:00:01 TP0] ") + ODD[0] + ODD[12] + ODD[6]
            + prefill_line(70, 1, prefix="[2026-11-02 10:00:01 DP1 TP0] ", mixed=3, style="old")).encode()
    cols = prefill_columns(blob, 10, sglang_log._last_prefix)
    assert cols.ok.tolist() == [True, False, False, False, True]
    assert cols.line_no.tolist() == [10, 12, 12, 13, 14]
    assert cols.new_token[cols.ok].tolist() == [64, 70] and cols.running_req[cols.ok].tolist() == [0, 3]
    assert cols.graph[cols.ok].tolist() == [1, -1]
    assert [cols.tags[k] for k in cols.key[cols.ok]] == [b" TP0", b" DP1 TP0"]


def test_marked_lines_keep_line_numbers():
    blob = startup_lines().encode() + ODD[0].encode() + prefill_line(64, 2).encode()
    got = list(marked_lines(blob, 7, RECORD_MARKERS + SETTINGS_MARKERS))
    lines = blob.split(b"\n")
    assert got == [(7 + i, line) for i, line in enumerate(lines) if any(m in line for m in RECORD_MARKERS + SETTINGS_MARKERS)]
    assert [n for n, _ in got][-1] == 7 + len(lines) - 2 and b"Prefill batch" in got[-1][1]
    assert list(marked_lines(ODD[0].encode() * 3, 1, RECORD_MARKERS)) == []
