"""The event loop of simulation.py as one numba-compiled function over arrays (issue 24).

Used for every simulation without a prefix cache (the default) of a trace of at least
`simulation.KERNEL_MIN_REQUESTS` requests when numba is installed (`pip install 'cpbcg[fast]'`);
the generator in simulation.py runs otherwise and with a prefix cache. Both give the same forwards and the same summary, float for float: every expression
below is the generator's, in the same order (IEEE doubles without fast-math, int64 with Python's
floor division and modulo; no value here comes near 2**53). tests/test_scheduler_kernel.py
checks the two against each other; the conformance tests check the result against SGLang.

Without a cache the waiting queue is always a contiguous run of requests in trace order
(admission is FCFS from its head, arrivals join its tail), so it is two indices into the
request arrays. The kernel returns to Python when it needs the next trace chunk, when
`BATCHES_PER_CHUNK` forwards are ready, or when the output buffer must grow; all its state is
in the `ints`/`floats` arrays and the two heaps, so a call resumes where the last one stopped.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from numpy.typing import NDArray

Ints = NDArray[np.int64]
Floats = NDArray[np.float64]

DONE, NEED_REQUESTS, OUT_FULL, GROW_OUT = 0, 1, 2, 3
"""What `run` returns: finished; needs the next chunk (or `exhausted`); a chunk of forwards is
ready; the extend-length buffer must grow (nothing was done for the pending forward)."""

# ints: index names
(STEP, NUM_RUNNING, BELOW_COUNT, BELOW_FINISH_SUM, HELD_BASE_SUM, EXTEND_TOKENS, BATCHES, CHUNKED_REQUESTS,
 MAX_WAITING, DECODE_STEPS, DECODED_TOKENS, MIXED_DECODE_TOKENS, MAX_RUNNING, PEAK_KV, KV_LIMITED, SLOT_LIMITED,
 KV_OVERSIZED, RETRACTION_POINTS, FORCED_PENDING, BATCH_FULL, CHUNKED, C_REMAINING, C_INPUT, C_OUTPUT, C_IMAGES, C_HELD, C_PREFIX,
 CHUNKED_HELD, N_FINISH, N_ABOVE, HEAD, NEXT, WINDOW_SET, N_OUT_LENS, N_OUT) = range(35)
NUM_INTS = 35
# floats
NOW_S, BUSY_S, DECODE_S, BLOCKED_S, RATIO, WINDOW_END_S, WINDOW_DECODE_S, WINDOW_BLOCKED_S = range(8)
NUM_FLOATS = 8
# settings (int64)
(PAGE, CLIP, CHUNK_BUDGET, MAX_PREFILL, REQUEST_LIMIT, SLOTS, POOL, DECODE_ON, MIXED_ON, OUT_LIMIT, GRAPH_MAX_BS) = range(11)
NO_LIMIT = -1
"""An int setting that is None (no chunking, no request limit, no slots, no pool)."""


def _held_at(page: int, held_base_sum: int, num_running: int, residues: Ints, at_step: int) -> int:  # simulation.py's held_at
    held = held_base_sum + num_running * at_step
    if page > 1:
        for r in range(page):
            count = residues[r]
            if count:
                held += count * ((-(r + at_step)) % page)
    return held


def _heap_push(heap: tuple[Ints, ...], n: int, entry: tuple[int, ...]) -> None:
    """Push `entry` onto a min-heap of `n` entries keyed by `heap[0]` (`heap[1:]`: payloads)."""
    keys, key = heap[0], entry[0]
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        for column in heap:
            column[i] = column[parent]
        i = parent
    for k in range(len(heap)):
        heap[k][i] = entry[k]


def _heap_pop(heap: tuple[Ints, ...], n: int) -> None:
    """Remove the root of a heap of `n` entries (the caller read it)."""
    n -= 1
    keys = heap[0]
    key = keys[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and keys[child + 1] < keys[child]:
            child += 1
        if keys[child] >= key:
            break
        for column in heap:
            column[i] = column[child]
        i = child
    if n > 0:
        for column in heap:
            column[i] = column[n]


def _advance(s: Ints, residues: Ints, f_keys: Ints, f_bases: Ints, f_res: Ints, above: Ints, clip: int, steps: int) -> int:
    """Advance the running batch `steps` decode steps (simulation.py); returns how many requests finished."""
    step = s[STEP] + steps
    s[STEP] = step
    while s[N_ABOVE] and above[0] <= step:
        crossing = above[0]
        _heap_pop((above,), s[N_ABOVE])
        s[N_ABOVE] -= 1
        s[BELOW_COUNT] += 1
        s[BELOW_FINISH_SUM] += crossing + clip
    finished = 0
    while s[N_FINISH] and f_keys[0] <= step:
        f_step, base, residue = f_keys[0], f_bases[0], f_res[0]
        _heap_pop((f_keys, f_bases, f_res), s[N_FINISH])
        s[N_FINISH] -= 1
        s[HELD_BASE_SUM] -= base
        residues[residue] -= 1
        s[BELOW_COUNT] -= 1
        s[BELOW_FINISH_SUM] -= f_step
        s[NUM_RUNNING] -= 1
        finished += 1
    return finished


def _join(s: Ints, residues: Ints, f_keys: Ints, f_bases: Ints, f_res: Ints, above: Ints, clip: int, page: int,
          input_tokens: int, out: int, extend: int) -> None:
    """A request whose prefill ended (`extend` tokens computed): it joins the running batch, or the running
    batch shrank (finished at prefill: the batch-full flag clears)."""
    if out <= 1:
        s[BATCH_FULL] = 0
        return
    step = s[STEP]
    f_step = step + out - 1
    kv = extend - step
    residue = (input_tokens - step) % page
    residues[residue] += 1
    _heap_push((f_keys, f_bases, f_res), s[N_FINISH], (f_step, kv, residue))
    s[N_FINISH] += 1
    s[HELD_BASE_SUM] += kv
    s[NUM_RUNNING] += 1
    if out - 1 > clip:
        _heap_push((above,), s[N_ABOVE], (f_step - clip,))
        s[N_ABOVE] += 1
    else:
        s[BELOW_COUNT] += 1
        s[BELOW_FINISH_SUM] += f_step


def _kv_now(s: Ints, residues: Ints, page: int, at_step: int) -> int:
    return _held_at(page, int(s[HELD_BASE_SUM]), int(s[NUM_RUNNING]), residues, at_step) + int(s[CHUNKED_HELD])


def run(cfg: Ints, fcfg: Floats, s: Ints, f: Floats, residues: Ints, f_keys: Ints, f_bases: Ints, f_res: Ints,
        above: Ints, times: Floats, inputs: Ints, outputs: Ints, images: Ints, n_times: int, exhausted: bool,
        out_lens: Ints, out_sizes: Ints, out_seq: Ints, out_mm: NDArray[np.bool_], decode_hist: Ints) -> int:  # noqa: C901 - one function on purpose (see module doc)
    """Run the event loop until it needs more requests, a chunk of forwards is full, or the end.

    `cfg` int64 settings, `fcfg` float64 settings (prefill fixed s, tokens/s, decode step fixed
    ms, ms/request, init/min ratio, ratio decay, eager decode factor); `s`/`f` the int/float state; `residues`
    [page] int64; the finish heap (`f_keys`, `f_bases`, `f_res`) and `above` sized for the
    request slots; `times`/`inputs`/`outputs`/`images` the requests not yet admitted and those
    waiting (`s[HEAD]` first waiting, `s[NEXT]` next to arrive, `n_times` valid); the `out_*`
    buffers receive forwards from `s[N_OUT]` / `s[N_OUT_LENS]` on; `decode_hist[bs]` counts the
    decode-only steps run with `bs` requests decoding ([slots + 1]). Returns a status above.
    """
    page, clip, chunk_budget, max_prefill = cfg[PAGE], cfg[CLIP], cfg[CHUNK_BUDGET], cfg[MAX_PREFILL]
    request_limit, slots, pool, decode_on, mixed_on = cfg[REQUEST_LIMIT], cfg[SLOTS], cfg[POOL], cfg[DECODE_ON], cfg[MIXED_ON]
    out_limit, graph_max_bs = cfg[OUT_LIMIT], cfg[GRAPH_MAX_BS]
    prefill_fixed_s, prefill_tokens_per_s, step_fixed_ms, step_ms_per_request = fcfg[0], fcfg[1], fcfg[2], fcfg[3]
    init_ratio, min_ratio, ratio_decay, eager_factor = fcfg[4], fcfg[5], fcfg[6], fcfg[7]
    cap_lens = out_lens.shape[0]
    while True:
        now_s = f[NOW_S]
        # --- Arrivals.due / admit
        i_next = s[NEXT]
        if i_next == n_times and not exhausted:
            return NEED_REQUESTS
        while i_next < n_times and times[i_next] <= now_s:
            i_next += 1
        s[NEXT] = i_next
        if i_next == n_times and not exhausted:
            return NEED_REQUESTS
        head = s[HEAD]
        num_waiting = i_next - head
        num_running = s[NUM_RUNNING]
        chunked = s[CHUNKED]
        # --- _prefill
        if num_waiting or chunked:
            if s[N_OUT_LENS] + num_waiting + 1 + num_running > cap_lens:
                return GROW_OUT
            if not num_running:
                s[BATCH_FULL] = 0
            allocatable = NO_LIMIT if slots == NO_LIMIT else slots - num_running
            if not chunked and (s[BATCH_FULL] or (allocatable != NO_LIMIT and allocatable <= 0)):
                s[BATCH_FULL] = 1
            else:
                if num_waiting > s[MAX_WAITING]:
                    s[MAX_WAITING] = num_waiting
                mixed = num_running if mixed_on else 0
                step = s[STEP]
                no_kv = pool == NO_LIMIT or (not chunked and not num_running and s[FORCED_PENDING])
                kv_free = 0
                if not no_kv:
                    kv_free = pool - _held_at(page, s[HELD_BASE_SUM], num_running, residues, step) - s[CHUNKED_HELD]
                rem_input = max_prefill - mixed
                has_chunk = chunk_budget != NO_LIMIT
                rem_chunk = chunk_budget - mixed if has_chunk else 0
                rem_total_offset = mixed + f[RATIO] * (s[N_ABOVE] * clip + s[BELOW_FINISH_SUM] - s[BELOW_COUNT] * step)
                cur_rem_offset = mixed
                num_admitted = 0
                n_lens0 = s[N_OUT_LENS]
                n_lens = n_lens0
                max_seq = 0
                multimodal = False
                done_chunk = False  # the in-progress request finished its prefill in this forward
                done_input = done_output = done_extend = 0
                if chunked:
                    remaining, held_chunk, prefix = s[C_REMAINING], s[C_HELD], s[C_PREFIX]
                    limit = rem_chunk
                    if not no_kv:
                        limit = min(limit, int(kv_free - rem_total_offset))
                        if limit <= 0:
                            limit = rem_chunk
                    take = min(remaining, max(limit, 1))
                    out = s[C_OUTPUT]
                    max_new = (out if out < clip else clip) if take == remaining else 0
                    paged = take if page == 1 else -(-take // page) * page
                    rem_total_offset += paged + max_new + page
                    cur_rem_offset += paged
                    rem_input -= paged
                    rem_chunk -= paged
                    num_admitted += 1
                    if take < remaining:
                        s[C_REMAINING] = remaining - take
                        s[C_HELD] = held_chunk + take
                        s[CHUNKED_HELD] = -(-(prefix + held_chunk + take) // page) * page - prefix
                    else:
                        done_chunk = True
                        done_input, done_output, done_extend = s[C_INPUT], out, held_chunk + take
                        s[CHUNKED] = 0
                        s[CHUNKED_HELD] = 0
                    out_lens[n_lens] = take
                    n_lens += 1
                    max_seq = prefix + held_chunk + take
                    multimodal = s[C_IMAGES] > 0
                first_admitted = head
                new_chunked = False
                if not s[BATCH_FULL]:
                    no_token = False
                    slots_full = False
                    check = True
                    while head < i_next:
                        if check:
                            check = False
                            if rem_input <= 0 or (has_chunk and rem_chunk <= 0):
                                if not (not no_kv and (kv_free - rem_total_offset <= 0 or kv_free - cur_rem_offset <= 0)):
                                    break
                        if allocatable != NO_LIMIT and num_admitted >= allocatable:
                            slots_full = True
                            break
                        extend = inputs[head]
                        out = outputs[head]
                        if request_limit != NO_LIMIT and num_admitted >= request_limit:
                            break
                        max_new = out if out < clip else clip
                        if not no_kv and extend + max_new + page >= kv_free - rem_total_offset:
                            no_token = True
                            break
                        paged = extend if page == 1 else -(-extend // page) * page
                        if not has_chunk and num_admitted and paged >= rem_input:
                            break
                        if not has_chunk or paged <= rem_chunk:
                            taken = extend
                        else:
                            taken = rem_chunk // page * page // page * page
                            if taken <= 0:
                                break
                            max_new = 0
                            paged = taken if page == 1 else -(-taken // page) * page
                        rem_total_offset += paged + max_new + page
                        cur_rem_offset += paged
                        rem_input -= paged
                        if has_chunk:
                            rem_chunk -= paged
                        num_admitted += 1
                        head += 1
                        out_lens[n_lens] = taken
                        n_lens += 1
                        if taken > max_seq:
                            max_seq = taken
                        if images[head - 1]:
                            multimodal = True
                        if taken < extend:
                            new_chunked = True
                            s[CHUNKED] = 1
                            s[C_REMAINING], s[C_INPUT], s[C_OUTPUT], s[C_IMAGES] = extend - taken, extend, out, images[head - 1]
                            s[C_HELD], s[C_PREFIX] = taken, 0
                            s[CHUNKED_HELD] = -(-taken // page) * page
                            s[CHUNKED_REQUESTS] += 1
                        if not no_kv and (kv_free - rem_total_offset <= 0 or kv_free - cur_rem_offset <= 0):
                            no_token = True
                            break
                        if rem_input <= 0 or (has_chunk and rem_chunk <= 0) or taken < extend:
                            break
                    s[HEAD] = head
                    s[FORCED_PENDING] = 0
                    if decode_on and (no_token or slots_full):
                        s[BATCH_FULL] = 1
                        s[KV_LIMITED] += 1 if no_token else 0
                        s[SLOT_LIMITED] += 1 if slots_full else 0
                        if n_lens == n_lens0 and not s[NUM_RUNNING] and not s[CHUNKED]:
                            s[FORCED_PENDING] = 1
                            s[KV_OVERSIZED] += 1
                            s[BATCH_FULL] = 0
                if n_lens > n_lens0:
                    # --- _run_forward
                    num_tokens = 0
                    for k in range(n_lens0, n_lens):
                        num_tokens += out_lens[k]
                    duration_s = prefill_fixed_s + (num_tokens + mixed) / prefill_tokens_per_s
                    f[NOW_S] += duration_s
                    f[BUSY_S] += duration_s
                    s[EXTEND_TOKENS] += num_tokens
                    s[BATCHES] += 1
                    if mixed:
                        s[MIXED_DECODE_TOKENS] += mixed
                        s[DECODED_TOKENS] += mixed
                        if pool != NO_LIMIT and _kv_now(s, residues, page, s[STEP] + 1) > pool:
                            s[RETRACTION_POINTS] += 1
                        _advance(s, residues, f_keys, f_bases, f_res, above, clip, 1)
                        s[BATCH_FULL] = 0
                    if s[CHUNKED] or not s[NUM_RUNNING]:
                        s[BATCH_FULL] = 0
                    if decode_on:  # finished prefills join the running batch (the order does not matter)
                        if done_chunk:
                            _join(s, residues, f_keys, f_bases, f_res, above, clip, page, done_input, done_output, done_extend)
                        for k in range(first_admitted, head - 1 if new_chunked else head):
                            _join(s, residues, f_keys, f_bases, f_res, above, clip, page, inputs[k], outputs[k], inputs[k])
                        if s[NUM_RUNNING] > s[MAX_RUNNING]:
                            s[MAX_RUNNING] = s[NUM_RUNNING]
                        kv_tokens = _kv_now(s, residues, page, s[STEP])
                        if kv_tokens > s[PEAK_KV]:
                            s[PEAK_KV] = kv_tokens
                    s[WINDOW_SET] = 1
                    f[WINDOW_END_S], f[WINDOW_DECODE_S], f[WINDOW_BLOCKED_S] = f[NOW_S], f[DECODE_S], f[BLOCKED_S]
                    for k in range(mixed):
                        out_lens[n_lens + k] = 1
                    n_out = s[N_OUT]
                    out_sizes[n_out] = n_lens - n_lens0 + mixed
                    out_seq[n_out] = max_seq
                    out_mm[n_out] = multimodal
                    s[N_OUT] = n_out + 1
                    s[N_OUT_LENS] = n_lens + mixed
                    if n_out + 1 >= out_limit:
                        return OUT_FULL
                    continue
        num_running = s[NUM_RUNNING]
        if num_running:
            # --- _decode
            batch_full = s[BATCH_FULL]
            step = s[STEP]
            waiting = s[HEAD] < i_next
            step_s = (step_fixed_ms + step_ms_per_request * num_running) / 1000.0
            if graph_max_bs != NO_LIMIT and num_running > graph_max_bs:
                step_s *= eager_factor
            steps = f_keys[0] - step
            if not waiting and not batch_full and not s[CHUNKED]:
                if i_next < n_times:
                    gap = (times[i_next] - now_s) / step_s  # steps = min(steps, max(1, ceil(gap)))
                    if gap < steps:
                        gap_steps = math.ceil(gap)
                        steps = gap_steps if gap_steps > 1 else 1
            elif not batch_full:
                steps = 1
            if pool != NO_LIMIT:
                if _kv_now(s, residues, page, step + steps) > pool:
                    s[RETRACTION_POINTS] += 1
            run_s = steps * step_s
            f[NOW_S] = now_s + run_s
            f[DECODE_S] += run_s
            if waiting or s[CHUNKED]:
                f[BLOCKED_S] += run_s
            s[DECODE_STEPS] += steps
            decode_hist[num_running] += steps
            s[DECODED_TOKENS] += steps * num_running
            ratio = f[RATIO] - steps * ratio_decay
            f[RATIO] = min_ratio if min_ratio > ratio else ratio
            if _advance(s, residues, f_keys, f_bases, f_res, above, clip, steps) or not s[NUM_RUNNING]:
                s[BATCH_FULL] = 0
            if s[NUM_RUNNING] > s[MAX_RUNNING]:
                s[MAX_RUNNING] = s[NUM_RUNNING]
            kv_tokens = _kv_now(s, residues, page, s[STEP])
            if kv_tokens > s[PEAK_KV]:
                s[PEAK_KV] = kv_tokens
            continue
        # --- _idle
        f[RATIO] = init_ratio
        s[BATCH_FULL] = 0
        if s[HEAD] < i_next:
            continue
        if i_next == n_times:
            return DONE
        if times[i_next] > now_s:
            f[NOW_S] = times[i_next]


try:  # the optional compiled path: `pip install 'cpbcg[fast]'`
    import numba

    COMPILED = True
except ImportError:  # pragma: no cover - the generator in simulation.py runs instead
    COMPILED = False



def _stamp_cache_by_content() -> type | None:
    """Have numba key the on-disk cache of this file's functions on its content, not its mtime.

    numba before 0.68 (numba/numba#10659) stamps a cache with the source file's mtime and size. A
    cache written while the wheel is built (setup.py) is installed beside a kernel.py whose mtime
    is the install's, so every non-editable install recompiled on its first run. This locator is
    numba's own in-tree one (the `__pycache__` beside kernel.py) with a sha256 of the file as the
    stamp, for this file only; `NUMBA_CACHE_DIR`, when set, still wins. Returns the class, or None
    when numba's internals differ (numba's own stamp then stays)."""
    import hashlib

    from numba.core import caching as numba_caching

    caching: Any = numba_caching  # numba's internals, by their names before and after 0.68
    config: Any = numba.config
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
    in_tree = getattr(caching, "InTreeCacheLocator", None) or caching._InTreeCacheLocator
    here = __file__

    class ContentStampedLocator(in_tree):  # type: ignore[misc, valid-type]
        def get_source_stamp(self) -> bytes:
            with open(self._py_file, "rb") as source:
                return hashlib.sha256(source.read()).digest()

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if os.path.abspath(py_file) != os.path.abspath(here) or config.CACHE_DIR:
                return None
            return super().from_function(py_func, py_file)

    if not any(getattr(c, "__name__", "") == "ContentStampedLocator" for c in impl._locator_classes):
        impl._locator_classes.insert(0, ContentStampedLocator)
    return ContentStampedLocator


if COMPILED:
    try:
        CACHE_LOCATOR = _stamp_cache_by_content()
    except Exception:  # noqa: BLE001 - another numba layout: its own stamp, the cache still works in place
        CACHE_LOCATOR = None
    _jit = numba.njit(cache=True, nogil=True)
    _held_at, _heap_push, _heap_pop = _jit(_held_at), _jit(_heap_push), _jit(_heap_pop)
    _advance, _join, _kv_now = _jit(_advance), _jit(_join), _jit(_kv_now)
    run = _jit(run)


def write_cache() -> str:
    """Compile `run` (and the helpers it calls) for the argument types every simulation passes
    (`simulation._kernel_loop`: 1-D int64 / float64 / bool arrays, an int and a bool) by running
    it over an empty trace, which writes numba's on-disk cache beside this file. setup.py calls
    it at install, so a user's first request-trace plan loads the loop instead of compiling it.
    Returns the cache directory. Raises `RuntimeError` without numba."""
    if not COMPILED:
        raise RuntimeError("numba is not installed: nothing to compile")
    def ints(n: int) -> Ints:
        return np.zeros(n, dtype=np.int64)

    cfg = ints(GRAPH_MAX_BS + 1)
    cfg[PAGE], cfg[OUT_LIMIT] = 1, 1
    for limit in (CHUNK_BUDGET, REQUEST_LIMIT, SLOTS, POOL, GRAPH_MAX_BS):
        cfg[limit] = NO_LIMIT
    floats = np.zeros(NUM_FLOATS, dtype=np.float64)
    status = run(cfg, np.ones(8, dtype=np.float64), ints(NUM_INTS), floats, ints(1), ints(2), ints(2), ints(2), ints(2),
                 np.zeros(0, dtype=np.float64), ints(0), ints(0), ints(0), 0, True, ints(1), ints(1), ints(1),
                 np.zeros(1, dtype=bool), ints(1))
    if status != DONE:
        raise RuntimeError(f"the empty warm-up run ended with status {status}, not DONE")
    dispatcher: Any = run  # numba's dispatcher (the function itself to mypy)
    return str(dispatcher.stats.cache_path)
