"""Capture bookkeeping on CPU with a fake graph backend: order, warm-ups, buffers, checks, errors."""

import weakref

import pytest

torch = pytest.importorskip("torch")

from cpbcg.graph_capture.comm import EmulatedGroup  # noqa: E402
from cpbcg.graph_capture.graphs import EagerPiece, StaticBuffers, capture_bucket  # noqa: E402
from cpbcg.graph_capture.harness import CaptureSession  # noqa: E402
from cpbcg.graph_capture.model import build_model, upcast  # noqa: E402
from cpbcg.graph_capture.presets import load_model_preset  # noqa: E402
from cpbcg.planner.model.capacity import CaptureSpec  # noqa: E402
from cpbcg.planner.model.layout import CPLayout  # noqa: E402
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
    shared_pool = "shared"

    def __init__(self, fail_rows=()):
        self.events, self.fail_rows = [], set(fail_rows)

    def new_pool(self):
        return None

    def new_piece(self, pool):
        return FakeGraph(self.events, self.fail_rows)

    def warmup(self, fn):
        self.events.append(("warmup", fn()[0].shape[0]))

    def synchronize(self):
        pass

    def settle(self):
        pass

    def pool_bytes(self, pool):
        return None

    def reserved_bytes(self):
        return None


class PoolGraph(EagerPiece):
    """A fake CUDA graph: its capture makes its pool at least `ROW_BYTES * rows` (temporaries
    of earlier captures in the same pool are reused, as in one shared CUDA graph pool)."""

    def __init__(self, backend, pool):
        super().__init__()
        self.backend, self.pool = backend, pool

    def capture(self, fn):
        out = super().capture(fn)
        pools = self.backend.pools
        pools[self.pool] = max(pools.get(self.pool, 0), ROW_BYTES * out[0].shape[0])
        return out


ROW_BYTES = 1000


class MemoryBackend(FakeBackend):
    """Not a dry run: pool and reserved bytes like the caching allocator, where `settle`
    (synchronize + empty_cache) returns `cached` temporaries, as `torch.cuda.graph` does on entry."""

    dry_run = False

    def __init__(self, cached=10**6):
        super().__init__()
        self.pools, self.cached, self.next_pool = {}, cached, 0
        self.graphs = weakref.WeakSet()

    def new_pool(self):
        self.next_pool += 1
        return f"private{self.next_pool}"

    def new_piece(self, pool):
        self.events.append(("capture_into", pool))
        graph = PoolGraph(self, pool)
        self.graphs.add(graph)
        return graph

    def settle(self):
        self.events.append(("settle", None))
        self.cached = 0
        self.pools = {k: v for k, v in self.pools.items() if k == "shared" or self._alive(k)}

    def _alive(self, pool):
        return any(g.pool == pool for g in self.graphs)  # a private pool is freed with its last graph

    def pool_bytes(self, pool):
        self.events.append(("read", pool))
        return self.pools.get(pool, 0)

    def reserved_bytes(self):
        self.events.append(("read", "reserved"))
        return self.cached + sum(self.pools.values())


def tiny_model(layers=2):
    return build_model(load_model_preset("tiny"), layers, seed=0, device=CPU, dtype=torch.float32)


def session(backend, layers=2):
    model = tiny_model(layers)
    return CaptureSession(CPLayout(4), CaptureSpec(), model, upcast(model), backend, EmulatedGroup(4))


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


def test_capture_out_of_memory_is_skipped_with_reason_and_the_rest_captured():
    s = session(FakeBackend(fail_rows={32}))
    records, skipped = s.capture([128, 256, 64], [32, 64, 16])
    assert [r.capture_num_tokens for r in records] == [256, 64]
    assert [(k.capture_num_tokens, k.local_rows, k.cause, k.reason) for k in skipped] == [
        (128, 32, "out_of_memory", "CUDA out of memory. Tried to allocate 2.00 GiB")]
    assert sorted(s.graphs) == [64, 256]  # the failed bucket's graphs are dropped


def test_capture_error_that_is_not_oom_is_skipped_as_capture_error():
    class Broken(FakeGraph):
        def capture(self, fn):
            raise RuntimeError("operation not permitted when stream is capturing")

    backend = FakeBackend()
    backend.new_piece = lambda pool: Broken(backend.events, set())
    _, skipped = session(backend).capture([128], [32])
    assert [(k.cause, k.reason) for k in skipped] == [("capture_error", "operation not permitted when stream is capturing")]


def test_memory_is_read_after_settle_and_never_negative():
    backend = MemoryBackend(cached=10**6)  # model building left 1 MB of cached temporaries
    records, _ = session(backend).capture([128, 256], [32, 64])
    assert [(r.capture_num_tokens, r.graph_bytes, r.standalone_graph_bytes) for r in records] == [
        (256, 64 * ROW_BYTES, 64 * ROW_BYTES),  # first bucket: the shared pool grows by its own size
        (128, 0, 32 * ROW_BYTES)]  # reuses the larger bucket's temporaries; alone it needs 32 rows
    assert [r.allocator_bytes for r in records] == [64 * ROW_BYTES, 0]  # the 1 MB cache is not counted
    reads = [i for i, (kind, _) in enumerate(backend.events) if kind == "read"]
    assert all(backend.events[i - 1][0] in ("settle", "read") for i in reads)  # every reading follows a settle
    pools = [pool for kind, pool in backend.events if kind == "capture_into"]
    assert pools == ["private1"] * 3 + ["shared"] * 3 + ["private2"] * 3 + ["shared"] * 3


def test_estimate_skips_a_bucket_before_building_it_and_refuses_when_none_fits():
    s = session(FakeBackend())
    need = {b: s.peak_bytes(b, c) for b, c in ((64, 16), (256, 64))}
    s.free_bytes = lambda: need[64]
    records, skipped = s.capture([64, 256], [16, 64])
    assert [r.capture_num_tokens for r in records] == [64] and 256 not in s.graphs
    assert [(k.capture_num_tokens, k.cause) for k in skipped] == [(256, "estimate")]
    assert skipped[0].reason.startswith(f"needs about {need[256] / 2**30:.1f} GiB for attention (kernels ")
    s = session(FakeBackend())
    s.free_bytes = lambda: need[64] - 1
    with pytest.raises(CaptureError, match=r"^buckets: no bucket fits: the smallest, 64 \(C\(B\)=16 rows\), needs about"):
        s.capture([64, 256], [16, 64])
    assert s.graphs == {} and s.buffers is None  # refused before anything was allocated


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


def test_pieces_write_into_shared_static_outputs():
    s = session(FakeBackend())
    s.capture([256, 128], [64, 32])
    big, small = s.graphs[256], s.graphs[128]
    out_big, qkv_big = big.pieces[0].replay()
    out_small, _ = small.pieces[1].replay()
    assert out_big.data_ptr() == out_small.data_ptr() == s.buffers.x_out.data_ptr()  # one output buffer
    assert qkv_big.data_ptr() == s.buffers.qkv_out.data_ptr() and out_small.shape == (32, 64)


def test_eager_and_graph_go_through_the_same_wrapper(graphs):
    x, attn = torch.randn(32, 64), torch.randn(32, 64)
    for k in range(3):
        g, e = graphs.run_piece(k, x, attn), graphs.run_eager(k, x, attn)
        assert torch.equal(g[0], e[0]) and (g[1] is None) == (e[1] is None)
    with pytest.raises(CaptureError, match="bucket 128 piece 1: input x has shape"):
        graphs.run_eager(1, torch.zeros(31, 64), attn)


def test_replay_returns_clones_not_static_outputs(graphs):
    x = torch.randn(32, 64)
    out1, qkv1 = graphs.run_piece(0, x, torch.zeros(32, 64))
    out2, _ = graphs.run_piece(0, x + 1, torch.zeros(32, 64))
    assert out1.data_ptr() != out2.data_ptr() and not torch.equal(out1, out2)
    assert qkv1.shape == (32, 64 + 2 * 32)
    last_x, last_qkv = graphs.run_piece(2, x, torch.zeros(32, 64))
    assert last_qkv is None and last_x.shape == (32, 64)


def test_cuda_pool_bytes_sums_the_segments_of_that_pool(monkeypatch):
    from cpbcg.graph_capture.graphs import CudaBackend, is_out_of_memory

    segments = [{"total_size": 2 << 20, "segment_pool_id": (0, 7)}, {"total_size": 20 << 20, "segment_pool_id": (0, 7)},
                {"total_size": 2 << 20, "segment_pool_id": (0, 0)}, {"total_size": 4 << 20, "segment_pool_id": (0, 8)}]
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: segments)
    backend = CudaBackend.__new__(CudaBackend)  # no CUDA here: only the reading is tested
    assert backend.pool_bytes((0, 7)) == 22 << 20 and backend.pool_bytes((0, 8)) == 4 << 20 and backend.pool_bytes((0, 9)) == 0
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"))
    assert not is_out_of_memory(RuntimeError("operation not permitted when stream is capturing"))


def test_standalone_measurement_out_of_memory_still_captures_into_the_shared_pool():
    backend = MemoryBackend()
    real = backend.new_piece

    def new_piece(pool):
        if pool.startswith("private") and pool != "private1":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(pool)

    backend.new_piece = new_piece
    records, skipped = session(backend).capture([128, 256], [32, 64])
    assert not skipped and [(r.capture_num_tokens, r.graph_bytes, r.standalone_graph_bytes) for r in records] == [
        (256, 64 * ROW_BYTES, 64 * ROW_BYTES), (128, 0, None)]
