"""Real CUDA-graph capture (skipped without CUDA; `scripts/gpu_check.sh` runs the full check)."""

import pytest

torch = pytest.importorskip("torch")

from cpbcg.capture.harness import CaptureSession, capture_all, replay_batches  # noqa: E402
from cpbcg.capture.presets import load_model_preset  # noqa: E402
from cpbcg.config import load_config  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: real CUDA graphs cannot be captured on CPU"),
]


def test_cuda_capture_verifies_and_measures():
    cfg = load_config(None, {"cp_size": 4})
    session = CaptureSession.open(cfg, load_model_preset("tiny"), 2)
    results, skipped = capture_all(session, [256, 2048, 2304])
    assert not session.backend.dry_run and not skipped
    for r in results:
        record = r.to_record()
        assert record["verified"] and record["overflow_refused"]
        assert record["graph_bytes"] is not None and record["allocator_bytes"] is not None
        assert record["replay_ms"] is not None and record["eager_ms"] is not None


def test_cuda_replay_batches_rescued():
    cfg = load_config(None, {"cp_size": 4, "buckets": "2048,2304"})
    (out,) = replay_batches([[1534, 161, 353]], cfg)
    assert out["bucket"] == 2304 and out["rescued"] and out["verified"] and out["replay_ms"] is not None
