"""The embedded default workload: a seeded synthetic batch stream.

`cpbcg plan` with no `--trace` runs on this, so a newcomer sees a result at once. It is a
stand-in for a busy chat deployment, not a measurement: request lengths are log-normal (median
1,800 tokens, sigma 1.0, clipped to 16..65,536), a random number of requests wait at each
prefill step (1 + Poisson(1.2)), and they are packed FCFS into chunks of `chunk_tokens` (8,192)
by the scheduler's own packing rule (`scheduler.adder`, page size 1, no KV budget): the
in-progress chunk first, whole requests while they fit, the first one that does not fit cut
to the remaining budget. Seed 2026, 20,000 forwards.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.scheduler.adder import PrefillAdder, fill_forward
from cpbcg.planner.scheduler.settings import SchedulerSettings

DEFAULT_SEED = 2026
DEFAULT_NUM_BATCHES = 20_000
DEFAULT_CHUNK_TOKENS = 8192


def synthetic_batches(
    num_batches: int = DEFAULT_NUM_BATCHES, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, seed: int = DEFAULT_SEED
) -> BatchSet:
    """Generate the default workload (see module doc). Deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    settings = SchedulerSettings(chunked_prefill_size=chunk_tokens, max_prefill_tokens=1 << 62, decode=False)
    waiting: deque[int] = deque()
    chunked: int | None = None  # extend tokens left of the in-progress request
    batches: list[list[int]] = []
    while len(batches) < num_batches:
        arrivals = 1 + rng.poisson(1.2)
        lengths = np.clip(rng.lognormal(np.log(1800), 1.0, size=arrivals), 16, 65536).astype(int)
        waiting.extend(int(x) for x in lengths)
        adder = PrefillAdder(settings)
        batch = [] if chunked is None else [adder.add_chunked(chunked, 0)]
        chunked = None if chunked is None or batch[0] == chunked else chunked - batch[0]
        if chunked is None:
            admitted, _, _ = fill_forward(adder, waiting, _plain)
            batch += [taken for _, _, taken in admitted]
            if admitted and admitted[-1][2] < admitted[-1][1]:
                chunked = admitted[-1][1] - admitted[-1][2]
        batches.append(batch)
    return BatchSet.from_lists(batches)


def _plain(length: object) -> tuple[int, int, int]:
    """`(extend, prefix, output)` tokens of a synthetic request (its length, an int): no cache, no output."""
    if not isinstance(length, int):
        raise TypeError(f"a synthetic request is its length in tokens, not {type(length).__name__}")
    return length, 0, 0
