"""Capture orchestration: capture every bucket like the server, verify and measure each one.

`CaptureSession` owns the proxy model (and its float32 twin, the reference), the graph backend
(CUDA, or eager for a dry run), the rank group and the shared static buffers. `capture` takes the
buckets largest first into one pool; per bucket it first compares the memory estimate with the
free memory (and skips a bucket that cannot fit before building it), then captures, catching
out-of-memory; every rank agrees on each bucket's status. `verify` replays the capture layout,
adversarial layouts and sampled trace batches, and times graph replay vs eager pieces.
`run_capture` (settings in, `CaptureResult` out) and `replay_batches` are the entry points.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, TypeVar

import torch

from cpbcg.graph_capture import estimate
from cpbcg.graph_capture.comm import DistGroup, RankGroup, init_group
from cpbcg.graph_capture.forward import ForwardOps, batch_input, cp_forward, time_forward_ms, verify_layout
from cpbcg.graph_capture.graphs import (
    BucketGraphs, CudaBackend, EagerBackend, GraphBackend, StaticBuffers, capture_bucket, is_out_of_memory,
)
from cpbcg.graph_capture.layouts import LiveLayout, bucket_layouts, rows_needed
from cpbcg.graph_capture.model import ProxyModel, build_model, sdpa_kernel, torch_dtype, upcast
from cpbcg.graph_capture.presets import ModelDims
from cpbcg.graph_capture.records import (
    BucketResult, BucketTiming, BucketWall, CaptureRecord, LayoutCheck, ProbeCheck, SkipCause, SkippedBucket,
)
from cpbcg.graph_capture.zigzag import shard
from cpbcg.errors import CaptureError, CpbcgError
from cpbcg.planner.model.capacity import CaptureSpec, capture_pieces
from cpbcg.planner.model.layout import CPLayout

CAUSES: tuple[SkipCause, ...] = ("estimate", "out_of_memory", "capture_error", "rank_disagreement")
"""Skip causes in the order of the status flag ranks all-reduce (0 = ok, i + 1 = `CAUSES[i]`)."""
REPLAY_ITERS = 5
"""Timed forwards per bucket (after one untimed warm-up)."""
GIB = 2**30
CPU_THREADS = 1
"""Torch intra-op threads while a session runs on the CPU (a dry run; restored by `close`). The
proxy's pieces and attention tiles are small: more threads only wait on each other. Issue 44,
`benchmarks/bench_capture.py` on the loaded 2-core machine, SGLang's 57 buckets for 8192: 56 s
wall / 32 s CPU with one thread, about 910 s / 256 s with torch's default two."""


_Done = TypeVar("_Done")
"""What a guarded step returns."""


@dataclass
class CaptureSession:
    """Model, reference, backend, rank group, static buffers and the captured buckets of one run."""

    cp: CPLayout
    spec: CaptureSpec
    model: ProxyModel
    truth: ProxyModel
    """The same weights in float32 (the reference every layout is compared with)."""
    backend: GraphBackend
    group: RankGroup
    seed: int = 0
    ops: ForwardOps = field(default_factory=ForwardOps)
    graphs: dict[int, BucketGraphs] = field(default_factory=dict)
    buffers: StaticBuffers | None = None
    """Static inputs and outputs, allocated by `capture` for the largest capacity."""
    free_bytes: Callable[[], int | None] | None = None
    """Free memory of the device now (tests replace it); default `available_bytes`."""
    _kernels: estimate.AttentionKernels | None = field(default=None, repr=False)
    walls: dict[int, dict[str, float]] = field(default_factory=dict)
    """Per bucket, wall seconds by `BucketWall` field name so far (filled by `capture` and `verify_all`)."""
    threads_before: int | None = None
    """Torch's intra-op threads before a CPU session set `CPU_THREADS` (restored by `close`)."""

    @classmethod
    def open(cls, cp: CPLayout, spec: CaptureSpec, dims: ModelDims, num_layers: int, seed: int = 0,
             dry_run: bool = False, dtype: str | None = None) -> "CaptureSession":
        """Pick CUDA (or torchrun ranks) when present and not `dry_run`, else the CPU.

        Raises `CaptureError` for an interleave deployment or `cp_size < 2` (zigzag only) or a
        bad torchrun world; `ConfigError` for an unknown dtype.
        """
        if not cp.model.capture_emulated:
            raise CaptureError("cp_strategy: capture emulates zigzag CP only (cp_strategy zigzag with cp_size >= 2)")
        group, device = init_group(cp.cp_size, want_cuda=not dry_run)
        backend: GraphBackend = CudaBackend() if device.type == "cuda" else EagerBackend()
        threads_before = None
        if device.type == "cpu":
            threads_before = torch.get_num_threads()
            torch.set_num_threads(CPU_THREADS)
        model = build_model(dims, num_layers, seed, device, torch_dtype(dtype or dims.dtype))
        return cls(cp, spec, model, upcast(model), backend, group, seed, threads_before=threads_before)

    def close(self) -> None:
        """Restore torch's intra-op threads after a CPU session; tear down the process group of
        a torchrun launch (no-op when emulating)."""
        if self.threads_before is not None:
            torch.set_num_threads(self.threads_before)
            self.threads_before = None
        if isinstance(self.group, DistGroup):
            import torch.distributed as dist

            dist.destroy_process_group()

    def kernels(self) -> estimate.AttentionKernels:
        """SDPA kernel per attention call site on this device and dtype (asked once)."""
        if self._kernels is None:
            dims, device = self.model.dims, self.model.device
            self._kernels = estimate.AttentionKernels(sdpa_kernel(dims, device, self.model.dtype, masked=True),
                                                      sdpa_kernel(dims, device, self.model.dtype, masked=False),
                                                      sdpa_kernel(dims, device, torch.float32, masked=False))
        return self._kernels

    def peak_bytes(self, bucket: int, capacity: int) -> int:
        """`estimate.bucket_peak_bytes` of one bucket on this session."""
        longest = max(capture_pieces(bucket, self.cp, self.spec))
        return estimate.bucket_peak_bytes(self.model.dims, bucket, capacity, longest, self.cp.cp_size,
                                          len(self.group.local_ranks), self.model.dtype.itemsize, self.kernels())

    def capture(self, buckets: list[int], capacities: list[int],
                on_bucket: Callable[[int], None] = lambda b: None) -> tuple[list[CaptureRecord], list[SkippedBucket]]:
        """Allocate static buffers for the largest capacity, then capture largest bucket first.

        A bucket whose estimate exceeds the free memory is skipped before it is built; one that
        runs out of memory or fails to capture is skipped with the reason, and so is a bucket
        another rank skipped. Raises `CaptureError` when the estimate refuses every bucket.
        """
        order = sorted(zip(buckets, capacities), reverse=True)
        refuse_if_none_fits(self, order)
        self.buffers = StaticBuffers.allocate(max(capacities), self.model)
        records: list[CaptureRecord] = []
        skipped: list[SkippedBucket] = []
        for bucket, capacity in order:
            wall = self.walls.setdefault(bucket, {})
            start = time.perf_counter()
            skip, record = self._estimate_skip(bucket, capacity), None
            wall["estimate_s"] = time.perf_counter() - start
            if skip is None:
                record, skip = self._guarded(bucket, capacity, lambda: self._capture_one(bucket, capacity))
            self._settle(bucket, capacity, record, skip, records, skipped)
            on_bucket(bucket)
            wall["total_s"] = time.perf_counter() - start
        return records, skipped

    def _estimate_skip(self, bucket: int, capacity: int) -> SkippedBucket | None:
        self.backend.settle()
        free, need = self.available(), self.peak_bytes(bucket, capacity)
        if free is None or need <= free:
            return None
        return SkippedBucket(bucket, capacity, "estimate", (
            f"needs about {need / GIB:.1f} GiB for attention (kernels {self.kernels().cp_attention}/"
            f"{self.kernels().reference}), only {free / GIB:.1f} GiB free on {self.model.device.type}"))

    def available(self) -> int | None:
        return (self.free_bytes or (lambda: available_bytes(self.model.device)))()

    def _guarded(self, bucket: int, capacity: int, step: Callable[[], _Done]) -> tuple[_Done | None, SkippedBucket | None]:
        """Run `step`; out-of-memory or a capture failure becomes a `SkippedBucket`."""
        try:
            return step(), None
        except (CpbcgError, RuntimeError, MemoryError) as exc:
            cause: SkipCause = "out_of_memory" if is_out_of_memory(exc) else "capture_error"
            self.graphs.pop(bucket, None)
            self.backend.settle()
            return None, SkippedBucket(bucket, capacity, cause, _reason(exc))

    def _settle(self, bucket: int, capacity: int, done: _Done | None, skip: SkippedBucket | None,
                kept: list[_Done], skipped: list[SkippedBucket]) -> None:
        """File one bucket's outcome once every rank agreed (`_agree`): its skip, or what this rank did."""
        agreed = self._agree(bucket, capacity, skip)
        if agreed is not None:
            skipped.append(agreed)
        elif done is not None:  # kept by every rank: this rank's step ran
            kept.append(done)

    def _agree(self, bucket: int, capacity: int, skip: SkippedBucket | None) -> SkippedBucket | None:
        """Every rank keeps the bucket, or every rank skips it (an all-reduce of the cause)."""
        mine = 0 if skip is None else CAUSES.index(skip.cause) + 1
        agreed = self.group.agree(mine)
        if agreed and skip is None:
            self.graphs.pop(bucket, None)
            self.backend.settle()
            return SkippedBucket(bucket, capacity, "rank_disagreement",
                                 f"another CP rank skipped this bucket ({CAUSES[agreed - 1]})")
        return skip

    def _standalone_bytes(self, bucket: int, capacity: int) -> int | None:
        """Pool bytes of this bucket's graphs captured alone into a private pool, then dropped.
        None in a dry run, or when that extra capture runs out of memory (the shared pool may
        still fit: there the bucket reuses the larger buckets' temporaries)."""
        backend = self.backend
        if backend.dry_run:
            return None
        pool = backend.new_pool()
        try:
            with torch.inference_mode():
                alone = capture_bucket(backend, self.model, self._buffers(), bucket, capacity, pool)
        except RuntimeError as exc:
            if not is_out_of_memory(exc):
                raise
            return None
        backend.settle()
        standalone = backend.pool_bytes(pool)
        del alone
        return None if standalone is None else max(standalone, 0)

    def _buffers(self) -> StaticBuffers:
        """The static buffers `capture` allocated (`CaptureError` before it)."""
        if self.buffers is None:
            raise CaptureError("no static buffers: capture() allocates them before the first bucket")
        return self.buffers

    def _capture_one(self, bucket: int, capacity: int) -> CaptureRecord:
        backend = self.backend
        wall = self.walls.setdefault(bucket, {})
        start = time.perf_counter()
        standalone = self._standalone_bytes(bucket, capacity)
        wall["standalone_s"] = time.perf_counter() - start
        backend.settle()
        pool_before, reserved_before = backend.pool_bytes(backend.shared_pool), backend.reserved_bytes()
        start = time.perf_counter()
        with torch.inference_mode():
            self.graphs[bucket] = capture_bucket(backend, self.model, self._buffers(), bucket, capacity)
        backend.synchronize()
        capture_s = time.perf_counter() - start
        wall["warmup_s"] = self.graphs[bucket].warmup_s
        wall["capture_s"] = capture_s - self.graphs[bucket].warmup_s
        backend.settle()
        pool_after, reserved_after = backend.pool_bytes(backend.shared_pool), backend.reserved_bytes()
        return CaptureRecord(bucket, capacity, capture_s, _growth(pool_before, pool_after, reserved_before, reserved_after),
                             standalone, _growth(reserved_before, reserved_after))

    def check(self, bucket: int, layout: LiveLayout, seed: int) -> LayoutCheck | ProbeCheck:
        """Replay one live layout in `bucket` and compare; an overflow probe must be refused."""
        graphs = self.graphs[bucket]
        rows = rows_needed(layout.extend_seq_lens, self.cp)
        try:
            return verify_layout(graphs, self.model, self.truth, self.group, layout.kind, layout.extend_seq_lens,
                                 rows, seed, self.ops)
        except CaptureError as exc:
            if layout.kind != "overflow_probe":
                raise
            return ProbeCheck(layout.extend_seq_lens, rows, True, str(exc))

    def time_bucket(self, bucket: int, extend_seq_lens: tuple[int, ...]) -> BucketTiming | None:
        """Replay, eager and raw-replay milliseconds of one layout in `bucket` (None in a dry run).

        Replay and eager go through the same wrapper (`BucketGraphs.run_piece`) and the same
        attention; raw is `graph.replay()` of every piece, once per local rank.
        """
        if self.backend.dry_run:
            return None
        graphs = self.graphs[bucket]
        plan = self.ops.plan(list(extend_seq_lens), self.group.cp_size, graphs.capacity_rows, self.model.device)
        x_local = shard(batch_input(self.model, sum(extend_seq_lens), self.seed), plan)
        forward = lambda run: lambda: cp_forward(run, self.model, self.group, plan, x_local, self.ops)  # noqa: E731
        timed = lambda fn: time_forward_ms(self.backend, self.group, fn, REPLAY_ITERS)  # noqa: E731
        def raw() -> None:
            for _ in self.group.local_ranks:
                graphs.replay_raw()

        return BucketTiming(timed(forward(graphs.run_piece)), timed(forward(graphs.run_eager)), timed(raw))

    def verify(self, record: CaptureRecord, samples: list[LiveLayout]) -> BucketResult:
        """Every live layout of one captured bucket checked, then the capture layout timed."""
        bucket, capacity = record.capture_num_tokens, record.local_rows
        wall = self.walls.setdefault(bucket, {})
        start = time.perf_counter()
        layouts = bucket_layouts(bucket, capacity, self.cp, self.spec)
        seen = {l.extend_seq_lens for l in layouts}
        layouts += [s for s in samples if s.extend_seq_lens not in seen]
        checks = [self.check(bucket, layout, self.seed + i) for i, layout in enumerate(layouts)]
        wall["verify_s"], wall["layouts"] = time.perf_counter() - start, len(checks)
        start = time.perf_counter()
        timing = self.time_bucket(bucket, layouts[0].extend_seq_lens)
        wall["timing_s"] = time.perf_counter() - start
        return BucketResult(record, timing, tuple(c for c in checks if isinstance(c, LayoutCheck)),
                            tuple(c for c in checks if isinstance(c, ProbeCheck)))

    def verify_all(self, records: list[CaptureRecord], samples: dict[int, list[LiveLayout]],
                   on_bucket: Callable[[int], None] = lambda b: None) -> tuple[list[BucketResult], list[SkippedBucket]]:
        """`verify` every record; out-of-memory skips the bucket (on every rank)."""
        results: list[BucketResult] = []
        skipped: list[SkippedBucket] = []
        for record in records:
            bucket, capacity = record.capture_num_tokens, record.local_rows
            start = time.perf_counter()
            result, skip = self._guarded(bucket, capacity, lambda: self.verify(record, samples.get(bucket, [])))
            if skip is not None:
                skip = SkippedBucket(bucket, capacity, skip.cause, f"verification: {skip.reason}")
            self._settle(bucket, capacity, result, skip, results, skipped)
            on_bucket(bucket)
            wall = self.walls.setdefault(bucket, {})
            wall["total_s"] = wall.get("total_s", 0.0) + time.perf_counter() - start
        return [replace(r, wall=self.bucket_wall(r.capture_num_tokens)) for r in results], skipped

    def bucket_wall(self, bucket: int) -> BucketWall:
        """The accounted wall time of one bucket so far (phases not run are 0)."""
        wall = self.walls.get(bucket, {})
        phases = {name: float(wall.get(name, 0.0)) for name in ("estimate_s", "standalone_s", "warmup_s", "capture_s", "verify_s", "timing_s")}
        return BucketWall(**phases, layouts=int(wall.get("layouts", 0)), total_s=float(wall.get("total_s", 0.0)))


def _growth(before: int | None, after: int | None, fallback_before: int | None = None,
            fallback_after: int | None = None) -> int | None:
    """`after - before` clamped at 0 (pool bytes never shrink while its graphs live); falls back
    to the second pair when the first is unknown; None when neither is known (dry run)."""
    if before is None or after is None:
        before, after = fallback_before, fallback_after
    return None if before is None or after is None else max(after - before, 0)


def available_bytes(device: torch.device) -> int | None:
    """Free memory of `device`: CUDA free bytes, or the CPU's MemAvailable; None if unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def refuse_if_none_fits(session: CaptureSession, order: list[tuple[int, int]]) -> None:
    """Raise `CaptureError` (nothing built) when the free memory cannot hold even the smallest
    bucket's estimate: the bucket list asks for more than this device has."""
    free = session.available()
    if free is None:
        return
    bucket, capacity = min(order)
    need = session.peak_bytes(bucket, capacity)
    if need > free:
        raise CaptureError(
            f"buckets: no bucket fits: the smallest, {bucket} (C(B)={capacity} rows), needs about {need / GIB:.1f} GiB "
            f"for attention, but only {free / GIB:.1f} GiB is free on {session.model.device.type}; capture smaller buckets"
        )


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"out of memory: {text}" if is_out_of_memory(exc) and "out of memory" not in text.lower() else text
