"""Scheduler simulation, prefill-only model (`decode=False`): hand-worked batch streams, prefix
cache, arrivals, conservation. The SGLang packing rules and decode are in test_scheduler_rules.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis_sizes import examples
from hypothesis import strategies as st

from cpbcg.config import SchedulerConfig
from cpbcg.planner.traces import RequestChunk
from cpbcg.planner.scheduler import PrefixCache, SchedulerSettings, Simulation
from cpbcg.assembly.sources import open_source

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
# Zero fixed cost and 1,000 tokens/s: a forward of n tokens takes n ms, easy to work by hand.
HAND = dict(prefill_fixed_ms=0.0, prefill_tokens_per_s=1000.0, decode=False)


def run(lengths, times=None, hashes=None, **settings_) -> tuple[list[list[int]], Simulation]:
    """Simulate one chunk of requests (all at t=0 unless `times` given); returns the batches."""
    cfg = SchedulerSettings(**{**HAND, **settings_})
    arrival = np.zeros(len(lengths)) if times is None else np.asarray(times, dtype=float)
    chunk = RequestChunk(np.asarray(lengths, dtype=np.int64), arrival, hashes)
    sim = Simulation([chunk], cfg)
    batches = [b for part in sim for b in (part.batch(i) for i in range(part.num_batches))]
    return batches, sim


def test_chunking_cuts_the_first_misfit_and_continues_it_first():
    # budget 8: 5 fits (3 left), 6 is cut to 3 and closes the batch; its rest (3) goes first next.
    batches, sim = run([5, 6, 3], chunked_prefill_size=8)
    assert batches == [[5, 3], [3, 3]]
    assert sim.summary().chunked_requests == 1


def test_in_progress_chunk_goes_first_until_done():
    batches, _ = run([20, 2], chunked_prefill_size=8)
    assert batches == [[8], [8], [4, 2]]


def test_budget_edges_exact_fit_is_not_chunked():
    batches, sim = run([4, 4, 1], chunked_prefill_size=8)
    assert batches == [[4, 4], [1]]  # budget used up exactly: no zero-token cut of the 1
    assert sim.summary().chunked_requests == 0
    assert run([8, 9], chunked_prefill_size=8)[0] == [[8], [8], [1]]


def test_prefill_max_requests_and_max_running_requests():
    assert run([1] * 5, prefill_max_requests=2)[0] == [[1, 1], [1, 1], [1]]
    assert run([1] * 5, max_running_requests=3)[0] == [[1, 1, 1], [1, 1]]
    assert run([1] * 5, prefill_max_requests=4, max_running_requests=3)[0] == [[1, 1, 1], [1, 1]]
    # the in-progress chunk counts as one of the requests
    assert run([10, 1, 1], chunked_prefill_size=8, prefill_max_requests=2)[0] == [[8], [2, 1], [1]]


def test_no_chunking_bounds_by_max_prefill_tokens():
    # -1: no cuts. The first request joins even above max_prefill_tokens; later ones join while
    # their length is below the remaining budget (SGLang: `input_tokens >= rem_input_tokens` waits).
    got = run([20, 3, 10, 6], chunked_prefill_size=-1, max_prefill_tokens=16)[0]
    assert got == [[20], [3, 10], [6]]
    assert run([8, 8], chunked_prefill_size=-1, max_prefill_tokens=16)[0] == [[8], [8]]


def test_chunking_closes_the_batch_once_max_prefill_tokens_is_spent():
    assert run([5, 5, 5], chunked_prefill_size=16, max_prefill_tokens=8)[0] == [[5, 5], [5]]


def test_arrivals_queue_during_a_forward():
    # 1000 tokens take 1 s; requests at 0.5 s and 0.7 s wait and go together; 2.0 s finds it idle.
    batches, sim = run([1000, 10, 20, 5], times=[0.0, 0.5, 0.7, 2.0])
    assert batches == [[1000], [10, 20], [5]]
    summary = sim.summary()
    assert summary.simulated_s == pytest.approx(2.005)
    assert summary.busy_s == pytest.approx(1.035)
    assert summary.max_waiting == 2


def test_time_scale_compresses_gaps():
    lengths, times = [1000, 10, 10], [0.0, 1.2, 1.8]
    assert run(lengths, times)[0] == [[1000], [10], [10]]
    assert run(lengths, times, time_scale=2.0)[0] == [[1000], [10, 10]]


def test_forward_time_includes_fixed_cost():
    _, sim = run([100, 100], times=[0.0, 10.0], prefill_fixed_ms=5.0, prefill_tokens_per_s=1000.0)
    assert sim.summary().busy_s == pytest.approx(0.21)


PREFIX_TRACE = dict(
    lengths=[1200, 1200, 1100, 1200],
    times=[0.0, 0.0, 10.0, 20.0],
    hashes=[[1, 2, 3], [1, 2, 3], [1, 2, 9], [1, 2, 3]],
)


def test_prefix_cache_unlimited():
    # Blocks enter the cache when a prefill finishes: the twin in the first batch gets no hit.
    # B shares two 512-token blocks (1024 cached); the repeat of A is fully cached but SGLang
    # keeps one token to compute (max_prefix_len = input_len - 1).
    batches, sim = run(**PREFIX_TRACE, prefix_cache="unlimited")
    assert batches == [[1200, 1200], [76], [1]]
    summary = sim.summary()
    assert summary.cached_tokens == 1024 + 1199
    assert summary.extend_tokens == 4700 - summary.cached_tokens


def test_prefix_cache_off_and_lru():
    assert run(**PREFIX_TRACE, prefix_cache="off")[0] == [[1200, 1200], [1100], [1200]]
    # LRU of 1,024 tokens = 2 blocks, evicted leaf first: A's block 3 goes, then B's block 9.
    assert run(**PREFIX_TRACE, prefix_cache=1024)[0] == [[1200, 1200], [76], [176]]


def test_lru_evicts_leaf_blocks_first():
    cache = PrefixCache(capacity_tokens=2 * 512)
    cache.insert([1, 2, 3])
    assert cache.cached_tokens([1, 2, 3], 2000) == 1024
    assert cache.cached_tokens([3], 2000) == 0


def test_poisson_arrivals_are_seeded():
    chunk = lambda: RequestChunk(np.full(200, 3000, dtype=np.int64), None, None)  # noqa: E731
    cfg = SchedulerSettings(rate=8.0, seed=7, decode=False)
    first = [b.extend_seq_lens.tolist() for b in Simulation([chunk()], cfg)]
    again = [b.extend_seq_lens.tolist() for b in Simulation([chunk()], cfg)]
    assert first == again
    sim = Simulation([chunk()], cfg)
    list(sim)
    assert sim.summary().synthetic_arrivals
    # 200 requests at 8/s span about 25 s of simulated time
    assert 15.0 < sim.summary().simulated_s < 40.0
    slow = Simulation([chunk()], SchedulerSettings(rate=0.01, seed=7, decode=False))
    assert sum(b.num_batches for b in slow) == 200  # idle server: one request per forward


@settings(max_examples=examples(60), deadline=None)
@given(
    lengths=st.lists(st.integers(1, 3000), min_size=1, max_size=40),
    gaps=st.lists(st.floats(0, 0.2), min_size=40, max_size=40),
    chunk=st.sampled_from([-1, 64, 512, 2048]),
    max_requests=st.sampled_from([None, 1, 3]),
    cache=st.sampled_from(["off", "unlimited", 1024]),
    seed=st.integers(0, 5),
)
def test_conservation_and_limits(lengths, gaps, chunk, max_requests, cache, seed):
    rng = np.random.default_rng(seed)
    hashes = [[int(x) for x in rng.integers(0, 4, size=-(-n // 512))] for n in lengths]
    times = np.cumsum(gaps[: len(lengths)])
    batches, sim = run(
        lengths, times, hashes, chunked_prefill_size=chunk, prefill_max_requests=max_requests, prefix_cache=cache
    )
    summary = sim.summary()
    assert sum(map(sum, batches)) == summary.extend_tokens == sum(lengths) - summary.cached_tokens
    assert summary.requests == len(lengths) and summary.batches == len(batches)
    assert all(batch and min(batch) >= 1 for batch in batches)
    if chunk != -1:
        assert max(map(sum, batches)) <= chunk
    if max_requests is not None:
        assert max(map(len, batches)) <= max_requests
    if cache == "off":
        assert summary.cached_tokens == 0


@pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces not present (../shared/traces)")
@pytest.mark.parametrize("cache", ["off", "unlimited", 262144])
def test_conservation_on_mooncake(cache):
    source = open_source(TRACES / "mooncake-fast25/conversation_trace.jsonl", scheduler=SchedulerConfig(prefix_cache=cache).to_settings())
    tokens = sum(int(b.num_tokens.sum()) for b in source.batches)
    summary = source.simulation.summary()
    assert summary.requests == 12031 and summary.input_tokens == 144_793_823
    assert tokens == summary.extend_tokens == summary.input_tokens - summary.cached_tokens
    assert (summary.cached_tokens > 0) == (cache != "off")


def test_simulation_note_and_summary_after_iteration():
    import orjson

    from cpbcg.outputs.documents import simulation_summary
    from cpbcg.outputs.notes import simulation_note

    assets = Path(__file__).parent / "assets" / "requests"
    source = open_source(assets / "mooncake.jsonl", scheduler=SchedulerConfig(prefix_cache="unlimited", time_scale=2.0, decode=False).to_settings())
    forwards = sum(part.num_batches for part in source.batches)
    note = simulation_note(source)
    assert note.startswith(f"simulated {forwards} prefill forwards from 4 requests (Mooncake, timestamps / time-scale 2): chunked_prefill_size 8192, ")
    assert "prefix cache unlimited (" in note and "\n" not in note
    summary = orjson.loads(orjson.dumps(simulation_summary(source)))
    assert summary["trace_format"] == "mooncake" and summary["arrivals"] == "timestamps"
    assert summary["batches"] == forwards and summary["requests"] == 4 and summary["scheduler"]["prefix_cache"] == "unlimited"
    assert 0.0 <= summary["busy_fraction"] <= 1.0
    vidur = open_source(assets / "vidur.csv", scheduler=SchedulerConfig(rate=4.0, decode=False).to_settings())
    list(vidur.batches)
    assert simulation_note(vidur).splitlines()[1] == "Poisson arrivals at 4 req/s (no arrival times were read: the trace has none or no --time-field was given; --rate, seed 0)"
    assert simulation_summary(vidur)["arrivals"] == "poisson"
    batch = open_source(None)
    list(batch.batches)
    assert simulation_note(batch) is None and simulation_summary(batch) is None
