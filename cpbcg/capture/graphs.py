"""Breakable CUDA graphs for one global bucket: graph pieces between the attention breaks.

Mirrors the server's capture (domain brief §5): static input buffers are allocated once, before
any capture, for the largest local capacity and sliced per bucket; buckets are captured largest
first into ONE shared graph memory pool; each bucket is warmed up twice (outside any timing)
before its pieces are captured. A replay copies the live rows into the static inputs after
checking their shape, dtype and device, replays the piece, and returns CLONES of its outputs:
a captured piece's outputs alias graph-pool memory that the next replay overwrites.

Without CUDA the `EagerBackend` runs the same pieces eagerly on the same static buffers
("dry run"), so buffer sizing, ordering and checks are exercised on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from cpbcg.capture.model import Piece, ProxyModel, piece
from cpbcg.errors import CaptureError

WARMUP_RUNS = 2
"""Eager warm-ups of every piece before its capture (the server's count)."""
Outputs = tuple[torch.Tensor, "torch.Tensor | None"]


class PieceGraph(Protocol):
    """One captured piece: `capture(fn)` records `fn` and returns its outputs; `replay()`
    reruns it on the static inputs and returns the outputs (which may alias graph memory)."""

    def capture(self, fn: Callable[[], Outputs]) -> Outputs: ...

    def replay(self) -> Outputs: ...


class GraphBackend(Protocol):
    """Creates piece graphs and reads device state. `dry_run` is true when nothing is captured."""

    dry_run: bool

    def new_piece(self) -> PieceGraph: ...

    def warmup(self, fn: Callable[[], object]) -> None: ...

    def synchronize(self) -> None: ...

    def memory_bytes(self) -> tuple[int, int] | None: ...


class CudaPiece:
    """A `torch.cuda.CUDAGraph` captured into the backend's shared pool."""

    def __init__(self, pool: object) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.pool = pool
        self.outputs: Outputs | None = None

    def capture(self, fn: Callable[[], Outputs]) -> Outputs:
        with torch.cuda.graph(self.graph, pool=self.pool):
            self.outputs = fn()
        return self.outputs

    def replay(self) -> Outputs:
        self.graph.replay()
        assert self.outputs is not None
        return self.outputs


class CudaBackend:
    """Real capture on the current CUDA device, one graph memory pool for every bucket."""

    dry_run = False

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()
        self.side_stream = torch.cuda.Stream()

    def new_piece(self) -> PieceGraph:
        return CudaPiece(self.pool)

    def warmup(self, fn: Callable[[], object]) -> None:
        """Run `fn` on a side stream (as PyTorch's capture recipe requires), then rejoin."""
        self.side_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side_stream):
            fn()
        torch.cuda.current_stream().wait_stream(self.side_stream)

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def memory_bytes(self) -> tuple[int, int]:
        """`(device free bytes, allocator reserved bytes)` after a synchronize."""
        torch.cuda.synchronize()
        return torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()


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

    def new_piece(self) -> PieceGraph:
        return EagerPiece()

    def warmup(self, fn: Callable[[], object]) -> None:
        fn()

    def synchronize(self) -> None:
        return None

    def memory_bytes(self) -> None:
        return None


@dataclass(frozen=True)
class StaticBuffers:
    """Static inputs shared by every bucket's pieces, sized for the largest capacity."""

    x: torch.Tensor
    """[max_rows, hidden] residual-stream input of a piece."""
    attn: torch.Tensor
    """[max_rows, q_width] attention output fed to a piece (unused by piece 0)."""

    @classmethod
    def allocate(cls, max_rows: int, model: ProxyModel) -> "StaticBuffers":
        """Allocate (zeroed) before any capture."""
        kw = dict(device=model.device, dtype=model.dtype)
        return cls(torch.zeros(max_rows, model.dims.hidden_size, **kw), torch.zeros(max_rows, model.dims.q_width, **kw))

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
    pieces: tuple[PieceGraph, ...]
    """num_layers + 1 pieces, in forward order."""

    def run_piece(self, index: int, x: torch.Tensor, attn: torch.Tensor) -> Outputs:
        """Replay piece `index` on `x [C, hidden]` and `attn [C, q_width]`.

        Returns clones (safe to keep). Raises `CaptureError` naming the bucket, piece and
        input when a shape, dtype or device differs from the static buffer.
        """
        check_input(self, index, "x", x, self.x_in)
        check_input(self, index, "attn", attn, self.attn_in)
        self.x_in.copy_(x)
        self.attn_in.copy_(attn)
        x_out, qkv = self.pieces[index].replay()
        return x_out.clone(), None if qkv is None else qkv.clone()


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
    backend: GraphBackend, model: ProxyModel, buffers: StaticBuffers, bucket: int, capacity_rows: int
) -> BucketGraphs:
    """Warm up (twice) and capture the pieces of one bucket over the first `capacity_rows`
    rows of the shared static buffers. Raises `CaptureError` if the buffers are too small."""
    if capacity_rows > buffers.max_rows:
        raise CaptureError(
            f"bucket {bucket}: capacity {capacity_rows} rows exceeds the static buffers ({buffers.max_rows} rows)"
        )
    x_in, attn_in = buffers.x[:capacity_rows], buffers.attn[:capacity_rows]
    fns = [_bind(piece(model, k), x_in, attn_in) for k in range(model.num_pieces)]
    for _ in range(WARMUP_RUNS):
        for fn in fns:
            backend.warmup(fn)
    backend.synchronize()
    pieces = []
    for fn in fns:
        graph = backend.new_piece()
        graph.capture(fn)
        pieces.append(graph)
    backend.synchronize()
    return BucketGraphs(bucket, capacity_rows, x_in, attn_in, tuple(pieces))


def _bind(fn: Piece, x_in: torch.Tensor, attn_in: torch.Tensor) -> Callable[[], Outputs]:
    return lambda: fn(x_in, attn_in)
