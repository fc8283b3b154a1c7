"""Breakable CUDA graphs for one global bucket: graph pieces between the attention breaks.

Mirrors the server's capture (SGLang 0.5.23 `srt/model_executor/runner/prefill_cuda_graph_runner.py`): static input AND output buffers are allocated
once, before any capture, for the largest local capacity and sliced per bucket; buckets are
captured largest first into ONE shared graph memory pool; each bucket is warmed up twice (outside
any timing) before its pieces are captured. Each piece writes its results into the shared static
outputs, so no graph output keeps pool memory alive (the server keeps only weak references).
A replay copies the live rows into the static inputs after checking their shape, dtype and
device, replays the piece, and returns CLONES of the static outputs, which the next replay
overwrites. The eager baseline runs the same bound functions through the same wrapper.

Without CUDA the `EagerBackend` runs the same pieces eagerly on the same static buffers
("dry run"), so buffer sizing, ordering and checks are exercised on CPU.
"""

from __future__ import annotations


import gc
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import torch

from cpbcg.graph_capture.model import Piece, ProxyModel, piece
from cpbcg.errors import CaptureError

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

WARMUP_RUNS = 2
"""Eager warm-ups of every piece before its capture (the server's count)."""
Outputs = tuple[torch.Tensor, "torch.Tensor | None"]


class PieceGraph(Protocol):
    """One captured piece: `capture(fn)` records `fn` and returns its outputs; `replay()`
    reruns it on the static inputs and returns the outputs (views of the static output buffers)."""

    def capture(self, fn: Callable[[], Outputs]) -> Outputs: ...

    def replay(self) -> Outputs: ...


class GraphBackend(Protocol):
    """Creates piece graphs and reads device state. `dry_run` is true when nothing is captured."""

    @property
    def dry_run(self) -> bool: ...

    @property
    def shared_pool(self) -> object:
        """The one graph memory pool every bucket is captured into."""

    def new_pool(self) -> object: ...

    def new_piece(self, pool: object) -> PieceGraph: ...

    def warmup(self, fn: Callable[[], object]) -> None: ...

    def synchronize(self) -> None: ...

    def settle(self) -> None: ...

    def pool_bytes(self, pool: object) -> int | None: ...

    def reserved_bytes(self) -> int | None: ...


def _cuda_pool(pool: object) -> "_POOL_HANDLE":
    """`pool` as the CUDA graph pool handle it is (`torch.cuda.graph_pool_handle()`: a pair of ints)."""
    if not (isinstance(pool, tuple) and len(pool) == 2 and all(isinstance(x, int) for x in pool)):
        raise CaptureError(f"not a CUDA graph pool handle: {pool!r}")
    return torch.cuda._POOL_HANDLE((pool[0], pool[1]))


class CudaPiece:
    """A `torch.cuda.CUDAGraph` captured into a graph memory pool."""

    def __init__(self, pool: object) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.outputs: Outputs | None = None

    def capture(self, fn: Callable[[], Outputs]) -> Outputs:
        with torch.cuda.graph(self.graph, pool=_cuda_pool(self.pool)):
            self.outputs = fn()
        return self.outputs

    def replay(self) -> Outputs:
        self.graph.replay()
        assert self.outputs is not None
        return self.outputs


class CudaBackend:
    """Real capture on the current CUDA device, one graph memory pool for every bucket.

    Memory is read only after `settle()` (synchronize, then `empty_cache()`): `torch.cuda.graph`
    empties the cache on entry, so a reading taken before that would still count the cached
    temporaries of model building and the first capture would look negative.
    """

    dry_run = False

    def __init__(self) -> None:
        self.shared_pool = torch.cuda.graph_pool_handle()
        self.side_stream = torch.cuda.Stream()

    def new_pool(self) -> object:
        return torch.cuda.graph_pool_handle()

    def new_piece(self, pool: object) -> PieceGraph:
        return CudaPiece(pool)

    def warmup(self, fn: Callable[[], object]) -> None:
        """Run `fn` on a side stream (as PyTorch's capture recipe requires), then rejoin."""
        self.side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side_stream):
            fn()
        torch.cuda.current_stream().wait_stream(self.side_stream)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def settle(self) -> None:
        """Synchronize, collect dead Python objects, and return unused cached blocks."""
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()

    def pool_bytes(self, pool: object) -> int | None:
        """Bytes of the segments `pool` holds (`torch.cuda.memory_snapshot`); None if unknown."""
        try:
            segments = torch.cuda.memory_snapshot()
        except (RuntimeError, AttributeError):
            return None
        want = tuple(_cuda_pool(pool))
        return sum(int(s["total_size"]) for s in segments if tuple(s.get("segment_pool_id", ())) == want)

    def reserved_bytes(self) -> int:
        return torch.cuda.memory_reserved()


class EagerPiece:
    """Dry run: `replay` calls the function again, eagerly."""

    def __init__(self) -> None:
        self.fn: Callable[[], Outputs] | None = None

    def capture(self, fn: Callable[[], Outputs]) -> Outputs:
        self.fn = fn
        return fn()

    def replay(self) -> Outputs:
        assert self.fn is not None
        return self.fn()


class EagerBackend:
    """No CUDA: pieces run eagerly; no memory figures."""

    dry_run = True
    shared_pool = None

    def new_pool(self) -> object:
        return None

    def new_piece(self, pool: object) -> PieceGraph:
        return EagerPiece()

    def warmup(self, fn: Callable[[], object]) -> None:
        fn()

    def synchronize(self) -> None:
        return None

    def settle(self) -> None:
        return None  # nothing is measured in a dry run

    def pool_bytes(self, pool: object) -> None:
        return None

    def reserved_bytes(self) -> None:
        return None


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA's `OutOfMemoryError` and the CPU allocator's `can't allocate memory`."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and ("out of memory" in text.lower() or "can't allocate memory" in text)


@dataclass(frozen=True)
class StaticBuffers:
    """Static inputs AND outputs shared by every bucket's pieces, sized for the largest capacity.

    Every piece copies its results into `x_out` / `qkv_out` inside its graph, so nothing a graph
    returns lives in the graph pool: the pool holds only each piece's temporaries, which later
    captures reuse (one shared output buffer, like SGLang's and vLLM's weak-ref outputs).
    Replays are sequential, so sharing is safe.
    """

    x: torch.Tensor
    """[max_rows, hidden] residual-stream input of a piece."""
    attn: torch.Tensor
    """[max_rows, q_width] attention output fed to a piece (unused by piece 0)."""
    x_out: torch.Tensor
    """[max_rows, hidden] residual-stream output of a piece."""
    qkv_out: torch.Tensor
    """[max_rows, q_width + 2*kv_width] fused QKV output of a piece (unused by the last piece)."""

    @classmethod
    def allocate(cls, max_rows: int, model: ProxyModel) -> "StaticBuffers":
        """Allocate (zeroed) before any capture."""
        dims = model.dims

        def zeros(width: int) -> torch.Tensor:
            return torch.zeros(max_rows, width, device=model.device, dtype=model.dtype)

        return cls(zeros(dims.hidden_size), zeros(dims.q_width), zeros(dims.hidden_size), zeros(dims.q_width + 2 * dims.kv_width))

    @property
    def max_rows(self) -> int:
        return self.x.shape[0]


@dataclass(frozen=True)
class BucketGraphs:
    """The captured pieces of one global bucket `B`, each over `capacity_rows` local rows."""

    bucket: int
    """Global token bucket `B` (`capture_num_tokens`)."""
    capacity_rows: int
    """Local capacity `C(B)`: rows of every static buffer and piece."""
    x_in: torch.Tensor
    """[capacity_rows, hidden] view of the shared static input."""
    attn_in: torch.Tensor
    """[capacity_rows, q_width] view of the shared static attention input."""
    fns: tuple[Callable[[], Outputs], ...]
    """num_layers + 1 pieces bound to the static buffers, run eagerly (what was captured)."""
    pieces: tuple[PieceGraph, ...]
    """num_layers + 1 captured pieces, in forward order."""
    warmup_s: float = 0.0
    """Wall seconds of the warm-up runs before capture (`WARMUP_RUNS` of every piece)."""

    def run_piece(self, index: int, x: torch.Tensor, attn: torch.Tensor, eager: bool = False) -> Outputs:
        """Replay piece `index` on `x [C, hidden]` and `attn [C, q_width]` (or, with `eager`,
        run the same bound function eagerly through the same copy-in / clone-out).

        Returns clones (safe to keep). Raises `CaptureError` naming the bucket, piece and
        input when a shape, dtype or device differs from the static buffer.
        """
        check_input(self, index, "x", x, self.x_in)
        check_input(self, index, "attn", attn, self.attn_in)
        self.x_in.copy_(x)
        self.attn_in.copy_(attn)
        x_out, qkv = self.fns[index]() if eager else self.pieces[index].replay()
        return x_out.clone(), None if qkv is None else qkv.clone()

    def run_eager(self, index: int, x: torch.Tensor, attn: torch.Tensor) -> Outputs:
        """`run_piece(..., eager=True)`: the eager baseline through the same wrapper."""
        return self.run_piece(index, x, attn, eager=True)

    def replay_raw(self) -> None:
        """`graph.replay()` of every piece back to back, no copies (raw replay timing)."""
        for graph in self.pieces:
            graph.replay()


def check_input(graphs: BucketGraphs, index: int, name: str, got: torch.Tensor, static: torch.Tensor) -> None:
    """Raise `CaptureError` unless `got` matches `static` in shape, dtype and device."""
    where = f"bucket {graphs.bucket} piece {index}: input {name}"
    if tuple(got.shape) != tuple(static.shape):
        raise CaptureError(f"{where} has shape {tuple(got.shape)}, the graph was captured with {tuple(static.shape)}")
    if got.dtype != static.dtype:
        raise CaptureError(f"{where} has dtype {got.dtype}, the graph was captured with {static.dtype}")
    if got.device != static.device:
        raise CaptureError(f"{where} is on {got.device}, the graph was captured on {static.device}")


def capture_bucket(
    backend: GraphBackend, model: ProxyModel, buffers: StaticBuffers, bucket: int, capacity_rows: int,
    pool: object = None,
) -> BucketGraphs:
    """Warm up (twice) and capture the pieces of one bucket over the first `capacity_rows`
    rows of the shared static buffers, into `pool` (default: the backend's shared pool).
    Raises `CaptureError` if the buffers are too small."""
    if capacity_rows > buffers.max_rows:
        raise CaptureError(
            f"bucket {bucket}: capacity {capacity_rows} rows exceeds the static buffers ({buffers.max_rows} rows)"
        )
    rows = slice(0, capacity_rows)
    fns = tuple(_bind(piece(model, k), buffers, rows) for k in range(model.num_pieces))
    start = time.perf_counter()
    for _ in range(WARMUP_RUNS):
        for fn in fns:
            backend.warmup(fn)
    backend.synchronize()
    warmup_s = time.perf_counter() - start
    pool = backend.shared_pool if pool is None else pool
    pieces = []
    for fn in fns:
        graph = backend.new_piece(pool)
        graph.capture(fn)
        pieces.append(graph)
    backend.synchronize()
    return BucketGraphs(bucket, capacity_rows, buffers.x[rows], buffers.attn[rows], fns, tuple(pieces), warmup_s)


def _bind(fn: Piece, buffers: StaticBuffers, rows: slice) -> Callable[[], Outputs]:
    """The piece on the static inputs, its results copied into the static outputs."""
    x_in, attn_in, x_out, qkv_out = buffers.x[rows], buffers.attn[rows], buffers.x_out[rows], buffers.qkv_out[rows]

    def run() -> Outputs:
        x, qkv = fn(x_in, attn_in)
        x_out.copy_(x)
        if qkv is None:
            return x_out, None
        qkv_out.copy_(qkv)
        return x_out, qkv_out

    return run
