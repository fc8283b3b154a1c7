"""`context_limit`: forwards whose longest sequence is above the prefill graphs' `max_seq_len`
run eagerly (SGLang 0.5.23 `can_replay_locally`)."""

from __future__ import annotations

import numpy as np

from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.layout import BatchSet, CPLayout
from cpbcg.planner.model.replay_limits import SeqBatchSet, max_seq_tokens
from cpbcg.assembly.plan import plan
from cpbcg.planner.scheduler import SchedulerSettings, Simulation
from cpbcg.planner.traces.records import RequestChunk

BUCKETS = (1024, 2048, 4096, 8192)


def evaluate(chunks, limit):
    dep = Deployment(cp=CPLayout(4), buckets=BUCKETS, max_seq_len_tokens=limit)
    return plan(chunks, dep, None).evaluation


def test_a_batch_trace_counts_its_longest_extend():
    batches = BatchSet.from_lists([[3000], [1000, 1000], [2500, 100]])
    assert max_seq_tokens(batches).tolist() == [3000, 1000, 2500]
    ev = evaluate([batches], 2500)
    assert ev.eager["context_limit"] == 1 and ev.graph_batches == 2  # only the 3000 (2500 is allowed)
    assert evaluate([batches], None).eager["context_limit"] == 0


def test_not_cp_active_is_decided_first():
    ev = evaluate([BatchSet.from_lists([[3000, 3]])], 1000)  # 3 < 2*cp: not CP-active
    assert ev.eager["not_cp_active"] == 1 and ev.eager["context_limit"] == 0


def test_the_simulation_hands_over_each_chunks_position():
    # 20000 in chunks of 8192: the third chunk (3616 tokens) ends at position 20000, with the
    # 100 beside it; the second ends at 16384.
    settings = SchedulerSettings(decode=False, prefill_fixed_ms=0.0, prefill_tokens_per_s=1024.0)
    chunk = RequestChunk(np.array([20000, 100]), np.zeros(2), None, None)
    parts = list(Simulation([chunk], settings))
    assert all(isinstance(p, SeqBatchSet) for p in parts)
    assert parts[0].max_seq_tokens.tolist() == [8192, 16384, 20000]
    ev = evaluate(Simulation([chunk], settings), 16384)
    assert ev.eager["context_limit"] == 1 and ev.eager_examples["context_limit"] == [[3616, 100]]
    assert [p.max_seq_tokens.tolist() for p in parts[0].split(2)] == [[8192, 16384], [20000]]


def test_images_keep_interleave_forwards_out_of_graphs(tmp_path):
    # Azure 2025: NumImages per request. Under interleave 0.5.23 replays no forward holding
    # images (InterleaveCPBCGInput.allows_replay); zigzag replays it.
    from cpbcg.assembly.sources import open_source

    trace = tmp_path / "azure-2025.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,NumImages\n"
                     "2025-03-01 10:00:00.000,1840,2,1\n"
                     "2025-03-01 10:00:10.000,733,2,0\n"
                     "2025-03-01 10:00:20.000,9000,2,2\n")
    chunks = list(open_source(str(trace)).batches)
    assert [p.multimodal.tolist() for p in chunks] == [[True, False, True, True]]  # 9000: two chunks
    for strategy, expected in (("interleave", 3), ("zigzag", 0)):
        dep = Deployment(cp=CPLayout(4, strategy), buckets=BUCKETS)
        ev = plan(open_source(str(trace)).batches, dep, None).evaluation
        assert ev.eager["multimodal_input"] == expected
