"""The embedded default workload: a seeded synthetic batch stream.

`cpbcg plan` with no `--trace` runs on this, so a newcomer sees a result at once. It is a
stand-in for a busy chat deployment, not a measurement: request lengths are log-normal (median
1,800 tokens, sigma 1.0, clipped to 16..65,536), a random number of requests wait at each
prefill step (1 + Poisson(1.2)), and they are packed FCFS into chunks of `chunk_tokens` (8,192)
the way chunked prefill does it (domain §6): the in-progress chunk first, whole requests while
they fit, the first one that does not fit cut to the remaining budget. Seed 2026, 20,000
forwards.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cpbcg.planner.layout import BatchSet

DEFAULT_SEED = 2026
DEFAULT_NUM_BATCHES = 20_000
DEFAULT_CHUNK_TOKENS = 8192


def synthetic_batches(
    num_batches: int = DEFAULT_NUM_BATCHES, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, seed: int = DEFAULT_SEED
) -> BatchSet:
    """Generate the default workload (see module doc). Deterministic for a given seed."""
    rng = np.random.default_rng(seed)
    waiting: deque[int] = deque()
    batches: list[list[int]] = []
    while len(batches) < num_batches:
        arrivals = 1 + rng.poisson(1.2)
        lengths = np.clip(rng.lognormal(np.log(1800), 1.0, size=arrivals), 16, 65536).astype(int)
        waiting.extend(int(x) for x in lengths)
        budget, batch = chunk_tokens, []
        while waiting and budget > 0:
            head = waiting[0]
            if head <= budget:
                batch.append(waiting.popleft())
                budget -= head
            else:
                batch.append(budget)
                waiting[0] = head - budget
                budget = 0
        batches.append(batch)
    return BatchSet.from_lists(batches)
