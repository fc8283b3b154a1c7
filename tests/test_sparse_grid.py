"""The sparse candidate grid (issue 23 cause 7): the optimiser's answer on it equals the dense
grid's on every instance, its size follows the trace's distinct forwards, not the chunk."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis_sizes import examples

from cpbcg.errors import ConfigError, ModelError
from cpbcg.planner.evaluate import Demand
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.strategy import CPStrategy
from cpbcg.planner.optimise import guarantee, optimiser
from cpbcg.planner.costs.cost import CostModel
from cpbcg.planner.optimise.grid import SizeLattice, candidate_grid, sparse_grid

COSTS = [CostModel(0.5, 4.0, 0.025), CostModel(0.5, 4.0, 1.0), CostModel(2.0, 0.0, 0.1)]

layouts = st.one_of(
    st.just(CaptureSpec()),
    st.builds(lambda ctx, slots: CaptureSpec(CaptureLayout.context_bounded, max_context_size_tokens=ctx, max_capture_requests=slots),
              st.integers(3, 70), st.one_of(st.none(), st.integers(1, 8))),
)
modes = st.sampled_from([(1, CPStrategy.zigzag), (2, CPStrategy.zigzag), (3, CPStrategy.zigzag), (4, CPStrategy.zigzag),
                         (2, CPStrategy.interleave), (4, CPStrategy.interleave)])


@settings(max_examples=examples(60), deadline=None)
@given(mode=modes, spec=layouts, top=st.integers(1, 400), step=st.sampled_from([1, 2, 5, 16]),
       extras=st.lists(st.integers(1, 420), max_size=3))
def test_lattice_walks_the_dense_grid(mode, spec, top, step, extras):
    cp = CPLayout(*mode)
    try:
        dense = candidate_grid(cp, spec, top, step, extras).sizes
    except ModelError:
        dense = np.zeros(0, dtype=np.int64)
    lattice = SizeLattice(cp, spec, top, step, extras)
    x = np.arange(-2, 460, dtype=np.int64)
    at = np.searchsorted(dense, x, side="left")
    want_succ = np.where(at < len(dense), dense[np.minimum(at, max(len(dense) - 1, 0))] if len(dense) else -1, -1)
    want_pred = np.where(at > 0, dense[np.maximum(at - 1, 0)] if len(dense) else -1, -1)
    assert lattice.succ(x).tolist() == want_succ.tolist()
    assert lattice.pred(x).tolist() == want_pred.tolist()
    assert lattice.largest() == (int(dense[-1]) if len(dense) else -1)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(1, 90), min_size=1, max_size=3), min_size=1, max_size=8),
    mode=modes, spec=layouts, cost=st.sampled_from(COSTS), k=st.integers(1, 5),
    max_tokens=st.integers(8, 200), headroom=st.integers(0, 120), factor=st.sampled_from([1.0, 1.25, 1.5, 2.0, 3.0]),
    step=st.sampled_from([1, 1, 3, 8]), pins=st.lists(st.integers(4, 200), max_size=2),
    need=st.lists(st.tuples(st.integers(1, 200), st.integers(0, 80)), max_size=2),
    objective=st.sampled_from(["time", "coverage"]), gap_free=st.booleans(),
)
def test_sparse_grid_gives_the_dense_answer(batches, mode, spec, cost, k, max_tokens, headroom, factor, step, pins, need,
                                            objective, gap_free, monkeypatch):
    cp = CPLayout(*mode)
    demand = Demand.of(BatchSet.from_lists(batches), cp).aggregate()
    options = dict(spec=spec, max_padding_factor=factor, bucket_multiple=step, pinned=pins, objective=objective,
                   max_bucket_tokens=max_tokens + headroom, required=need, allow_gaps=not gap_free)

    def run(limit):
        monkeypatch.setattr(optimiser, "DENSE_GRID_LIMIT", limit)
        try:
            r = optimiser.optimise(demand, cp, cost, k, max_tokens, **options)
        except (ConfigError, ModelError) as exc:
            return type(exc), str(exc).replace("size", "")
        return r.buckets, r.cost_ms, r.graph_forwards, r.num_candidates

    dense, sparse = run(1 << 30), run(0)
    if isinstance(dense[0], type):  # the same refusal (its wording may name a different grid size)
        assert sparse[0] is dense[0]
    else:
        assert sparse == dense


def test_sparse_grid_size_follows_the_demand_not_the_chunk():
    # one forward of 100 tokens planned for a 4,194,304-token chunk with headroom: the dense grid
    # would hold a size per 4 tokens (over a million); the sparse one the windows' ends, the
    # chunk, and the gap-free chain down from it (about one size per halving)
    cp = CPLayout(4)
    demand = Demand.of(BatchSet.from_lists([[100]]), cp).aggregate()
    chunk = 1 << 22
    need = guarantee.headroom_required(chunk, 1, cp)
    assert need == [(chunk, chunk // 4)]
    grid = sparse_grid(cp, CaptureSpec(), chunk, 1, [chunk], np.asarray([100, chunk, 8]), np.asarray([32, chunk // 4, 8]),
                       2.0, chunk, True)
    assert 20 <= len(grid.sizes) <= 64
    lists = optimiser.optimise(demand, cp, CostModel(10, 24, 0.05), 57, chunk, max_bucket_tokens=chunk, required=need + [(8, 8)])
    assert lists.grid_size == len(grid.sizes) and lists.num_candidates <= 40
    assert lists.best(57) == [16, 32, 64, 100, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144,
                              524288, 1048576, 2097152, 4194304]


@pytest.mark.parametrize("cp_size,requests,chunk", [(4, 32, 8192), (2, 3, 1000), (8, 5, 4096), (3, 7, 999)])
def test_headroom_required_reads_the_chunk_alone(cp_size, requests, chunk):
    cp = CPLayout(cp_size)
    n, rows = guarantee.worst_rows(guarantee.Limits(requests, chunk), cp)
    assert guarantee.headroom_required(chunk, requests, cp) == [(chunk, int(rows[-1]))] and n[-1] == chunk
