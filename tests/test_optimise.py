"""The exact optimiser against brute force, the baselines, and the cost model."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cpbcg.config import CostConfig
from cpbcg.errors import ConfigError
from cpbcg.planner.bucket_lists import pow2_buckets, trtllm_buckets, uniform_buckets, vllm_buckets
from cpbcg.planner.buckets import parse_bucket_spec
from cpbcg.planner.capacity import CaptureLayout, CaptureSpec
from cpbcg.planner.cost import CostModel, demand_cost_ms, evaluation_cost_ms, with_measured
from cpbcg.planner.evaluate import Demand, evaluate
from cpbcg.planner.layout import BatchSet, CPLayout
from cpbcg.planner.optimise import candidate_grid, optimise
from cpbcg.planner.selector import BucketTable, select_buckets
from cpbcg.planner.synthetic import synthetic_batches

COSTS = [
    CostModel(0.5, 4.0, 0.025),  # defaults: heavy padding costs more than eager
    CostModel(0.5, 4.0, 1.0),  # a graph replay is costlier than eager after 3.5 tokens of padding
    CostModel(0.0, 1.0, 0.01),
    CostModel(2.0, 0.0, 0.1),  # eager always cheaper: the best list replays as little as it can
]


def graph_batches(demand, table, factor):
    sel = select_buckets(demand.num_tokens, demand.rows, demand.active, table, factor)
    return int(demand.counts[sel.bucket_index >= 0].sum())


def brute_force(demand, cp, cost, k, max_tokens, factor, pinned=(), spec=CaptureSpec(), objective="time"):
    """Least modelled time over every list (objective time), or the least time among the lists
    with the most graph forwards (objective coverage)."""
    sizes = candidate_grid(cp, spec, max_tokens, 1, pinned).sizes.tolist()
    best = (np.inf, np.inf)
    for r in range(1, k + 1):
        for subset in itertools.combinations(sizes, r):
            if set(pinned) <= set(subset):
                table = BucketTable.build(list(subset), cp, spec)
                time_ms = demand_cost_ms(demand, table, cost, factor)
                key = (-graph_batches(demand, table, factor) if objective == "coverage" else 0, time_ms)
                best = min(best, key)
    return best[1]


batch_lists = st.lists(st.lists(st.integers(1, 28), min_size=1, max_size=3), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    batches=batch_lists,
    counts=st.lists(st.integers(1, 5), min_size=8, max_size=8),
    cp_size=st.sampled_from([1, 2, 4]),
    cost=st.sampled_from(COSTS),
    k=st.integers(1, 3),
    max_tokens=st.integers(16, 30),
    factor=st.sampled_from([1.5, 2.0]),
    pin=st.one_of(st.none(), st.integers(8, 16)),
    objective=st.sampled_from(["time", "coverage"]),
)
def test_optimiser_matches_brute_force(batches, counts, cp_size, cost, k, max_tokens, factor, pin, objective):
    cp = CPLayout(cp_size)
    demand = Demand.of(BatchSet.from_lists(batches, counts[: len(batches)]), cp).aggregate()
    pinned = [] if pin is None else [pin]
    try:
        result = optimise(demand, cp, cost, k, max_tokens, max_padding_factor=factor, pinned=pinned, objective=objective)
    except Exception as exc:  # nothing replayable: brute force agrees no list helps
        assert "nothing to optimise" in str(exc)
        return
    for limit in range(max(1, len(pinned)), k + 1):
        want = brute_force(demand, cp, cost, limit, max_tokens, factor, pinned, objective=objective)
        got = result.cost_ms[limit]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        table = BucketTable.build(result.buckets[limit], cp)
        assert demand_cost_ms(demand, table, cost, factor) == pytest.approx(got, rel=1e-9, abs=1e-9)
        assert len(result.buckets[limit]) <= limit and set(pinned) <= set(result.buckets[limit])


def test_context_bounded_capacity_is_monotone_and_optimiser_exact():
    cp, spec = CPLayout(2), CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=9)
    grid = candidate_grid(cp, spec, 40)
    assert np.all(np.diff(grid.capacity_rows) >= 0)
    assert 10 not in grid.sizes.tolist()  # 9 + 1: a piece shorter than 2*cp cannot be captured
    demand = Demand.of(BatchSet.from_lists([[12, 5], [20], [9, 9, 9], [30]], [3, 1, 2, 4]), cp).aggregate()
    cost = CostModel(0.5, 4.0, 0.3)
    result = optimise(demand, cp, cost, 2, 40, spec=spec)
    assert result.cost_ms[2] == pytest.approx(brute_force(demand, cp, cost, 2, 40, 2.0, spec=spec))


def test_optimiser_never_loses_to_a_baseline_of_the_same_size():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    batches = synthetic_batches(num_batches=3000, chunk_tokens=4096)
    demand = Demand.of(batches, cp).aggregate()
    baselines = [parse_bucket_spec(f"{name}:4096") for name in ("sglang-default", "pow2", "trtllm", "uniform")]
    tables = [BucketTable.build(b, cp) for b in baselines]
    k = max(len(t.capture_num_tokens) for t in tables)
    by_time = optimise(demand, cp, cost, k, 4096, objective="time")
    by_coverage = optimise(demand, cp, cost, k, 4096, objective="coverage")
    for table in tables:
        size = len(table.capture_num_tokens)
        baseline_ms, baseline_graph = demand_cost_ms(demand, table, cost), graph_batches(demand, table, 2.0)
        assert by_time.cost_ms[size] <= baseline_ms + 1e-6
        mine = BucketTable.build(by_coverage.buckets[size], cp)
        assert graph_batches(demand, mine, 2.0) >= baseline_graph
        if graph_batches(demand, mine, 2.0) == baseline_graph:
            assert by_coverage.cost_ms[size] <= baseline_ms + 1e-6


def test_coverage_objective_keeps_a_batch_in_a_graph_that_time_would_leave_eager():
    # Two buckets for n = 300 (x3), 500 (x1), 1900 (x4): by time alone, 500 runs eager
    # (4 + 12.5 ms) rather than pad 300 up to 500 three times; coverage first pads them.
    cp, cost = CPLayout(1), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(BatchSet.from_lists([[300], [500], [1900]], [3, 1, 4]), cp).aggregate()
    by_time = optimise(demand, cp, cost, 2, 2000, objective="time")
    by_coverage = optimise(demand, cp, cost, 2, 2000, objective="coverage")
    assert (by_time.buckets[2], by_time.cost_ms[2]) == ([300, 1900], pytest.approx(24 + 16.5 + 192))
    assert (by_coverage.buckets[2], by_coverage.cost_ms[2]) == ([500, 1900], pytest.approx(39 + 13 + 192))
    with pytest.raises(ConfigError, match="objective"):
        optimise(demand, cp, cost, 2, 2000, objective="speed")


def test_full_chunk_headroom_needs_bucket_above_the_chunk():
    cp = CPLayout(4)
    demand = Demand.of(BatchSet.from_lists([[1534, 161, 353]] * 5), cp).aggregate()  # 2048 tokens, 520 rows
    cost = CostModel(0.5, 4.0, 0.025)
    assert optimise(demand, cp, cost, 1, 2048).cost_ms[1] == pytest.approx(5 * (4.0 + 2048 * 0.025))
    assert optimise(demand, cp, cost, 1, 4096).buckets[1] == [2049]  # C(2049) = 520 (one extra row on rank 0)


def test_modelled_cost_of_evaluation_matches_demand_cost():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    batches = synthetic_batches(num_batches=500)
    table = BucketTable.build(parse_bucket_spec("sglang-default:8192"), cp)
    ev = evaluate(iter([batches]), table, cp)
    assert evaluation_cost_ms(ev, cost) == pytest.approx(demand_cost_ms(Demand.of(batches, cp).aggregate(), table, cost))


def test_optimiser_errors():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(BatchSet.from_lists([[100]]), cp).aggregate()
    with pytest.raises(ConfigError, match="max-buckets"):
        optimise(demand, cp, cost, 0, 1024)
    with pytest.raises(ConfigError, match="exceed"):
        optimise(demand, cp, cost, 1, 1024, pinned=[128, 256])
    with pytest.raises(ConfigError, match="cannot be captured"):
        optimise(demand, cp, cost, 2, 1024, pinned=[4])
    with pytest.raises(ConfigError, match="token_ms"):
        CostModel(0.5, 4.0, -1.0)


def test_bucket_multiple_coarsens_the_grid():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(synthetic_batches(num_batches=500), cp).aggregate()
    fine = optimise(demand, cp, cost, 8, 8192)
    coarse = optimise(demand, cp, cost, 8, 8192, bucket_multiple=256)
    assert all(b % 256 == 0 for b in coarse.buckets[8]) and coarse.grid_size == 32
    assert fine.cost_ms[8] <= coarse.cost_ms[8]


def test_baselines_follow_their_rules():
    assert pow2_buckets(3000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3000]
    vllm = vllm_buckets(512)
    assert vllm[:5] == [1, 2, 4, 8, 16] and 256 in vllm and vllm[-3:] == [480, 496, 512] and len(vllm) == 51
    assert trtllm_buckets(3072) == [1, 2, 4, 8, 16, 32, 64, 128] + list(range(256, 3073, 256))
    assert uniform_buckets(8192) == [-(-8192 * i // 58) for i in range(1, 59)]
    assert parse_bucket_spec("uniform:1000")[-1] == 1000


def test_cost_model_from_config_and_measured_timings():
    assert CostConfig().to_cost("config").to_dict() == {"graph_fixed_ms": 10.0, "eager_fixed_ms": 24.0, "token_ms": 0.05, "source": "config"}
    fitted = with_measured(CostConfig().to_cost("config"), (0.2, 0.01), 3.0, "manifest m.json")
    assert (fitted.graph_fixed_ms, fitted.eager_fixed_ms, fitted.token_ms, fitted.source) == (0.2, 3.0, 0.01, "manifest m.json")
    assert with_measured(fitted, None, None, "other").source == "manifest m.json"
    assert CostModel(0.5, 4.0, 0.025).break_even_tokens == pytest.approx(140.0)
