"""`cpbcg capture`: its use case (`run`), reading `CaptureOptions` (declared once in
`cpbcg.commands.capture_options`) and returning the typed `CaptureResult` that
`cpbcg.outputs.capture.write` renders (table, notes, the JSON manifest).

Torch is imported by the capture run only (`cpbcg.graph_capture`, through `cpbcg.api.capture`),
when `run` is called: importing this module does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

from cpbcg import api
from cpbcg.atomic import check_outputs
from cpbcg.commands.common import input_files
from cpbcg.commands.capture_options import CaptureOptions

if TYPE_CHECKING:
    from cpbcg.graph_capture.records import CaptureResult


def run(options: CaptureOptions, config: str | None = None, overrides: Mapping[str, object] | None = None, *,
        on_start: Callable[[int], None] | None = None, on_step: Callable[[str, int], None] | None = None,
        on_phase: Callable[[str, int], None] | None = None) -> CaptureResult:
    """Capture, verify and measure the buckets of the deployment `config` and dotted `overrides`
    describe, with `options`' model, layers, dtype, seed and trace samples (`cpbcg.api.capture`;
    `on_start`, `on_step`, `on_phase` report progress as it documents). The manifest path and the
    trace are checked before any work (`check_outputs`). Returns the `CaptureResult` (rank 0's
    view; `is_writer` False on the other torchrun ranks). Raises `ConfigError`, `TraceError`,
    `ModelError`, `CaptureError` (also when torch is missing)."""
    check_outputs({"-o": options.output}, input_files(config, overrides or {}, trace=options.trace))
    return api.capture(config, overrides, preset=options.preset, layers=options.layers,
                       dtype=options.dtype.value if options.dtype else None, seed=options.seed, trace=options.trace,
                       samples=options.samples, dry_run=options.dry_run, on_start=on_start, on_step=on_step, on_phase=on_phase)
