"""Benchmark: the vectorised layout model + selector, and `cpbcg plan` end to end.

Run: `python benchmarks/bench_plan.py [--batches 1000000] [--workdir /tmp/cpbcg-bench]`

0. Reading and parsing the batch trace (`read_batch_trace`) in the default 1 MiB chunks and in
   16 MiB chunks, one fresh process per run (the chunk size is `BATCH_CHUNK_BYTES`).
1. Layout + selector over N batches of about 8 requests each, vectorised (`Demand.of` +
   `select_buckets`) against a straightforward per-request Python loop of the same rule
   (`zigzag rows` per request, then `select_one`), in the same run, on the same batches.
   The loop's answers are checked against the vectorised ones.
2. `cpbcg --help`, `cpbcg plan --help`, and `cpbcg plan --trace T --format json` with and
   without the recommendation, each in a fresh process per run (wall time and peak RSS, Python
   start-up included), against a plain `json.loads` per line plus the same loop.
Every figure is min-median-max over `--runs` fresh processes, after one warm-up run (bytecode
cache and page cache, as on a machine that ran cpbcg before). `plan` fits the out-of-sample list
in a forked child beside the final fit (`cpbcg/planner/background.py`); the peak RSS is the
larger of the two processes.

Numbers go in the README; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.evaluate import evaluate
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import BucketTable, select_one
from cpbcg.planner.traces.batches import BATCH_CHUNK_BYTES, read_batch_trace

CP = CPLayout(4)


def make_batches(num_batches: int, seed: int = 0) -> BatchSet:
    """About 8 requests per batch, lengths log-normal around 600 tokens, at least 1."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(4, 13, num_batches)
    lens = np.clip(rng.lognormal(np.log(600), 0.9, int(sizes.sum())), 1, 8000).astype(np.int64)
    offsets = np.zeros(num_batches + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return BatchSet(lens, offsets)


def write_trace(batches: BatchSet, path: Path) -> None:
    with open(path, "w") as handle:
        for i in range(batches.num_batches):
            handle.write('{"extend_seq_lens": [%s]}\n' % ", ".join(map(str, batches.batch(i))))


def loop_rule(batch: list[int], cp: int, align: int, caps: dict[int, int]):
    """The same rule, written the plain way from domain §2: cut each request into its 2*cp
    blocks, give rank r blocks r and 2cp-1-r, align the largest rank, then `select_one`."""
    seg = 2 * cp
    ranks = [0] * cp
    for length in batch:
        base, rem = divmod(length, seg)
        blocks = [base + (j < rem) for j in range(seg)]
        for r in range(cp):
            ranks[r] += blocks[r] + blocks[seg - 1 - r]
    active = cp > 1 and all(length >= seg for length in batch)
    rows = -(-max(ranks) // align) * align
    return select_one(sum(batch), rows, active, caps, 2.0)[0]


def bench_model(batches: BatchSet, table: BucketTable) -> tuple[float, float]:
    """Time `evaluate` (layout + selector + tallies) against the loop; check they agree."""
    t0 = time.perf_counter()
    ev = evaluate([batches], table, CP, 2.0)
    vec_s = time.perf_counter() - t0
    caps = table.as_dict()
    lists = [batches.batch(i) for i in range(batches.num_batches)]
    t0 = time.perf_counter()
    chosen = [loop_rule(b, CP.cp_size, CP.align_rows, caps) for b in lists]
    loop_s = time.perf_counter() - t0
    hits = Counter(b for b in chosen if b is not None)
    assert {b: hits.get(b, 0) for b in ev.buckets} == ev.bucket_hits, "loop and vectorised selector disagree"
    return vec_s, loop_s


INSTALLED_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The children run as an installed cpbcg does: with bytecode caching (a warm-up run writes the
`.pyc` files of an editable checkout; `pip install` writes them at install time)."""


def run_child(argv: list[str]) -> tuple[float, float]:
    """`(wall s, peak RSS MB)` of one fresh process running `argv` (output discarded)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=INSTALLED_ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return wall, usage.ru_maxrss / 1024


def spread(values: list[float], fmt: str = ".2f") -> str:
    """`min-median-max` of the runs."""
    return "-".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def naive_end_to_end(trace: Path, table: BucketTable) -> float:
    """`json.loads` per line plus the plain loop (the plain-Python reference), one run."""
    caps = table.as_dict()
    t0 = time.perf_counter()
    with open(trace) as handle:
        for line in handle:
            loop_rule(json.loads(line)["extend_seq_lens"], CP.cp_size, CP.align_rows, caps)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench"))
    parser.add_argument("--child", choices=("model", "write", "read"), help=argparse.SUPPRESS)
    parser.add_argument("--chunk-bytes", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    table = BucketTable.build(sglang_default_buckets(8192), CP)
    trace = args.workdir / f"batches-{args.batches}.jsonl"
    if args.child == "model":  # one child run of the in-process comparison
        batches = make_batches(args.batches)
        print(*bench_model(batches, table), len(batches.extend_seq_lens))
        return
    if args.child == "write":
        write_trace(make_batches(args.batches), trace)
        return
    if args.child == "read":  # one child run reading the trace in chunks of --chunk-bytes
        t0 = time.perf_counter()
        forwards = sum(chunk.num_batches for chunk in read_batch_trace(trace, args.chunk_bytes))
        print(time.perf_counter() - t0, forwards)
        return
    # The parent builds nothing big: children are forked from it, and a child's peak RSS
    # counts what it inherited, so the figures below are the children's own.
    args.workdir.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, __file__, "--batches", str(args.batches), "--workdir", str(args.workdir), "--child"]
    if not trace.exists():
        subprocess.run(me + ["write"], check=True)
    reads = {size: [float(subprocess.run(me + ["read", "--chunk-bytes", str(size)], check=True, capture_output=True, text=True).stdout.split()[0])
                    for _ in range(args.runs)] for size in (BATCH_CHUNK_BYTES, 16 << 20)}
    print(f"batch-trace read and parse, {trace.stat().st_size / 1e6:.0f} MB, {args.runs} runs: "
          + ", ".join(f"{size >> 20} MiB chunks {spread(times, '.3f')} s" for size, times in reads.items()))
    me = me + ["model"]
    model = [tuple(map(float, subprocess.run(me, check=True, capture_output=True, text=True).stdout.split())) for _ in range(args.runs)]
    vec, loop, num_requests = [m[0] for m in model], [m[1] for m in model], int(model[0][2])
    print(f"layout+selector+tallies, {args.batches:,} forwards ({num_requests:,} requests), cp 4, {args.runs} runs (min-median-max):")
    print(f"  vectorised {spread(vec, '.3f')} s   plain Python loop {spread(loop)} s   speed-up {min(loop) / max(vec):.0f}-{max(loop) / min(vec):.0f}x")
    cpbcg = [sys.executable, "-m", "cpbcg"]
    figures = {
        "cpbcg --help": cpbcg + ["--help"],
        "cpbcg plan --help": cpbcg + ["plan", "--help"],
        f"plan --trace ({trace.stat().st_size / 1e6:.0f} MB) --no-recommend": cpbcg + ["plan", "-t", str(trace), "-f", "json", "--no-recommend"],
        f"plan --trace ({trace.stat().st_size / 1e6:.0f} MB), with the recommendation": cpbcg + ["plan", "-t", str(trace), "-f", "json"],
    }
    run_child(cpbcg + ["plan", "-t", str(trace), "-f", "json"])  # warm-up: bytecode and page cache
    for name, argv in figures.items():
        runs = [run_child(argv) for _ in range(args.runs)]
        print(f"  {name}: {spread([r[0] for r in runs])} s, peak {spread([r[1] for r in runs], '.0f')} MB")
    print(f"  plain-Python reference (json.loads per line + loop), 1 run: {naive_end_to_end(trace, table):.2f} s")


if __name__ == "__main__":
    main()
