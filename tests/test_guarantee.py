"""Guarantee mode against exhaustive enumeration of every CP-active batch for small limits."""

import itertools

import numpy as np
import pytest

from cpbcg.errors import ModelError
from cpbcg.engines.sglang.capture_lists import sglang_default_buckets
from cpbcg.planner.model.layout import BatchSet, CPLayout, local_rows, worst_case_rows
from cpbcg.planner.optimise.guarantee import Limits, check_guarantee, guarantee_buckets, headroom_required, worst_rows
from cpbcg.planner.optimise.grid import candidate_grid
from cpbcg.planner.model.selector import GRAPH, BucketTable, select_buckets


def all_batches(limits: Limits, cp: CPLayout) -> BatchSet:
    """Every multiset of request lengths >= 2*cp with <= max_requests requests and <= max_tokens tokens."""
    short = 2 * cp.cp_size
    out = []
    for k in range(1, limits.max_requests + 1):
        for combo in itertools.combinations_with_replacement(range(short, limits.max_tokens + 1), k):
            if sum(combo) <= limits.max_tokens:
                out.append(list(combo))
    return BatchSet.from_lists(out)


CASES = [(CPLayout(2), Limits(3, 26)), (CPLayout(4), Limits(3, 60)), (CPLayout(3), Limits(4, 48))]


@pytest.mark.parametrize("cp,limits", CASES)
def test_exact_worst_rows_match_enumeration_and_sit_below_the_bound(cp, limits):
    batches = all_batches(limits, cp)
    n, rows = batches.num_tokens, local_rows(batches, cp)
    want = np.zeros(limits.max_tokens + 1, dtype=np.int64)
    np.maximum.at(want, n, rows)
    got_n, got_rows = worst_rows(limits, cp)
    assert np.array_equal(got_rows, want[got_n])
    k = np.minimum(limits.max_requests, got_n // (2 * cp.cp_size))
    assert np.all(got_rows <= worst_case_rows(got_n, k, cp))


@pytest.mark.parametrize("cp,limits", CASES)
def test_guarantee_serves_every_batch_and_is_minimal(cp, limits):
    buckets = guarantee_buckets(limits, cp)
    batches = all_batches(limits, cp)
    table = BucketTable.build(buckets, cp)
    sel = select_buckets(batches.num_tokens, local_rows(batches, cp), np.ones(batches.num_batches, bool), table)
    assert np.all(sel.reason_code == GRAPH)
    assert check_guarantee(buckets, limits, cp).ok
    # minimal: no list with one bucket fewer serves every enumerated batch
    sizes = candidate_grid(cp, table_spec(), 2 * limits.max_tokens).sizes.tolist()
    rows = local_rows(batches, cp)
    for subset in itertools.combinations(sizes, len(buckets) - 1):
        if not subset:
            continue
        sel = select_buckets(batches.num_tokens, rows, np.ones(batches.num_batches, bool), BucketTable.build(list(subset), cp))
        assert not np.all(sel.reason_code == GRAPH)


def table_spec():
    from cpbcg.planner.model.capacity import CaptureSpec

    return CaptureSpec()


def test_guarantee_for_32_requests_8192_tokens_cp4():
    cp, limits = CPLayout(4), Limits(32, 8192)
    buckets = guarantee_buckets(limits, cp)
    # on SGLang 0.5.23's grid (multiples of cp 4; before the rounding: 16, 34, 70, ..., 8334)
    assert buckets == [16, 32, 52, 104, 196, 340, 536, 908, 1676, 3212, 6284, 12428]
    assert check_guarantee(buckets, limits, cp).ok


def test_check_names_the_smallest_falling_back_batch():
    cp, limits = CPLayout(4), Limits(32, 8192)
    check = check_guarantee(sglang_default_buckets(8192), limits, cp)
    assert not check.ok and check.failing_tokens == 8103 and check.failing_rows == 2056
    assert check.reason == "local_capacity"
    assert sum(check.witness) == 8103 and len(check.witness) <= 32
    rows = local_rows(BatchSet.from_lists([check.witness]), cp)
    assert rows[0] == 2056  # bucket 8192 holds 2048


def test_impossible_guarantee_is_a_model_error():
    with pytest.raises(ModelError, match="no bucket can replay"):
        guarantee_buckets(Limits(32, 64), CPLayout(4), max_padding_factor=1.0)


def rank_tokens(length: int, rank: int, cp: int) -> int:
    """Zigzag tokens rank `rank` holds of one request (domain §2), in plain Python."""
    base, rem = divmod(length, 2 * cp)
    return 2 * base + (rank < rem) + (2 * cp - 1 - rank < rem)


@pytest.mark.parametrize("cp_size,max_requests", [(2, 5), (4, 3), (4, 17), (3, 9)])
def test_worst_rows_match_a_plain_knapsack(cp_size, max_requests):
    # most[c][t]: most tokens one rank holds over c requests (each >= 2*cp) of t tokens in all
    cp, top = CPLayout(cp_size), 160
    short, none = 2 * cp_size, -1
    want = [none] * (top + 1)
    for rank in range(cp_size):
        most = [[none] * (top + 1) for _ in range(max_requests + 1)]
        most[0][0] = 0
        for c in range(1, max_requests + 1):
            for t in range(short, top + 1):
                options = [most[c - 1][t - length] + rank_tokens(length, rank, cp_size)
                           for length in range(short, t + 1) if most[c - 1][t - length] >= 0]
                most[c][t] = max(options, default=none)
        for t in range(top + 1):
            want[t] = max([want[t]] + [most[c][t] for c in range(1, max_requests + 1)])
    n, rows = worst_rows(Limits(max_requests, top), cp)
    align = cp.align_rows
    assert rows.tolist() == [-(-want[t] // align) * align for t in n.tolist()]


def test_worst_rows_for_1024_requests():
    # 1024 requests of residue 1 (>= 9 tokens each, 9216 <= 16384 in all): rank 0 holds
    # (16384 - 1024) / 4 + 1024 = 4864 rows, the §2 bound; n = 8192: 2048 + 24 with 32 requests
    n, rows = worst_rows(Limits(1024, 16384), CPLayout(4))
    assert rows[-1] == 4864 == worst_case_rows(16384, 1024, CPLayout(4))
    assert worst_rows(Limits(32, 8192), CPLayout(4))[1][-1] == 2072
    assert headroom_required(8192, 32, CPLayout(4)) == [(8192, 2072)]
