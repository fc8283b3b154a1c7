"""Prefill batch formation: a discrete-event simulation of SGLang's prefill scheduler.

Turns a request trace (arrival time, prompt length, prefix hashes) into the stream of prefill
forwards the server would run (domain §6; docs/scheduler.md states the model and its limits):

* requests arrive at their timestamps (gaps divided by `time_scale`), or, for traces without
  timestamps, as a seeded Poisson process at `rate` requests/s;
* one prefill forward at a time; a forward of `n` tokens takes
  `prefill_fixed_ms / 1000 + n / prefill_tokens_per_s` seconds, and arrivals meanwhile queue;
* each forward is formed FCFS like SGLang's `PrefillAdder` (page size 1): the in-progress
  chunked request first, then whole requests while they fit the chunk budget
  (`chunked_prefill_size`); the first that does not fit is cut to the remaining budget,
  continues in the next forwards and closes this one. At most `prefill_max_requests` and
  `max_running_requests` requests per forward; the forward closes once `max_prefill_tokens`
  is used up; without chunking (-1) a request of at least the remaining `max_prefill_tokens`
  waits for the next forward unless it would be the first;
* a prefix cache over `hash_ids` (512-token blocks) shrinks a request's extend length by its
  cached leading blocks, keeping at least one token (SGLang's `max_prefix_len = input_len - 1`).
  A request's blocks enter the cache when its prefill finishes.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from cpbcg.config import SchedulerConfig
from cpbcg.planner.layout import BatchSet
from cpbcg.planner.traces.records import BLOCK_TOKENS, RequestChunk

BATCHES_PER_CHUNK = 65536
"""Forwards per yielded `BatchSet` (bounds memory)."""


@dataclass(frozen=True)
class SimulationSummary:
    """What the simulation saw and did (all counts over the whole trace)."""

    requests: int
    """Requests read from the trace."""
    input_tokens: int
    """Prompt tokens of all requests."""
    cached_tokens: int
    """Prompt tokens served from the prefix cache (not prefilled)."""
    extend_tokens: int
    """Tokens prefilled: `input_tokens - cached_tokens` = the sum over all forwards."""
    batches: int
    """Prefill forwards formed."""
    chunked_requests: int
    """Requests cut into more than one chunk."""
    simulated_s: float
    """Simulated time from the first arrival to the end of the last forward (s)."""
    busy_s: float
    """Simulated time spent in prefill forwards (s)."""
    max_waiting: int
    """Most requests waiting at once (queue length when a forward was formed)."""
    synthetic_arrivals: bool
    """Arrival times were drawn (Poisson at `rate`) because the trace has none."""


class PrefixCache:
    """Prefix cache over 512-token blocks: `unlimited` (never evicts) or LRU of `capacity_tokens`.

    Hash ids name a block together with everything before it (Mooncake's remapped prefix
    hashes), so a request's hit is the run of its leading ids already cached. LRU order is
    kept leaf-first like a radix tree's eviction: a request's blocks are touched last block
    first, so its first block is the most recent and evicted last.
    """

    def __init__(self, capacity_tokens: int | None):
        self.capacity_blocks = None if capacity_tokens is None else capacity_tokens // BLOCK_TOKENS
        self._blocks: OrderedDict[int, None] | set[int] = set() if capacity_tokens is None else OrderedDict()

    def cached_tokens(self, hash_ids: list[int], input_tokens: int) -> int:
        """Tokens of the request's prompt already cached, at most `input_tokens - 1`."""
        blocks, hit = self._blocks, 0
        for block in hash_ids:
            if block not in blocks:
                break
            hit += 1
        if hit and self.capacity_blocks is not None:
            for block in reversed(hash_ids[:hit]):
                blocks.move_to_end(block)
        return min(hit * BLOCK_TOKENS, input_tokens - 1)

    def insert(self, hash_ids: list[int]) -> None:
        """Cache every block of a request whose prefill finished (evicting LRU blocks if full)."""
        blocks = self._blocks
        if self.capacity_blocks is None:
            blocks.update(hash_ids)
            return
        for block in reversed(hash_ids):
            blocks[block] = None
            blocks.move_to_end(block)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)


def make_cache(setting: str | int) -> PrefixCache | None:
    """The cache for `SchedulerConfig.prefix_cache` (`off` gives None)."""
    if setting == "off":
        return None
    return PrefixCache(None if setting == "unlimited" else int(setting))


class _Arrivals:
    """Pulls request chunks on demand and hands out requests in arrival order."""

    def __init__(self, chunks: Iterable[RequestChunk], cfg: SchedulerConfig, keep_hashes: bool):
        self._chunks = iter(chunks)
        self._rng = np.random.default_rng(cfg.seed)
        self._rate, self._scale, self._keep_hashes = cfg.rate, cfg.time_scale, keep_hashes
        self._origin_s: float | None = None
        self._clock_s = 0.0
        self._times: list[float] = []
        self._lens: list[int] = []
        self._hashes: list | None = None
        self._i = 0
        self.requests = self.input_tokens = 0
        self.synthetic = False

    def next_time_s(self) -> float | None:
        """Arrival time of the next request not yet handed out, or None at the end."""
        if self._i == len(self._times) and not self._refill():
            return None
        return self._times[self._i]

    def admit(self, now_s: float, lens: deque, hashes: deque | None) -> None:
        """Append every request arrived by `now_s` to the waiting queue."""
        while True:
            times, i, n = self._times, self._i, len(self._times)
            j = i
            while j < n and times[j] <= now_s:
                j += 1
            lens.extend(self._lens[i:j])
            if hashes is not None:
                hashes.extend(self._hashes[i:j] if self._hashes is not None else [()] * (j - i))
            self._i = j
            if j < n or not self._refill():
                return

    def _refill(self) -> bool:
        chunk = next(self._chunks, None)
        if chunk is None:
            return False
        n = chunk.num_requests
        if chunk.arrival_s is None:
            self.synthetic = True
            times = self._clock_s + np.cumsum(self._rng.exponential(1.0 / self._rate, n)) / self._scale
        else:
            if self._origin_s is None:
                self._origin_s = float(chunk.arrival_s[0])
            times = (chunk.arrival_s - self._origin_s) / self._scale
        if n:
            self._clock_s = float(times[-1])
        self._times, self._lens, self._i = times.tolist(), chunk.input_tokens.tolist(), 0
        self._hashes = chunk.hash_ids if self._keep_hashes else None
        self.requests += n
        self.input_tokens += int(chunk.input_tokens.sum())
        return True


class Simulation:
    """Iterate to get the prefill forwards as `BatchSet` chunks; `summary()` once exhausted.

    Memory is bounded by the waiting queue (requests arrived but not yet started) and the
    prefix cache, not by the trace length.
    """

    def __init__(self, chunks: Iterable[RequestChunk], cfg: SchedulerConfig):
        self.cfg = cfg
        self.cache = make_cache(cfg.prefix_cache)
        self.arrivals = _Arrivals(chunks, cfg, self.cache is not None)
        self._chunk_tokens = None if cfg.chunked_prefill_size == -1 else cfg.chunked_prefill_size
        limits = [x for x in (cfg.prefill_max_requests, cfg.max_running_requests) if x is not None]
        self._max_requests = min(limits) if limits else 1 << 62
        self._totals = dict(cached_tokens=0, extend_tokens=0, batches=0, chunked_requests=0, max_waiting=0)
        self._start_s: float | None = None
        self._now_s = 0.0
        self._busy_s = 0.0

    def __iter__(self) -> Iterator[BatchSet]:
        lens: deque[int] = deque()
        hashes: deque | None = deque() if self.cache is not None else None
        self._chunked: list | None = None  # [remaining extend tokens, hash_ids]
        out_lens: list[int] = []
        out_sizes: list[int] = []
        self._start_s = self.arrivals.next_time_s()
        self._now_s = self._start_s or 0.0
        while True:
            self.arrivals.admit(self._now_s, lens, hashes)
            if self._chunked is None and not lens:
                next_s = self.arrivals.next_time_s()
                if next_s is None:
                    break
                self._now_s = max(self._now_s, next_s)
                continue
            size = self._form_batch(lens, hashes, out_lens)
            out_sizes.append(size)
            if len(out_sizes) >= BATCHES_PER_CHUNK:
                yield BatchSet.from_sizes(out_lens, out_sizes)
                out_lens, out_sizes = [], []
        if out_sizes:
            yield BatchSet.from_sizes(out_lens, out_sizes)

    def _form_batch(self, lens: deque, hashes: deque | None, out: list[int]) -> int:
        """Form one forward from the queue, append its extend lengths to `out`, advance time."""
        totals, cache = self._totals, self.cache
        totals["max_waiting"] = max(totals["max_waiting"], len(lens))
        rem_chunk = self._chunk_tokens
        rem_input = self.cfg.max_prefill_tokens
        batch: list[int] = []
        finished: list = []
        if self._chunked is not None:
            remaining, blocks = self._chunked
            take = min(remaining, rem_chunk)
            batch.append(take)
            rem_chunk -= take
            rem_input -= take
            if take < remaining:
                self._chunked[0] = remaining - take
            else:
                finished.append(blocks)
                self._chunked = None
        while lens and len(batch) < self._max_requests and rem_input > 0 and (rem_chunk is None or rem_chunk > 0):
            input_tokens = lens[0]
            blocks = hashes[0] if hashes is not None else None
            cached = cache.cached_tokens(blocks, input_tokens) if blocks else 0
            extend = input_tokens - cached
            if rem_chunk is None and batch and extend >= rem_input:
                break
            lens.popleft()
            if hashes is not None:
                hashes.popleft()
            totals["cached_tokens"] += cached
            if rem_chunk is None or extend <= rem_chunk:
                batch.append(extend)
                finished.append(blocks)
                rem_input -= extend
                if rem_chunk is not None:
                    rem_chunk -= extend
            else:
                batch.append(rem_chunk)
                self._chunked = [extend - rem_chunk, blocks]
                totals["chunked_requests"] += 1
                break
        self._run_forward(batch, finished)
        out.extend(batch)
        return len(batch)

    def _run_forward(self, batch: list[int], finished: list) -> None:
        num_tokens = sum(batch)
        duration_s = self.cfg.prefill_fixed_ms / 1000.0 + num_tokens / self.cfg.prefill_tokens_per_s
        self._now_s += duration_s
        self._busy_s += duration_s
        self._totals["extend_tokens"] += num_tokens
        self._totals["batches"] += 1
        if self.cache is not None:
            for blocks in finished:
                if blocks:
                    self.cache.insert(blocks)

    def summary(self) -> SimulationSummary:
        """Counts so far (complete once iteration has finished)."""
        start = self._start_s if self._start_s is not None else 0.0
        return SimulationSummary(
            requests=self.arrivals.requests,
            input_tokens=self.arrivals.input_tokens,
            simulated_s=max(0.0, self._now_s - start),
            busy_s=self._busy_s,
            synthetic_arrivals=self.arrivals.synthetic,
            **self._totals,
        )
