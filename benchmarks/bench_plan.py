"""Benchmark: the vectorised layout model + selector, and `cpbcg plan` end to end.

Run: `python benchmarks/bench_plan.py [--batches 1000000] [--workdir /tmp/cpbcg-bench]`

1. Layout + selector over N batches of about 8 requests each, vectorised (`Demand.of` +
   `select_buckets`) against a straightforward per-request Python loop of the same rule
   (`zigzag rows` per request, then `select_one`), in the same run, on the same batches.
   The loop's answers are checked against the vectorised ones.
2. `cpbcg plan --trace T --format json` as a subprocess on an N-line batch trace (wall time,
   Python start-up included), against a plain `json.loads` per line plus the same loop.

Numbers go in the README; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from cpbcg.planner.buckets import sglang_default_buckets
from cpbcg.planner.evaluate import evaluate
from cpbcg.planner.layout import BatchSet, CPLayout
from cpbcg.planner.selector import BucketTable, select_one

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
    assert {str(b): hits.get(b, 0) for b in ev.buckets} == ev.bucket_hits, "loop and vectorised selector disagree"
    return vec_s, loop_s


def bench_end_to_end(trace: Path, table: BucketTable) -> tuple[float, float]:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "cpbcg", "plan", "--trace", str(trace), "--format", "json", "--cp-size", "4"],
        check=True, stdout=subprocess.DEVNULL,
    )
    cli_s = time.perf_counter() - t0
    caps = table.as_dict()
    t0 = time.perf_counter()
    with open(trace) as handle:
        for line in handle:
            loop_rule(json.loads(line)["extend_seq_lens"], CP.cp_size, CP.align_rows, caps)
    naive_s = time.perf_counter() - t0
    return cli_s, naive_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    batches = make_batches(args.batches)
    table = BucketTable.build(sglang_default_buckets(8192), CP)
    vec_s, loop_s = bench_model(batches, table)
    print(f"layout+selector, {args.batches:,} batches ({len(batches.extend_seq_lens):,} requests), cp 4:")
    print(f"  vectorised {vec_s:.3f} s   python loop {loop_s:.2f} s   speed-up {loop_s / vec_s:.0f}x")
    trace = args.workdir / f"batches-{args.batches}.jsonl"
    if not trace.exists():
        write_trace(batches, trace)
    size_mb = trace.stat().st_size / 1e6
    cli_s, naive_s = bench_end_to_end(trace, table)
    print(f"end to end on {trace} ({size_mb:.0f} MB):")
    print(f"  cpbcg plan {cli_s:.2f} s   json.loads + loop {naive_s:.2f} s   speed-up {naive_s / cli_s:.1f}x")


if __name__ == "__main__":
    main()
