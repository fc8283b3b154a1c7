"""Time the exact optimiser (`cpbcg.planner.optimise`): K = 64 buckets over ~16,384 candidate sizes.

Run: `.venv/bin/python benchmarks/bench_optimise.py` (numbers are reported, not asserted).

Workloads:
* `dense-16k`: one batch of every size 8..16,384 tokens (single request, random weights), cp 4,
  max_tokens 16,384: every size is a candidate (the worst case for the DP's band scan).
* `embedded-default`: the embedded default workload (20,000 forwards), cp 4, max_tokens 8,192.
"""

from __future__ import annotations

import time

import numpy as np

from cpbcg.planner.cost import CostModel
from cpbcg.planner.evaluate import Demand
from cpbcg.planner.layout import BatchSet, CPLayout
from cpbcg.planner.optimise import optimise
from cpbcg.planner.synthetic import synthetic_batches


def dense(max_tokens: int, seed: int = 0) -> BatchSet:
    rng = np.random.default_rng(seed)
    sizes = np.arange(8, max_tokens + 1, dtype=np.int64)
    counts = rng.integers(1, 100, size=len(sizes))
    return BatchSet(sizes, np.arange(len(sizes) + 1, dtype=np.int64), counts)


def run(name: str, batches: BatchSet, max_tokens: int, k: int, cost: CostModel) -> None:
    cp = CPLayout(4)
    start = time.perf_counter()
    demand = Demand.of(batches, cp).aggregate()
    result = optimise(demand, cp, cost, k, max_tokens)
    elapsed = time.perf_counter() - start
    print(
        f"{name:18s} K={k:3d} items={len(demand.num_tokens):6d} grid={result.grid_size:6d} "
        f"candidates={result.num_candidates:6d} cost={result.cost_ms[k] / 1e3:10.3f} s  time={elapsed:6.2f} s"
    )


def main() -> None:
    default_cost = CostModel(0.5, 4.0, 0.025)
    cheap_graph = CostModel(0.5, 4.0, 0.0001)  # graph never costlier than eager
    run("dense-16k", dense(16384), 16384, 64, default_cost)
    run("dense-16k cheap", dense(16384), 16384, 64, cheap_graph)
    run("dense-8k", dense(8192), 8192, 64, default_cost)
    run("embedded-default", synthetic_batches(), 8192, 58, default_cost)
    run("embedded-default", synthetic_batches(), 8192, 64, default_cost)


if __name__ == "__main__":
    main()
