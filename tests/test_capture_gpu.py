"""Real CUDA-graph capture (skipped without CUDA; `scripts/gpu_check.sh` runs the full check)."""

import pytest

torch = pytest.importorskip("torch")

from cpbcg.graph_capture import CaptureSettings, run_capture  # noqa: E402
from cpbcg.graph_capture.run import replay_batches  # noqa: E402
from cpbcg.config import load_config  # noqa: E402
from cpbcg.outputs.documents import manifest_document  # noqa: E402
from cpbcg.manifest import load_manifest, manifest_bytes  # noqa: E402
from cpbcg.planner.deployment import Deployment  # noqa: E402
from cpbcg.planner.model.capacity import CaptureSpec  # noqa: E402
from cpbcg.planner.model.layout import CPLayout  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: real CUDA graphs cannot be captured on CPU"),
]

MEMORY = ("graph_bytes", "standalone_graph_bytes", "allocator_bytes")


@pytest.fixture(scope="module")
def result():
    return run_capture(CaptureSettings(Deployment(CPLayout(4), CaptureSpec(), 2.0, (256, 2048, 2304)), preset="tiny", num_layers=2))


def test_cuda_capture_verifies_bitwise_and_within_1e4(result):
    assert not result.dry_run and result.complete and result.verified
    assert [b.capture_num_tokens for b in result.buckets] == [2304, 2048, 256]
    for b in result.buckets:
        assert b.graph_matches_eager  # graph replay == eager pieces on the same sharded input, bit for bit
        assert all(c.max_abs_err <= c.tolerance for c in b.layouts) and b.max_abs_err < 1e-3
        assert b.probes and all(p.refused for p in b.probes)


def test_cuda_memory_is_measured_and_never_negative(result):
    first = result.buckets[0].capture
    for b in result.buckets:
        values = [getattr(b.capture, key) for key in MEMORY]
        assert all(type(v) is int and v >= 0 for v in values), values
        assert b.capture.standalone_graph_bytes > 0
    assert first.graph_bytes > 0  # the largest bucket grows the shared pool; later ones mostly reuse it


def test_cuda_timings_and_manifest_round_trip(result, tmp_path):
    for b in result.buckets:
        t = b.timing
        assert t is not None and 0 < t.raw_replay_ms <= t.replay_ms and t.eager_ms > 0
    path = tmp_path / "m.json"
    path.write_bytes(manifest_bytes(manifest_document(result)))
    manifest = load_manifest(path)
    assert manifest.table().as_dict() == {256: 64, 2048: 512, 2304: 576}
    fit = manifest.fitted_cost()
    assert fit is not None and fit.proxy_layers == 2 and fit.graph_fixed_ms >= 0 and fit.token_ms > 0
    assert manifest.fitted_cost(num_layers=64).token_ms == pytest.approx(32 * fit.token_ms)


def test_cuda_replay_batches_rescued():
    cfg = load_config(None, {"cp_size": 4, "buckets": "2048,2304"}).to_deployment()
    (out,) = replay_batches([[1534, 161, 353]], cfg)
    assert out.bucket == 2304 and out.rescued and out.verified and out.replay_ms is not None and out.replay_ms > 0
