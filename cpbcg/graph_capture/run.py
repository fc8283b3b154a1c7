"""Entry points: `run_capture` (settings in, `CaptureResult` out) and `replay_batches`."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

import cpbcg
from cpbcg.graph_capture.harness import CaptureSession
from cpbcg.graph_capture.forward import tolerance_for
from cpbcg.graph_capture.layouts import LiveLayout, sample_trace_batches
from cpbcg.graph_capture.presets import load_model_preset
from cpbcg.graph_capture.records import BatchReplay, CaptureResult, CaptureSettings, LayoutCheck
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.model.capacity import capture_buckets, local_capacity
from cpbcg.planner.model.layout import BatchSet, cp_active, local_rows
from cpbcg.planner.model.selector import BucketTable, select_buckets

StepCallback = Callable[[str, int], None]
"""`(phase, bucket)`: called after each bucket's `capture` and `verify` step."""


def run_capture(settings: CaptureSettings, on_step: StepCallback | None = None) -> CaptureResult:
    """Capture `settings.buckets` like the server (largest first, one pool), verify and time
    each one; see `CaptureSession`. Buckets that cannot fit, run out of memory or fail to
    capture are in `CaptureResult.skipped` (the rest are still there: `complete` is false).

    Raises `ConfigError` (preset, dtype, buckets), `TraceError` (trace), `ModelError` (capture
    layout) and `CaptureError` (not zigzag, torchrun world, no bucket fits the free memory).
    """
    step = on_step or (lambda phase, bucket: None)
    dims = load_model_preset(settings.preset)
    cp, spec = settings.cp_layout, settings.capture_spec
    kept = list(capture_buckets(list(settings.buckets), cp).capture_num_tokens)  # as SGLang 0.5.23 captures them
    capacities = local_capacity(kept, cp, spec).tolist()
    samples: dict[int, list[LiveLayout]] = {}
    if settings.trace is not None:
        table = BucketTable.build(kept, cp, spec)
        samples = sample_trace_batches(settings.trace, table, cp, settings.max_padding_factor, settings.samples, settings.seed)
    session = CaptureSession.open(cp, spec, dims, settings.num_layers, settings.seed, settings.dry_run, settings.dtype)
    try:
        records, skipped = session.capture(kept, capacities, lambda b: step("capture", b))
        results, failed = session.verify_all(records, samples, lambda b: step("verify", b))
        return result_of(session, settings, tuple(results), tuple(skipped + failed))
    finally:
        session.close()


def result_of(session: CaptureSession, settings: CaptureSettings, results, skipped) -> CaptureResult:
    """The typed result of a finished session."""
    device = session.model.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    versions = (("cpbcg", cpbcg.__version__), ("torch", torch.__version__), ("cuda", torch.version.cuda))
    return CaptureResult(
        settings, session.model.dims, str(session.model.dtype).removeprefix("torch."), name, session.backend.dry_run,
        len(session.group.local_ranks) > 1, versions, session.kernels().as_pairs(), tolerance_for(session.model.dtype),
        results, skipped, session.group.is_writer,
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
