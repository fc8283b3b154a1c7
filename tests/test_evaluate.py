"""Evaluation tallies honour `count` weights everywhere, and the per-rank packing never overflows."""

import numpy as np

from cpbcg.planner.model.demand import Demand
from cpbcg.planner.demand_log import DemandLog
from cpbcg.planner.evaluate import evaluate
from cpbcg.planner.model.layout import BatchSet, CPLayout, local_rows, local_tokens
from cpbcg.planner.model.selector import BucketTable

CP4 = CPLayout(4)
TABLE = BucketTable.build([2048, 2304], CP4)


def test_rescued_and_overflow_count_weights():
    # [1534, 161, 353] needs 520 rows; C(2048) = 512, C(2304) = 576: rescued, natural overflow
    batches = BatchSet.from_lists([[1534, 161, 353], [2048]], counts=[3, 2])
    ev = evaluate([batches], TABLE, CP4)
    assert (ev.batches, ev.graph_batches, ev.rescued, ev.natural_overflow) == (5, 5, 3, 3)
    assert ev.bucket_hits == {2048: 2, 2304: 3} and ev.padded_tokens == 3 * 256
    assert ev.tokens == 5 * 2048 and ev.graph_tokens == 5 * 2048


def test_eager_counts_and_tokens_honour_weights():
    batches = BatchSet.from_lists([[4, 4], [1000]], counts=[7, 4])  # inactive (4 < 8); padding limit (2048 > 2000)
    ev = evaluate([batches], TABLE, CP4)
    assert ev.eager == {"not_cp_active": 7, "above_largest_bucket": 0, "padding_limit": 4, "local_capacity": 0, "context_limit": 0, "multimodal_input": 0}
    assert ev.eager_tokens["not_cp_active"] == 56 and ev.eager_tokens["padding_limit"] == 4000


def test_packed_rank_sums_do_not_overflow_16_bits():
    # 40,000 requests of 15 tokens: seg 8, base 1, rem 7 -> rank 0 gets 3, ranks 1-3 get 4 per request
    batches = BatchSet.from_lists([[15] * 40_000])
    assert local_tokens(batches, CP4)[0].tolist() == [120_000, 160_000, 160_000, 160_000]
    assert local_rows(batches, CP4).tolist() == [160_000]


def test_demand_log_splits_in_trace_order():
    log = DemandLog()
    for n in (100, 200, 300, 400, 500, 600, 700, 800, 900, 1000):
        log.add(Demand(np.array([n]), np.array([n // 4]), np.array([True]), np.array([1]), np.array([2])))
    head, tail, used = log.split(0.7)
    assert used == 0.7 and sorted(head.num_tokens.tolist()) == [100, 200, 300, 400, 500, 600, 700]
    assert tail.num_tokens.tolist() == [800, 900, 1000] and tail.num_forwards == 6
    assert log.whole().num_forwards == 20 and log.max_requests() == 1


def _aggregate_by_dict(demand: Demand) -> dict:
    merged: dict = {}
    for n, r, a, q, c in zip(*(x.tolist() for x in (demand.num_tokens, demand.rows, demand.active, demand.num_requests, demand.counts))):
        count, requests = merged.get((n, r, a), (0, 0))
        merged[(n, r, a)] = (count + c, max(requests, q))
    return merged


def test_aggregate_merges_equal_forwards_exactly_on_every_key_width():
    # The radix order takes 1 to 4 digits of 16 bits (small keys, tokens near 2**31), the other
    # path keys beyond; counts add up exactly past 2**53; the result is sorted by key.
    rng = np.random.default_rng(3)
    for top in (40, 1 << 15, 1 << 20, (1 << 31) - 1, 1 << 40):
        n = rng.integers(1, top, 3000) // rng.integers(1, 500, 3000) + 1
        n[:1500] = n[1500:]  # repeats
        rows = n // 4 + rng.integers(0, 3, 3000)
        active = rng.random(3000) < 0.9
        counts = rng.integers(1, 1 << 42, 3000)
        counts[:10] = counts[1500:1510] = (1 << 53) - 1  # each pair sums to 2**54 - 2: not a float64
        demand = Demand(n, rows, active, rng.integers(1, 60, 3000), counts)
        got = demand.aggregate()
        keys = list(zip(got.num_tokens.tolist(), got.rows.tolist(), got.active.tolist()))
        assert keys == sorted(_aggregate_by_dict(demand))
        assert dict(zip(keys, zip(got.counts.tolist(), got.num_requests.tolist()))) == _aggregate_by_dict(demand)
        assert got.counts.dtype == np.int64 and got.num_tokens.dtype == np.int64


def test_demand_log_split_depends_on_the_trace_not_on_its_chunks(monkeypatch):
    # Blocks start at multiples of BLOCK_FORWARDS lines however the reader cut the trace, so the
    # split lands at the same line, within BLOCK_FORWARDS / 2 of the target (exact in the raw tail).
    from cpbcg.planner import demand_log

    monkeypatch.setattr(demand_log, "RAW_FORWARDS", 8)
    monkeypatch.setattr(demand_log, "BLOCK_FORWARDS", 4)
    rng = np.random.default_rng(5)
    n = rng.integers(16, 400, 203)
    whole = Demand(n, n // 4, np.ones(203, bool), rng.integers(1, 9, 203), rng.integers(1, 4, 203))
    answers = set()
    for pieces in ([203], [1] * 203, [5, 3, 8, 8, 17, 100, 62], [7] * 29):
        log, start = DemandLog(), 0
        for size in pieces:
            log.add(whole.subset(slice(start, start + size)))
            start += size
        head, tail, used = log.split(0.7)
        assert abs(used * 203 - 0.7 * 203) <= 2 and (used * 203) % 4 == 0
        answers.add((used, tuple(head.counts.tolist()), tuple(tail.counts.tolist()), log.whole().num_forwards))
    assert len(answers) == 1
    head, tail, used = log.split(0.98)  # 199 of 203: inside the raw tail, exact
    assert used == 199 / 203 and tail.num_forwards == int(whole.counts[199:].sum())
