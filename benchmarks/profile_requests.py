"""Profile of the request path by stage: reading a request trace, then the scheduler simulation.

Run: `python benchmarks/profile_requests.py TRACE [--runs 3] [--no-decode] [--page-size 16]
[--mixed-chunk] [--no-kernel] [--cprofile]`

Reads the whole trace into `RequestChunk`s first (timed alone), then runs the simulation over
them (timed alone), and prints wall and CPU seconds of each stage and the simulation's CPU
microseconds per forward (prefill forwards); the first run of a process includes loading the
compiled loop (numba, `cpbcg[fast]`), `--no-kernel` times the Python generator instead. CPU
time is given because the machine these numbers come from is shared: wall time there varies
with other users' load. Nothing here is asserted.
`benchmarks/bench_requests.py` times `cpbcg plan` end to end against the batch path.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from cpbcg.planner.scheduler import SchedulerSettings, Simulation, simulation
from cpbcg.planner.traces import ReadOptions
from cpbcg.assembly.registry import open_trace


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-decode", action="store_true")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--mixed-chunk", action="store_true")
    parser.add_argument("--no-kernel", action="store_true", help="run the Python generator, not the compiled loop")
    parser.add_argument("--cprofile", action="store_true", help="print the simulation's top functions")
    args = parser.parse_args()
    simulation.USE_KERNEL = not args.no_kernel
    settings = SchedulerSettings(decode=not args.no_decode, page_size=args.page_size, enable_mixed_chunk=args.mixed_chunk)
    for run in range(args.runs):
        chunks, read_wall, read_cpu = timed(lambda: list(open_trace(args.trace, "auto", ReadOptions()).items))
        requests = sum(c.num_requests for c in chunks)
        sim = Simulation(chunks, settings)
        profile = cProfile.Profile() if args.cprofile and run == 0 else None
        if profile:
            profile.enable()
        forwards, sim_wall, sim_cpu = timed(lambda: sum(b.num_batches for b in sim))
        if profile:
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)
        print(f"run {run}: {requests:,} requests read in {read_wall:.2f} s ({read_cpu:.2f} s CPU); "
              f"{forwards:,} forwards simulated in {sim_wall:.2f} s ({sim_cpu:.2f} s CPU, "
              f"{sim_cpu / max(forwards, 1) * 1e6:.1f} us CPU/forward)")


if __name__ == "__main__":
    main()
