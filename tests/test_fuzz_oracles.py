"""Two oracles over the hostile-input fuzzer's surfaces (issue 23).

(a) Paths: the same records read through every path of a reader give the same result or the
    same error: the fast paths (numpy byte parse, one orjson call per line, numpy CSV columns, pyarrow's CSV reader)
    against the careful line-by-line path, and the plain file against `.gz`, standard input,
    small read chunks, a leading UTF-8 BOM (plain and gzip) and CRLF line ends. Seeded random
    traces of good lines mixed with hostile ones.
(b) Bounds: every bound `--help` shows (`[A<=x<=B]`, `[0<x<=1]`) is accepted at its edge and
    refused one step past it, on every command; the options that set a deployment setting are
    also run end to end at their edges (the config's own bound must agree).

Fast by default; `CPBCG_FUZZ_CASES=10000` (as for test_fuzz.py) runs `CASES // 20` traces per
format, and `CPBCG_FUZZ_SEED` picks another seed.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import typer.main
from typer.testing import CliRunner

import cpbcg.planner.traces.batches as batches
import cpbcg.planner.traces.csv_table as csv_table
import cpbcg.planner.traces.jsonl_table as jsonl_table
import cpbcg.planner.traces.stdin as stdin
from cpbcg.cli import app
from cpbcg.errors import TraceError
from cpbcg.planner.model.layout import BatchSet
from cpbcg.assembly.registry import open_trace
from test_fuzz import run_case
from test_fuzz_generators import GOOD_TRACE, Case

CASES = max(20, int(os.environ.get("CPBCG_FUZZ_CASES", "200")) // 20)
SEED = int(os.environ.get("CPBCG_FUZZ_SEED", "20261201"))


# ----------------------------------------------------------------------------- (a) paths


def _lens(rng: random.Random) -> list[int]:
    return [rng.choice([1, 7, 8, 100, 1534, 8192, rng.randrange(1, 20000)]) for _ in range(rng.randrange(1, 6))]


def batch_line(rng: random.Random, hostile: bool = False) -> str:
    """A batch-trace line: mostly good (several spellings), sometimes hostile."""
    lens = _lens(rng)
    good = [
        '{"extend_seq_lens": [%s]}' % ", ".join(map(str, lens)),
        '{"extend_seq_lens":[%s]}' % ",".join(map(str, lens)),
        "[%s]" % ", ".join(map(str, lens)),
        '{"extend_seq_lens": [%s], "count": %d}' % (", ".join(map(str, lens)), rng.randrange(1, 50)),
        '{"extend_seq_lens": [%s], "id": %d, "count": %d}' % (", ".join(map(str, lens)), rng.randrange(10**6), rng.randrange(1, 5)),
        '{"count": 2, "extend_seq_lens": [%s], "tag": "a"}' % ", ".join(map(str, lens)),
        "",
    ]
    bad = [
        "[5], [6]", "[5],[6]", "[5], 6", '{"extend_seq_lens": [5]}, {"extend_seq_lens": [6]}', "[05]", "[-5]", "[+5]", "[0]",
        "[5.0]", "[true]", "[null]", '["5"]', "[]", "[4194305]", "[2147483648]", "[99999999999999999999]", '{"extend_seq_lens": 5}',
        '{"extend_seq_lens": [5], "extend_seq_lens": [6]}', '{"extend_seq_lens": [5], "count": 2, "count": 3}', '{"extend_seq_lens": [5], "x": {"a": 1, "a": 2}}',
        '{"extend_seq_lens": [5], "count": 0}', '{"extend_seq_lens": [5], "count": -1}', "[[5]]", "[5", "5]", "{}", "[1e3]", "\t[5]",
    ]
    return rng.choice(bad) if hostile else rng.choice(good)


def mooncake_line(rng: random.Random, t: int, hostile: bool = False) -> str:
    length, out = rng.choice([0, 1, 100, 2048, rng.randrange(1, 30000)]), rng.randrange(0, 500)
    hashes = ", ".join(str(rng.randrange(100)) for _ in range(rng.randrange(0, 4)))
    good = '{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}' % (t, length, out, hashes)
    bad = [
        good + ", " + good, good.replace('"input_length": ', '"input_length": -'), good.replace('"output_length": ', '"output_length": 0'),
        good.replace('"timestamp": ', '"timestamp": "'), good[:-1], good.replace("[", "[true, ", 1), "", "[1]", good.replace("}", ', "x": null}'),
        good.replace("}", ', "input_length": 5}'), good.replace("{", '{"timestamp": 0, ', 1),
    ]
    return rng.choice(bad) if hostile else good


def azure_line(rng: random.Random, t: int, hostile: bool = False) -> str:
    stamp = f"2023-11-16 18:{t // 60 % 60:02d}:{t % 60:02d}.{rng.randrange(10**6):06d}"
    length, out = rng.choice([0, 1, 100, 2048, rng.randrange(1, 30000)]), rng.randrange(0, 500)
    good = f"{stamp},{length},{out}"
    bad = [f"{stamp},+{length},{out}", f"{stamp},{length},-0", f"{stamp},{length},+{out}", f'{stamp},"{length}",{out}', f"{stamp}, {length},{out}",
               f"{stamp},{length}", f"{stamp},{length}.0,{out}", f"{stamp},{length},{out},9", f"{stamp},\u00b2,{out}", "",
           # timestamps: the columnar path (pyarrow) must read or refuse them as numpy does
           f"2023-02-30 18:00:00,{length},{out}", f"2023-11-16 24:00:00,{length},{out}", f"2023-11-16 18:00:60,{length},{out}",
           f"2023-11-16T18:00:00Z,{length},{out}", f"2023-11-16 18:00:00+01:00,{length},{out}", f"2023-11-16,{length},{out}",
           f"1969-12-31 23:59:59,{length},{out}", f"2200-01-01 00:00:00,{length},{out}", f"2023-11-16 18:00:00.1234567891,{length},{out}",
           f"2023-11-16T18:00:00.1234567,{length},{out}", f"2023-11-16 18:00,{length},{out}", f"{stamp},{length},{out}\r",
           f"{stamp}\r,{length},{out}", f"{stamp},{length},\x01{out}", f"{stamp},{length},{out} "]
    return rng.choice(bad) if hostile else good


def trace_text(kind: str, rng: random.Random) -> str:
    """Good lines, and in about half the traces one hostile line at a random place."""
    n = rng.randrange(1, 400)
    odd = rng.randrange(n) if rng.random() < 0.5 else -1
    if kind == "batches":
        return "\n".join(batch_line(rng, i == odd) for i in range(n)) + rng.choice(["\n", ""])
    if kind == "mooncake":
        return "\n".join(mooncake_line(rng, 10 * i, i == odd) for i in range(n)) + "\n"
    return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(azure_line(rng, i, i == odd) for i in range(n)) + "\n"


def _batch_result(items) -> tuple:
    whole = BatchSet.concat(list(items))
    return ("batches", whole.extend_seq_lens.tolist(), np.diff(whole.offsets).tolist(), whole.counts.tolist())


def _request_result(opened) -> tuple:
    chunks = list(opened.items)
    cat = lambda get: None if get(chunks[0]) is None else np.concatenate([get(c) for c in chunks]).tolist()  # noqa: E731
    return ("requests", cat(lambda c: c.input_tokens), cat(lambda c: c.arrival_s), cat(lambda c: c.output_tokens),
            [h for c in chunks for h in (c.hash_ids or [])], opened.notes.skipped_rows, opened.notes.first_skipped_line)


def read_result(path, name: str, kind: str, chunk_bytes: int | None = None) -> tuple:
    """What reading `path` gives: the records, or the error with the trace's name replaced."""
    try:
        if kind == "batches":
            return _batch_result(batches.read_batch_trace(path, **({"chunk_bytes": chunk_bytes} if chunk_bytes else {})))
        return _request_result(open_trace(path, "mooncake" if kind == "mooncake" else "azure"))
    except TraceError as exc:
        return ("error", str(exc).replace(name, "<T>"))


def careful_only(monkeypatch) -> None:
    """Every fast path declines, so each chunk goes line by line."""
    monkeypatch.setattr(batches, "_parse_canonical_checked", lambda blob: None)
    monkeypatch.setattr(batches, "_parse_fast", lambda lines: None)
    monkeypatch.setattr(jsonl_table, "_fast", lambda *args: None)
    monkeypatch.setattr(csv_table, "_chunk_fast", lambda *args: None)
    monkeypatch.setattr(csv_table, "_chunk_columnar", lambda *args: None)


class _Stdin:
    def __init__(self, data: bytes):
        self.buffer = io.BufferedReader(io.BytesIO(data))


@pytest.mark.parametrize("kind", ["batches", "mooncake", "azure"])
def test_every_path_of_a_reader_reads_the_same(tmp_path, monkeypatch, kind):
    rng = random.Random(f"{SEED}-{kind}")
    suffix = ".csv" if kind == "azure" else ".jsonl"
    differ, errors = [], 0
    for case in range(CASES):
        text = trace_text(kind, rng)
        plain, packed = tmp_path / f"t{case}{suffix}", tmp_path / f"t{case}{suffix}.gz"
        plain.write_text(text)
        packed.write_bytes(gzip.compress(text.encode()))
        results = {"plain": read_result(plain, str(plain), kind), "gz": read_result(packed, str(packed), kind)}
        for variant, data in (("bom", b"\xef\xbb\xbf" + text.encode()), ("crlf", text.replace("\n", "\r\n").encode()),
                              ("bom gz", gzip.compress(b"\xef\xbb\xbf" + text.encode()))):
            other = tmp_path / f"t{case}-{variant.replace(' ', '-')}{suffix}{'.gz' if 'gz' in variant else ''}"
            other.write_bytes(data)
            results[variant] = read_result(other, str(other), kind)
        if kind == "batches":
            results["small chunks"] = read_result(plain, str(plain), kind, chunk_bytes=rng.choice([37, 100, 4096]))
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdin", _Stdin(text.encode()))
            patch.setattr(stdin, "_tap", None)
            results["stdin"] = read_result("-", "<stdin>", kind)
        with monkeypatch.context() as patch:
            careful_only(patch)
            results["careful"] = read_result(plain, str(plain), kind)
        if kind == "azure":  # pyarrow's columns (large chunks only by default), not only numpy's
            with monkeypatch.context() as patch:
                patch.setattr(csv_table, "COLUMNAR_MIN_BYTES", 0)
                results["pyarrow columns"] = read_result(plain, str(plain), kind)
        errors += results["plain"][0] == "error"
        if len({repr(r) for r in results.values()}) > 1:
            differ.append((case, text[:300], {k: repr(v)[:200] for k, v in results.items()}))
    assert not differ, f"{len(differ)} of {CASES} traces read differently by path; first: {differ[0]}"
    assert 0 < errors < CASES  # both outcomes were exercised


# ----------------------------------------------------------------------------- (b) bounds

BOUND = re.compile(r"\[(-?[0-9][0-9.e+-]*)(<=|<)x(<=|<)(-?[0-9][0-9.e+-]*)\]")
COMMANDS = ("plan", "batches", "replay-check", "layout", "capture")
REQUIRED = {"batches": ["-o", "o.jsonl"], "layout": ["100"]}
"""Arguments a command needs besides the option under test."""


def help_bounds(command: str) -> dict[str, tuple[str, str, str, str]]:
    """`{--option: (low, op, op, high)}` for every bound the command's `--help` shows."""
    text = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "100", "CPBCG_WIDTH": "100"}).stdout
    blocks = re.split(r"\n(?=\s{2}-)", text)
    found = {}
    for block in blocks:
        name = re.match(r"\s*((?:--?[\w-]+)(?:, --?[\w-]+)*)", block)
        bound = BOUND.search(" ".join(block.split()))
        if name and bound:
            option = next(o for o in name.group(1).split(", ") if o.startswith("--"))
            found[option] = bound.groups()
    return found


def _is_int(text: str) -> bool:
    return re.fullmatch(r"-?[0-9]+", text) is not None


def edge_values(low: str, low_op: str, high_op: str, high: str) -> list[tuple[str, bool]]:
    """`(value, accepted)`: each edge (or the nearest value inside an open bound) and one step past."""
    if _is_int(low) and _is_int(high) and low_op == high_op == "<=":  # an integer option (floats show `1.0`)
        lo, hi = int(low), int(high)
        return [(str(lo), True), (str(lo - 1), False), (str(hi), True), (str(hi + 1), False)]
    lo, hi = float(low), float(high)
    inside_lo = lo if low_op == "<=" else math.nextafter(lo, math.inf)
    outside_lo = math.nextafter(lo, -math.inf) if low_op == "<=" else lo
    inside_hi = hi if high_op == "<=" else math.nextafter(hi, -math.inf)
    outside_hi = math.nextafter(hi, math.inf) if high_op == "<=" else hi
    return [(repr(inside_lo), True), (repr(outside_lo), False), (repr(inside_hi), True), (repr(outside_hi), False)]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_bound_is_the_parsed_bound(command):
    click_command = typer.main.get_command(app).commands[command]
    bounds = help_bounds(command)
    assert bounds, f"{command} --help shows no bound"
    wrong = []
    for option, bound in sorted(bounds.items()):
        for value, accepted in edge_values(*bound):
            try:
                click_command.make_context(command, [*REQUIRED.get(command, []), option, value])
                got = True
            except Exception:  # noqa: BLE001 - click's usage errors
                got = False
            if got != accepted:
                wrong.append(f"{option} {value}: {'accepted' if got else 'refused'}, help shows [{''.join(bound[:2])}x{''.join(bound[2:])}]")
    assert not wrong, wrong


EDGE_COMPANIONS = {
    "--page-size": ["--chunked-prefill-size", "4194304"],  # a page never exceeds the chunk
    "--max-context-size": ["--capture-layout", "context_bounded"],
    "--max-capture-requests": ["--capture-layout", "context_bounded", "--max-context-size", "8192",
                               "--chunked-prefill-size", "8192"],  # one request slot: no bucket above the context (the B200 default is 16384)
}
"""Settings an edge value needs beside it to be a deployment at all (a cross-key rule)."""
LOW_EDGE_EXCEPTIONS = {"--max-context-size"}
"""Low edges refused by a cross-key rule: a capture piece holds at least 2*cp_size tokens."""


def test_deployment_options_run_at_their_edges(tmp_path):
    """The options that set a config key, run end to end at the edges `--help` shows: the
    config's own bound agrees with the option's (exit 0 at the edge)."""
    bounds = help_bounds("plan")
    config_options = [o for o in bounds if o not in ("--max-buckets", "--max-tokens", "--bucket-multiple", "--max-requests", "--validate-fraction", "--target-coverage", "--max-capture-seconds", "--max-graph-memory")]
    assert len(config_options) >= 20
    refused = []
    for option in config_options:
        for index, (value, accepted) in enumerate(edge_values(*bounds[option])):
            if not accepted or (index == 0 and option in LOW_EDGE_EXCEPTIONS):
                continue
            argv = ["plan", "-t", GOOD_TRACE, "--no-recommend", "-f", "json", *EDGE_COMPANIONS.get(option, []), option, value]
            result = run_case(Case("bound", argv, False), tmp_path / f"{option}{index}")
            if result.crash or result.code != 0:
                refused.append((option, value, result.crash or result.stderr.strip()[-200:]))
    assert not refused, refused
