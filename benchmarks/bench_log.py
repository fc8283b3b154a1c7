"""Benchmark: reading SGLang server logs (issue 34), end to end and the reader alone.

Run: `python benchmarks/bench_log.py [--prefills 500000] [--decodes 500000] [--runs 3]
[--workdir /tmp/cpbcg-bench-log]`

Writes a SYNTHETIC 0.5.23 log once (`make_sglang_log.py`: 500,000 `Prefill batch` and 500,000
`Decode batch` lines, about 190 MB), then times, each in a fresh process after one warm-up run
(page cache and bytecode, as on a machine that ran cpbcg before):

1. `cpbcg plan -t LOG --no-recommend` end to end (wall, CPU = user + system of the process and
   its children, peak RSS);
2. the reader alone (`LogReader`, the bulk prefilter of `log_scan`), MB/s of wall and of CPU;
3. the reader alone with `bulk=False` (the per-line parser every odd line still goes to), once.

Every figure is min / median / max over `--runs`. Numbers go in the README; nothing here is
asserted by the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_requests import WRAPPER  # noqa: E402
from make_sglang_log import write_log  # noqa: E402

READER = """
import json, sys, time
from cpbcg.engines.sglang.logs.log import LogReader
wall, cpu = time.perf_counter(), time.process_time()
reader = LogReader(sys.argv[1], bulk=sys.argv[2] == "bulk")
forwards = sum(len(c.num_tokens) for c in reader)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "forwards": forwards}))
"""


def run(argv: list[str]) -> dict[str, float]:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if done.returncode:
        sys.exit(done.stderr.decode()[-2000:])
    return json.loads(done.stdout.splitlines()[0])


def show(label: str, figures: list[dict[str, float]], size_mb: float | None = None) -> None:
    def mmm(key: str) -> str:
        values = sorted(f[key] for f in figures)
        return f"{values[0]:.2f}-{statistics.median(values):.2f}-{values[-1]:.2f}"

    line = f"{label}: wall {mmm('wall_s')} s, CPU {mmm('cpu_s')} s"
    if "rss_mb" in figures[0]:
        line += f", peak RSS {max(f['rss_mb'] for f in figures):.0f} MB"
    if size_mb:
        line += (f"; {size_mb / statistics.median(f['wall_s'] for f in figures):.0f} MB/s of wall, "
                 f"{size_mb / statistics.median(f['cpu_s'] for f in figures):.0f} MB/s of CPU")
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefills", type=int, default=500_000)
    parser.add_argument("--decodes", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/cpbcg-bench-log"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    log = args.workdir / f"sglang-{args.prefills}-{args.decodes}.log"
    if not log.exists():
        write_log(log, args.prefills, args.decodes)
    size_mb = log.stat().st_size / 1e6
    print(f"{log}: {size_mb:.1f} MB, {args.prefills:,} Prefill batch + {args.decodes:,} Decode batch lines", flush=True)
    plan = [sys.executable, "-c", WRAPPER, sys.executable, "-m", "cpbcg", "plan", "-t", str(log), "--no-recommend"]
    run(plan)  # warm-up
    show("cpbcg plan --no-recommend", [run(plan) for _ in range(args.runs)], size_mb)
    reader = [sys.executable, "-c", READER, str(log)]
    run(reader + ["bulk"])
    show("LogReader (bulk prefilter)", [run(reader + ["bulk"]) for _ in range(args.runs)], size_mb)
    show("LogReader(bulk=False) (per-line parser), 1 run", [run(reader + ["plain"])], size_mb)


if __name__ == "__main__":
    main()
