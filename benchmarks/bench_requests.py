"""Benchmark: request traces through the scheduler simulation, and several traces over workers.

Run: `python benchmarks/bench_requests.py [--requests 1000000] [--files 8] [--file-requests 100000]
[--runs 3] [--workdir /tmp/cpbcg-bench-requests]`

It generates the traces it times (seeded), then times `cpbcg plan --format json` end to end
(recommendation included), each run a fresh process (Python start-up included):

1. one Azure-style CSV of `--requests` timestamped requests (decode on, the default scheduler)
   against a batch trace of as many lines (`{"extend_seq_lens": [...]}`) in the same run;
2. `--files` request files (`--file-requests` each) planned together with `--jobs 1` and
   `--jobs 2`; the two JSON outputs must be byte-identical (checked).

Every figure is min / median / max over `--runs` fresh processes after one warm-up run, with the
peak RSS of the largest process (workers included, `getrusage(RUSAGE_CHILDREN)`). Numbers go in
the README; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def write_requests(path: Path, num_requests: int, seed: int, rate_per_s: float = 3.0) -> None:
    """Azure-style CSV: `TIMESTAMP` (wall clock), `ContextTokens`, `GeneratedTokens`; prompts
    log-normal around 1,000 tokens, Poisson arrivals at `rate_per_s`."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, num_requests)
    seconds = np.cumsum(gaps)
    prompts = np.clip(rng.lognormal(np.log(1000), 1.0, num_requests), 1, 30000).astype(np.int64)
    outputs = np.clip(rng.lognormal(np.log(200), 0.8, num_requests), 1, 4000).astype(np.int64)
    base = np.datetime64("2024-05-01T00:00:00", "us")
    stamps = (base + (seconds * 1e6).astype("timedelta64[us]")).astype(str)
    with open(path, "w") as handle:
        handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        handle.writelines(f"{t.replace('T', ' ')},{p},{o}\n" for t, p, o in zip(stamps, prompts, outputs))


def write_batches(path: Path, num_lines: int, seed: int) -> None:
    """A batch trace of `num_lines` forwards of about 4 requests each."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as handle:
        for _ in range(num_lines):
            lens = np.clip(rng.lognormal(np.log(600), 0.9, int(rng.integers(1, 8))), 8, 8000).astype(int)
            handle.write('{"extend_seq_lens": [%s]}\n' % ", ".join(map(str, lens)))


def timed(argv: list[str], runs: int) -> tuple[list[float], float, bytes]:
    """Wall seconds of `runs` fresh runs (after a warm-up), peak RSS (MB) and the last stdout."""
    subprocess.run(argv, check=True, capture_output=True)
    times, out = [], b""
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(argv, check=True, capture_output=True).stdout
        times.append(time.perf_counter() - start)
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return times, rss_mb, out


def show(label: str, times: list[float], rss_mb: float) -> None:
    print(f"{label:<58} {min(times):7.2f} {statistics.median(times):7.2f} {max(times):7.2f} s   peak RSS {rss_mb:,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-requests", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench-requests"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    cpbcg = [sys.executable, "-m", "cpbcg"]
    requests, batches = args.workdir / f"requests-{args.requests}.csv", args.workdir / f"batches-{args.requests}.jsonl"
    if not requests.exists():
        write_requests(requests, args.requests, 0)
    if not batches.exists():
        write_batches(batches, args.requests, 1)
    files = []
    for i in range(args.files):
        path = args.workdir / f"server-{i}-{args.file_requests}.csv"
        if not path.exists():
            write_requests(path, args.file_requests, 100 + i)
        files.append(path)
    print(f"cpbcg plan --format json, {args.runs} fresh processes each (min median max):")
    show(f"batch trace, {args.requests:,} lines", *timed([*cpbcg, "plan", "-t", str(batches), "-f", "json"], args.runs)[:2])
    show(f"request trace, {args.requests:,} requests (decode on)", *timed([*cpbcg, "plan", "-t", str(requests), "-f", "json"], args.runs)[:2])
    many = [*cpbcg, "plan", *[a for f in files for a in ("-t", str(f))], "-f", "json"]
    serial, rss1, out1 = timed([*many, "--jobs", "1"], args.runs)
    show(f"{args.files} request files x {args.file_requests:,}, --jobs 1", serial, rss1)
    parallel, rss2, out2 = timed([*many, "--jobs", "2"], args.runs)
    show(f"{args.files} request files x {args.file_requests:,}, --jobs 2", parallel, rss2)
    print(f"--jobs 1 and --jobs 2 JSON byte-identical: {out1 == out2}")


if __name__ == "__main__":
    main()
