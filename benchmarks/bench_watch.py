"""Benchmark: `cpbcg watch` following a log, in forwards per second, and the memory it holds.

Run: `python benchmarks/bench_watch.py [--forwards 1000000] [--rate 5000] [--seconds 20] [--workdir /tmp/cpbcg-bench-watch]`

1. Catch-up: a SYNTHETIC SGLang log of N forwards (the tests' line format, SGLang 0.5.23's
   wording, 58 default buckets) is written first, then `cpbcg watch LOG --max-forwards N
   --format json` follows it from the start in a fresh process: forwards per second read (wall
   time, start-up included), peak RSS and the RSS at the end (`/proc/self/status` VmHWM/VmRSS,
   printed by the child). The default windows: 10,000 forwards gated every 2,500, the ring of
   131,072 forwards, one update a second, the list refitted every 60 s.
2. Live: this process appends `--rate` forwards per second for `--seconds` seconds while
   `cpbcg watch --max-forwards RATE*SECONDS` follows; it keeps up when it stops within about an
   update (1 s) of the last line written. Its RSS is sampled every second (memory held over a
   long run: flat once the ring is full).

Numbers go in the README and docs/watch.md; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from sglang_log_fixtures import SYNTHETIC_HEADER, default_buckets, prefill_line, sglang_graph_verdict, startup_lines  # noqa: E402

CHILD = """
import sys, time, resource
from cpbcg.cli import main
start = time.perf_counter()
try:
    main(sys.argv[1:])
except SystemExit:
    pass
wall = time.perf_counter() - start
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(f"BENCH wall_s={wall:.3f} hwm_mib={int(status['VmHWM'].split()[0]) / 1024:.1f} rss_mib={int(status['VmRSS'].split()[0]) / 1024:.1f}", file=sys.stderr)
"""


def lines(n: int, seed: int = 0) -> list[str]:
    rng, buckets = random.Random(seed), default_buckets(8192)
    out = []
    for _ in range(n):
        size = rng.choice([rng.randint(1, 512), rng.randint(513, 8192), rng.randint(8193, 9000)])
        k = rng.randint(1, min(size, 8))
        out.append(prefill_line(size, k, graph=sglang_graph_verdict(size, buckets) and rng.random() < 0.97))
    return out


def rss_mib(pid: int) -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def catch_up(workdir: Path, n: int) -> None:
    log = workdir / "catchup.log"
    sample = lines(20_000)
    with open(log, "w") as f:
        f.write(SYNTHETIC_HEADER + startup_lines())
        for i in range(0, n, len(sample)):
            f.write("".join(sample[: min(len(sample), n - i)]))
    args = ["watch", str(log), "--max-forwards", str(n), "--format", "json", "--page-size", "1", "--chunked-prefill-size", "8192"]
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    stats = dict(kv.split("=") for kv in out.stderr.split("BENCH ")[1].split())
    wall = float(stats["wall_s"])
    print(f"catch-up: {n:,} forwards ({log.stat().st_size / 2**20:.0f} MiB) in {wall:.2f} s: {n / wall:,.0f} forwards/s; "
          f"peak RSS {stats['hwm_mib']} MiB, RSS at the end {stats['rss_mib']} MiB")


def live(workdir: Path, rate: int, seconds: float) -> None:
    log = workdir / "live.log"
    log.unlink(missing_ok=True)
    sample = lines(20_000, seed=1)
    total = int(rate * seconds)
    report = open(workdir / "live.jsonl", "wb")  # a file, not a pipe: the JSON lines never block the watch
    watch = subprocess.Popen([sys.executable, "-m", "cpbcg", "watch", str(log), "--max-forwards", str(total), "--duration", str(seconds + 120),
                              "--format", "json", "--page-size", "1", "--chunked-prefill-size", "8192"], cwd=ROOT, stdout=report,
                             stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    written, samples = 0, []
    with open(log, "w") as f:
        f.write(SYNTHETIC_HEADER + startup_lines())
        f.flush()
        start = time.monotonic()
        next_sample = start + 1
        while written < total:
            due = min(total, int((time.monotonic() - start) * rate))
            if due > written:
                f.write("".join(sample[(written + i) % len(sample)] for i in range(due - written)))
                f.flush()
                written = due
            if time.monotonic() >= next_sample:
                samples.append(rss_mib(watch.pid))
                next_sample += 1
            time.sleep(0.01)
    done_writing = time.monotonic()
    while watch.poll() is None and time.monotonic() - done_writing < 120:
        time.sleep(0.01)
    caught_up = time.monotonic() - done_writing
    report.close()
    import json

    final = json.loads((workdir / "live.jsonl").read_text().splitlines()[-1])
    print(f"live: a writer at {rate:,} forwards/s for {seconds:.0f} s ({total:,} forwards); the watch read {final['forwards']:,} and "
          f"stopped {caught_up:.2f} s after the last line was written; its RSS every second (MiB): {', '.join(f'{s:.0f}' for s in samples)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forwards", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--skip-catch-up", action="store_true")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench-watch"))
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    if not a.skip_catch_up:
        catch_up(a.workdir, a.forwards)
    live(a.workdir, a.rate, a.seconds)


if __name__ == "__main__":
    main()
