"""SGLang's packing rules and the decode model, pinned by hand-worked forward sequences.

Every case names the SGLang code it follows (docs/scheduler.md). Timings use powers of two so
times are exact: 1,024 prefill tokens/s and no fixed cost make a forward of n tokens n/1024 s,
and the derived decode step costs 1000/1024 ms per running request (2**-10 s for one).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis_sizes import examples
from hypothesis import strategies as st

from cpbcg.config import SchedulerConfig
from cpbcg.planner.traces.records import RequestChunk
from cpbcg.planner.scheduler import SchedulerSettings, Simulation

EXACT = dict(prefill_fixed_ms=0.0, prefill_tokens_per_s=1024.0)
STEP_S = 2.0**-10
"""One decode step of one running request under `EXACT` (s)."""


def run(lengths, times=None, outputs=None, progress=None, **settings_):
    """Simulate one chunk of requests (all at t=0 unless `times`); returns (forwards, summary)."""
    cfg = SchedulerSettings(**{**EXACT, **settings_})
    arrival = np.zeros(len(lengths)) if times is None else np.asarray(times, dtype=float)
    out = None if outputs is None else np.asarray(outputs, dtype=np.int64)
    sim = Simulation([RequestChunk(np.asarray(lengths, dtype=np.int64), arrival, None, out)], cfg, progress)
    forwards = [part.batch(i) for part in sim for i in range(part.num_batches)]
    return forwards, sim.summary()


# --- packing rules, every request present at once (prefill-only and with decode) -------------


@pytest.mark.parametrize("decode", [False, True])
def test_page_size_1_cuts_at_the_remaining_budget(decode):
    # PrefillAdder.add_one_req: 6758 fits (1434 left), 9000 is cut to 1434; add_chunked_req
    # continues it with 7566 (626 left) and 3000 is cut to 626.
    assert run([6758, 9000, 3000], decode=decode)[0] == [[6758, 1434], [7566, 626], [2374]]


@pytest.mark.parametrize("decode", [False, True])
def test_page_size_16_charges_pages_and_cuts_at_a_page_boundary(decode):
    # ceil_paged_tokens(6758) = 6768 is charged, so 1424 are left (a page multiple); the
    # continuation 7576 is charged 7584, leaving 608 for the 3000 (608 // 16 * 16 = 608).
    assert run([6758, 9000, 3000], page_size=16, decode=decode)[0] == [[6758, 1424], [7576, 608], [2392]]


def test_page_cut_rounds_the_remaining_budget_down():
    # 100 is charged 112 (page 16), leaving 8192 - 112 = 8080 = 505 pages: the 9000 is cut to 8080.
    assert run([100, 9000], page_size=16, decode=False)[0] == [[100, 8080], [920]]
    # page 64: 90 is charged 128, leaving 8064.
    assert run([90, 9000], page_size=64, decode=False)[0] == [[90, 8064], [936]]
    # chunk 100 with page 16: 10 is charged 16, the 84 left round down to 80.
    assert run([10, 200], chunked_prefill_size=100, page_size=16, decode=False)[0] == [[10, 80], [100], [20]]
    # a budget below one page cuts nothing: 8192 - ceil64(8150) = 0 -> the 9000 waits.
    assert run([8150, 9000], page_size=64, decode=False)[0] == [[8150], [8192], [808]]


def test_a_spent_budget_admits_no_waiting_request():
    # 0.5.23 _get_new_batch_prefill_raw checks budget_state before every waiting request, the
    # first too: the continuation 5808 overspends max_prefill_tokens 4096, so the 3000 waits.
    assert run([14000, 3000], max_prefill_tokens=4096, decode=False)[0] == [[8192], [5808], [3000]]


def test_max_running_requests_counts_the_chunked_request_once():
    # 0.5.23 get_num_allocatable_reqs: the chunk is not in the running batch, and its request
    # row is given back (num_held_rows): 3 slots hold the chunk and two more.
    got = run([20000, 100, 100, 100], max_running_requests=3, decode=False)[0]
    assert got == [[8192], [8192], [3616, 100, 100], [100]]


def test_without_chunking_a_request_at_the_input_budget_waits():
    # _select_prefill_admission: without chunking a request >= rem_input_tokens waits unless first.
    assert run([20, 3, 10, 6], chunked_prefill_size=-1, max_prefill_tokens=16, decode=False)[0] == [[20], [3, 10], [6]]
    # page-rounded: 3 is charged 16 with page 16, so the 10 (charged 16) meets rem_input 0.
    assert run([3, 10], chunked_prefill_size=-1, max_prefill_tokens=32, page_size=16, decode=False)[0] == [[3], [10]]


def test_prefill_max_requests_includes_the_chunked_request():
    assert run([10, 1, 1], chunked_prefill_size=8, prefill_max_requests=2, decode=False)[0] == [[8], [2, 1], [1]]


# --- the KV budget (PrefillAdder.add_one_req / _update_prefill_budget) -----------------------


def test_admission_needs_extend_plus_clipped_output_plus_a_page_below_the_free_pool():
    # an empty server refuses a request whose charge reaches the pool, then forces it (kv_oversized)
    def oversized(pool, output, **kw):
        return run([100], outputs=[output], max_total_tokens=pool, **kw)[1].kv_oversized_requests
    assert (oversized(151, 50), oversized(152, 50)) == (1, 0)  # 100 + 50 + 1 >= 151
    # the output estimate is clipped at SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (4096)
    assert (oversized(100 + 4096 + 1, 10**6), oversized(100 + 4096 + 2, 10**6)) == (1, 0)
    assert oversized(150 + 16, 50, page_size=16) == 1 and oversized(150 + 17, 50, page_size=16) == 0  # a page, not 1
    # the charge of an admitted request is page-rounded extend + output estimate + one page
    # (reserve): 112 + 50 + 16 of a 10,000 pool, so 9,000 + out + 16 must stay below 9,822
    both = dict(outputs=[50, 0], max_total_tokens=10_000, page_size=16, chunked_prefill_size=16384)
    assert run([100, 9000], **{**both, "outputs": [50, 805]})[0][0] == [100, 9000]
    assert run([100, 9000], **{**both, "outputs": [50, 806]})[0][0] == [100]
    # the chunk budget is charged the page-rounded extend: 8192 - 112 left, cut at a page
    assert run([100, 9000], outputs=[50, 50], max_total_tokens=100_000, page_size=16)[0][:2] == [[100, 8080], [920]]


def test_kv_budget_holds_the_second_request_until_the_first_finishes():
    # Pool 300: A takes 100 + 50 + 1 = 151 of it, B needs 151 >= 149 left -> NO_TOKEN. A's
    # forward ran with no running batch, so it becomes the running batch with the flag clear
    # (0.5.23): B is refused once more, and then batch_is_full keeps prefill off until A's 49
    # decode steps finish it.
    forwards, s = run([128, 128], outputs=[50, 50], max_total_tokens=300)
    assert forwards == [[128], [128]]
    assert s.kv_limited_forwards == 2
    assert s.simulated_s == 0.125 + 49 * STEP_S + 0.125
    assert run([128, 128], outputs=[50, 50], max_total_tokens=1000)[0] == [[128, 128]]


def test_running_requests_reserve_new_token_ratio_times_their_remaining_output():
    # A (128 + 300 out) runs from 0.125 s; B arrives 128 decode steps later. A then holds
    # 129 + 128 = 257 tokens and has 171 to go; new_token_ratio decayed to 0.7 - 128 * 0.602/600.
    # Pool 600: 600 - 257 - 171 * 0.57157 = 245.3 > 128 + 100 + 1 = 229 -> B runs at once
    # (it would not at the initial ratio: 343 - 119.7 < 229). Pool 580: B waits for A's end.
    times, outputs = [0.0, 0.25], [300, 100]
    forwards, s = run([128, 128], times, outputs, max_total_tokens=600)
    assert forwards == [[128], [128]] and s.kv_limited_forwards == 0
    assert s.simulated_s == 0.375
    forwards, s = run([128, 128], times, outputs, max_total_tokens=580)
    assert s.kv_limited_forwards == 1
    assert s.simulated_s == pytest.approx(0.125 + 299 * STEP_S + 0.125)
    _, s = run([128, 128], times, outputs, max_total_tokens=600, new_token_ratio_decay_steps=10**9)
    assert s.kv_limited_forwards == 1  # without the decay, 600 is too small


# --- request slots, decode steps, mixed chunks -----------------------------------------------


def test_request_slots_are_held_while_decoding():
    # 2 slots: A, B prefill together; C waits (batch_is_full) until B finishes after 1 step.
    forwards, s = run([10, 10, 10], outputs=[3, 2, 2], max_running_requests=2)
    assert forwards == [[10, 10], [10]]
    assert s.slot_limited_forwards == 1 and s.max_running == 2
    assert s.decode_steps == 2 and s.decoded_tokens == 2 + 2
    assert s.simulated_s == (20 + 0) / 1024 + 2 * STEP_S + 10 / 1024
    assert s.blocked_decode_s == 2 * STEP_S  # the first decode step ran while C waited
    assert s.drain_s == 2 * STEP_S
    # without decode a slot is free again once its prefill ends: C follows at once
    forwards, s = run([10, 10, 10], outputs=[3, 2, 2], max_running_requests=2, decode=False)
    assert forwards == [[10, 10], [10]] and s.simulated_s == 30 / 1024


def test_decode_runs_between_prefills_and_prefill_goes_first():
    # A decodes from 1/8 s in steps of 2**-10 s; B arriving 4 steps later is prefilled at once.
    forwards, s = run([128, 128], times=[0.0, 0.125 + 4 * STEP_S], outputs=[10, 1])
    assert forwards == [[128], [128]]
    assert s.decode_steps == 4 + 5 and s.decoded_tokens == 9
    assert s.simulated_s == 0.125 + 4 * STEP_S + 0.125
    assert s.drain_s == 5 * STEP_S  # B finished at its prefill (1 output token)


def test_decode_step_time_is_fixed_plus_per_running_request():
    _, s = run([10, 10], outputs=[5, 5], decode_fixed_ms=2.0, decode_ms_per_request=0.5)
    assert s.drain_s == pytest.approx(4 * (2.0 + 2 * 0.5) / 1000)


def test_mixed_chunk_shrinks_the_chunk_by_the_running_requests_and_decodes_inside():
    # A (32 tokens, 10 out) decodes when B (100) arrives; chunk 64 - 1 running = 63 for B, and
    # A's decode token rides along as a 1-token extend (ScheduleBatch.mix_with_running).
    times = [0.0, 32 / 1024 + 4 * STEP_S]
    mixed, s = run([32, 100], times, [10, 2], chunked_prefill_size=64, enable_mixed_chunk=True)
    assert mixed == [[32], [63, 1], [37, 1]]
    assert s.mixed_decode_tokens == 2 and s.extend_tokens == 132
    plain, _ = run([32, 100], times, [10, 2], chunked_prefill_size=64)
    assert plain == [[32], [64], [36]]


def test_default_output_tokens_for_traces_without_output_lengths():
    _, s = run([10, 10], default_output_tokens=7)
    assert s.output_tokens == 14 and s.default_output_requests == 2
    assert s.decode_steps == 6
    _, s = run([10, 10], outputs=[3, 4])
    assert s.output_tokens == 7 and s.default_output_requests == 0


def test_no_decode_ignores_the_kv_pool_and_derived_slots():
    forwards, s = run([100] * 5, outputs=[10**6] * 5, max_total_tokens=1, decode=False)
    assert forwards == [[100] * 5] and s.decode_steps == 0 and s.kv_pool_tokens is None
    assert SchedulerSettings(decode=False).request_slots is None
    assert SchedulerSettings().request_slots == 4096  # min(1,048,576 // 2, 4096)
    assert SchedulerSettings(max_total_tokens=1000).request_slots == 500


def test_a_request_too_large_for_an_empty_pool_runs_anyway():
    forwards, s = run([500, 10], outputs=[10, 2], max_total_tokens=100)
    assert forwards == [[500, 10]] and s.kv_oversized_requests == 1


def test_progress_hook_reports_requests_read():
    seen: list[int] = []
    run([10, 10, 10], progress=seen.append)
    assert seen == [3]


def test_running_requests_reserve_their_clipped_remaining_output():
    # A (10 in, 7 out) runs with 6 tokens to decode, reserving min(6, clip 4) x ratio 0.7 (held
    # there by a min ratio factor of 1); B (1 out) arrives as A's forward ends and needs
    # extend + 1 + 1 below 100 - 10 held - 2.8: 85 fits, 86 waits for A to finish. Without the
    # clip (4.2) 85 would wait; without the reserve 86 would fit.
    def limited(extend):
        return run([10, extend], [0.0, 10 / 1024], [7, 1], max_total_tokens=100, clip_max_new_tokens=4,
                   min_new_token_ratio_factor=1.0)[1].kv_limited_forwards
    assert (limited(85), limited(86)) == (0, 1)


def test_running_requests_hold_whole_pages_of_prompt_and_decoded_tokens():
    # 0.5.23 allocates KV in pages: 100 prompt + 49 decoded tokens hold 10 pages of 16 (160), so
    # a pool of 159 is overrun before the request finishes (a retraction point), 160 is not
    def overruns(pool, page):
        return run([100], outputs=[50], max_total_tokens=pool, page_size=page, clip_max_new_tokens=1)[1].retraction_points
    assert (overruns(159, 16), overruns(160, 16), overruns(149, 1), overruns(148, 1)) == (1, 0, 0, 1)


def test_config_converts_to_settings():
    cfg = SchedulerConfig(page_size=16, decode=False, max_total_tokens=None, enable_mixed_chunk=True)
    settings_ = cfg.to_settings()
    assert isinstance(settings_, SchedulerSettings)
    assert (settings_.page_size, settings_.decode, settings_.max_total_tokens, settings_.enable_mixed_chunk) == (16, False, None, True)
    assert SchedulerConfig().to_settings() == SchedulerSettings()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"scheduler.page_size": 0}, "scheduler.page_size: Input should be greater than or equal to 1"),
        ({"scheduler.page_size": 64, "scheduler.chunked_prefill_size": 32}, "scheduler.page_size: must not exceed chunked_prefill_size 32"),
        ({"scheduler.max_total_tokens": 0}, "scheduler.max_total_tokens: Input should be greater than or equal to 1"),
        ({"scheduler.decode": "sometimes"}, "scheduler.decode: Input should be a valid boolean"),
        ({"scheduler.default_output_tokens": 0}, "scheduler.default_output_tokens: Input should be greater than or equal to 1"),
        ({"scheduler.init_new_token_ratio": 1.5}, "scheduler.init_new_token_ratio: Input should be less than or equal to 1"),
        ({"scheduler.decode_ms_per_request": -1.0}, "scheduler.decode_ms_per_request: Input should be greater than or equal to 0"),
        ({"scheduler.new_token_ratio_decay": 3}, "scheduler.new_token_ratio_decay: unknown key"),
    ],
)
def test_config_refuses_bad_scheduler_values(overrides, message):
    from cpbcg.config import load_config
    from cpbcg.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
    with pytest.raises(ValueError):
        SchedulerSettings(chunked_prefill_size=8, page_size=16)


@settings(max_examples=examples(60), deadline=None)
@given(
    lengths=st.lists(st.integers(1, 3000), min_size=1, max_size=30),
    outputs=st.lists(st.integers(1, 300), min_size=30, max_size=30),
    gaps=st.lists(st.floats(0, 0.05), min_size=30, max_size=30),
    chunk=st.sampled_from([-1, 256, 2048]),
    page=st.sampled_from([1, 16]),
    slots=st.sampled_from([None, 1, 4]),
    pool=st.sampled_from([None, 4000, 20000]),
)
def test_decode_conserves_tokens_and_keeps_its_limits(lengths, outputs, gaps, chunk, page, slots, pool):
    n = len(lengths)
    forwards, s = run(
        lengths, np.cumsum(gaps[:n]), outputs[:n], chunked_prefill_size=chunk, page_size=page,
        max_running_requests=slots, max_total_tokens=pool, prefill_fixed_ms=1.0, prefill_tokens_per_s=5000.0,
    )
    assert sum(map(sum, forwards)) == s.extend_tokens == sum(lengths)
    assert s.decoded_tokens == sum(outputs[:n]) - n  # the first token of each comes from prefill
    if chunk != -1:
        assert max(map(sum, forwards)) <= chunk
    if slots is not None:
        assert s.max_running <= slots and max(map(len, forwards)) <= slots


def test_the_scheduler_package_loads_neither_the_config_nor_pydantic():
    import subprocess
    import sys

    code = "import sys, cpbcg.planner.scheduler, cpbcg.assembly.embedded, cpbcg.assembly.sources; " \
        "print(sorted(m for m in ('cpbcg.config', 'pydantic', 'typer', 'rich', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cached_prefix_is_not_charged_to_the_running_request():
    # B arrives during A's prefill and shares A's two leading 512-token blocks, cached when A's
    # prefill ends; B is prefilled right after (prefill goes first, no decode step in between).
    # Only B's 176 computed tokens count for it (the first output token's KV is written by the
    # next decode step): peak 1200 + 176.
    hashes = [[1, 2, 3], [1, 2, 9]]
    cfg = SchedulerSettings(**EXACT, prefix_cache="unlimited")
    chunk = RequestChunk(np.array([1200, 1200]), np.array([0.0, 0.5]), hashes, np.array([5, 5]))
    sim = Simulation([chunk], cfg)
    assert [part.batch(i) for part in sim for i in range(part.num_batches)] == [[1200], [176]]
    assert sim.summary().peak_kv_tokens == 1200 + 176


def test_note_states_where_output_lengths_came_from():
    from cpbcg.outputs.documents import simulation_summary
    from cpbcg.outputs.notes import simulation_note
    from cpbcg.planner.traces import TraceFormat
    from cpbcg.assembly.sources import BatchSource

    chunks = [
        RequestChunk(np.array([10, 10]), np.array([0.0, 0.0]), None, np.array([3, 4])),
        RequestChunk(np.array([10]), np.array([0.0]), None, None),
    ]
    sim = Simulation(chunks, SchedulerSettings(**EXACT, default_output_tokens=2))
    source = BatchSource(iter(sim), TraceFormat.mooncake, sim)
    assert [part.batch(i) for part in source.batches for i in range(part.num_batches)] == [[10, 10, 10]]
    decode_line = simulation_note(source).splitlines()[1]
    assert decode_line.startswith("decode: output lengths from the trace (1 at default_output_tokens 2); step 0 ms + 0.976562 ms/request; ")
    summary = simulation_summary(source)
    assert summary["output_tokens"] == 9 and summary["decode_steps"] == 3 and summary["scheduler"]["default_output_tokens"] == 2


def _oracle_forwards(lengths: list[int], chunk: int, max_prefill: int, page: int) -> list[list[int]]:
    """SGLang's packing with every request present at once, restated from its rules alone
    (no decode, no KV budget): in-progress chunk first, whole while the page-rounded length
    fits the chunk budget, else cut to the budget rounded down to a page; no waiting request
    once a budget is spent."""
    ceil = lambda x: -(-x // page) * page  # noqa: E731
    queue, chunked, out = list(lengths), 0, []
    while queue or chunked:
        rem_chunk, rem_input, batch = chunk, max_prefill, []
        if chunked:
            take = min(chunked, rem_chunk)
            batch.append(take)
            rem_chunk, rem_input, chunked = rem_chunk - ceil(take), rem_input - ceil(take), chunked - take
        while queue and rem_input > 0 and rem_chunk > 0:
            head = queue[0]
            if ceil(head) <= rem_chunk:
                queue.pop(0)
                batch.append(head)
                rem_chunk, rem_input = rem_chunk - ceil(head), rem_input - ceil(head)
            else:
                take = rem_chunk // page * page
                if take > 0:
                    queue.pop(0)
                    batch.append(take)
                    chunked = head - take
                break
        out.append(batch)
    return out


@settings(max_examples=examples(150), deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20000), min_size=1, max_size=25),
    chunk=st.sampled_from([256, 1000, 4096, 8192]),
    max_prefill=st.sampled_from([512, 4096, 16384]),
    page=st.sampled_from([1, 16, 64]),
)
def test_packing_matches_the_restated_rules(lengths, chunk, max_prefill, page):
    got, _ = run(lengths, chunked_prefill_size=chunk, max_prefill_tokens=max_prefill, page_size=page, decode=False)
    assert got == _oracle_forwards(lengths, chunk, max_prefill, page)
