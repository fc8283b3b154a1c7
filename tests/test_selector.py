"""Replay selector: every domain §4 value, reasons, and invariants against the plain loop."""

import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.selector import EAGER_REASONS, GRAPH, BucketTable, EagerReason, select_buckets, select_one


def run(n, rows, capacities, factor=2.0, active=True):
    table = BucketTable.from_mapping(capacities)
    sel = select_buckets(np.array([n]), np.array([rows]), np.array([active]), table, factor)
    idx, code = int(sel.bucket_index[0]), int(sel.reason_code[0])
    bucket = int(table.capture_num_tokens[idx]) if idx >= 0 else None
    reason = None if code == GRAPH else EAGER_REASONS[code - 1]
    assert (bucket, reason, bool(sel.rescued[0])) == select_one(n, rows, active, capacities, factor)
    return bucket, reason, bool(sel.rescued[0]), bool(sel.natural_overflow[0])


def test_natural_bucket_lacks_capacity_larger_one_rescues():
    assert run(2048, 520, {2048: 512, 2304: 576, 2560: 640}) == (2304, None, True, True)


def test_same_bucket_on_every_rank():
    # rows are the max over ranks, so one selection serves all ranks of the batch
    batches = BatchSet.from_lists([[1534, 161, 353]])
    from cpbcg.planner.model.layout import local_rows, local_tokens

    per_rank = local_tokens(batches, CPLayout(4))[0]
    rows = local_rows(batches, CPLayout(4))[0]
    assert rows == 520 and all(t <= rows for t in per_rank)
    assert run(2048, int(rows), {2048: 512, 2304: 576, 2560: 640})[0] == 2304


def test_no_bucket_with_capacity_is_local_capacity():
    assert run(2048, 520, {2048: 512, 2304: 516}) == (None, EagerReason.local_capacity, False, True)


def test_capacity_beyond_the_2x_limit_is_padding_limit():
    assert run(1024, 520, {2048: 512, 2304: 576}) == (None, EagerReason.padding_limit, False, True)


def test_no_cp_buckets_4_16_exactly_2x_allowed():
    caps = {4: 4, 16: 16}
    assert run(5, 5, caps) == (None, EagerReason.padding_limit, False, False)
    assert run(8, 8, caps) == (16, None, False, False)


def test_above_largest_bucket_and_not_cp_active():
    assert run(20, 20, {4: 4, 16: 16}) == (None, EagerReason.above_largest_bucket, False, False)
    assert run(8, 8, {16: 16}, active=False) == (None, EagerReason.not_cp_active, False, False)


def test_padding_factor_is_configurable():
    assert run(8, 8, {4: 4, 20: 20}, factor=2.5) == (20, None, False, False)
    assert run(8, 8, {4: 4, 20: 20}, factor=2.0) == (None, EagerReason.padding_limit, False, False)


def test_from_real_layouts_domain_batch():
    table = BucketTable.build([2048, 2304, 2560], CPLayout(4))
    assert table.as_dict() == {2048: 512, 2304: 576, 2560: 640}


@st.composite
def instances(draw):
    buckets = sorted(draw(st.sets(st.integers(8, 400), min_size=1, max_size=8)))
    caps = {b: draw(st.integers(max(1, b // 8), b)) for b in buckets}
    n = draw(st.integers(1, 450))
    rows = draw(st.integers(1, max(1, n)))
    factor = draw(st.sampled_from([1.0, 1.5, 2.0, 3.0]))
    return caps, n, rows, factor, draw(st.booleans())


@settings(max_examples=examples(400), deadline=None)
@given(instances())
def test_vectorised_matches_plain_loop_and_stays_in_window(instance):
    caps, n, rows, factor, active = instance
    bucket, reason, rescued, _ = run(n, rows, caps, factor, active)
    if bucket is not None:
        assert n <= bucket <= factor * n
        assert rows <= caps[bucket]
    else:
        assert reason is not None


@settings(max_examples=examples(200), deadline=None)
@given(instances(), st.integers(8, 450), st.integers(1, 450))
def test_adding_a_bucket_never_lowers_coverage(instance, extra, extra_cap):
    caps, n, rows, factor, active = instance
    before = run(n, rows, caps, factor, active)[0] is not None
    after = run(n, rows, {**caps, extra: caps.get(extra, extra_cap)}, factor, active)[0] is not None
    assert after >= before


def test_many_batches_at_once_match_one_by_one():
    rng = np.random.default_rng(7)
    caps = {b: b // 4 + 8 * (b % 3) for b in range(16, 4096, 48)}
    table = BucketTable.from_mapping(caps)
    n = rng.integers(1, 5000, 3000)
    rows = (n // 4 + rng.integers(0, 16, 3000)).clip(1)
    active = rng.random(3000) > 0.05
    sel = select_buckets(n, rows, active, table, 2.0)
    for i in range(len(n)):
        b, reason, rescued = select_one(int(n[i]), int(rows[i]), bool(active[i]), caps, 2.0)
        idx = int(sel.bucket_index[i])
        assert (int(table.capture_num_tokens[idx]) if idx >= 0 else None) == b
        assert bool(sel.rescued[i]) == rescued
