"""The event loop: prefill and decode as SGLang's `Scheduler.event_loop_normal` alternates them.

Each turn: requests that arrived join the waiting queue; `get_next_batch_to_run` forms a prefill
forward if it can (`_get_new_batch_prefill_raw`: the in-progress chunk, then FCFS admission by
`PrefillAdder`), otherwise the running batch decodes (`update_running_batch`); an empty server
waits for the next arrival. Decode steps are run in runs between events (a finish, an
arrival), which is exact because nothing changes in between. docs/scheduler.md has the model.

Speed: the loop is one generator function over plain local variables (issue 24). It is where the
rules are written: the budgets of SGLang's `PrefillAdder` (each block names the method it
follows) and the running batch's sums, kept event-driven in O(log n) per request. Every running
request decodes one token per decode step, so after `step` global steps a request admitted at
step `s0` with `d` tokens to decode has `F - step` left (`F = s0 + d`) and has written
`kv + step - s0` KV tokens, held in whole pages counted from the start of its sequence (a cached
prefix before them is the cache's): finishes are a heap by `F`, the requests reserving `clip` a
heap by the step they fall below it, and the page padding a count of requests per sequence-end
residue modulo the page size. kernel.py restates this loop expression for expression for numba
(tests/test_scheduler_kernel.py compares the two float for float); tests/test_scheduler_rules.py
pins each rule on hand-worked cases and the conformance tests run this loop against SGLang
0.5.23's own scheduler code. The embedded default workload (assembly/embedded.py) is packed by it.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from math import ceil
from types import ModuleType
from typing import Callable, Iterable, Iterator

import numpy as np

from cpbcg.planner.model.layout import BatchSet
from cpbcg.planner.model.replay_limits import SeqBatchSet
from cpbcg.planner.scheduler.arrivals import Arrivals, Item
from cpbcg.planner.scheduler.cache import make_cache
from cpbcg.planner.scheduler.settings import SchedulerSettings
from cpbcg.planner.scheduler.summary import SimulationSummary, Tally
from cpbcg.planner.traces.records import RequestChunk

BATCHES_PER_CHUNK = 65536
"""Forwards per yielded `BatchSet` (bounds memory)."""
USE_KERNEL = True
"""Run the compiled loop (kernel.py) where it applies and numba is installed (tests turn it off)."""
KERNEL_MAX_SLOTS = 1 << 20
"""Request slots beyond which the generator runs (the kernel's heaps are sized by the slots)."""
KERNEL_MIN_REQUESTS = 100_000
"""Requests a trace must hold before the compiled loop runs it (`compiled=None`): below, the
generator is done (~15 us per forward, under ~1 s) before numba would have loaded its cached
loop (~0.7 s), let alone compiled it on first use after an install (~10 s)."""


class Simulation:
    """Iterate to get the prefill forwards as `BatchSet` chunks; `summary()` once exhausted.

    `chunks`: the trace's `RequestChunk`s (read lazily); `progress(requests_read)` is called as
    the trace is read. `compiled`: None runs the compiled loop where it applies (`compiled_loop`)
    and the trace holds at least `KERNEL_MIN_REQUESTS` requests (read ahead to tell), True where
    it applies whatever the length, False never (the Python loop; same forwards). Memory is bounded by the waiting queue, the running requests and the
    prefix cache, not by the trace length.
    """

    def __init__(
        self,
        chunks: Iterable[RequestChunk],
        settings: SchedulerSettings | None = None,
        progress: Callable[[int], None] | None = None,
        compiled: bool | None = None,
    ):
        self.settings = self.cfg = settings or SchedulerSettings()  # `cfg`: the name commands read
        self.cache = make_cache(self.settings.prefix_cache)
        self._ahead = _ReadAhead(chunks)
        self.arrivals = Arrivals(self._ahead, self.settings, self.cache is not None, progress)
        self.tally = Tally()
        self._start_s: float | None = None
        self._now_s = 0.0
        self._compiled = compiled

    def __iter__(self) -> Iterator[BatchSet]:
        wanted = self._compiled is not False and kernel_applies(self.settings) and (
            self._compiled is True or self._ahead.holds(KERNEL_MIN_REQUESTS))
        kernel = compiled_loop(self.settings) if wanted else None
        return _event_loop(self) if kernel is None else _kernel_loop(self, kernel)

    def summary(self) -> SimulationSummary:
        """Counts so far (complete once iteration has finished)."""
        start = self._start_s if self._start_s is not None else 0.0
        return self.tally.summary(self.arrivals, self.settings, start, self._now_s)


def _event_loop(sim: Simulation) -> Iterator[SeqBatchSet]:  # noqa: C901 - one function on purpose (see module doc)
    """`Simulation.__iter__`. Each block names the SGLang method it follows."""
    st, tally, cache, arrivals = sim.settings, sim.tally, sim.cache, sim.arrivals
    page, clip = st.page_size, st.clip_max_new_tokens
    chunk_budget, max_prefill, request_limit = st.chunk_tokens, st.max_prefill_tokens, st.prefill_max_requests
    slots, pool, decode_on, mixed_on = st.request_slots, st.kv_pool_tokens, st.decode, st.enable_mixed_chunk
    step_fixed_ms, step_ms_per_request = st.decode_step_fixed_ms, st.decode_step_ms_per_request
    graph_max_bs, eager_factor = st.decode_graph_max_bs, st.eager_decode_factor
    init_ratio, min_ratio, ratio_decay = st.init_new_token_ratio, st.min_new_token_ratio, st.new_token_ratio_decay
    prefill_fixed_s, prefill_tokens_per_s = st.prefill_fixed_ms / 1000.0, st.prefill_tokens_per_s
    # the running batch: decode steps run, requests, sums of the reserve and of the KV held
    step = num_running = below_count = below_finish_sum = held_base_sum = residue_sum = 0
    residues = [0] * page  # running requests per sequence-end residue; residue_sum: sum of residue * count
    finish_heap: list[tuple[int, int, int]] = []
    above_heap: list[int] = []
    # Tally counters
    cached_tokens = extend_tokens = batches = chunked_requests = max_waiting = 0
    decode_steps = decoded_tokens = mixed_decode_tokens = max_running = peak_kv_tokens = 0
    kv_limited = slot_limited = kv_oversized = retraction_points = 0
    busy_s = decode_s = blocked_s = 0.0
    decode_hist: dict[int, int] = {}  # decode-only steps per running batch size (sparse: the slots can be huge)
    forced_pending = batch_full = False
    window: tuple[float, float, float] | None = None
    ratio = init_ratio
    # the in-progress chunk: remaining extend, item, extend tokens prefilled so far, prefix
    chunked: tuple[int, Item, int, int] | None = None
    chunked_held = 0  # KV it holds: its prefilled tokens in whole pages (`_chunked_held`)
    # Arrivals: the current chunk's times and items, and the next index
    times: list[float] = []
    items: list[Item] = []
    n_times = i_next = 0
    exhausted = False

    def held_at(at_step: int) -> int:  # KV the running requests hold after `at_step` steps, page > 1
        # held_base_sum + num_running * at_step + sum over r of residues[r] * (-(r + at_step) % page)
        # (kernel.py's _held_at), in closed form: with t = at_step % page the pad of residue r is
        # page - r - t, plus page where r + t >= page, less page where r + t == page (or r = t = 0)
        t = at_step % page
        return (held_base_sum + num_running * (at_step - t) - residue_sum
                + page * (num_running - residues[-t % page] + sum(residues[page - t:])))

    def advance(steps: int) -> int:  # the running batch runs `steps` decode steps; returns how many finished
        nonlocal step, below_count, below_finish_sum, held_base_sum, residue_sum, num_running
        step += steps
        while above_heap and above_heap[0] <= step:  # requests falling below the clip
            below_count += 1
            below_finish_sum += heappop(above_heap) + clip
        finished = 0
        while finish_heap and finish_heap[0][0] <= step:
            f_step, base, residue = heappop(finish_heap)
            held_base_sum -= base
            residues[residue] -= 1
            residue_sum -= residue
            below_count -= 1
            below_finish_sum -= f_step
            num_running -= 1
            finished += 1
        return finished

    def sync() -> None:
        sim._now_s = now_s
        tally.cached_tokens, tally.extend_tokens, tally.batches, tally.chunked_requests = cached_tokens, extend_tokens, batches, chunked_requests
        tally.max_waiting, tally.decode_steps, tally.decoded_tokens = max_waiting, decode_steps, decoded_tokens
        tally.mixed_decode_tokens, tally.max_running, tally.peak_kv_tokens = mixed_decode_tokens, max_running, peak_kv_tokens
        tally.kv_limited_forwards, tally.slot_limited_forwards = kv_limited, slot_limited
        tally.kv_oversized_requests, tally.retraction_points = kv_oversized, retraction_points
        tally.busy_s, tally.decode_s, tally.blocked_decode_s = busy_s, decode_s, blocked_s
        tally.forced_pending, tally.window = forced_pending, window
        sizes = np.fromiter(decode_hist, dtype=np.int64, count=len(decode_hist))
        tally.decode_hist = np.zeros(int(sizes.max()) + 1 if len(sizes) else 1, dtype=np.int64)
        tally.decode_hist[sizes] = np.fromiter(decode_hist.values(), dtype=np.int64, count=len(decode_hist))

    waiting: deque[Item] = deque()
    out_lens: list[int] = []
    out_sizes: list[int] = []
    out_seq: list[int] = []
    out_mm: list[bool] = []
    next_chunk = arrivals.next_chunk
    got = next_chunk()
    if got is None:
        exhausted = True
    else:
        times, items = got
        n_times = len(times)
    sim._start_s = times[0] if n_times else None
    now_s = sim._start_s or 0.0
    popleft, append_waiting = waiting.popleft, waiting.extend
    while True:
        # --- Arrivals.due / admit
        if i_next == n_times or times[i_next] <= now_s:
            while True:
                j = i_next
                while j < n_times and times[j] <= now_s:
                    j += 1
                if j > i_next:
                    append_waiting(items[i_next:j])
                i_next = j
                if j < n_times or exhausted:
                    break
                got = next_chunk()
                if got is None:
                    exhausted = True
                    break
                times, items = got
                n_times, i_next = len(times), 0
        # --- _prefill: form one prefill forward
        formed = False
        if waiting or chunked is not None:
            if not num_running:
                batch_full = False  # 0.5.23: an empty running batch clears the flag
            allocatable = None if slots is None else slots - num_running
            if chunked is None and (batch_full or (allocatable is not None and allocatable <= 0)):
                if not batch_full:
                    batch_full = True
            else:
                if len(waiting) > max_waiting:
                    max_waiting = len(waiting)
                mixed = num_running if mixed_on else 0
                if pool is None or (chunked is None and not num_running and forced_pending):
                    kv_free = None
                else:
                    held = held_base_sum + num_running * step if page == 1 else held_at(step)
                    kv_free = pool - held - chunked_held
                # PrefillAdder.__init__: the forward's budgets
                rem_input = max_prefill - mixed
                rem_chunk = None if chunk_budget is None else chunk_budget - mixed
                rem_total_offset = mixed + ratio * (len(above_heap) * clip + below_finish_sum - below_count * step)
                cur_rem_offset = mixed
                num_admitted = 0
                batch: list[int] = []
                done: list[tuple[Item, int]] = []
                max_seq, multimodal = 0, False
                if chunked is not None:
                    # PrefillAdder.add_chunked_req for the in-progress request
                    remaining, item, held_chunk, prefix = chunked
                    assert rem_chunk is not None  # a request is cut only under a chunk budget
                    limit = rem_chunk
                    if kv_free is not None:
                        limit = min(limit, int(kv_free - rem_total_offset))
                        if limit <= 0:
                            limit = rem_chunk
                    take = min(remaining, max(limit, 1))  # max: a chunk budget spent by mixed decode tokens
                    out = item[2]
                    max_new = (out if out < clip else clip) if take == remaining else 0
                    paged = take if page == 1 else -(-take // page) * page  # PrefillAdder._update_prefill_budget
                    rem_total_offset += paged + max_new + page
                    cur_rem_offset += paged
                    rem_input -= paged
                    rem_chunk -= paged
                    num_admitted += 1
                    if take < remaining:
                        chunked = (remaining - take, item, held_chunk + take, prefix)
                        chunked_held = -(-(prefix + held_chunk + take) // page) * page - prefix
                    else:
                        chunked, chunked_held = None, 0
                        done.append((item, held_chunk + take))
                    batch.append(take)
                    max_seq, multimodal = prefix + held_chunk + take, item[3] > 0
                if not batch_full:
                    # the waiting-queue loop of _get_new_batch_prefill_raw: FCFS add_one_req until one is refused
                    no_token = slots_full = False
                    check = True
                    cached = 0
                    while waiting:
                        if check:  # budget_state() is OTHER, before the first request
                            check = False
                            if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0):
                                if not (kv_free is not None and (kv_free - rem_total_offset <= 0 or kv_free - cur_rem_offset <= 0)):
                                    break
                        if allocatable is not None and num_admitted >= allocatable:
                            slots_full = True
                            break
                        item = waiting[0]
                        input_tokens, blocks, out, _ = item
                        prefix = cache.cached_tokens(blocks, input_tokens) if blocks and cache is not None else 0
                        extend = input_tokens - prefix
                        # add_one
                        if request_limit is not None and num_admitted >= request_limit:
                            no_token = False
                            break
                        max_new = out if out < clip else clip
                        if kv_free is not None and extend + max_new + page >= kv_free - rem_total_offset:
                            no_token = True
                            break
                        paged = extend if page == 1 else -(-extend // page) * page
                        if rem_chunk is None and num_admitted and paged >= rem_input:
                            no_token = False
                            break
                        if rem_chunk is None or paged <= rem_chunk:
                            taken = extend
                        else:
                            taken = (prefix + rem_chunk // page * page) // page * page - prefix
                            if taken <= 0:
                                no_token = False
                                break
                            max_new = 0
                            paged = taken if page == 1 else -(-taken // page) * page
                        rem_total_offset += paged + max_new + page  # charge
                        cur_rem_offset += paged
                        rem_input -= paged
                        if rem_chunk is not None:
                            rem_chunk -= paged
                        num_admitted += 1
                        popleft()
                        batch.append(taken)
                        if prefix + taken > max_seq:
                            max_seq = prefix + taken
                        if item[3]:
                            multimodal = True
                        cached += prefix
                        if taken < extend:
                            chunked = (extend - taken, item, taken, prefix)
                            chunked_held = -(-(prefix + taken) // page) * page - prefix
                            chunked_requests += 1
                        else:
                            done.append((item, extend))
                        # add_one returns budget_state() after the charge
                        if kv_free is not None and (kv_free - rem_total_offset <= 0 or kv_free - cur_rem_offset <= 0):
                            no_token = True
                            break
                        if rem_input <= 0 or (rem_chunk is not None and rem_chunk <= 0) or taken < extend:
                            no_token = False
                            break
                    else:
                        no_token = False
                    cached_tokens += cached
                    # _note_stop: SGLang sets `batch_is_full` when the KV budget or the slots stop admission
                    forced_pending = False
                    if decode_on and (no_token or slots_full):
                        batch_full = True
                        kv_limited += no_token
                        slot_limited += slots_full
                        if not batch and not num_running and chunked is None:
                            forced_pending = True  # an empty server cannot fit the head request
                            kv_oversized += 1
                            batch_full = False
                if batch:
                    formed = True
                    # _run_forward: advance time by the forward; finished prefills join the running batch
                    num_tokens = sum(batch)
                    duration_s = prefill_fixed_s + (num_tokens + mixed) / prefill_tokens_per_s
                    now_s += duration_s
                    busy_s += duration_s
                    extend_tokens += num_tokens
                    batches += 1
                    if mixed:
                        mixed_decode_tokens += mixed
                        decoded_tokens += mixed
                        if pool is not None:  # _note_retraction(1)
                            if (held_base_sum + num_running * (step + 1) if page == 1 else held_at(step + 1)) + chunked_held > pool:
                                retraction_points += 1
                        advance(1)  # the running batch decoded one step inside the forward
                        batch_full = False  # 0.5.23: the mixed batch becomes the running batch, flag clear
                    if chunked is not None or not num_running:
                        # 0.5.23: the forward's batch shrinks when the chunk leaves it, and it becomes the
                        # running batch (flag clear) when none was running
                        batch_full = False
                    for item, extend in done:
                        if cache is not None and item[1]:
                            cache.insert(item[1])
                        if decode_on:
                            out = item[2]
                            if out > 1:  # joins the running batch with out - 1 tokens to decode
                                f_step = step + out - 1
                                kv = extend - step
                                residue = (item[0] - step) % page
                                residues[residue] += 1
                                residue_sum += residue
                                heappush(finish_heap, (f_step, kv, residue))
                                held_base_sum += kv
                                num_running += 1
                                if out - 1 > clip:
                                    heappush(above_heap, f_step - clip)
                                else:
                                    below_count += 1
                                    below_finish_sum += f_step
                            else:
                                batch_full = False  # finished at prefill: the running batch shrank
                    if decode_on:  # _see_running
                        if num_running > max_running:
                            max_running = num_running
                        kv_tokens = (held_base_sum + num_running * step if page == 1 else held_at(step)) + chunked_held
                        if kv_tokens > peak_kv_tokens:
                            peak_kv_tokens = kv_tokens
                    window = (now_s, decode_s, blocked_s)
                    out_lens.extend(batch)
                    if mixed:
                        out_lens.extend([1] * mixed)
                    out_sizes.append(len(batch) + mixed)
                    out_seq.append(max_seq)
                    out_mm.append(multimodal)
                    if len(out_sizes) >= BATCHES_PER_CHUNK:
                        sync()
                        yield _chunk(out_lens, out_sizes, out_seq, out_mm)
                        out_lens, out_sizes, out_seq, out_mm = [], [], [], []
        if formed:
            continue
        if num_running:
            # --- _decode: decode steps up to the next event (a finish, or with the queue empty an arrival)
            step_s = (step_fixed_ms + step_ms_per_request * num_running) / 1000.0
            if graph_max_bs is not None and num_running > graph_max_bs:
                step_s *= eager_factor  # the running batch is above the decode graphs: an eager step
            steps = finish_heap[0][0] - step
            if not waiting and not batch_full and chunked is None:
                if i_next == n_times and not exhausted:  # Arrivals.next_time_s
                    got = next_chunk()
                    if got is None:
                        exhausted = True
                    else:
                        times, items = got
                        n_times, i_next = len(times), 0
                if i_next < n_times:
                    gap_steps = ceil((times[i_next] - now_s) / step_s)  # min(steps, max(1, gap)), inlined
                    if gap_steps < steps:
                        steps = gap_steps if gap_steps > 1 else 1
            elif not batch_full:
                steps = 1  # a budget below one page stopped the forward: retry after a step
            if pool is not None:  # _note_retraction(steps)
                if (held_base_sum + num_running * (step + steps) if page == 1 else held_at(step + steps)) + chunked_held > pool:
                    retraction_points += 1
            run_s = steps * step_s
            now_s += run_s
            decode_s += run_s
            if waiting or chunked is not None:
                blocked_s += run_s
            decode_steps += steps
            decode_hist[num_running] = decode_hist.get(num_running, 0) + steps
            decoded_tokens += steps * num_running
            ratio -= steps * ratio_decay
            if min_ratio > ratio:
                ratio = min_ratio
            if advance(steps) or not num_running:
                batch_full = False
            if num_running > max_running:  # _see_running
                max_running = num_running
            kv_tokens = (held_base_sum + num_running * step if page == 1 else held_at(step)) + chunked_held
            if kv_tokens > peak_kv_tokens:
                peak_kv_tokens = kv_tokens
            continue
        # --- _idle: nothing runs, wait for the next arrival (stop at the end of the trace)
        ratio = init_ratio
        batch_full = False
        if waiting:
            continue  # the head never fits the KV pool: the next turn forces it
        if i_next == n_times and not exhausted:
            got = next_chunk()
            if got is None:
                exhausted = True
            else:
                times, items = got
                n_times, i_next = len(times), 0
        if i_next == n_times:
            break
        if times[i_next] > now_s:
            now_s = times[i_next]
    sync()
    if out_sizes:
        yield _chunk(out_lens, out_sizes, out_seq, out_mm)


class _ReadAhead:
    """The trace's chunks, with a look ahead: `holds(n)` reads chunks until `n` requests are at
    hand or the trace ends (the chunks read are handed out first, then the rest, lazily)."""

    def __init__(self, chunks: Iterable[RequestChunk]):
        self._rest = iter(chunks)
        self._read: deque[RequestChunk] = deque()
        self._requests = 0

    def holds(self, requests: int) -> bool:
        while self._requests < requests:
            chunk = next(self._rest, None)
            if chunk is None:
                return False
            self._read.append(chunk)
            self._requests += len(chunk.input_tokens)
        return True

    def __iter__(self) -> Iterator[RequestChunk]:
        return self

    def __next__(self) -> RequestChunk:
        if self._read:
            return self._read.popleft()
        return next(self._rest)


def kernel_applies(settings: SchedulerSettings) -> bool:
    """Whether the compiled loop can run a simulation with `settings` (no prefix cache,
    `USE_KERNEL`, at most `KERNEL_MAX_SLOTS` slots), numba aside. Imports nothing."""
    slots = settings.request_slots
    return USE_KERNEL and settings.prefix_cache == "off" and not (settings.decode and (slots is None or slots > KERNEL_MAX_SLOTS))


def compiled_loop(settings: SchedulerSettings) -> ModuleType | None:
    """kernel.py when it runs a simulation with `settings` (`kernel_applies` and numba is
    installed), else None. Imports numba only then."""
    if not kernel_applies(settings):
        return None
    from cpbcg.planner.scheduler import kernel  # imports numba: the request path only

    return kernel if kernel.COMPILED else None


def load_compiled_loop(settings: SchedulerSettings) -> bool:
    """Load (or compile) the compiled loop for `settings` in this process, so that processes
    forked afterwards inherit it instead of each loading it again (~0.7 s): one empty simulation
    runs through it, with the argument types of every run. Returns whether it applies."""
    if compiled_loop(settings) is None:
        return False
    for _ in Simulation((), settings, compiled=True):
        pass
    return True


def _kernel_loop(sim: Simulation, kernel: ModuleType) -> Iterator[SeqBatchSet]:
    """`Simulation.__iter__` through the compiled `kernel.run` (no prefix cache): feeds it the
    trace's chunks, hands out its forwards, and copies its counters into the tally at the end."""
    st, arrivals, k = sim.settings, sim.arrivals, kernel
    none = k.NO_LIMIT
    slots = st.request_slots
    cfg = np.array([st.page_size, st.clip_max_new_tokens, none if st.chunk_tokens is None else st.chunk_tokens,
                    st.max_prefill_tokens, none if st.prefill_max_requests is None else st.prefill_max_requests,
                    none if slots is None else slots, none if st.kv_pool_tokens is None else st.kv_pool_tokens,
                    int(st.decode), int(st.enable_mixed_chunk), BATCHES_PER_CHUNK,
                    none if st.decode_graph_max_bs is None else st.decode_graph_max_bs], dtype=np.int64)
    fcfg = np.array([st.prefill_fixed_ms / 1000.0, st.prefill_tokens_per_s, st.decode_step_fixed_ms,
                     st.decode_step_ms_per_request, st.init_new_token_ratio, st.min_new_token_ratio,
                     st.new_token_ratio_decay, st.eager_decode_factor], dtype=np.float64)
    s = np.zeros(k.NUM_INTS, dtype=np.int64)
    f = np.zeros(k.NUM_FLOATS, dtype=np.float64)
    heap_size = (slots or 0) + 2
    residues = np.zeros(st.page_size, dtype=np.int64)
    f_keys, f_bases, f_res, above = (np.zeros(heap_size, dtype=np.int64) for _ in range(4))
    out_lens = np.zeros(1 << 18, dtype=np.int64)
    out_sizes = np.zeros(BATCHES_PER_CHUNK, dtype=np.int64)
    out_seq = np.zeros(BATCHES_PER_CHUNK, dtype=np.int64)
    out_mm = np.zeros(BATCHES_PER_CHUNK, dtype=bool)
    decode_hist = np.zeros((slots or 0) + 1, dtype=np.int64)
    sim.tally.decode_hist = decode_hist  # filled in place
    times = np.zeros(0, dtype=np.float64)
    inputs, outputs, images = (np.zeros(0, dtype=np.int64) for _ in range(3))
    exhausted = False
    got = arrivals.next_chunk_arrays()
    if got is None:
        exhausted = True
    else:  # writable copies of read-only columns (a CSV's, read zero-copy): the one signature the install compiled
        times, inputs, outputs, images = (a if a.flags.writeable else a.copy() for a in got)
    sim._start_s = float(times[0]) if len(times) else None
    f[k.NOW_S] = sim._start_s or 0.0
    f[k.RATIO] = st.init_new_token_ratio
    while True:
        status = k.run(cfg, fcfg, s, f, residues, f_keys, f_bases, f_res, above, times, inputs, outputs, images,
                       len(times), exhausted, out_lens, out_sizes, out_seq, out_mm, decode_hist)
        if status == k.NEED_REQUESTS:
            got = arrivals.next_chunk_arrays()
            head = int(s[k.HEAD])
            if got is None:
                exhausted = True
            else:  # keep the waiting requests, append the chunk
                times, inputs, outputs, images = (np.concatenate([old[head:], new]) for old, new in
                                                  zip((times, inputs, outputs, images), got))
                s[k.HEAD], s[k.NEXT] = 0, s[k.NEXT] - head
        elif status == k.GROW_OUT:
            out_lens = np.concatenate([out_lens, np.zeros_like(out_lens)])
        else:
            n_out, n_lens = int(s[k.N_OUT]), int(s[k.N_OUT_LENS])
            if n_out:
                _copy_tally(sim, k, s, f)
                yield _arrays(out_lens[:n_lens].copy(), out_sizes[:n_out], out_seq[:n_out].copy(), out_mm[:n_out].copy())
                s[k.N_OUT] = s[k.N_OUT_LENS] = 0
            if status == k.DONE:
                break
    _copy_tally(sim, k, s, f)


def _copy_tally(sim: Simulation, k: ModuleType, s: np.ndarray, f: np.ndarray) -> None:
    t = sim.tally
    ints = s.tolist()
    t.extend_tokens, t.batches, t.chunked_requests, t.max_waiting = (
        ints[k.EXTEND_TOKENS], ints[k.BATCHES], ints[k.CHUNKED_REQUESTS], ints[k.MAX_WAITING])
    t.decode_steps, t.decoded_tokens, t.mixed_decode_tokens = ints[k.DECODE_STEPS], ints[k.DECODED_TOKENS], ints[k.MIXED_DECODE_TOKENS]
    t.max_running, t.peak_kv_tokens = ints[k.MAX_RUNNING], ints[k.PEAK_KV]
    t.kv_limited_forwards, t.slot_limited_forwards = ints[k.KV_LIMITED], ints[k.SLOT_LIMITED]
    t.kv_oversized_requests, t.retraction_points = ints[k.KV_OVERSIZED], ints[k.RETRACTION_POINTS]
    t.forced_pending = bool(ints[k.FORCED_PENDING])
    floats = f.tolist()
    t.busy_s, t.decode_s, t.blocked_decode_s = floats[k.BUSY_S], floats[k.DECODE_S], floats[k.BLOCKED_S]
    t.window = (floats[k.WINDOW_END_S], floats[k.WINDOW_DECODE_S], floats[k.WINDOW_BLOCKED_S]) if ints[k.WINDOW_SET] else None
    sim._now_s = floats[k.NOW_S]


def _arrays(lens: np.ndarray, sizes: np.ndarray, max_seq: np.ndarray, multimodal: np.ndarray) -> SeqBatchSet:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return SeqBatchSet(lens, offsets, np.ones(len(sizes), dtype=np.int64), max_seq, multimodal)


def _chunk(lens: list[int], sizes: list[int], max_seq: list[int], multimodal: list[bool]) -> SeqBatchSet:
    """Forwards as a `SeqBatchSet`: each forward's longest sequence and whether it holds a
    request with images go along (`context_limit`, `multimodal_input`)."""
    plain = BatchSet.from_sizes(lens, sizes)
    return SeqBatchSet(plain.extend_seq_lens, plain.offsets, plain.counts, np.asarray(max_seq, dtype=np.int64),
                       np.asarray(multimodal, dtype=bool))
