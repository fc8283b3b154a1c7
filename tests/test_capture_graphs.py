"""Capture bookkeeping on CPU with a fake graph backend: order, warm-ups, buffers, checks, errors."""

import pytest

torch = pytest.importorskip("torch")

from cpbcg.capture.comm import EmulatedGroup  # noqa: E402
from cpbcg.capture.graphs import EagerPiece, StaticBuffers, capture_bucket  # noqa: E402
from cpbcg.capture.harness import CaptureSession  # noqa: E402
from cpbcg.capture.model import build_model  # noqa: E402
from cpbcg.capture.presets import load_model_preset  # noqa: E402
from cpbcg.config import load_config  # noqa: E402
from cpbcg.errors import CaptureError  # noqa: E402

CPU = torch.device("cpu")


class FakeGraph(EagerPiece):
    """A fake graph object: records captures (by the static buffer's row count) and can fail."""

    def __init__(self, log, fail_rows):
        super().__init__()
        self.log, self.fail_rows = log, fail_rows

    def capture(self, fn):
        out = fn()
        self.log.append(("capture", out[0].shape[0]))
        if out[0].shape[0] in self.fail_rows:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        self.fn = fn
        return out


class FakeBackend:
    dry_run = True

    def __init__(self, fail_rows=()):
        self.events, self.fail_rows = [], set(fail_rows)

    def new_piece(self):
        return FakeGraph(self.events, self.fail_rows)

    def warmup(self, fn):
        self.events.append(("warmup", fn()[0].shape[0]))

    def synchronize(self):
        pass

    def memory_bytes(self):
        return None


def tiny_model(layers=2):
    return build_model(load_model_preset("tiny"), layers, seed=0, device=CPU, dtype=torch.float32)


def session(backend, layers=2):
    cfg = load_config(None, {"cp_size": 4})
    return CaptureSession(cfg, tiny_model(layers), backend, EmulatedGroup(4))


def test_largest_first_two_warmups_and_one_buffer():
    backend = FakeBackend()
    s = session(backend)
    records, skipped = s.capture([64, 256, 128], [16, 64, 32])
    captures = [rows for kind, rows in backend.events if kind == "capture"]
    assert captures == [64] * 3 + [32] * 3 + [16] * 3  # 3 pieces per bucket (2 layers), largest first
    assert [r.capture_num_tokens for r in records] == [256, 128, 64]
    assert sum(1 for kind, _ in backend.events if kind == "warmup") == 2 * 3 * 3
    # one static buffer of the largest capacity; each bucket a view of its first C(B) rows
    base = s.graphs[256].x_in
    assert base.shape == (64, 64) and s.graphs[128].x_in.shape == (32, 64)
    assert s.graphs[128].x_in.data_ptr() == base.data_ptr() == s.graphs[64].x_in.data_ptr()
    assert s.graphs[64].attn_in.shape == (16, 64)
    assert not skipped


def test_warmups_precede_captures_within_a_bucket():
    backend = FakeBackend()
    session(backend).capture([64], [16])
    assert backend.events == [("warmup", 16)] * 6 + [("capture", 16)] * 3


def test_capture_failure_raises_or_is_skipped_with_reason():
    with pytest.raises(CaptureError, match="bucket 128: capture failed: CUDA out of memory. Tried to allocate 2.00 GiB$"):
        session(FakeBackend(fail_rows={32})).capture([128, 256], [32, 64])
    records, skipped = session(FakeBackend(fail_rows={32})).capture([128, 256], [32, 64], continue_on_error=True)
    assert [r.capture_num_tokens for r in records] == [256]
    assert [(s.capture_num_tokens, s.reason) for s in skipped] == [(128, "CUDA out of memory. Tried to allocate 2.00 GiB")]


def test_buffers_too_small_is_an_error():
    model = tiny_model()
    buffers = StaticBuffers.allocate(16, model)
    with pytest.raises(CaptureError, match="bucket 128: capacity 32 rows exceeds the static buffers \\(16 rows\\)"):
        capture_bucket(FakeBackend(), model, buffers, 128, 32)


@pytest.fixture
def graphs():
    s = session(FakeBackend())
    s.capture([128], [32])
    return s.graphs[128]


def test_replay_checks_shape_dtype_device(graphs):
    good_x, good_attn = torch.zeros(32, 64), torch.zeros(32, 64)
    with pytest.raises(CaptureError, match=r"bucket 128 piece 1: input x has shape \(33, 64\), the graph was captured with \(32, 64\)"):
        graphs.run_piece(1, torch.zeros(33, 64), good_attn)
    with pytest.raises(CaptureError, match="bucket 128 piece 0: input attn has dtype torch.float16, the graph was captured with torch.float32"):
        graphs.run_piece(0, good_x, good_attn.half())
    with pytest.raises(CaptureError, match="input x is on meta, the graph was captured on cpu"):
        graphs.run_piece(2, torch.zeros(32, 64, device="meta"), good_attn)


def test_replay_returns_clones_not_static_outputs(graphs):
    x = torch.randn(32, 64)
    out1, qkv1 = graphs.run_piece(0, x, torch.zeros(32, 64))
    out2, _ = graphs.run_piece(0, x + 1, torch.zeros(32, 64))
    assert out1.data_ptr() != out2.data_ptr() and not torch.equal(out1, out2)
    assert qkv1.shape == (32, 64 + 2 * 32)
    last_x, last_qkv = graphs.run_piece(2, x, torch.zeros(32, 64))
    assert last_qkv is None and last_x.shape == (32, 64)
