"""cpbcg's scheduler simulation against SGLang 0.5.23's own scheduler loop (from the wheel).

`sglang_scheduler_oracle.run` executes 0.5.23's `get_next_batch_to_run`,
`_get_new_batch_prefill_raw`, `PrefillAdder`, `PrefillBudget`, `update_running_batch` and
`check_decode_mem` under stubs; cpbcg must form the same prefill forwards, one for one. Times
are powers of two (exact in floating point) so both loops see arrivals at the same turns.
A 0.5.23 run that reaches a retraction is compared up to it (cpbcg notes retractions).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.traces.records import RequestChunk
from sglang_oracle import sglang_wheel  # noqa: F401 - fixture
import sglang_scheduler_oracle as oracle

TIMES = dict(prefill_fixed_ms=15.625, prefill_tokens_per_s=1024.0, decode_fixed_ms=15.625,
             decode_ms_per_request=1000.0 / 1024)
"""A forward costs 2**-6 s + n * 2**-10 s: exact, so both loops order events alike."""
NO_POOL = 1 << 40
"""The oracle's pool for cpbcg's prefill-only model (nothing stays resident)."""


def cpbcg_forwards(lens, arrivals, outputs, *, decode, pool, page_size=1, chunk=8192, max_prefill=16384,
                   max_running=None, prefill_max_requests=None, mixed=False):
    settings = SchedulerSettings(
        chunked_prefill_size=chunk, max_prefill_tokens=max_prefill, max_running_requests=max_running,
        prefill_max_requests=prefill_max_requests, decode=decode, page_size=page_size, max_total_tokens=pool,
        enable_mixed_chunk=mixed, **TIMES)
    chunk_ = RequestChunk(np.asarray(lens, np.int64), np.asarray(arrivals, float), None, np.asarray(outputs, np.int64))
    sim = Simulation([chunk_], settings)
    return [part.batch(i) for part in sim for i in range(part.num_batches)], sim.summary()


def sglang_forwards(lens, arrivals, outputs, *, decode, pool, page_size=1, chunk=8192, max_prefill=16384,
                    max_running=None, prefill_max_requests=None, mixed=False):
    if not decode:  # cpbcg's prefill-only model: one output token, nothing stays resident
        outputs, pool, mixed = [1] * len(lens), NO_POOL, False
        max_running = 1 << 30 if max_running is None else max_running
    elif max_running is None:
        max_running = max(1, min(pool // 2, 4096))
    return oracle.run(list(zip(lens, outputs)), arrivals_s=arrivals, pool_tokens=pool, page_size=page_size,
                      chunked_prefill_size=chunk, max_prefill_tokens=max_prefill, max_running_requests=max_running,
                      prefill_max_requests=prefill_max_requests, enable_mixed_chunk=mixed, **TIMES)


def both(*args, **kwargs):
    expected = sglang_forwards(*args, **kwargs)
    got, summary = cpbcg_forwards(*args, **kwargs)
    if expected.retracted:
        got = got[: len(expected.forwards)]
    return expected, got, summary


# --- the reproducers (issue 20) ------------------------------------------------------


def test_held_rows_count_the_chunk_in_progress_once(sglang_wheel):
    case = ([20000, 100, 100, 100], [0.0] * 4, [1] * 4)
    expected, got, _ = both(*case, decode=False, pool=None, max_running=3)
    assert expected.forwards == [[8192], [8192], [3616, 100, 100], [100]]
    assert got == expected.forwards


def test_budget_spent_before_the_first_waiting_request(sglang_wheel):
    case = ([14000, 3000], [0.0, 0.0], [1, 1])
    expected, got, _ = both(*case, decode=False, pool=None, max_prefill=4096)
    assert expected.forwards == [[8192], [5808], [3000]]
    assert got == expected.forwards


def test_full_flag_clears_when_the_running_batch_is_empty(sglang_wheel):
    case = ([1000] * 5, [0.0] * 5, [100, 100, 100, 100, 10])
    expected, got, _ = both(*case, decode=True, pool=4400)
    assert expected.forwards == [[1000] * 3, [1000], [1000]]
    assert got == expected.forwards


def test_kv_held_in_whole_pages_with_decoded_tokens(sglang_wheel):
    case = ([1000, 4832, 10], [0.0, 2.0**-10, 2.0**-10], [101, 4928, 10])
    expected, got, _ = both(*case, decode=True, pool=10000)
    assert expected.forwards == [[1000], [4832], [10]]
    assert got == expected.forwards


# --- randomized sequences --------------------------------------------------------------------


def random_case(rng: random.Random, decode: bool) -> tuple[tuple, dict]:
    n = rng.randint(3, 10)
    lens = [rng.choice([rng.randint(1, 64), rng.randint(64, 1500), rng.randint(1500, 5000)]) for _ in range(n)]
    outputs = [rng.choice([1, rng.randint(2, 40), rng.randint(40, 400), rng.randint(400, 1200)]) for _ in range(n)]
    gaps = [rng.choice([0, 0, rng.randint(1, 64), rng.randint(64, 2048)]) / 1024 for _ in range(n)]
    arrivals = list(np.cumsum(gaps))
    page = rng.choice([1, 16, 64])
    chunk = rng.choice([-1, 512, 2048, 8192])
    if chunk != -1 and chunk < page:
        chunk = page
    kwargs = dict(decode=decode, page_size=page, chunk=chunk, max_prefill=rng.choice([1024, 4096, 16384]),
                  max_running=rng.choice([None, 8, 16, 4096, rng.randint(1, 4)]),
                  prefill_max_requests=rng.choice([None, None, 2, 5]), mixed=decode and rng.random() < 0.3)
    if decode:
        need = max(ln + min(o, 4096) + 2 * page for ln, o in zip(lens, outputs))
        kwargs["pool"] = rng.choice([need, need + rng.randint(0, 2000), need * 3, 1 << 20])
    else:
        kwargs["pool"] = None
    return (lens, arrivals, outputs), kwargs


def mismatches(seed: int, count: int, decode: bool) -> list:
    """Cases whose forwards differ (or whose retraction cpbcg does not note), and the count of
    0.5.23 runs that reached a retraction."""
    rng = random.Random(seed)
    bad, retracted = [], 0
    for k in range(count):
        case, kwargs = random_case(rng, decode)
        expected, got, summary = both(*case, **kwargs)
        retracted += expected.retracted
        if got != expected.forwards or (expected.retracted and not getattr(summary, "retraction_points", 0)):
            bad.append((k, case, kwargs, expected, got))
    return bad, retracted


@pytest.mark.parametrize("decode", [True, False])
def test_random_sequences_form_the_forwards_of_sglang_0_5_23(sglang_wheel, decode):
    count = 200 if decode else 80
    bad, retracted = mismatches(20, count, decode)
    assert not bad, f"{len(bad)} of {count} differ; first: {bad[0]}"
    if decode:
        assert retracted >= 1  # some pools are small enough to reach a retraction
