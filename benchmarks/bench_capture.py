"""Benchmark: where a `cpbcg capture` CPU dry run spends its wall time (issue 34).

Run: `python benchmarks/bench_capture.py [--buckets sglang-default:8192] [--trace T] [--cp-size 4]
[--workdir /tmp/cpbcg-bench-capture] [--threads 1]`

Runs `cpbcg capture --preset tiny --dry-run` once in a fresh process (the default list is
SGLang's for 8192 tokens: 57 buckets once those below 2*cp_size are dropped; the default trace
is the shared Azure conversation trace when it is there), then prints the wall and CPU time of
the process and the manifest's accounting (`wall_s`): setup, trace sampling, capture (warm-ups),
verification (layouts replayed), and the five slowest buckets by phase. CPU = user + system.
Numbers go in the README; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_TRACE = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", default="sglang-default:8192")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    parser.add_argument("--cp-size", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench-capture"))
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads of the capture process (OMP_NUM_THREADS); default: torch's own (one per core)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    manifest = args.workdir / "manifest.json"
    argv = [sys.executable, "-m", "cpbcg", "capture", "--preset", "tiny", "--cp-size", str(args.cp_size), "--buckets", args.buckets,
            "--dry-run", "-o", str(manifest)] + (["--trace", str(args.trace)] if args.trace else [])
    start = time.perf_counter()
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 3):
        sys.exit(done.stderr.decode()[-2000:])
    doc = json.loads(manifest.read_text())
    w = doc["wall_s"]
    print(f"{' '.join(argv[1:])}" + (f" (OMP_NUM_THREADS={args.threads})" if args.threads else ""))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"process: {wall:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU; {len(doc['buckets'])} buckets")
    print(f"run_capture {w['total_s']:.1f} s = setup {w['setup_s']:.1f} + trace sampling {w['sampling_s']:.1f} + capture "
          f"{w['capture_s']:.1f} (warm-ups {w['warmup_s']:.1f}) + verification {w['verify_s']:.1f} ({w['layouts']} layouts; "
          f"timed forwards {w['timing_s']:.1f}) + other {w['total_s'] - w['setup_s'] - w['sampling_s'] - w['capture_s'] - w['verify_s']:.1f}")
    slow = sorted(doc["buckets"], key=lambda r: -r["wall_s"]["total_s"])[:5]
    for r in slow:
        b = r["wall_s"]
        print(f"  bucket {r['capture_num_tokens']:>5}: {b['total_s']:.1f} s (capture {r['capture_s']:.2f}, verify {b['verify_s']:.1f} "
              f"over {b['layouts']} layouts, other {b['other_s']:.2f})")


if __name__ == "__main__":
    main()
