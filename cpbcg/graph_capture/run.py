"""Entry points: `run_capture` (settings in, `CaptureResult` out) and `replay_batches`."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

import cpbcg
from cpbcg.graph_capture.harness import CaptureSession
from cpbcg.graph_capture.forward import tolerance_for
from cpbcg.graph_capture.layouts import LiveLayout, sample_trace_batches
from cpbcg.graph_capture.presets import load_model_preset
from cpbcg.graph_capture.records import BatchReplay, CaptureResult, CaptureSettings, LayoutCheck, RunWall
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.capacity import capture_buckets, local_capacity
from cpbcg.planner.model.layout import BatchSet, cp_active, local_rows
from cpbcg.planner.model.selector import BucketTable, select_buckets

StepCallback = Callable[[str, int], None]
"""`(phase, bucket)`: called after each bucket's `capture` and `verify` step."""
PhaseCallback = Callable[[str, int], None]
"""`(phase, bucket)`: called as a phase begins: `setup` and `sampling` (bucket 0), then
`capture` and `verify` per bucket."""


def run_capture(settings: CaptureSettings, on_step: StepCallback | None = None, on_phase: PhaseCallback | None = None) -> CaptureResult:
    """Capture `settings.buckets` like the server (largest first, one pool), verify and time
    each one; see `CaptureSession`. Buckets that cannot fit, run out of memory or fail to
    capture are in `CaptureResult.skipped` (the rest are still there: `complete` is false).

    Raises `ConfigError` (preset, dtype, buckets), `TraceError` (trace), `ModelError` (capture
    layout) and `CaptureError` (not zigzag, torchrun world, no bucket fits the free memory).
    """
    step = on_step or (lambda phase, bucket: None)
    phase = on_phase or (lambda phase, bucket: None)
    started = time.perf_counter()
    dims = load_model_preset(settings.preset)
    cp, spec = settings.cp_layout, settings.capture_spec
    kept = list(capture_buckets(list(settings.buckets), cp).capture_num_tokens)  # as SGLang 0.5.23 captures them
    capacities = local_capacity(kept, cp, spec).tolist()
    samples: dict[int, list[LiveLayout]] = {}
    phase("sampling", 0)
    clock = time.perf_counter()
    if settings.trace is not None:
        table = BucketTable.build(kept, cp, spec)
        samples = sample_trace_batches(settings.trace, table, cp, settings.max_padding_factor, settings.samples, settings.seed)
    sampling_s = time.perf_counter() - clock
    phase("setup", 0)
    clock = time.perf_counter()
    session = CaptureSession.open(cp, spec, dims, settings.num_layers, settings.seed, settings.dry_run, settings.dtype)
    setup_s = time.perf_counter() - clock
    try:
        order = sorted(kept, reverse=True)
        clock = time.perf_counter()
        records, skipped = session.capture(kept, capacities, _then(step, phase, "capture", "capture", order))
        capture_s, clock = time.perf_counter() - clock, time.perf_counter()
        verified = [r.capture_num_tokens for r in records]
        results, failed = session.verify_all(records, samples, _then(step, phase, "verify", "verify", verified))
        wall = RunWall(setup_s, sampling_s, capture_s, time.perf_counter() - clock, time.perf_counter() - started)
        return result_of(session, settings, tuple(results), tuple(skipped + failed), wall)
    finally:
        session.close()


def _then(step: StepCallback, phase: PhaseCallback, done: str, begins: str, order: list[int]) -> Callable[[int], None]:
    """The per-bucket callback of one loop over `order`: `step(done, bucket)`, then the next
    bucket's `phase(begins, next)`; the first bucket's phase is announced at once."""
    if order:
        phase(begins, order[0])
    position = {b: i for i, b in enumerate(order)}

    def after(bucket: int) -> None:
        step(done, bucket)
        i = position.get(bucket, len(order)) + 1
        if i < len(order):
            phase(begins, order[i])

    return after


def result_of(session: CaptureSession, settings: CaptureSettings, results, skipped, wall: RunWall | None = None) -> CaptureResult:
    """The typed result of a finished session."""
    device = session.model.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    versions = (("cpbcg", cpbcg.__version__), ("torch", torch.__version__), ("cuda", torch.version.cuda))
    return CaptureResult(
        settings, session.model.dims, str(session.model.dtype).removeprefix("torch."), name, session.backend.dry_run,
        len(session.group.local_ranks) > 1, versions, session.kernels().as_pairs(), tolerance_for(session.model.dtype),
        results, skipped, session.group.is_writer, wall,
    )


def replay_batches(
    batches: Sequence[Sequence[int]], deployment: Deployment, *, preset: str = "tiny", layers: int = 2, seed: int = 0
) -> list[BatchReplay]:
    """Capture the buckets the runtime selector picks for `batches`, then replay and verify each.

    Buckets and capacities are the deployment's (`Deployment.table()`); only buckets that
    some batch routes to are captured (largest first, one pool). Runs on CUDA when present,
    else as a dry run (eager pieces, no timings). Returns one `BatchReplay` per batch, in order; a
    batch whose bucket could not be captured (estimate, out of memory) is not verified
    (`verified` False, `skip_reason` set). Raises `CaptureError` / `ConfigError` for bad settings.
    """
    cp, spec = deployment.cp, deployment.capture
    table = deployment.table()
    batch_set = BatchSet.from_lists([list(b) for b in batches])
    rows = local_rows(batch_set, cp)
    sel = select_buckets(batch_set.num_tokens, rows, cp_active(batch_set, cp), table, deployment.max_padding_factor)
    needed = sorted({int(i) for i in sel.bucket_index if i >= 0})
    session = CaptureSession.open(cp, spec, load_model_preset(preset), layers, seed)
    try:
        skipped = {}
        if needed:
            _, lost = session.capture([int(table.capture_num_tokens[i]) for i in needed], [int(table.capacity_rows[i]) for i in needed])
            skipped = {k.capture_num_tokens: f"{k.cause}: {k.reason}" for k in lost}
        return [_replay_one(session, table, sel, i, tuple(int(x) for x in b), skipped) for i, b in enumerate(batches)]
    finally:
        session.close()


def _replay_one(session: CaptureSession, table: BucketTable, sel, i: int, lens: tuple[int, ...],
                skipped: dict[int, str]) -> BatchReplay:
    index, rescued = int(sel.bucket_index[i]), bool(sel.rescued[i])
    if index < 0:
        return BatchReplay(lens, None, sel.reason_of(i).value, rescued, None, None, None)
    bucket = int(table.capture_num_tokens[index])
    if bucket in skipped:
        return BatchReplay(lens, bucket, None, rescued, False, None, None, skipped[bucket])
    check = session.check(bucket, LiveLayout("batch", lens), session.seed + i)
    assert isinstance(check, LayoutCheck)
    timing = session.time_bucket(bucket, lens)
    return BatchReplay(lens, bucket, None, rescued, check.verified, check.max_abs_err, None if timing is None else timing.replay_ms)
