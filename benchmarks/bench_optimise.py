"""Time the exact optimiser (`cpbcg.planner.optimise.optimiser`), one cold process per run.

Run: `python benchmarks/bench_optimise.py [--runs 5] [--only NAME]` from the repository root
(numbers are reported, not asserted). Each run launches a fresh Python process that imports
cpbcg, builds the workload and runs the optimiser once; the parent prints, per workload,
min-median-max over the runs of:

* `process s`: wall time of the whole child process (start-up, imports, workload, optimiser),
* `process cpu s`: its user + system CPU time (steadier than wall time on a shared machine),
* `optimise s` / `optimise cpu s`: the `optimise` call alone, measured inside the child.

Workloads (cp 4, default cost model unless named):
* `dense-16k`: one batch of every size 8..16,384 tokens (single request, random weights),
  max_tokens 16,384, K = 64: every size is a candidate (the worst case).
  `gap-free` is the default; `allow-gaps` the unconstrained list; `cheap` a cost model where
  no replay costs more than eager; `time` the time objective (band scan, `O(K * sum band)`);
  `anchors` the general transition-cost evaluator that takes over when the zone table would be
  too large (`transition_costs.ZONE_TABLE_LIMIT`), forced here.
* `dense-8k`: the same up to 8,192.
* `embedded-default`: the embedded default workload (20,000 forwards), max_tokens 8,192.
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

WORKLOADS = {
    # name: (batches, max_tokens, K, cost, options)
    "dense-16k": ("dense:16384", 16384, 64, "default", {}),
    "dense-16k anchors": ("dense:16384", 16384, 64, "default", {}),
    "dense-16k allow-gaps": ("dense:16384", 16384, 64, "default", {"allow_gaps": True}),
    "dense-16k cheap": ("dense:16384", 16384, 64, "cheap", {}),
    "dense-8k": ("dense:8192", 8192, 64, "default", {}),
    "embedded-default K58": ("embedded", 8192, 58, "default", {}),
    "embedded-default K64": ("embedded", 8192, 64, "default", {}),
    "embedded-default K64 allow-gaps": ("embedded", 8192, 64, "default", {"allow_gaps": True}),
    "dense-16k time": ("dense:16384", 16384, 64, "default", {"objective": "time", "allow_gaps": True}),
}


def child(name: str) -> None:
    """One run in this (fresh) process; prints one JSON line."""
    import numpy as np

    from cpbcg.planner.costs.cost import CostModel
    from cpbcg.planner.evaluate import Demand
    from cpbcg.planner.model.layout import BatchSet, CPLayout
    from cpbcg.planner.optimise.optimiser import optimise
    from cpbcg.assembly.embedded import synthetic_batches

    source, max_tokens, k, cost_name, options = WORKLOADS[name]
    if "anchors" in name:
        from cpbcg.planner.optimise import transition_costs

        transition_costs.ZONE_TABLE_LIMIT = -1
    if source == "embedded":
        batches = synthetic_batches()
    else:
        top = int(source.split(":")[1])
        rng = np.random.default_rng(0)
        sizes = np.arange(8, top + 1, dtype=np.int64)
        batches = BatchSet(sizes, np.arange(len(sizes) + 1, dtype=np.int64), rng.integers(1, 100, size=len(sizes)))
    cost = CostModel(0.5, 4.0, 0.025) if cost_name == "default" else CostModel(0.5, 4.0, 0.0001)
    cp = CPLayout(4)
    accepted = inspect.signature(optimise).parameters  # older versions lack some options
    options = {key: value for key, value in options.items() if key in accepted}
    wall, cpu = time.perf_counter(), time.process_time()
    demand = Demand.of(batches, cp).aggregate()
    result = optimise(demand, cp, cost, k, max_tokens, **options)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({
        "wall": wall, "cpu": cpu, "candidates": result.num_candidates, "grid": result.grid_size,
        "items": len(demand.num_tokens), "cost_s": result.cost_ms[k] / 1e3, "list_head": result.buckets[k][:4],
    }))


def spread(values: list[float]) -> str:
    return f"{min(values):6.2f}-{statistics.median(values):.2f}-{max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=None, help="run only the workloads whose name contains this")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    root = Path(__file__).resolve().parent.parent
    print(f"{'workload':34s} {'cand':>6s} {'process s':>16s} {'process cpu s':>16s} {'optimise s':>16s} {'optimise cpu s':>16s}")
    for name in WORKLOADS:
        if args.only and args.only not in name:
            continue
        walls, cpus, inner, inner_cpu, info = [], [], [], [], {}
        for _ in range(args.runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            out = subprocess.run([sys.executable, __file__, "--child", name], cwd=root, check=True,
                                 capture_output=True, text=True).stdout
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            info = json.loads(out.strip().splitlines()[-1])
            inner.append(info["wall"])
            inner_cpu.append(info["cpu"])
        print(f"{name:34s} {info['candidates']:6d} {spread(walls):>16s} {spread(cpus):>16s} "
              f"{spread(inner):>16s} {spread(inner_cpu):>16s}   cost {info['cost_s']:.3f} s")


if __name__ == "__main__":
    main()
