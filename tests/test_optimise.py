"""The exact optimiser against an independent brute force (the domain rules in plain Python), the
baselines, and the cost model."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.config import CostConfig
from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.model.bucket_lists import pow2_buckets, trtllm_buckets, uniform_buckets, vllm_buckets
from cpbcg.planner.model.bucket_spec import parse_bucket_spec
from cpbcg.engines.sglang.capture_lists import LISTS
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec, local_capacity
from cpbcg.planner.costs.cost import CostModel, demand_cost_ms, evaluation_cost_ms, with_measured
from cpbcg.planner.evaluate import Demand, evaluate
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.optimise import dp, transition_costs
from cpbcg.planner.optimise.guarantee import headroom_required
from cpbcg.planner.optimise.capture_cost import CaptureModel
from cpbcg.planner.optimise.optimiser import Budget, candidate_grid, fewest_for_coverage, optimise
from cpbcg.planner.model.selector import BucketTable, select_buckets
from cpbcg.assembly.embedded import synthetic_batches

COSTS = [
    CostModel(0.5, 4.0, 0.025),  # defaults: heavy padding costs more than eager
    CostModel(0.5, 4.0, 1.0),  # a graph replay is costlier than eager after 3.5 tokens of padding
    CostModel(0.0, 1.0, 0.01),
    CostModel(2.0, 0.0, 0.1),  # eager always cheaper: the best list replays as little as it can
]


def graph_batches(demand, table, factor):
    sel = select_buckets(demand.num_tokens, demand.rows, demand.active, table, factor)
    return int(demand.counts[sel.bucket_index >= 0].sum())


# --- the oracle: the domain rules in plain Python, sharing no code with cpbcg ---------------

def rows_of(lens, cp, align):
    """Zigzag CP-local rows (domain §2): rank r owns blocks r and 2cp-1-r of every request."""
    if cp == 1:
        return sum(lens)
    seg, ranks = 2 * cp, [0] * cp
    for length in lens:
        base, rem = divmod(length, seg)
        for r in range(cp):
            ranks[r] += 2 * base + (r < rem) + (seg - 1 - r < rem)
    return -(-max(ranks) // align) * align


def is_active(lens, cp):
    return cp == 1 or (sum(lens) >= 2 * cp and min(lens) >= 2 * cp)


def replayed_in(n, rows, active, buckets, cap, factor):
    """The runtime selector (domain §4): first bucket >= n with room, stopping above factor*n."""
    if not active:
        return None
    for bucket in sorted(buckets):
        if bucket < n:
            continue
        if bucket > n * factor:
            return None
        if rows <= cap[bucket]:
            return bucket
    return None


def oracle_outcome(batches, counts, buckets, cap, cp, align, cost, factor):
    """(graph forwards, modelled ms) of a list."""
    graph, ms = 0, 0.0
    for lens, count in zip(batches, counts):
        n = sum(lens)
        bucket = replayed_in(n, rows_of(lens, cp, align), is_active(lens, cp), buckets, cap, factor)
        if bucket is None:
            ms += count * (cost.eager_fixed_ms + n * cost.token_ms)
        else:
            graph += count
            ms += count * (cost.graph_fixed_ms + bucket * cost.token_ms)
    return graph, ms


def oracle_allows(buckets, cap, max_tokens, factor, pinned, required, gap_free):
    if not set(pinned) <= set(buckets):
        return False
    if any(replayed_in(n, rows, True, buckets, cap, factor) is None for n, rows in required):
        return False
    if gap_free:
        if buckets[-1] < max_tokens:
            return False
        if any(b > (p + 1) * factor for p, b in zip(buckets, buckets[1:]) if p < max_tokens):
            return False
    return True


def oracle_best(batches, counts, cp, cost, k_top, max_tokens, factor, objective, pinned=(), required=(),
                gap_free=False, top=None, align=None, budget_ok=None):
    """Best (graph forwards, ms) for each count limit 1..k_top over every subset of the sizes
    2*cp..top as SGLang 0.5.23 captures them (rounded up to multiples of cp; single-request
    capture: C(B) = rows of one request of B tokens); None if none is allowed."""
    align = align or (2 * cp if cp > 1 else 1)
    smallest = 2 * cp if cp > 1 else 1
    sizes = sorted(b for b in {-(-s // cp) * cp for s in range(1, (top or max_tokens) + 1)} if b >= smallest)
    cap = {b: rows_of([b], cp, align) for b in sizes}
    best_by_size = {}
    for r in range(1, k_top + 1):
        for subset in itertools.combinations(sizes, r):
            if not oracle_allows(subset, cap, max_tokens, factor, pinned, required, gap_free):
                continue
            if budget_ok is not None and not budget_ok(subset, cap):
                continue
            graph, ms = oracle_outcome(batches, counts, subset, cap, cp, align, cost, factor)
            key = (-graph, ms) if objective == "coverage" else (0, ms)
            if r not in best_by_size or key < best_by_size[r]:
                best_by_size[r] = key
    out, best = {}, None
    for r in range(1, k_top + 1):
        if r in best_by_size and (best is None or best_by_size[r] < best):
            best = best_by_size[r]
        out[r] = best
    return out, cap


batch_lists = st.lists(st.lists(st.integers(1, 28), min_size=1, max_size=3), min_size=1, max_size=6)


@settings(max_examples=examples(80), deadline=None)
@given(
    batches=batch_lists,
    counts=st.lists(st.integers(1, 5), min_size=6, max_size=6),
    cp_size=st.sampled_from([1, 2, 4]),
    cost=st.sampled_from(COSTS),
    k=st.integers(1, 3),
    max_tokens=st.integers(16, 24),
    headroom=st.integers(0, 6),
    factor=st.sampled_from([1.5, 2.0]),
    pin=st.one_of(st.none(), st.integers(8, 16)),
    need=st.one_of(st.none(), st.lists(st.integers(8, 12), min_size=1, max_size=2)),
    objective=st.sampled_from(["time", "coverage"]),
    gap_free=st.booleans(),
)
def test_optimiser_matches_an_independent_brute_force(
    batches, counts, cp_size, cost, k, max_tokens, headroom, factor, pin, need, objective, gap_free
):
    cp, counts = CPLayout(cp_size), counts[: len(batches)]
    align = 2 * cp_size if cp_size > 1 else 1
    pinned = [] if pin is None else [-(-pin // cp_size) * cp_size]  # SGLang rounds a pin up to a multiple of cp
    required = [] if need is None or not is_active(need, cp_size) else [(sum(need), rows_of(need, cp_size, align))]
    top = max_tokens + headroom
    want, cap = oracle_best(batches, counts, cp_size, cost, k, max_tokens, factor, objective, pinned, required, gap_free, top)
    demand = Demand.of(BatchSet.from_lists(batches, counts), cp).aggregate()
    options = dict(max_padding_factor=factor, pinned=[] if pin is None else [pin], objective=objective, allow_gaps=not gap_free,
                   max_bucket_tokens=top, required=required)
    if required and not any(replayed_in(n, r, True, [b], cap, factor) for n, r in required for b in cap):
        with pytest.raises(ModelError, match="required forward"):
            optimise(demand, cp, cost, k, max_tokens, **options)
        return
    result = optimise(demand, cp, cost, k, max_tokens, **options)
    for limit in range(1, k + 1):
        if want[limit] is None:
            assert limit not in result.buckets
            continue
        chosen = result.buckets[limit]
        assert len(chosen) <= limit and oracle_allows(chosen, cap, max_tokens, factor, pinned, required, gap_free)
        graph, ms = oracle_outcome(batches, counts, chosen, cap, cp_size, align, cost, factor)
        assert (graph, result.graph_forwards[limit]) == (graph, graph)
        assert result.cost_ms[limit] == pytest.approx(ms, rel=1e-9, abs=1e-9)
        if objective == "coverage":
            assert graph == -want[limit][0]
        assert ms == pytest.approx(want[limit][1], rel=1e-9, abs=1e-9)


def _random_items(rng, m, count, reach, lower=None):
    """A random `dp.Problem` (items with windows up to `reach` long) and its `tcost` by definition."""
    lo = np.sort(rng.integers(0, m, size=count))
    hi = np.minimum(lo + rng.integers(0, reach, size=count), m - 1)
    weight = rng.integers(1, 5, size=count)
    gamma = np.sort(rng.integers(1, 50, size=m))
    dead = weight * 1000 + rng.integers(0, 50, size=count)
    lower = np.ones(m, np.int64) if lower is None else lower
    problem = transition_costs.Problem(lo, hi, weight, dead, gamma, lower, np.ones(m, bool), 1, 2)

    def tcost(a, b):  # sum over items with a <= lo <= b of (w * gamma[b] if hi >= b else e)
        keep = (lo >= a) & (lo <= b)
        return int(np.where(hi[keep] >= b, weight[keep] * gamma[b], dead[keep]).sum())

    return problem, tcost


def _check_rows(rng, evaluate, tcost, b, left):
    """`evaluate(dp_prev, b, left, right)` against the definition on random column ranges."""
    dp_prev = rng.integers(0, 10**5, size=int(b[-1]) + 2)  # states 0..m
    right = np.array([int(rng.integers(lf, r + 1)) for lf, r in zip(left, b)])
    at, val = evaluate(dp_prev, b, left, right)
    for row, (bb, lf, r) in enumerate(zip(b, left, right)):
        totals = [dp_prev[a] + tcost(a, bb) for a in range(lf, r + 1)]
        assert val[row] == min(totals) and at[row] == lf + max(i for i, t in enumerate(totals) if t == min(totals))
    return right


@pytest.mark.parametrize("seed", range(4))
def test_transition_costs_match_their_definition(seed):
    # The anchor evaluator (transition_costs.AnchorRows): prefix sums, the anchor table, per-row sums.
    rng = np.random.default_rng(seed)
    m = 60
    problem, tcost = _random_items(rng, m, 80, 25)
    step = int(rng.integers(2, 9))
    solver = transition_costs.AnchorRows(problem, transition_costs.Prefix(problem), step)
    band = solver.pre.band_lo  # anchors: b + 1, any x <= band_lo[b], multiples of step
    pairs = [(a, b) for b in range(m) for a in range(b + 2) if a == b + 1 or a <= band[b] or a % step == 0]
    assert sum(a % step == 0 and band[b] < a <= b for a, b in pairs) > 50  # the table is read
    xs, bs = np.array(pairs).T
    assert solver.anchor(xs, bs).tolist() == [tcost(a, b) for a, b in pairs]
    b = np.arange(5, m)
    _check_rows(rng, solver, tcost, b, rng.integers(1, 6, size=len(b)))


def test_each_row_takes_its_last_minimum():
    # The divide and conquer relies on the largest minimising state (module doc of dp).
    total = np.array([3, 1, 1, 2, 5, 5, 0, 4, 0, 0, 7])
    ncol = np.array([4, 2, 5])
    cstart = np.concatenate([[0], np.cumsum(ncol)])
    col = np.arange(len(total)) + 100
    arg, best = transition_costs.last_argmin(total, col, cstart, ncol)
    assert best.tolist() == [1, 5, 0] and arg.tolist() == [102, 105, 109]


@pytest.mark.parametrize("seed", range(6))
def test_zone_evaluator_matches_the_definition_of_tcost(seed):
    # transition_costs.ZoneRows: zone A (every item below a is dead at b), the table (dead and live
    # items interleave in lo: nested windows) and zone B (every item from a on is live), with a
    # random nondecreasing lower bound on the columns.
    rng = np.random.default_rng(seed)
    m = 70
    lower = np.maximum(np.minimum(np.sort(rng.integers(-20, m, size=m)) // 2, np.arange(m)), 1)
    problem, tcost = _random_items(rng, m, 90, 30, lower)
    pre = transition_costs.Prefix(problem)
    rows = transition_costs.ZoneRows.build(problem, pre, 10**6)
    assert rows is not None and len(rows.table) > 30  # the table is read
    assert transition_costs.ZoneRows.build(problem, pre, len(rows.table) - 2) is None  # and declines past its limit
    b = np.arange(2, m)
    left = lower[b]
    right = _check_rows(rng, rows, tcost, b, left)
    zones = {"a": 0, "table": 0, "b": 0}
    for bb, lf, r in zip(b, left, right):
        for a in range(lf, r + 1):
            zones["a" if a <= pre.band_lo[bb] else "table" if a <= rows.last_table[bb] else "b"] += 1
    assert min(zones.values()) > 20, zones  # every zone is evaluated


@pytest.mark.parametrize("seed,scale", [(s, 1) for s in range(6)] + [(6, 3 * 10**4), (8, 3 * 10**4)])
def test_divide_and_conquer_matches_the_band_scan_on_larger_instances(seed, scale, monkeypatch):
    # The two solvers share only the prefix sums; the zone table and the anchor evaluator (an
    # anchor every 32nd candidate, or every 3rd) must agree on instances larger than the brute force's. scale 3e4:
    # coverage keys near 10**18 (int64 keys, just below the 2**61 limit of the exact path).
    rng = np.random.default_rng(seed)
    cp = CPLayout(int(rng.choice([2, 4])))
    batches = [[int(x) for x in rng.integers(8, 400, size=rng.integers(1, 5))] for _ in range(300)]
    counts = (rng.integers(1, 9, size=300) * scale).tolist()
    demand = Demand.of(BatchSet.from_lists(batches, counts), cp).aggregate()
    objective, cost = [("coverage", CostModel(0.5, 4.0, 0.025)), ("time", CostModel(0.5, 4.0, 0.0001))][seed % 2]
    options = dict(objective=objective, allow_gaps=seed % 3 == 0, max_bucket_tokens=1600, required=[(1200, 320)])
    want = {}
    for zones, step in ((True, None), (False, None), (False, 3)):  # zone table, anchors every 32nd or 3rd
        monkeypatch.setattr(transition_costs, "ZONE_TABLE_LIMIT", 1 << 22 if zones else -1)
        monkeypatch.setattr(transition_costs, "ANCHOR_STEP", step or 32)
        got = optimise(demand, cp, cost, 12, 1200, **options)
        want.setdefault("dc", got)
        assert got.cost_ms == pytest.approx(want["dc"].cost_ms) and got.graph_forwards == want["dc"].graph_forwards

    def band(problem, stop=None, final_ok=None):
        as_float = dataclasses.replace(problem, dead=problem.dead.astype(float), gamma=problem.gamma.astype(float))
        return dp.solve_band(as_float, final_ok)

    monkeypatch.setattr(dp, "solve_monge", band)
    scan = optimise(demand, cp, cost, 12, 1200, **options)
    assert scan.graph_forwards == want["dc"].graph_forwards
    assert scan.cost_ms == pytest.approx(want["dc"].cost_ms, rel=1e-12)


def test_time_objective_leaves_the_window_of_a_batch_whose_replay_costs_more():
    # cp 4, align 1: [9,9,9,9] (36 tokens, 12 rows) and [71] (18 rows). Bucket 72 = 2*36 would
    # replay both (36 padded to 72 costs 72.5 ms, eager 42 ms); 76 (the next multiple of cp 4,
    # as SGLang 0.5.23 captures buckets) leaves 36 eager: 76.5 + 42 < all eager 42 + 77.
    cp, cost = CPLayout(4, align_size=1), CostModel(0.5, 6.0, 1.0)
    demand = Demand.of(BatchSet.from_lists([[9, 9, 9, 9], [71]]), cp).aggregate()
    result = optimise(demand, cp, cost, 1, 80, objective="time", allow_gaps=True)
    assert (result.buckets[1], result.cost_ms[1]) == ([76], pytest.approx(118.5))
    coverage = optimise(demand, cp, cost, 1, 80, allow_gaps=True)
    assert (coverage.buckets[1], coverage.graph_forwards[1], coverage.cost_ms[1]) == ([72], 2, pytest.approx(145.0))


def test_gap_free_lists_close_every_gap_below_the_chunk():
    # n = 100 and n = 1000 (cp 1, factor 2). Gap-free, a bucket b after p needs b <= 2 (p + 1):
    # from 124: 249 <= 250, 499 <= 500, 1000 <= 1000; from 123 the chain ends at 998 < 1000.
    cp, cost = CPLayout(1), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(BatchSet.from_lists([[100], [1000]]), cp).aggregate()
    free = optimise(demand, cp, cost, 2, 1000, allow_gaps=True)
    assert free.buckets[2] == [100, 1000]
    strict = optimise(demand, cp, cost, 4, 1000)
    assert strict.buckets[4] == [124, 249, 499, 1000] and strict.graph_forwards[4] == 2
    assert strict.graph_forwards[3] == 1 and strict.buckets[3][-1] == 1000
    assert strict.buckets[1] == [1000] and strict.gap_free
    few = fewest_for_coverage(demand, cp, cost, 1.0, 1000, max_buckets=8)
    assert (few.buckets, few.num_buckets, few.coverage, few.reached) == ([124, 249, 499, 1000], 4, 1.0, True)
    assert fewest_for_coverage(demand, cp, cost, 0.5, 1000).buckets == [1000]
    assert fewest_for_coverage(demand, cp, cost, 1.0, 1000, allow_gaps=True).buckets == [100, 1000]
    short = fewest_for_coverage(demand, cp, cost, 1.0, 1000, max_buckets=3)
    assert not short.reached and short.coverage == 0.5
    with pytest.raises(ConfigError, match="target_coverage"):
        fewest_for_coverage(demand, cp, cost, 1.5, 1000)


def test_required_full_chunk_headroom_above_the_chunk():
    # A full 8192-token chunk of up to 32 requests needs 2072 rows at cp 4; bucket 8192 holds
    # 2048, 8196 holds 2056; the first bucket with 2072 rows on SGLang's grid (multiples of cp 4)
    # is 8260 (8257 = 2*1032 + 1 would do, and rounds up to 8260); 2049 rounds up to 2052.
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    need = headroom_required(8192, 32, cp)
    assert need == [(8192, 2072)]
    demand = Demand.of(BatchSet.from_lists([[1534, 161, 353]] * 5), cp).aggregate()  # 2048 tokens, 520 rows
    result = optimise(demand, cp, cost, 2, 8192, max_bucket_tokens=16384, required=need, allow_gaps=True)
    assert result.buckets[2] == [2052, 8260] and result.buckets[1] == [8260]
    assert result.graph_forwards == {1: 0, 2: 5} and result.max_bucket_tokens == 16384
    with pytest.raises(ModelError, match=r"fits no capturable bucket up to 8192 tokens: raise --max-tokens \(max_bucket_tokens\)"):
        optimise(demand, cp, cost, 2, 8192, required=need)  # no headroom allowed: nothing holds 2072 rows


def test_context_bounded_capacity_is_monotone_and_optimiser_exact():
    cp, spec = CPLayout(2), CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=9)
    grid = candidate_grid(cp, spec, 40)
    assert np.all(np.diff(grid.capacity_rows) >= 0)
    assert 10 not in grid.sizes.tolist()  # 9 + 1: a piece shorter than 2*cp cannot be captured
    slots = CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=9, max_capture_requests=3)
    assert candidate_grid(cp, slots, 40).sizes.max() == 26  # 27 is no multiple of cp 2; 28 would need a fourth request slot
    demand = Demand.of(BatchSet.from_lists([[12, 5], [20], [9, 9, 9], [30]], [3, 1, 2, 4]), cp).aggregate()
    cost = CostModel(0.5, 4.0, 0.3)
    result = optimise(demand, cp, cost, 2, 40, spec=spec, allow_gaps=True)
    # rows: [12, 5] 12, [20] 12, [9, 9, 9] 16, [30] 16; C(18) = 12 ([9, 9]; 17 is no multiple of
    # cp 2); 30 would leave a piece of 3 < 2*cp, so 32 ([9, 9, 9, 5], C = 20) is the first
    # capturable bucket for [30] on SGLang's grid
    assert 30 not in grid.sizes.tolist()
    assert result.buckets[2] == [18, 32] and result.graph_forwards[2] == 10
    assert result.cost_ms[2] == pytest.approx(3 * (0.5 + 18 * 0.3) + 7 * (0.5 + 32 * 0.3))
    for size, rows in zip(grid.sizes.tolist(), grid.capacity_rows.tolist()):  # the vectorised capacities
        assert rows == int(local_capacity([size], cp, spec)[0])


def test_optimiser_never_loses_to_a_baseline_of_the_same_size():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    batches = synthetic_batches(num_batches=3000, chunk_tokens=4096)
    demand = Demand.of(batches, cp).aggregate()
    baselines = [parse_bucket_spec(f"{name}:4096", lists=LISTS) for name in ("sglang-default", "pow2", "trtllm", "uniform")]
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
    by_time = optimise(demand, cp, cost, 2, 2000, objective="time", allow_gaps=True)
    by_coverage = optimise(demand, cp, cost, 2, 2000, objective="coverage", allow_gaps=True)
    assert (by_time.buckets[2], by_time.cost_ms[2]) == ([300, 1900], pytest.approx(24 + 16.5 + 192))
    assert (by_coverage.buckets[2], by_coverage.cost_ms[2]) == ([500, 1900], pytest.approx(39 + 13 + 192))
    with pytest.raises(ConfigError, match="objective"):
        optimise(demand, cp, cost, 2, 2000, objective="speed")


def test_full_chunk_headroom_needs_bucket_above_the_chunk():
    cp = CPLayout(4)
    demand = Demand.of(BatchSet.from_lists([[1534, 161, 353]] * 5), cp).aggregate()  # 2048 tokens, 520 rows
    cost = CostModel(0.5, 4.0, 0.025)
    assert optimise(demand, cp, cost, 1, 2048).cost_ms[1] == pytest.approx(5 * (4.0 + 2048 * 0.025))
    assert optimise(demand, cp, cost, 1, 4096, allow_gaps=True).buckets[1] == [2052]  # C(2049) = 520 (one extra row on rank 0); SGLang captures 2049 as 2052


def test_modelled_cost_of_evaluation_matches_demand_cost():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    batches = synthetic_batches(num_batches=500)
    table = BucketTable.build(parse_bucket_spec("sglang-default:8192", lists=LISTS), cp)
    ev = evaluate(iter([batches]), table, cp)
    assert evaluation_cost_ms(ev, cost) == pytest.approx(demand_cost_ms(Demand.of(batches, cp).aggregate(), table, cost))


def test_optimiser_errors():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(BatchSet.from_lists([[100]]), cp).aggregate()
    with pytest.raises(ConfigError, match="max_buckets: must be >= 1"):
        optimise(demand, cp, cost, 0, 1024)
    with pytest.raises(ConfigError, match="max_buckets: 2 pinned buckets exceed"):
        optimise(demand, cp, cost, 1, 1024, pinned=[128, 256])
    with pytest.raises(ConfigError, match=r"pinned buckets \[4\]: 4 \(as captured\) below 2\*cp_size=8, which the CP capture drops"):
        optimise(demand, cp, cost, 2, 1024, pinned=[4])
    with pytest.raises(ConfigError, match="token_ms"):
        CostModel(0.5, 4.0, -1.0)


def test_bucket_multiple_coarsens_the_grid():
    cp, cost = CPLayout(4), CostModel(0.5, 4.0, 0.025)
    demand = Demand.of(synthetic_batches(num_batches=500), cp).aggregate()
    fine = optimise(demand, cp, cost, 8, 8192)
    coarse = optimise(demand, cp, cost, 8, 8192, bucket_multiple=256)
    assert all(b % 256 == 0 for b in coarse.buckets[8]) and coarse.grid_size == 32
    assert fine.graph_forwards[8] >= coarse.graph_forwards[8]  # coverage first, then time
    if fine.graph_forwards[8] == coarse.graph_forwards[8]:
        assert fine.cost_ms[8] <= coarse.cost_ms[8]


def test_baselines_follow_their_rules():
    assert pow2_buckets(3000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3000]
    vllm = vllm_buckets(512)
    assert vllm[:5] == [1, 2, 4, 8, 16] and 256 in vllm and vllm[-3:] == [480, 496, 512] and len(vllm) == 51
    assert trtllm_buckets(3072) == [1, 2, 4, 8, 16, 32, 64, 128] + list(range(256, 3073, 256))
    assert uniform_buckets(8192, 58) == LISTS.named["uniform"](8192) == [-(-8192 * i // 58) for i in range(1, 59)]
    assert parse_bucket_spec("uniform:1000", lists=LISTS)[-1] == 1000


def test_cost_model_from_config_and_measured_timings():
    assert CostConfig().to_cost("config").to_dict() == {"graph_fixed_ms": 70.67, "eager_fixed_ms": 122.7, "token_ms": 0.02591, "source": "config"}
    fitted = with_measured(CostConfig().to_cost("config"), (0.2, 0.01), 3.0, "manifest m.json")
    assert (fitted.graph_fixed_ms, fitted.eager_fixed_ms, fitted.token_ms, fitted.source) == (0.2, 3.0, 0.01, "manifest m.json")
    assert with_measured(fitted, None, None, "other").source == "manifest m.json"
    assert CostModel(0.5, 4.0, 0.025).break_even_tokens == pytest.approx(140.0)


def test_histogram_matches_add_at_on_large_int64_sums():
    rng = np.random.default_rng(7)
    index = rng.integers(0, 50, 5000)
    values = rng.integers(0, 1 << 61, 5000, dtype=np.int64) // 64  # sums stay below 2**62
    expected = np.zeros(50, dtype=np.int64)
    np.add.at(expected, index, values)
    assert np.array_equal(transition_costs.histogram(index, values, 50), expected)
    assert np.array_equal(transition_costs.histogram(index, values.astype(np.float64), 50), np.bincount(index, values.astype(np.float64), 50))


@settings(max_examples=examples(80), deadline=None)
@given(
    batches=batch_lists,
    counts=st.lists(st.integers(1, 5), min_size=6, max_size=6),
    cp_size=st.sampled_from([1, 2, 4]),
    cost=st.sampled_from(COSTS),
    k=st.integers(1, 4),
    max_tokens=st.integers(16, 24),
    headroom=st.integers(0, 6),
    objective=st.sampled_from(["time", "coverage"]),
    gap_free=st.booleans(),
    max_s=st.one_of(st.none(), st.floats(2.5, 12.0)),
    max_mib=st.one_of(st.none(), st.floats(8.0, 40.0)),
    per_row=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_capture_budgets_match_a_brute_force(batches, counts, cp_size, cost, k, max_tokens, headroom, objective, gap_free,
                                             max_s, max_mib, per_row):
    # budgets are exact constraints: a list of K buckets captures in start-up + K*s and holds
    # per_row * C(largest) + K * per_graph MiB; the brute force filters every subset by both
    model = CaptureModel(startup_s=0.5, s_per_graph=2.0, mib_per_row=per_row, mib_per_token=0.0, mib_per_graph=3.0,
                         chunk_tokens=max_tokens, eager_peak_mib=0.0, source="test")
    budget = Budget(model, max_s, max_mib)

    def budget_ok(subset, cap):
        return ((max_s is None or 0.5 + 2.0 * len(subset) <= max_s)
                and (max_mib is None or per_row * cap[max(subset)] + 3.0 * len(subset) <= max_mib))

    cp, counts = CPLayout(cp_size), counts[: len(batches)]
    align = 2 * cp_size if cp_size > 1 else 1
    top = max_tokens + headroom
    want, cap = oracle_best(batches, counts, cp_size, cost, k, max_tokens, 2.0, objective, gap_free=gap_free, top=top,
                            budget_ok=budget_ok)
    demand = Demand.of(BatchSet.from_lists(batches, counts), cp).aggregate()
    options = dict(objective=objective, allow_gaps=not gap_free, max_bucket_tokens=top, budget=budget)
    if max_s is not None and 0.5 + 2.0 > max_s:
        with pytest.raises(ConfigError, match="--max-capture-seconds"):
            optimise(demand, cp, cost, k, max_tokens, **options)
        return
    result = optimise(demand, cp, cost, k, max_tokens, **options)
    for limit in range(1, k + 1):
        if want[limit] is None:
            assert limit not in result.buckets
            continue
        chosen = result.buckets[limit]
        assert budget_ok(chosen, cap) and oracle_allows(chosen, cap, max_tokens, 2.0, [], [], gap_free)
        graph, ms = oracle_outcome(batches, counts, chosen, cap, cp_size, align, cost, 2.0)
        if objective == "coverage":
            assert graph == -want[limit][0]
        assert ms == pytest.approx(want[limit][1], rel=1e-9, abs=1e-9)
