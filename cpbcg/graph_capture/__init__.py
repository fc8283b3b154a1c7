"""`cpbcg capture`: real breakable CUDA graphs per bucket on a proxy model (the only torch user).

Public entry point: `run_capture(settings: CaptureSettings, on_step=None, on_phase=None) -> CaptureResult`
(typed records in `records`, serialised by `cpbcg.manifest.manifest_document`). Importing this
package does not import torch; `run_capture` and `replay_batches` import it when called.

Modules: `records` (typed settings and results, no torch), `presets` (model dims, no torch),
`estimate` (memory estimate, no torch), `model` (proxy layers, graph pieces, SDPA), `zigzag`
(CP sharding, gather, attention), `graphs` (capture/replay with static buffers and one pool),
`comm` (emulated or torchrun rank groups), `layouts` (live layouts to replay), `forward` (CP
forward, verification, timing), `harness` (the session), `run` (entry points). See docs/capture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

from cpbcg.graph_capture.records import BatchReplay, CaptureResult, CaptureSettings

if TYPE_CHECKING:
    from cpbcg.planner.deployment import Deployment

__all__ = ["BatchReplay", "CaptureResult", "CaptureSettings", "replay_batches", "run_capture"]


def run_capture(settings: CaptureSettings, on_step: Callable[[str, int], None] | None = None,
                on_phase: Callable[[str, int], None] | None = None) -> CaptureResult:
    """Capture, verify and measure `settings.buckets` (see `cpbcg.graph_capture.run.run_capture`);
    `on_step(phase, bucket)` after each bucket's capture and verification, `on_phase(phase,
    bucket)` as each phase begins (`sampling`, `setup`, then `capture` / `verify` per bucket).

    Raises `ImportError` without torch, else what `cpbcg.graph_capture.run.run_capture` raises."""
    from cpbcg.graph_capture.run import run_capture as run

    return run(settings, on_step, on_phase)


def replay_batches(batches: Sequence[Sequence[int]], deployment: "Deployment", **kw: object) -> list[BatchReplay]:
    """Route, capture and replay `batches` in `deployment`'s buckets (see `cpbcg.graph_capture.run.replay_batches`)."""
    from cpbcg.graph_capture.run import replay_batches as replay

    return replay(batches, deployment, **kw)  # type: ignore[arg-type]
