"""Benchmark: request traces through the scheduler simulation, and several traces over workers.

Run: `python benchmarks/bench_requests.py [--requests 1000000] [--big-requests 10000000]
[--files 8] [--file-requests 100000] [--runs 3] [--workdir /tmp/cpbcg-bench-requests]`

It generates the traces it times (seeded), then times `cpbcg plan --format json` end to end
(recommendation included), each run a fresh process (Python start-up included):

1. one Azure-style CSV of `--requests` timestamped requests (decode on, the default scheduler)
   against a batch trace of as many lines (`{"extend_seq_lens": [...]}`) in the same run, and
   the ratio of the two medians;
2. one CSV of `--big-requests` requests, one run, for its peak RSS (0 skips it);
3. `--files` request files (`--file-requests` each) planned together with `--jobs 1` and
   `--jobs 2`; the two JSON outputs must be byte-identical (checked).

`--without pyarrow` times what a plain install (no `[fast]` extra) gets; `--without
numba,pyarrow` what it got before numba became a dependency (`--big-requests 0 --files 0` keeps
to the 1M comparison).

Every figure is min / median / max over `--runs` fresh processes after one warm-up run (which
also fills numba's on-disk cache of the compiled scheduler loop), wall and CPU seconds (CPU:
user + system of the process and its workers), and the peak RSS of the largest process
(workers included). `--cold` adds request-trace runs with numba's cache emptied (no warm-up: each
compiles the loop). The warm runs see the cache that `pip install -e .` writes (setup.py), which is
what a user's first run finds. Each run is measured by a small wrapper process of its own
(`getrusage(RUSAGE_CHILDREN)`), so runs do not see each other's peaks. Numbers go in the
README; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
if done.returncode:
    sys.stderr.write(done.stderr.decode()[-2000:])
    sys.exit(done.returncode)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.buffer.write(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                                    "rss_mb": usage.ru_maxrss / 1024}).encode() + b"\\n" + done.stdout)
"""


def write_requests(path: Path, num_requests: int, seed: int, rate_per_s: float = 3.0) -> None:
    """Azure-style CSV: `TIMESTAMP` (wall clock), `ContextTokens`, `GeneratedTokens`; prompts
    log-normal around 1,000 tokens, Poisson arrivals at `rate_per_s`. Written in blocks of
    1M rows (bounded memory)."""
    rng = np.random.default_rng(seed)
    base = np.datetime64("2024-05-01T00:00:00", "us")
    clock_s = 0.0
    with open(path, "w") as handle:
        handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for start in range(0, num_requests, 1_000_000):
            n = min(1_000_000, num_requests - start)
            seconds = clock_s + np.cumsum(rng.exponential(1.0 / rate_per_s, n))
            clock_s = float(seconds[-1])
            prompts = np.clip(rng.lognormal(np.log(1000), 1.0, n), 1, 30000).astype(np.int64)
            outputs = np.clip(rng.lognormal(np.log(200), 0.8, n), 1, 4000).astype(np.int64)
            stamps = (base + (seconds * 1e6).astype("timedelta64[us]")).astype(str)
            handle.writelines(f"{t.replace('T', ' ')},{p},{o}\n" for t, p, o in zip(stamps, prompts, outputs))


def write_batches(path: Path, num_lines: int, seed: int) -> None:
    """A batch trace of `num_lines` forwards of about 4 requests each."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as handle:
        for _ in range(num_lines):
            lens = np.clip(rng.lognormal(np.log(600), 0.9, int(rng.integers(1, 8))), 8, 8000).astype(int)
            handle.write('{"extend_seq_lens": [%s]}\n' % ", ".join(map(str, lens)))


CHILD_ENV: dict[str, str] | None = None
"""Environment of the timed processes (`--without` sets it); None: this one's."""


def without(modules: list[str], workdir: Path) -> dict[str, str]:
    """An environment in which `import MODULE` fails for each of `modules` (a `sitecustomize`
    first on PYTHONPATH), as in an install without them (`--without pyarrow`: a plain
    `pip install cpbcg`, no [fast] extra)."""
    folder = workdir / ("without-" + "-".join(modules))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text("import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_once(argv: list[str], env: dict[str, str] | None = None) -> tuple[dict[str, float], bytes]:
    """One fresh run of `argv` in its own wrapper: (wall_s, cpu_s, rss_mb) and its stdout."""
    out = subprocess.run([sys.executable, "-c", WRAPPER, *argv], check=True, capture_output=True, env=env or CHILD_ENV).stdout
    head, _, body = out.partition(b"\n")
    return json.loads(head), body


def cold(argv: list[str], runs: int, workdir: Path) -> list[dict[str, float]]:
    """`runs` fresh runs, each with numba's cache emptied (`NUMBA_CACHE_DIR` a new empty folder,
    so the cache that `pip install -e .` wrote beside kernel.py is not read): the compile a first
    run paid before issue 44, and what a run pays where the install could not write the cache."""
    figures = []
    for i in range(runs):
        folder = workdir / f"numba-cache-cold-{os.getpid()}-{i}"
        subprocess.run(["rm", "-rf", str(folder)], check=True)
        figures.append(run_once(argv, {**(CHILD_ENV or os.environ), "NUMBA_CACHE_DIR": str(folder)})[0])
    return figures


def timed(argv: list[str], runs: int) -> tuple[list[dict[str, float]], bytes]:
    """`runs` fresh runs after a warm-up: their figures and the last stdout."""
    run_once(argv)
    figures, out = [], b""
    for _ in range(runs):
        figure, out = run_once(argv)
        figures.append(figure)
    return figures, out


def show(label: str, figures: list[dict[str, float]]) -> float:
    """Print min / median / max wall and CPU seconds and the peak RSS; returns the median wall."""
    wall = [f["wall_s"] for f in figures]
    cpu = [f["cpu_s"] for f in figures]
    rss = max(f["rss_mb"] for f in figures)
    print(f"{label:<46} wall {min(wall):6.2f} {statistics.median(wall):6.2f} {max(wall):6.2f} s"
          f"   CPU {min(cpu):6.2f} {statistics.median(cpu):6.2f} {max(cpu):6.2f} s   peak RSS {rss:,.0f} MB", flush=True)
    return statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--big-requests", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-requests", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench-requests"))
    parser.add_argument("--without", default="", help="comma-separated modules the timed processes cannot import "
                        "(pyarrow: what a plain install gets; numba,pyarrow: a plain install before issue 34)")
    parser.add_argument("--python", type=Path, help="the interpreter the timed processes use, e.g. a fresh venv's "
                        "bin/python after `pip install .`; they run in --workdir without PYTHONPATH (the installed cpbcg)")
    parser.add_argument("--first-run", action="store_true", help="time the request trace's first run before any "
                        "warm-up, as the first plan after an install meets it (numba's cache as the install left it)")
    parser.add_argument("--cold", action="store_true", help="also time request-trace runs with numba's cache emptied "
                        "(each run compiles the scheduler loop, as a first run did before the install wrote the cache)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.without:
        global CHILD_ENV
        CHILD_ENV = without(args.without.split(","), args.workdir)
        print(f"timed processes cannot import: {args.without}", flush=True)
    cpbcg = [sys.executable, "-m", "cpbcg"]
    if args.python is not None:  # the installed cpbcg of that interpreter: not this checkout
        CHILD_ENV = {k: v for k, v in (CHILD_ENV or os.environ).items() if k != "PYTHONPATH"}
        cpbcg = [str(args.python), "-m", "cpbcg"]
        os.chdir(args.workdir)
        print(f"timed processes: {args.python} (installed cpbcg, no PYTHONPATH)", flush=True)
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
    first = None
    if args.first_run:  # before anything below warms numba's cache or the bytecode
        first, _ = run_once([*cpbcg, "plan", "-t", str(requests), "-f", "json"])
    print(f"cpbcg plan --format json, {args.runs} fresh processes each (min median max):", flush=True)
    batch_s = show(f"batch trace, {args.requests:,} lines", timed([*cpbcg, "plan", "-t", str(batches), "-f", "json"], args.runs)[0])
    request_s = show(f"request trace, {args.requests:,} requests", timed([*cpbcg, "plan", "-t", str(requests), "-f", "json"], args.runs)[0])
    print(f"request / batch (median wall): {request_s / batch_s:.2f}x", flush=True)
    if first is not None:
        first_s = show("request trace, first run (no warm-up)", [first])
        print(f"first request run / batch (median wall): {first_s / batch_s:.2f}x", flush=True)
    if args.cold:
        cold_s = show("request trace, numba cache emptied (cold)", cold([*cpbcg, "plan", "-t", str(requests), "-f", "json"], args.runs, args.workdir))
        print(f"cold request / batch (median wall): {cold_s / batch_s:.2f}x", flush=True)
    if args.big_requests:
        big = args.workdir / f"requests-{args.big_requests}.csv"
        if not big.exists():
            write_requests(big, args.big_requests, 2)
        figure, _ = run_once([*cpbcg, "plan", "-t", str(big), "-f", "json"])
        show(f"request trace, {args.big_requests:,} requests (1 run)", [figure])
    if not files:
        return
    many = [*cpbcg, "plan", *[a for f in files for a in ("-t", str(f))], "-f", "json"]
    serial, out1 = timed([*many, "--jobs", "1"], args.runs)
    show(f"{args.files} request files x {args.file_requests:,}, --jobs 1", serial)
    parallel, out2 = timed([*many, "--jobs", "2"], args.runs)
    show(f"{args.files} request files x {args.file_requests:,}, --jobs 2", parallel)
    print(f"--jobs 1 and --jobs 2 JSON byte-identical: {out1 == out2}")


if __name__ == "__main__":
    main()
