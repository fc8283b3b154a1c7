"""Capture harness on CPU (dry run): verification, injected faults, refusal, trace samples."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from cpbcg.graph_capture import zigzag  # noqa: E402
from cpbcg.graph_capture.forward import ForwardOps  # noqa: E402
from cpbcg.graph_capture.harness import CaptureSession  # noqa: E402
from cpbcg.graph_capture.layouts import LiveLayout, adversarial_layouts, sample_trace_batches  # noqa: E402
from cpbcg.graph_capture.model import attention  # noqa: E402
from cpbcg.graph_capture.presets import ModelDims, load_model_preset  # noqa: E402
from cpbcg.graph_capture.records import CaptureSettings, LayoutCheck, ProbeCheck  # noqa: E402
from cpbcg.graph_capture.run import replay_batches, run_capture  # noqa: E402
from cpbcg.config import load_config  # noqa: E402
from cpbcg.errors import CaptureError  # noqa: E402
from cpbcg.planner.deployment import Deployment  # noqa: E402
from cpbcg.planner.model.capacity import CaptureSpec  # noqa: E402
from cpbcg.planner.model.layout import CPLayout, CPStrategy  # noqa: E402
from cpbcg.planner.model.selector import BucketTable  # noqa: E402

MID = ModelDims("mid", 256, 8, 2, 32, 512, "bfloat16")
"""Big enough for bfloat16 rounding to look like a real model's (tiny has 64 channels)."""


def open_session(cp=4, layers=1, dims=None, dtype=None, strategy=CPStrategy.zigzag):
    return CaptureSession.open(CPLayout(cp, strategy), CaptureSpec(), dims or load_model_preset("tiny"), layers,
                               seed=0, dry_run=True, dtype=dtype)


@pytest.fixture(scope="module")
def captured():
    return run_capture(CaptureSettings(Deployment(CPLayout(4), CaptureSpec(), 2.0, (64, 128, 4)), num_layers=1, dry_run=True))


def test_run_capture_verifies_every_bucket(captured):
    assert captured.dry_run and captured.complete and captured.verified
    assert [(b.capture.capture_num_tokens, b.capture.local_rows) for b in captured.buckets] == [(128, 32), (64, 16)]  # 4 < 2*cp dropped
    for b in captured.buckets:
        assert b.verified and b.graph_matches_eager and b.max_abs_err < 1e-4 and b.timing is None
        assert [c.kind for c in b.layouts] == ["capture", "many_short", "long_plus_short"]
        assert all(1e-4 < c.tolerance < 1e-4 + 1e-4 * 20 and c.noise_floor is None for c in b.layouts)  # fp32: 1e-4 + 1e-4*max|ref|
        assert b.capture.graph_bytes is None and b.capture.standalone_graph_bytes is None
    (probe,) = captured.buckets[0].probes
    assert probe == ProbeCheck((9,) * 11, 40, True, "Live batch needs 40 local CP rows, but global prefill bucket 128 has captured capacity 32")
    assert dict(captured.attention_kernels)["cp_attention"] == "flash"  # 4-D SDPA: the CPU flash kernel, not math


def test_adversarial_layouts_fill_capacity_exactly():
    layouts = adversarial_layouts(2048, 512, CPLayout(4))
    assert [(l.kind, l.num_tokens, len(l.extend_seq_lens)) for l in layouts] == [
        ("many_short", 1538, 171), ("long_plus_short", 1988, 22), ("overflow_probe", 1539, 171)]


def test_live_batch_above_capacity_is_refused_with_runtime_message():
    session = open_session()
    session.capture([2048], [512])
    with pytest.raises(CaptureError, match="^Live batch needs 520 local CP rows, but global prefill bucket 2048 has captured capacity 512$"):
        session.check(2048, LiveLayout("trace", (1534, 161, 353)), seed=0)


def swapped_block_plan(lens, cp, rows, device):
    """Fault: rows hold block 2cp-1-r before block r, but the metadata says r first."""
    plan = zigzag.plan_zigzag(lens, cp, rows, device)
    bad = plan.token_index.clone()
    for r in range(cp):
        row = 0
        for length in lens:
            base, rem = divmod(length, 2 * cp)
            first, second = base + (r < rem), base + (2 * cp - 1 - r < rem)
            seg = slice(row, row + first + second)
            bad[r, seg] = torch.roll(plan.token_index[r, seg], -first)
            row += first + second
    return dataclasses.replace(plan, token_index=bad, _masks={})


def masked_attention(edit):
    """CP attention with the mask changed by `edit(mask, plan, rank)` (a fault)."""
    def run(q, k_all, v_all, plan, rank):
        mask = plan.attention_mask(rank).clone()
        edit(mask, plan, rank)
        return attention(q, k_all, v_all, mask=mask)
    return run


def leak_padding(mask, plan, rank):
    """Fault: real queries also see padding keys."""
    mask |= (plan.request_id.reshape(-1) < 0)[None, :]


def hide_one_key(mask, plan, rank):
    """Fault: the key at position 3 of request 0 is invisible to every later query."""
    key = (plan.request_id.reshape(-1) == 0) & (plan.position.reshape(-1) == 3)
    mask[:, key] &= ~(plan.position[rank] > 3)[:, None]


def drop_diagonal_past_64(mask, plan, rank):
    """Fault: a query past position 64 does not see its own key."""
    rows = torch.nonzero(plan.position[rank] > 64).squeeze(1)
    mask[rows, rank * plan.rows + rows] = False


FAULTS = {
    "wrong_block_order": ForwardOps(plan=swapped_block_plan),
    "padding_leak": ForwardOps(attention=masked_attention(leak_padding)),
    "hide_one_key": ForwardOps(attention=masked_attention(hide_one_key)),
    "drop_diagonal_past_64": ForwardOps(attention=masked_attention(drop_diagonal_past_64)),
}


@pytest.mark.parametrize("dims, dtype", [(None, "float32"), (MID, "bfloat16")], ids=["tiny-fp32", "mid-bf16"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_verification_catches_injected_faults(fault, dims, dtype):
    session = open_session(layers=2, dims=dims, dtype=dtype)
    session.capture([256], [64])
    layout = LiveLayout("trace", (130, 57, 40))  # 227 tokens: padding on every rank, positions past 64
    good = session.check(256, layout, seed=1)
    assert isinstance(good, LayoutCheck) and good.verified and good.graph_matches_eager
    session.ops = FAULTS[fault]
    bad = session.check(256, layout, seed=1)
    assert not bad.verified and bad.max_abs_err > 2 * bad.tolerance, (bad.max_abs_err, bad.tolerance)


def test_bf16_tolerance_comes_from_the_measured_noise_floor():
    session = open_session(layers=2, dims=MID, dtype="bfloat16")
    session.capture([256], [64])
    check = session.check(256, LiveLayout("trace", (130, 57, 40)), seed=1)
    assert check.noise_floor is not None and 0 < check.noise_floor < 0.2
    assert check.tolerance == pytest.approx(2 * check.noise_floor + 2**-10)
    assert check.max_abs_err <= check.tolerance


def test_graph_that_differs_from_eager_fails_even_within_tolerance():
    session = open_session()
    session.capture([128], [32])
    graphs = session.graphs[128]
    replay = graphs.pieces[1].replay

    def nudged():  # one ulp-scale change in the replayed output: the error stays tiny
        x, qkv = replay()
        return x + 1e-7 * x.abs().max(), qkv

    graphs.pieces[1].replay = nudged
    check = session.check(128, LiveLayout("trace", (57, 40)), seed=1)
    assert check.max_abs_err <= check.tolerance and not check.graph_matches_eager and not check.verified


def test_replay_batches_rescued_batch():
    cfg = load_config(None, {"cp_size": 4, "buckets": "2048,2304"}).to_deployment()
    out = replay_batches([[1534, 161, 353], [4, 4], [2048]], cfg, layers=1)
    assert out[0].bucket == 2304 and out[0].rescued and out[0].verified
    assert out[0].max_abs_err < 1e-4 and out[0].replay_ms is None
    assert (out[1].bucket, out[1].eager_reason, out[1].rescued, out[1].verified) == (None, "not_cp_active", False, None)
    assert out[2].bucket == 2048 and out[2].verified and not out[2].rescued


def test_trace_samples_follow_the_selector(tmp_path):
    trace = tmp_path / "batches.jsonl"
    trace.write_text('{"extend_seq_lens": [1534, 161, 353]}\n[2048]\n[1000, 1000]\n[300]\n')
    table = BucketTable.build([2048, 2304], CPLayout(4))
    got = sample_trace_batches(trace, table, CPLayout(4), 2.0, samples=2, seed=0)
    assert got[2304] == [LiveLayout("trace", (1534, 161, 353))]
    assert got[2048][0] == LiveLayout("trace", (2048,))  # heaviest first: 512 rows vs 504
    assert {l.extend_seq_lens for l in got[2048]} == {(2048,), (1000, 1000)}
    assert 300 not in [l.num_tokens for ls in got.values() for l in ls]  # 2048 > 2*300: eager


def test_interleave_and_cp1_are_refused_naming_config_keys():
    for kw in ({"strategy": CPStrategy.interleave}, {"cp": 1}):
        with pytest.raises(CaptureError, match="^cp_strategy: capture emulates zigzag CP only") as info:
            open_session(**kw)
        assert "--" not in str(info.value)


def test_replay_batches_bucket_that_cannot_be_captured_is_not_verified(monkeypatch):
    from cpbcg.graph_capture import harness

    real = harness.capture_bucket

    def oom_2304(backend, model, buffers, bucket, rows, pool=None):
        if bucket == 2304:
            raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return real(backend, model, buffers, bucket, rows, pool)

    monkeypatch.setattr(harness, "capture_bucket", oom_2304)
    cfg = load_config(None, {"cp_size": 4, "buckets": "2048,2304"}).to_deployment()
    rescued, natural = replay_batches([[1534, 161, 353], [2048]], cfg, layers=1)
    assert (rescued.bucket, rescued.verified, rescued.max_abs_err) == (2304, False, None)
    assert rescued.skip_reason == "out_of_memory: CUDA out of memory. Tried to allocate 8.00 GiB"
    assert natural.bucket == 2048 and natural.verified and natural.skip_reason is None


def test_a_cpu_session_runs_on_one_torch_thread_and_gives_the_count_back():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        session = open_session()
        assert torch.get_num_threads() == 1 and session.threads_before == 3
        session.close()
        assert torch.get_num_threads() == 3 and session.threads_before is None
        session.close()  # twice: nothing left to restore
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
