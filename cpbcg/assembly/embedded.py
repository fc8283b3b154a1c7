"""The embedded default workload: a seeded synthetic batch stream.

`cpbcg plan` with no `--trace` runs on this, so a newcomer sees a result at once. It is a
stand-in for a busy chat deployment, not a measurement: request lengths are log-normal (median
1,800 tokens, sigma 1.0, clipped to 16..65,536), a random number of requests wait at each
prefill step (1 + Poisson(1.2)), and they are packed FCFS into chunks of `chunk_tokens` (8,192)
by the scheduler simulation's own packing (`scheduler.Simulation`, page size 1, no decode, no KV
budget): the in-progress chunk first, whole requests while they fit, the first one that does
not fit cut to the remaining budget. Step k's requests arrive at k s and every forward takes
1 s, so forward k sees the arrivals of steps 0..k. Seed 2026, 20,000 forwards.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.scheduler.settings import SchedulerSettings
from cpbcg.planner.scheduler.simulation import Simulation
from cpbcg.planner.traces.records import RequestChunk

DEFAULT_SEED = 2026
DEFAULT_NUM_BATCHES = 20_000
DEFAULT_CHUNK_TOKENS = 8192


@lru_cache(maxsize=4)
def synthetic_batches(
    num_batches: int = DEFAULT_NUM_BATCHES, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, seed: int = DEFAULT_SEED
) -> BatchSet:
    """Generate the default workload (see module doc): `num_batches` forwards. Deterministic for
    a given seed. Runs the Python event loop (planning the default never imports numba). Built
    once per process and arguments (a plan opens it twice; about 0.3 s of CPU each): the arrays
    are read-only, so no caller can change what the next one gets."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(num_batches, dtype=np.int64)
    lengths: list[np.ndarray] = []
    for step in range(num_batches):
        counts[step] = arrivals = 1 + rng.poisson(1.2)
        lengths.append(np.clip(rng.lognormal(np.log(1800), 1.0, size=arrivals), 16, 65536).astype(np.int64))
    requests = RequestChunk(np.concatenate(lengths), np.repeat(np.arange(num_batches, dtype=np.float64), counts), None)
    settings = SchedulerSettings(chunked_prefill_size=chunk_tokens, max_prefill_tokens=1 << 62, decode=False,
                                 prefill_fixed_ms=1000.0, prefill_tokens_per_s=math.inf)
    sizes: list[np.ndarray] = []
    flat: list[np.ndarray] = []
    formed = 0
    for part in Simulation([requests], settings, compiled=False):  # the backlog after the last step is cut
        keep = min(part.num_batches, num_batches - formed)
        sizes.append(np.diff(part.offsets[: keep + 1]))
        flat.append(part.extend_seq_lens[: part.offsets[keep]])
        formed += keep
        if formed == num_batches:
            break
    batches = BatchSet.from_sizes(np.concatenate(flat), np.concatenate(sizes))
    for array in (batches.extend_seq_lens, batches.offsets, batches.counts):
        array.setflags(write=False)
    return batches
