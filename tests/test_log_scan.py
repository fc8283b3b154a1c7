"""The log prefilter (`cpbcg/planner/traces/log_scan.py`, issue 34): the bulk read of SGLang logs
gives the same forwards, the same counts and the same located lines and errors as the per-line
reader (`LogReader(bulk=False)`), on real-shaped logs with odd lines in between, in blocks small
enough that copies, folds and the copy-check window cross block boundaries. Every log here is
SYNTHETIC (tests/sglang_log_fixtures.py)."""

from __future__ import annotations

import functools
import random
import re

import numpy as np
import pytest

from cpbcg.errors import TraceError
from cpbcg.engines.sglang.logs import log as sglang_log
from cpbcg.planner.traces import log_scan
from cpbcg.planner.traces.log_scan import lines_with, prefill_columns
from cpbcg.engines.sglang.logs.log import LogReader
from cpbcg.planner.traces.text import iter_blob_chunks
from hypothesis_sizes import seeds
from sglang_log_fixtures import prefill_line, resolved_line, startup_lines, write_log

FIELDS = ("num_tokens", "num_requests", "cached_tokens", "decode_requests", "line_no", "dp_rank", "graph")


def read(path, bulk: bool):
    reader = LogReader(path, bulk=bulk)
    try:
        chunks = list(reader)
    except TraceError as e:
        return "error", str(e)
    got = {name: np.concatenate([getattr(c, name) for c in chunks]).tolist() for name in FIELDS}
    got["launch"] = [(c.launch, len(c.num_tokens)) for c in chunks]  # one chunk per launch a block touches
    got["settings"] = reader.launches()
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


@pytest.mark.parametrize("seed", seeds(12))
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


SETTINGS_ODD = [
    resolved_line(),  # read by the launch, begins none
    "[2026-11-02 10:00:02 TP0] Load weight end. type=LlamaForCausalLM, avail mem=60.00 GB, mem usage=15.00 GB.\n",
    "[2026-11-02 10:00:02] SGLang version: 0.5.23\n",
    "[2026-11-02 10:00:02 TP0] Capture cuda graph num tokens [4, 8, 16]\n",
    "[2026-11-02 10:00:02 TP0] Automatically turn off --chunked-prefill-size as it is not supported\n",
    "sglang-router-1  | GET /health 200\n",  # a literal the settings search finds, no INTERESTING match
]


def replayed(line: str, rng: random.Random) -> str:
    """A 0.5.23 record with encoder replay (`#replay-token`, after `#pending-token`)."""
    return line.replace("#pending-token: 0, ", f"#pending-token: 0, #replay-token: {rng.choice([0, 1, 256, 100000])}, ")


def multi_launch_log(seed: int) -> str:
    """2-4 launches (restarts: a dump or a launch command line once forwards ran), each with its
    own printers and forwards; settings lines and `#replay-token` records between the forwards,
    and a dump right between two `Prefill batch` lines of one printer (a restart mid-block)."""
    rng = random.Random(seed)
    parts = []
    for i in range(rng.randint(2, 4)):
        lines = (random_log(seed * 10 + i, lines=rng.choice([200, 800])).rstrip("\n") + "\n").splitlines(keepends=True)
        if i and rng.random() < 0.3:  # a launch command line instead of a dump
            lines[0] = "[2026-11-02 11:00:00] python -m sglang.launch_server --model-path org/model --attn-cp-size 2 --tp 2\n"
        for at in sorted(rng.sample(range(1, len(lines)), 12), reverse=True):
            lines.insert(at, rng.choice(SETTINGS_ODD))
        for at in rng.sample(range(len(lines)), len(lines) // 10):
            if "Prefill batch, " in lines[at] and "#pending-token: 0, " in lines[at]:
                lines[at] = replayed(lines[at], rng)
        if i and rng.random() < 0.5:  # the dump of this launch printed amid the last one's forwards
            parts[-1].insert(len(parts[-1]) // 2, lines.pop(0))
        parts.append(lines)
    return "".join(line for lines in parts for line in lines)


@pytest.mark.parametrize("seed", seeds(8))
def test_bulk_read_of_launches_equals_the_per_line_reader(tmp_path, blocks, seed):
    """Launch splits, settings lines in log order, folding within a launch, per-launch counts and
    one chunk per launch: the bulk reader gives what the per-line parser gives."""
    path = write_log(tmp_path / "s.log", multi_launch_log(seed))
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    summary, got = plain
    assert summary.launches >= 2 and len(got["settings"]) == summary.launches
    assert sum(summary.launch_forwards.values()) == summary.forwards > 200


def test_restart_between_two_prefill_lines_of_one_block(tmp_path, blocks):
    """A dump between two forwards of one printer begins a launch: its copies are not folded with
    the last launch's, and the chunks carry the launch; `#replay-token` adds rows, leaves the cache."""
    rng = random.Random(3)
    first = [prefill_line(100 + i, 1, prefix="[2026-11-02 10:00:01 TP0] ") for i in range(50)]
    second = [prefill_line(200 + i, 1, 64, prefix="[2026-11-02 10:05:01 TP0] ") for i in range(50)]
    second[7] = second[7].replace("#pending-token: 0, ", "#pending-token: 0, #replay-token: 16, ")
    rng.shuffle(first)
    path = write_log(tmp_path / "s.log", startup_lines() + "".join(first) + startup_lines() + "".join(second))
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    summary, got = plain
    assert (summary.launches, summary.launch_forwards, summary.folded_copies) == (2, {1: 50, 2: 50}, 0)
    assert got["num_tokens"][50:53] == [200, 201, 202] and sum(n for _, n in got["launch"] if _ == 2) == 50
    replay = 50 + 7
    assert "#replay-token: 16," in second[7] and (got["num_tokens"][replay], got["cached_tokens"][replay]) == (207 + 16, 64 - 16)


def test_launch_command_after_bulk_forwards_begins_a_launch(tmp_path, blocks):
    """A log without start-up output whose first record is no prefill (read per line), then forwards
    read in bulk: they count as the launch's forwards, so a launch command line begins launch 2."""
    head = prefill_line(0, 1, prefix="[2026-11-02 10:00:01 TP0] ")
    forwards = "".join(prefill_line(100 + i, 1, prefix="[2026-11-02 10:00:01 TP0] ") for i in range(40))
    command = "[2026-11-02 11:00:00] python -m sglang.launch_server --model-path org/model --attn-cp-size 2 --tp 2\n"
    path = write_log(tmp_path / "s.log", head + forwards + command + forwards)
    bulk, plain = read(path, True), read(path, False)
    assert bulk == plain
    assert (plain[0].launches, plain[0].launch_forwards, plain[0].nonprefill) == (2, {1: 40, 2: 40}, 1)


def take_calls(monkeypatch) -> list[int]:
    """The lines `LogParser._take` (the record-by-record path) is called for."""
    calls: list[int] = []
    take = sglang_log.LogParser._take
    monkeypatch.setattr(sglang_log.LogParser, "_take", lambda self, rec, line_no: calls.append(line_no) or take(self, rec, line_no))
    return calls


def test_a_launch_of_one_printer_is_read_in_bulk(tmp_path, monkeypatch):
    """Only each launch's first record goes record by record (`_take`), and the log's last line
    (its reads would reach the block's end: `_Block.near_end`); the rest in bulk."""
    calls = take_calls(monkeypatch)
    forwards = "".join(prefill_line(100 + i, 1) for i in range(1000))
    head = startup_lines()
    path = write_log(tmp_path / "s.log", head + forwards + head + forwards)
    reader = LogReader(path)
    assert [(c.launch, len(c.num_tokens)) for c in reader] == [(1, 1000), (2, 1000)]
    first = 2 + head.count("\n")  # the synthetic header, then the start-up lines
    assert calls == [first, first + 1000 + head.count("\n"), first + 2000 + head.count("\n") - 1]


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


@pytest.mark.parametrize("seed", seeds(4))
def test_crlf_logs_read_in_bulk_equal_the_per_line_reader(tmp_path, blocks, seed):
    """A log with CRLF line ends (a carriage return before each newline, read by the per-line
    parser as a space) is read in bulk, with the same forwards, counts, located lines and
    launches; a carriage return inside a line still sends that line to the per-line parser."""
    for name, text in (("r", random_log(seed)), ("m", multi_launch_log(seed))):
        path = write_log(tmp_path / f"{name}.log", crlf(text))
        bulk, plain = read(path, True), read(path, False)
        assert bulk == plain
        assert plain[0].forwards > 200
        lf = read(write_log(tmp_path / f"{name}-lf.log", text), False)
        assert plain[1]["num_tokens"] == lf[1]["num_tokens"] and plain[1]["graph"] == lf[1]["graph"]  # the CR changes no field


def test_crlf_log_of_one_printer_is_read_in_bulk(tmp_path, monkeypatch):
    calls = take_calls(monkeypatch)
    forwards = [prefill_line(100 + i, 1, graph=i % 3 == 0) for i in range(1000)]
    forwards[500] = forwards[500].replace(", #queue-req", ",\r#queue-req")  # a carriage return inside the line
    path = write_log(tmp_path / "s.log", crlf(startup_lines() + "".join(forwards)))
    chunks = list(LogReader(path))
    assert sum(len(c.num_tokens) for c in chunks) == 1000
    assert np.concatenate([c.graph for c in chunks]).tolist() == [int(i % 3 == 0) for i in range(1000)]
    first = 2 + startup_lines().count("\n")
    assert calls == [first, first + 500, first + 999]  # the printer's first record, the inner CR's line, the last line


def plain_lines_with(blob: bytes, literals, folded) -> list[int]:
    """The reference: line starts of the lines holding a literal, line by line."""
    out, at = [], 0
    for line in blob.split(b"\n"):
        if any(x in line for x in literals) or any(x in line.lower() for x in folded):
            out.append(at)
        at += len(line) + 1
    return out


@pytest.mark.parametrize("anchor_hits", [1 << 12, 3])  # 3: every anchor is common, and a block the sample misjudges
def test_lines_with_finds_the_lines_a_plain_search_finds(monkeypatch, anchor_hits):
    """`lines_with` (anchors, whole-literal finds, letters in any case, the misjudged-sample path)
    gives the lines a plain line-by-line search gives."""
    monkeypatch.setattr(log_scan, "MAX_ANCHOR_HITS", anchor_hits)
    rng = random.Random(anchor_hits)
    pieces = [b"Decode batch, #running-req: 3, cuda graph: True", b"SGLang version: 0.5.23", b"SgLaNg==0.5.1", b"sglang serve",
              b"server_args={'tp_size': 1}", b"x server_arg", b"Capturing num tokens", b"CAPTURE", b"GLANG", b"S G L", b"\r", b"_"]
    for trial in range(40):
        head = [rng.choice(pieces[:1]) for _ in range(rng.randint(0, 400))]  # the sample (the block's head) sees none of the rest
        tail = [b" ".join(rng.choice(pieces) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(0, 400))]
        blob = b"\n".join(head + tail) + rng.choice([b"", b"\n"])
        literals, folded = (b"server_args", b"Captur", b"_"), (b"sglang",)
        assert lines_with(blob, literals, folded) == plain_lines_with(blob, literals, folded)


def test_uint_at_reads_the_digits_the_regex_reads():
    """`_Block.uint_at` (eight bytes at a time) on random byte strings, digit runs of 0..16 bytes
    among bytes next to the digits in value (`/`, `:`) or with the high bit set: the value, the
    offset after the run (at most 13 bytes on) and whether 1..MAX_DIGITS digits were read, as
    `\\d+` finds them."""
    rng = random.Random(2)
    cases = [b"0", b"7,", b"123456789012,", b"1234567890123", b"12345678", b"123456789", b"x12", b"", b"00012 ", b"9" * 16]
    cases += [bytes(rng.choice(b"0123456789/:aZ ,\xff\x00\x80\xb9") for _ in range(rng.randint(0, 16))) for _ in range(3000)]
    blob = b"".join(c + b"|" for c in cases)
    at = np.cumsum([0] + [len(c) + 1 for c in cases[:-1]]).astype(np.int64)
    value, end, read = log_scan._Block(blob + bytes(64)).uint_at(at)
    for i, case in enumerate(cases):
        digits = re.match(rb"\d*", case).group()
        assert (bool(read[i]), int(end[i] - at[i])) == (1 <= len(digits) <= log_scan.MAX_DIGITS, min(len(digits), log_scan.MAX_DIGITS + 1)), case
        if read[i]:
            assert int(value[i]) == int(digits), case


def test_prefix_shape_writes_every_digit_as_d():
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 256, (2000, 32), dtype=np.uint8)
    rows[:, ::3] = rng.integers(ord("0"), ord("9") + 1, (2000, 11), dtype=np.uint8)
    shape = log_scan._digits_as_d(rows.view("<u8")).view(np.uint8).reshape(rows.shape)
    assert (shape == np.where((rows >= ord("0")) & (rows <= ord("9")), ord("D"), rows)).all()


@pytest.mark.parametrize("size", [5, 4095, 4096, 70001])
def test_pair_occurrences_find_every_occurrence(size):
    """`_Block.pair_occurrences` (byte pairs at even offsets): every occurrence, overlapping ones,
    ones at odd and even offsets and at the block's very start and end, as a plain search finds."""
    rng = random.Random(size)
    for literal in (b"sglang", b"aaa", b"Disabling breakable", b" graph: ", b"aba"):
        blob = bytearray(rng.choice(b"sglanab \n") for _ in range(size))
        for _ in range(size // 50 + 2):
            at = rng.randrange(0, max(1, size - len(literal) + 1))
            blob[at:at + len(literal)] = literal[:size - at]
        blob[-len(literal):] = literal[-size:]
        data = bytes(blob)
        expected = [m.start() for m in re.finditer(b"(?=" + re.escape(literal) + b")", data)]
        assert log_scan._Block(data).pair_occurrences(literal).tolist() == expected
