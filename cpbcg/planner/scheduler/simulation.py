"""The event loop: prefill and decode as SGLang's `Scheduler.event_loop_normal` alternates them.

Each turn: requests that arrived join the waiting queue; `get_next_batch_to_run` forms a prefill
forward if it can (`_get_new_batch_prefill_raw`: the in-progress chunk, then FCFS admission by
`PrefillAdder`), otherwise the running batch decodes (`update_running_batch`); an empty server
waits for the next arrival. Decode steps are run in runs between events (a finish, an
arrival), which is exact because nothing changes in between. docs/scheduler.md has the model.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable, Iterable, Iterator

import numpy as np

from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.replay_limits import SeqBatchSet
from cpbcg.planner.traces.records import RequestChunk
from cpbcg.planner.scheduler.adder import AddResult, PrefillAdder, fill_forward
from cpbcg.planner.scheduler.arrivals import Arrivals
from cpbcg.planner.scheduler.cache import make_cache
from cpbcg.planner.scheduler.running import RunningSet
from cpbcg.planner.scheduler.settings import SchedulerSettings
from cpbcg.planner.scheduler.summary import SimulationSummary, Tally

BATCHES_PER_CHUNK = 65536
"""Forwards per yielded `BatchSet` (bounds memory)."""


class Simulation:
    """Iterate to get the prefill forwards as `BatchSet` chunks; `summary()` once exhausted.

    `chunks`: the trace's `RequestChunk`s (read lazily); `progress(requests_read)` is called as
    the trace is read. Memory is bounded by the waiting queue, the running requests and the
    prefix cache, not by the trace length.
    """

    def __init__(
        self,
        chunks: Iterable[RequestChunk],
        settings: SchedulerSettings | None = None,
        progress: Callable[[int], None] | None = None,
    ):
        self.settings = self.cfg = settings or SchedulerSettings()  # `cfg`: the name commands read
        self.cache = make_cache(self.settings.prefix_cache)
        self.arrivals = Arrivals(chunks, self.settings, self.cache is not None, progress)
        self.running = RunningSet(self.settings.clip_max_new_tokens, self.settings.page_size)
        self.tally = Tally()
        self._slots = self.settings.request_slots
        self._pool = self.settings.kv_pool_tokens
        self._ratio = self.settings.init_new_token_ratio
        self._batch_full = False
        self._chunked: list | None = None  # [remaining extend, item, extend tokens prefilled so far, prefix]
        self._start_s: float | None = None
        self._now_s = 0.0
        self._max_seq = 0  # longest sequence (prefix + prefilled) of the forward being formed
        self._multimodal = False  # the forward being formed holds a request with images
        st = self.settings  # settings read every forward or decode run, looked up once
        self._decode_on, self._mixed_on = st.decode, st.enable_mixed_chunk
        self._step_fixed_ms, self._step_ms_per_request = st.decode_step_fixed_ms, st.decode_step_ms_per_request
        self._min_ratio, self._ratio_decay = st.min_new_token_ratio, st.new_token_ratio_decay
        self._prefill_fixed_s, self._prefill_tokens_per_s = st.prefill_fixed_ms / 1000.0, st.prefill_tokens_per_s
        if self.cache is None:
            self._lookup = _uncached_lookup

    def __iter__(self) -> Iterator[BatchSet]:
        waiting: deque = deque()
        out_lens: list[int] = []
        out_sizes: list[int] = []
        out_seq: list[int] = []
        out_mm: list[bool] = []
        self._start_s = self.arrivals.next_time_s()
        self._now_s = self._start_s or 0.0
        arrivals, running = self.arrivals, self.running
        while True:
            if arrivals.due(self._now_s):
                arrivals.admit(self._now_s, waiting)
            batch = self._prefill(waiting) if waiting or self._chunked is not None else None
            if batch:
                out_lens.extend(batch)
                out_sizes.append(len(batch))
                out_seq.append(self._max_seq)
                out_mm.append(self._multimodal)
                if len(out_sizes) >= BATCHES_PER_CHUNK:
                    yield _chunk(out_lens, out_sizes, out_seq, out_mm)
                    out_lens, out_sizes, out_seq, out_mm = [], [], [], []
            elif running.num_requests:
                self._decode(bool(waiting))
            elif not self._idle(waiting):
                break
        if out_sizes:
            yield _chunk(out_lens, out_sizes, out_seq, out_mm)

    def _idle(self, waiting: deque) -> bool:
        """Nothing runs: wait for the next arrival (False at the end of the trace)."""
        self._ratio = self.settings.init_new_token_ratio
        self._batch_full = False
        if waiting:
            return True  # the head never fits the KV pool: `_prefill` forces it next turn
        next_s = self.arrivals.next_time_s()
        if next_s is None:
            return False
        self._now_s = max(self._now_s, next_s)
        return True

    def _prefill(self, waiting: deque) -> list[int]:
        """Form and run one prefill forward; its extend lengths, or [] when none can be formed."""
        s, running, slots = self.settings, self.running, self._slots
        if not running.num_requests:
            self._batch_full = False  # 0.5.23: an empty running batch clears the flag
        if self._chunked is None and (not waiting or self._batch_full):
            return []
        allocatable = None if slots is None else slots - running.num_requests
        if self._chunked is None and allocatable is not None and allocatable <= 0:
            self._batch_full = True
            return []
        tally = self.tally
        if len(waiting) > tally.max_waiting:
            tally.max_waiting = len(waiting)
        mixed = running.num_requests if self._mixed_on else 0
        force = self._chunked is None and not running.num_requests and tally.forced_pending
        kv_free = None if self._pool is None or force else self._pool - running.held_tokens - self._chunked_held()
        adder = PrefillAdder(s, mixed, kv_free, self._ratio * running.reserve_tokens, allocatable)
        batch: list[int] = []
        done: list = []
        self._max_seq, self._multimodal = 0, False
        if self._chunked is not None:
            _, item, held, prefix = self._chunked
            batch.append(self._continue_chunk(adder, done))
            self._max_seq, self._multimodal = prefix + held + batch[0], item[3] > 0
        admitted: list = []
        if not self._batch_full:
            admitted, result, slots_full = fill_forward(adder, waiting, self._lookup)
            self._note_stop(result, slots_full, bool(batch or admitted))
        max_seq, multimodal, cached = self._max_seq, self._multimodal, 0
        for item, extend, taken in admitted:
            batch.append(taken)
            prefix = item[0] - extend
            if prefix + taken > max_seq:
                max_seq = prefix + taken
            if item[3]:
                multimodal = True
            cached += prefix
            if taken < extend:
                self._chunked = [extend - taken, item, taken, prefix]
                tally.chunked_requests += 1
            else:
                done.append((item, extend))
        self._max_seq, self._multimodal = max_seq, multimodal
        tally.cached_tokens += cached
        if batch:
            self._run_forward(batch, mixed, done)
        return batch + [1] * mixed if batch else []

    def _continue_chunk(self, adder: PrefillAdder, done: list) -> int:
        remaining, item, held, prefix = self._chunked
        take = adder.add_chunked(remaining, item[2])
        if take < remaining:
            self._chunked = [remaining - take, item, held + take, prefix]
        else:
            self._chunked = None
            done.append((item, held + take))
        return take

    def _note_stop(self, result: AddResult, slots_full: bool, formed: bool) -> None:
        """SGLang sets `batch_is_full` when the KV budget or the request slots stop admission."""
        self.tally.forced_pending = False
        if self.settings.decode and (result is AddResult.NO_TOKEN or slots_full):
            self._batch_full = True
            self.tally.kv_limited_forwards += result is AddResult.NO_TOKEN
            self.tally.slot_limited_forwards += slots_full
            if not formed and not self.running.num_requests and self._chunked is None:
                self.tally.forced_pending = True  # an empty server cannot fit the head request
                self.tally.kv_oversized_requests += 1
                self._batch_full = False

    def _lookup(self, item: tuple) -> tuple[int, int, int]:
        input_tokens, blocks, output, _ = item
        cached = self.cache.cached_tokens(blocks, input_tokens) if blocks and self.cache is not None else 0
        return input_tokens - cached, cached, output

    def _chunked_held(self) -> int:
        """KV the in-progress chunk holds: its prefilled tokens in whole pages."""
        if self._chunked is None:
            return 0
        _, _, held, prefix = self._chunked
        return self.ceil_paged(prefix + held) - prefix

    def _run_forward(self, batch: list[int], mixed: int, done: list) -> None:
        """Advance time by the forward; finished prefills join the running batch."""
        tally, running, decode = self.tally, self.running, self._decode_on
        num_tokens = sum(batch)
        duration_s = self._prefill_fixed_s + (num_tokens + mixed) / self._prefill_tokens_per_s
        self._now_s += duration_s
        tally.busy_s += duration_s
        tally.extend_tokens += num_tokens
        tally.batches += 1
        if mixed:
            tally.mixed_decode_tokens += mixed
            tally.decoded_tokens += mixed
            self._note_retraction(1)
            running.advance(1)
            self._batch_full = False  # 0.5.23: the mixed batch becomes the running batch, flag clear
        if self._chunked is not None or not running.num_requests:
            # 0.5.23: the forward's batch shrinks when the chunk leaves it, and it becomes the
            # running batch (flag clear) when none was running
            self._batch_full = False
        cache = self.cache
        for item, extend in done:
            if cache is not None and item[1]:
                cache.insert(item[1])
            if decode and item[2] > 1:
                running.add(extend, item[2] - 1, item[0] - extend)
            elif decode:
                self._batch_full = False  # finished at prefill: the running batch shrank
        if decode:
            self._see_running()
        tally.close_window(self._now_s)

    def ceil_paged(self, tokens: int) -> int:
        page = self.settings.page_size
        return -(-tokens // page) * page

    def _decode(self, waiting: bool) -> None:
        """Run decode steps up to the next event: a finish, or (queue empty) an arrival."""
        running, tally = self.running, self.tally
        n = running.num_requests
        step_s = (self._step_fixed_ms + self._step_ms_per_request * n) / 1000.0
        steps = running.steps_to_next_finish()
        if not waiting and not self._batch_full and self._chunked is None:
            next_s = self.arrivals.next_time_s()
            if next_s is not None:
                steps = min(steps, max(1, math.ceil((next_s - self._now_s) / step_s)))
        elif not self._batch_full:
            steps = 1  # a budget below one page stopped the forward: retry after a step
        if self._pool is not None:
            self._note_retraction(steps)
        self._now_s += steps * step_s
        tally.decode_s += steps * step_s
        if waiting or self._chunked is not None:
            tally.blocked_decode_s += steps * step_s
        tally.decode_steps += steps
        tally.decoded_tokens += steps * n
        self._ratio = max(self._ratio - steps * self._ratio_decay, self._min_ratio)
        if running.advance(steps) or not running.num_requests:
            self._batch_full = False
        self._see_running()

    def _see_running(self) -> None:
        """Note the running set's size and resident KV (the in-progress chunk's too) in the tally's peaks."""
        running, tally = self.running, self.tally
        if running.num_requests > tally.max_running:
            tally.max_running = running.num_requests
        kv_tokens = running.held_tokens_at(running.step)
        if self._chunked is not None:
            kv_tokens += self._chunked_held()
        if kv_tokens > tally.peak_kv_tokens:
            tally.peak_kv_tokens = kv_tokens

    def _note_retraction(self, steps: int) -> None:
        """Count decode runs whose KV (whole pages, the in-progress chunk too) would outgrow
        the pool: SGLang 0.5.23 retracts requests there (`retract_decode`), cpbcg does not."""
        if self._pool is not None and self.running.held_tokens_at(self.running.step + steps) + self._chunked_held() > self._pool:
            self.tally.retraction_points += 1

    def summary(self) -> SimulationSummary:
        """Counts so far (complete once iteration has finished)."""
        start = self._start_s if self._start_s is not None else 0.0
        return self.tally.summary(self.arrivals, self.settings, start, self._now_s)


def _uncached_lookup(item: tuple) -> tuple[int, int, int]:
    """`Simulation._lookup` without a prefix cache: nothing cached."""
    return item[0], 0, item[2]


def _chunk(lens: list[int], sizes: list[int], max_seq: list[int], multimodal: list[bool]) -> SeqBatchSet:
    """Forwards as a `SeqBatchSet`: each forward's longest sequence and whether it holds a
    request with images go along (`context_limit`, `multimodal_input`)."""
    plain = BatchSet.from_sizes(lens, sizes)
    return SeqBatchSet(plain.extend_seq_lens, plain.offsets, plain.counts, np.asarray(max_seq, dtype=np.int64),
                       np.asarray(multimodal, dtype=bool))
