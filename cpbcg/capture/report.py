"""The capture manifest document (schema v1, see `cpbcg.manifest`) built from a session's results."""

from __future__ import annotations

import torch

import cpbcg
from cpbcg.capture.forward import TOLERANCES
from cpbcg.capture.harness import BucketResult, CaptureSession, SkippedBucket
from cpbcg.manifest import SCHEMA_VERSION


def device_name(session: CaptureSession) -> str:
    """`torch.cuda.get_device_name` of the session's device, or `cpu`."""
    device = session.model.device
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def manifest_document(
    session: CaptureSession, preset: str, results: list[BucketResult], skipped: list[SkippedBucket]
) -> dict:
    """The whole manifest: versions, device, CP and capture settings, model, one record per
    captured bucket (capture order, largest first), skipped buckets with reasons."""
    cfg, model = session.cfg, session.model
    atol, rtol = TOLERANCES[model.dtype]
    return {
        "schema_version": SCHEMA_VERSION,
        "cpbcg_version": cpbcg.__version__,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device_name": device_name(session),
        "dry_run": session.backend.dry_run,
        "emulated_ranks": len(session.group.local_ranks) > 1,
        "cp_size": cfg.cp_size,
        "cp_strategy": cfg.cp_strategy.value,
        "align_size": cfg.cp_layout.align_rows,
        "capture_layout": cfg.capture_layout.value,
        "max_context_size_tokens": cfg.max_context_size_tokens,
        "max_capture_requests": cfg.max_capture_requests,
        "max_padding_factor": cfg.max_padding_factor,
        "model": {**model.dims.to_dict(), "preset": preset, "name": model.dims.name,
                  "dtype": str(model.dtype).removeprefix("torch."), "num_layers": model.num_layers},
        "seed": session.seed,
        "tolerance": {"atol": atol, "rtol": rtol, "rule": "max_abs_err <= atol + rtol * max|reference|"},
        "buckets": [r.to_record() for r in results],
        "skipped_buckets": [{"capture_num_tokens": s.capture_num_tokens, "reason": s.reason} for s in skipped],
    }
