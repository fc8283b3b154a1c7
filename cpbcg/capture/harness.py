"""Capture orchestration: capture every bucket like the server, verify and measure each one.

`CaptureSession` owns the proxy model, the graph backend (CUDA, or eager for a dry run), the
rank group and the shared static buffers. `capture_all` captures the buckets largest first into
one pool, then replays per bucket the capture layout, adversarial layouts and sampled trace
batches, compares each with an unsharded eager forward, and times graph replay vs eager pieces.
`replay_batches` does the same for an explicit list of batches (used by `replay-check`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from cpbcg.capture.comm import NcclGroup, RankGroup, init_group
from cpbcg.capture.forward import (
    ForwardOps, batch_input, cp_forward, eager_runner, time_forward_ms, verify_layout,
)
from cpbcg.capture.graphs import BucketGraphs, CudaBackend, EagerBackend, GraphBackend, StaticBuffers, capture_bucket
from cpbcg.capture.layouts import LiveLayout, bucket_layouts, rows_needed, sample_trace_batches
from cpbcg.capture.model import ProxyModel, build_model, torch_dtype
from cpbcg.capture.presets import ModelDims, load_model_preset
from cpbcg.capture.zigzag import shard
from cpbcg.config import DeploymentConfig
from cpbcg.errors import CaptureError, CpbcgError
from cpbcg.planner.buckets import parse_bucket_spec
from cpbcg.planner.capacity import capturable_buckets, local_capacity
from cpbcg.planner.layout import BatchSet, CPStrategy, cp_active, local_rows
from cpbcg.planner.selector import EAGER_REASONS, BucketTable, select_buckets

REPLAY_ITERS = 5
"""Timed forwards per bucket (after one untimed warm-up)."""


@dataclass(frozen=True)
class CaptureRecord:
    """What capturing one bucket cost."""

    capture_num_tokens: int
    """Global bucket `B` (tokens)."""
    local_rows: int
    """Local capacity `C(B)` (rows per rank)."""
    capture_s: float
    """Seconds for the two warm-ups plus the capture of every piece."""
    graph_bytes: int | None
    """Drop in device free memory across the capture (bytes); None in a dry run."""
    allocator_bytes: int | None
    """Growth of the caching allocator's reserved memory, graph pool included (bytes); None in a dry run."""


@dataclass(frozen=True)
class SkippedBucket:
    """A bucket that could not be captured, with the reason."""

    capture_num_tokens: int
    """Global bucket `B` (tokens)."""
    reason: str
    """Why (out of memory, invalid layout, ...)."""


@dataclass(frozen=True)
class BucketResult:
    """One captured bucket: capture cost, replay timings and verification."""

    capture: CaptureRecord
    """Capture measurements."""
    replay_ms: float | None
    """Per-rank forward through the graphs plus eager attention (ms, CUDA events); None in a dry run."""
    eager_ms: float | None
    """The same forward with the pieces run eagerly (ms); None in a dry run."""
    layouts: tuple[dict, ...]
    """Per live layout: kind, num_tokens, num_requests, local_rows, max_abs_err, verified / refused."""

    @property
    def verified(self) -> bool:
        return all(l["verified"] for l in self.layouts if l["kind"] != "overflow_probe")

    @property
    def max_abs_err(self) -> float:
        errs = [l["max_abs_err"] for l in self.layouts if l["max_abs_err"] is not None]
        return max(errs, default=0.0)

    def to_record(self) -> dict:
        """The manifest's bucket record (schema v1 keys plus `overflow_refused` and `layouts`)."""
        probes = [l for l in self.layouts if l["kind"] == "overflow_probe"]
        return {
            **self.capture.__dict__, "replay_ms": self.replay_ms, "eager_ms": self.eager_ms,
            "verified": self.verified, "max_abs_err": self.max_abs_err,
            "layouts_checked": len(self.layouts) - len(probes),
            "overflow_refused": all(l["refused"] for l in probes) if probes else None,
            "layouts": list(self.layouts),
        }


@dataclass
class CaptureSession:
    """Model, backend, rank group, static buffers and the captured buckets of one run."""

    cfg: DeploymentConfig
    model: ProxyModel
    backend: GraphBackend
    group: RankGroup
    seed: int = 0
    ops: ForwardOps = field(default_factory=ForwardOps)
    graphs: dict[int, BucketGraphs] = field(default_factory=dict)

    @classmethod
    def open(cls, cfg: DeploymentConfig, dims: ModelDims, num_layers: int, seed: int = 0,
             dry_run: bool = False, dtype: str | None = None) -> "CaptureSession":
        """Pick CUDA (or torchrun NCCL ranks) when present and not `dry_run`, else the CPU.

        Raises `CaptureError` for an interleave deployment (zigzag only) or a bad torchrun world.
        """
        if cfg.cp_strategy is not CPStrategy.zigzag or cfg.cp_size < 2:
            raise CaptureError("capture emulates zigzag CP only: use --cp-strategy zigzag and --cp-size >= 2")
        group, device = init_group(cfg.cp_size, want_cuda=not dry_run)
        backend: GraphBackend = CudaBackend() if device.type == "cuda" else EagerBackend()
        model = build_model(dims, num_layers, seed, device, torch_dtype(dtype or dims.dtype))
        return cls(cfg, model, backend, group, seed)

    def close(self) -> None:
        """Tear down the NCCL process group of a torchrun launch (no-op when emulating)."""
        if isinstance(self.group, NcclGroup):
            import torch.distributed as dist

            dist.destroy_process_group()

    def capture(self, buckets: list[int], capacities: list[int], continue_on_error: bool = False,
                on_bucket: Callable[[int], None] = lambda b: None) -> tuple[list[CaptureRecord], list[SkippedBucket]]:
        """Allocate static buffers for the largest capacity, then capture largest bucket first.

        Raises `CaptureError` on the first failure unless `continue_on_error`.
        """
        check_memory(self, buckets, capacities)
        order = sorted(zip(buckets, capacities), reverse=True)
        buffers = StaticBuffers.allocate(max(capacities), self.model)
        records, skipped = [], []
        for bucket, capacity in order:
            try:
                records.append(self._capture_one(buffers, bucket, capacity))
            except (CpbcgError, RuntimeError) as exc:
                reason = _reason(exc)
                if not continue_on_error:
                    raise CaptureError(f"bucket {bucket}: capture failed: {reason}") from exc
                skipped.append(SkippedBucket(bucket, reason))
            on_bucket(bucket)
        return records, skipped

    def _capture_one(self, buffers: StaticBuffers, bucket: int, capacity: int) -> CaptureRecord:
        before = self.backend.memory_bytes()
        self.backend.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            self.graphs[bucket] = capture_bucket(self.backend, self.model, buffers, bucket, capacity)
        self.backend.synchronize()
        capture_s = time.perf_counter() - start
        after = self.backend.memory_bytes()
        if before is None or after is None:
            return CaptureRecord(bucket, capacity, capture_s, None, None)
        return CaptureRecord(bucket, capacity, capture_s, before[0] - after[0], after[1] - before[1])

    def check(self, bucket: int, layout: LiveLayout, seed: int) -> dict:
        """Replay one live layout in `bucket` and compare; an overflow probe must be refused."""
        graphs, cp = self.graphs[bucket], self.cfg.cp_layout
        rows = rows_needed(layout.extend_seq_lens, cp)
        entry = {"kind": layout.kind, "num_tokens": layout.num_tokens,
                 "num_requests": len(layout.extend_seq_lens), "local_rows": rows}
        try:
            result = verify_layout(graphs.run_piece, self.model, self.group, layout.extend_seq_lens,
                                   bucket, graphs.capacity_rows, rows, seed, self.ops)
        except CaptureError as exc:
            if layout.kind != "overflow_probe":
                raise
            return {**entry, "max_abs_err": None, "verified": None, "refused": True, "message": str(exc)}
        refused = {"refused": False} if layout.kind == "overflow_probe" else {}
        return {**entry, "max_abs_err": result.max_abs_err, "verified": result.verified, **refused}

    def time_bucket(self, bucket: int, extend_seq_lens: tuple[int, ...]) -> tuple[float | None, float | None]:
        """`(replay_ms, eager_ms)` of one layout in `bucket` (None, None in a dry run)."""
        if self.backend.dry_run:
            return None, None
        graphs = self.graphs[bucket]
        plan = self.ops.plan(list(extend_seq_lens), self.group.cp_size, graphs.capacity_rows, self.model.device)
        x_local = shard(batch_input(self.model, sum(extend_seq_lens), self.seed), plan)
        eager = eager_runner(self.model)
        forward = lambda run: lambda: cp_forward(run, self.model, self.group, plan, x_local, self.ops)  # noqa: E731
        return (time_forward_ms(self.backend, self.group, forward(graphs.run_piece), REPLAY_ITERS),
                time_forward_ms(self.backend, self.group, forward(eager), REPLAY_ITERS))


def attention_bytes(bucket: int, capacity: int, cp_size: int, local_ranks: int, dims: ModelDims,
                    element_bytes: int, dense_scores: bool) -> int:
    """Estimated peak bytes of capturing and verifying one bucket, dominated by attention.

    Every local rank caches a `[C(B), cp_size*C(B)]` bool attention mask; on CUDA one rank's mask
    is also expanded to a bias in the model dtype. `dense_scores` (the CPU / dry run, whose SDPA
    materializes scores) adds float32 scores and softmax of one rank, `[heads, C(B), cp*C(B)]`,
    and of the unsharded reference over one request of `B` tokens, `[heads, B, B]`. Weights and
    static buffers are small beside these and left out, so this is an estimate from below.
    """
    keys = cp_size * capacity
    total = local_ranks * capacity * keys
    if dense_scores:
        total += 8 * dims.num_attention_heads * (capacity * keys + bucket * bucket)
    else:
        total += element_bytes * capacity * keys
    return total


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


def check_memory(session: CaptureSession, buckets: list[int], capacities: list[int]) -> None:
    """Refuse, before any allocation, a bucket whose `attention_bytes` exceed the free memory.

    Raises `CaptureError` naming the bucket, the estimate and the memory available.
    """
    model, free = session.model, available_bytes(session.model.device)
    if free is None:
        return
    for bucket, capacity in sorted(zip(buckets, capacities), reverse=True):
        need = attention_bytes(bucket, capacity, session.group.cp_size, len(session.group.local_ranks), model.dims,
                               model.dtype.itemsize, session.backend.dry_run)
        if need > free:
            raise CaptureError(
                f"--buckets: bucket {bucket} (C(B)={capacity} rows) needs about {need / 2**30:.1f} GiB for "
                f"attention, but only {free / 2**30:.1f} GiB is free on {model.device.type}; capture smaller buckets"
            )


def capture_all(
    session: CaptureSession, buckets: list[int], *, trace: Path | None = None, samples: int = 2,
    continue_on_error: bool = False, on_step: Callable[[str, int], None] = lambda phase, b: None,
) -> tuple[list[BucketResult], list[SkippedBucket]]:
    """Capture `buckets` (largest first), then verify and time each captured bucket.

    `on_step(phase, bucket)` is called after each capture (`"capture"`) and verification
    (`"verify"`). Raises `CaptureError` on a failed capture (unless `continue_on_error`), a
    replay input mismatch, or a live layout that does not fit (never truncated).
    """
    cfg, cp = session.cfg, session.cfg.cp_layout
    kept = capturable_buckets(buckets, cp)
    capacities = local_capacity(kept, cp, cfg.capture_spec).tolist()
    table = BucketTable.build(kept, cp, cfg.capture_spec)
    sampled = {} if trace is None else sample_trace_batches(trace, table, cp, cfg.max_padding_factor, samples, session.seed)
    records, skipped = session.capture(kept, capacities, continue_on_error, lambda b: on_step("capture", b))
    results = []
    for record in records:
        results.append(_verify_bucket(session, record, sampled.get(record.capture_num_tokens, [])))
        on_step("verify", record.capture_num_tokens)
    return results, skipped


def _verify_bucket(session: CaptureSession, record: CaptureRecord, samples: list[LiveLayout]) -> BucketResult:
    bucket, capacity = record.capture_num_tokens, record.local_rows
    layouts = bucket_layouts(bucket, capacity, session.cfg.cp_layout, session.cfg.capture_spec) + samples
    checks = tuple(session.check(bucket, layout, session.seed + i) for i, layout in enumerate(layouts))
    replay_ms, eager_ms = session.time_bucket(bucket, layouts[0].extend_seq_lens)
    return BucketResult(record, replay_ms, eager_ms, checks)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "out of memory: " + str(exc).splitlines()[0]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def replay_batches(
    batches: list[list[int]], cfg: DeploymentConfig, *, preset: str = "tiny", layers: int = 2, seed: int = 0
) -> list[dict]:
    """Capture the buckets the runtime selector picks for `batches`, then replay and verify each.

    Buckets come from `cfg.buckets` with capacities from the capture model; only buckets that
    some batch routes to are captured (largest first, one pool). Runs on CUDA when present,
    else as a dry run (eager pieces, no timings).

    Returns one dict per batch, in order: `extend_seq_lens` (list), `bucket` (int, or None when
    the selector runs it eagerly), `eager_reason` (str or None), `rescued` (bool), `verified`
    (bool, None when eager), `max_abs_err` (float, None when eager), `replay_ms` (float, None
    when eager or dry run). Raises `CaptureError` / `ConfigError` for bad settings.
    """
    table = BucketTable.build(parse_bucket_spec(cfg.buckets), cfg.cp_layout, cfg.capture_spec)
    batch_set = BatchSet.from_lists(batches)
    rows = local_rows(batch_set, cfg.cp_layout)
    sel = select_buckets(batch_set.num_tokens, rows, cp_active(batch_set, cfg.cp_layout), table, cfg.max_padding_factor)
    needed = sorted({int(i) for i in sel.bucket_index if i >= 0})
    session = CaptureSession.open(cfg, load_model_preset(preset), layers, seed)
    try:
        if needed:
            session.capture([int(table.capture_num_tokens[i]) for i in needed], [int(table.capacity_rows[i]) for i in needed])
        return [_replay_one(session, table, sel, i, list(b)) for i, b in enumerate(batches)]
    finally:
        session.close()


def _replay_one(session: CaptureSession, table: BucketTable, sel, i: int, lens: list[int]) -> dict:
    index, code = int(sel.bucket_index[i]), int(sel.reason_code[i])
    out = {"extend_seq_lens": lens, "bucket": None, "eager_reason": None, "rescued": bool(sel.rescued[i]),
           "verified": None, "max_abs_err": None, "replay_ms": None}
    if index < 0:
        return {**out, "eager_reason": EAGER_REASONS[code - 1].value}
    bucket = int(table.capture_num_tokens[index])
    check = session.check(bucket, LiveLayout("batch", tuple(lens)), session.seed + i)
    replay_ms, _ = session.time_bucket(bucket, tuple(lens))
    return {**out, "bucket": bucket, "verified": check["verified"], "max_abs_err": check["max_abs_err"], "replay_ms": replay_ms}

