"""Capture harness on CPU (dry run): verification, injected faults, refusal, trace samples, manifest."""

import dataclasses

import orjson
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from cpbcg.capture import zigzag  # noqa: E402
from cpbcg.capture.forward import ForwardOps  # noqa: E402
from cpbcg.capture.harness import CaptureSession, capture_all, replay_batches  # noqa: E402
from cpbcg.capture.layouts import LiveLayout, adversarial_layouts, sample_trace_batches  # noqa: E402
from cpbcg.capture.model import expand_kv  # noqa: E402
from cpbcg.capture.presets import load_model_preset  # noqa: E402
from cpbcg.capture.report import manifest_document  # noqa: E402
from cpbcg.config import load_config  # noqa: E402
from cpbcg.errors import CaptureError  # noqa: E402
from cpbcg.manifest import load_manifest, manifest_bytes  # noqa: E402
from cpbcg.planner.layout import CPLayout  # noqa: E402
from cpbcg.planner.selector import BucketTable  # noqa: E402


def open_session(cp=4, layers=1, **over):
    cfg = load_config(None, {"cp_size": cp, **over})
    return CaptureSession.open(cfg, load_model_preset("tiny"), layers, seed=0, dry_run=True)


@pytest.fixture(scope="module")
def captured():
    session = open_session()
    results, skipped = capture_all(session, [64, 128, 4])
    return session, results, skipped


def test_capture_all_verifies_every_bucket(captured):
    session, results, skipped = captured
    assert session.backend.dry_run and not skipped
    records = [r.to_record() for r in results]
    assert [(r["capture_num_tokens"], r["local_rows"]) for r in records] == [(128, 32), (64, 16)]  # 4 < 2*cp dropped
    for r in records:
        assert r["verified"] and r["max_abs_err"] < 1e-4
        assert r["overflow_refused"] is True and r["layouts_checked"] == 3
        assert r["replay_ms"] is None and r["graph_bytes"] is None
    kinds = [layout["kind"] for layout in records[0]["layouts"]]
    assert kinds == ["capture", "many_short", "long_plus_short", "overflow_probe"]
    probe = records[0]["layouts"][-1]
    assert probe["message"] == "Live batch needs 40 local CP rows, but global prefill bucket 128 has captured capacity 32"


def test_adversarial_layouts_fill_capacity_exactly():
    layouts = adversarial_layouts(2048, 512, CPLayout(4))
    assert [(l.kind, l.num_tokens, len(l.extend_seq_lens)) for l in layouts] == [
        ("many_short", 1538, 171), ("long_plus_short", 1988, 22), ("overflow_probe", 1539, 171)]


def test_live_batch_above_capacity_is_refused_with_runtime_message():
    session = open_session(buckets="2048")
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


def leaky_attention(q, k_all, v_all, plan, rank):
    """Fault: real queries also see padding keys."""
    mask = plan.attention_mask(rank) | (plan.request_id.reshape(-1) < 0)[None, :]
    heads = q.shape[1]
    out = F.scaled_dot_product_attention(q.transpose(0, 1), expand_kv(k_all, heads).transpose(0, 1),
                                         expand_kv(v_all, heads).transpose(0, 1), attn_mask=mask)
    return out.transpose(0, 1).reshape(q.shape[0], -1)


@pytest.mark.parametrize("ops", [ForwardOps(plan=swapped_block_plan), ForwardOps(attention=leaky_attention)],
                         ids=["wrong_block_order", "padding_leak"])
def test_verification_catches_injected_faults(ops):
    session = open_session()
    session.capture([128], [32])
    layout = LiveLayout("trace", (57, 40))  # 97 tokens: padding on every rank
    assert session.check(128, layout, seed=1)["verified"] is True
    session.ops = ops
    bad = session.check(128, layout, seed=1)
    assert bad["verified"] is False and bad["max_abs_err"] > 1e-2


def test_replay_batches_rescued_batch():
    cfg = load_config(None, {"cp_size": 4, "buckets": "2048,2304"})
    out = replay_batches([[1534, 161, 353], [4, 4], [2048]], cfg, layers=1)
    assert out[0]["bucket"] == 2304 and out[0]["rescued"] and out[0]["verified"]
    assert out[0]["max_abs_err"] < 1e-4 and out[0]["replay_ms"] is None
    assert out[1] == {"extend_seq_lens": [4, 4], "bucket": None, "eager_reason": "not_cp_active", "rescued": False,
                      "verified": None, "max_abs_err": None, "replay_ms": None}
    assert out[2]["bucket"] == 2048 and out[2]["verified"] and not out[2]["rescued"]


def test_trace_samples_follow_the_selector(tmp_path):
    trace = tmp_path / "batches.jsonl"
    trace.write_text('{"extend_seq_lens": [1534, 161, 353]}\n[2048]\n[1000, 1000]\n[300]\n')
    table = BucketTable.build([2048, 2304], CPLayout(4))
    got = sample_trace_batches(trace, table, CPLayout(4), 2.0, samples=2, seed=0)
    assert got[2304] == [LiveLayout("trace", (1534, 161, 353))]
    assert got[2048][0] == LiveLayout("trace", (2048,))  # heaviest first: 512 rows vs 504
    assert {l.extend_seq_lens for l in got[2048]} == {(2048,), (1000, 1000)}
    assert 300 not in [l.num_tokens for ls in got.values() for l in ls]  # 2048 > 2*300: eager


def test_manifest_document_round_trips(captured, tmp_path):
    session, results, skipped = captured
    doc = manifest_document(session, "tiny", results, skipped)
    path = tmp_path / "manifest.json"
    path.write_bytes(manifest_bytes(doc))
    manifest = load_manifest(path)
    assert manifest.table().as_dict() == {64: 16, 128: 32}
    data = orjson.loads(path.read_bytes())
    assert data["dry_run"] is True and data["device_name"] == "cpu" and data["emulated_ranks"] is True
    assert data["model"]["num_layers"] == 1 and data["model"]["dtype"] == "float32"
    assert data["tolerance"]["atol"] == 1e-4 and manifest.fitted_cost_ms() is None


def test_interleave_and_cp1_are_refused():
    with pytest.raises(CaptureError, match="zigzag CP only"):
        open_session(cp_strategy="interleave")
    with pytest.raises(CaptureError, match="zigzag CP only"):
        open_session(cp=1)
