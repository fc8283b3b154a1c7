"""`cpbcg capture`: capture and replay breakable CUDA graphs per bucket and prove they fit.

Torch is imported inside the command only, so `import cpbcg.cli` and `cpbcg plan` stay torch-free.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, Optional

from typing import TYPE_CHECKING

import typer

from cpbcg.atomic import check_outputs, output_path, write_atomic
from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import TraceOpt, progress_bar, stderr_console, stdout_console
from cpbcg.cli.options import CaptureDeploymentOptions, with_options
from cpbcg.errors import ExitCode

if TYPE_CHECKING:
    from rich.table import Table

MAX_LAYERS = 256
"""Most proxy layers `--layers` accepts (real models have at most a few hundred)."""


class Dtype(str, Enum):
    """Dtypes the proxy model runs in (`cpbcg.graph_capture.presets.DTYPES`)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


PresetOpt = Annotated[str, typer.Option("--preset", "-p", help="Model preset (gpt-oss-120b, llama-3.1-70b, qwen3-32b, tiny) or a model YAML file.")]
LayersOpt = Annotated[int, typer.Option("--layers", min=1, max=MAX_LAYERS, help="Proxy transformer layers (each adds one break).")]
SamplesOpt = Annotated[int, typer.Option("--samples", min=0, max=1024, help="Trace batches replayed per bucket (with --trace): the heaviest plus random ones.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", parser=output_path, help="Write the capture manifest (JSON, atomic).", show_default=False)]


@app.command()
@error_boundary
@with_options(deployment=CaptureDeploymentOptions)
def capture(
    preset: PresetOpt = "tiny",
    layers: LayersOpt = 2,
    trace: TraceOpt = None,
    samples: SamplesOpt = 2,
    output: OutputOpt = None,
    dtype: Annotated[Optional[Dtype], typer.Option("--dtype", help="Override the preset dtype.", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**63 - 1, help="Seed of weights, inputs and trace sampling.")] = 0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Run the pieces eagerly even if CUDA is present (under torchrun: CPU ranks over gloo).")] = False,
    *,
    deployment: CaptureDeploymentOptions,
) -> None:
    """Capture breakable CUDA graphs per bucket like the server, replay them with the worst live
    layouts each bucket admits, check that each replay equals the same pieces run eagerly bit for bit and matches an unsharded
    float32 forward, and measure them.

    Per bucket: static buffers of C(B) CP-local rows, largest bucket first, two warm-ups, one
    shared graph pool; graph pieces between attention breaks (zigzag CP attention, eager).
    Replays the capture layout, adversarial layouts (many short requests loading one rank), an
    overflow probe that must be refused, and with `--trace` sampled batches the selector routes
    to the bucket. Without CUDA it is a dry run: the same pieces run eagerly on the CPU.

    One GPU emulates all CP ranks; `torchrun --nproc-per-node 4 -m cpbcg capture --cp-size 4`
    runs one rank per GPU over NCCL. A bucket that cannot fit (memory estimate), runs out of
    memory or fails to capture is skipped with its reason and the rest are still written.
    Exit 1 if a bucket fails verification, 3 if a bucket was skipped (capture incomplete)
    (`cpbcg --help` lists every exit code).

    Example: `cpbcg capture --cp-size 4 --preset tiny -o manifest.json`
    """
    from cpbcg import api
    from cpbcg.outputs.documents import dumps, manifest_document

    check_outputs({"-o": output}, {"--trace": trace})
    rank0 = os.environ.get("RANK", "0") == "0"  # torchrun: only rank 0 shows progress
    progress = CaptureProgress(rank0)
    with ExitStack() as stack:
        stack.enter_context(progress)
        result = api.capture(deployment.config, deployment.overrides(), preset=preset, layers=layers,
                             dtype=dtype.value if dtype else None, seed=seed, trace=trace, samples=samples, dry_run=dry_run,
                             on_start=progress.start, on_step=progress.step, on_phase=progress.phase)
    if not result.is_writer:
        return
    doc = manifest_document(result)
    _render(doc)
    if output is not None:
        write_atomic(output, dumps(doc))
        stderr_console().print(f"wrote {output}")
    else:
        stderr_console().print("no manifest written (add -o manifest.json for plan and replay-check)")
    failed = [r["capture_num_tokens"] for r in doc["buckets"] if not r["verified"]]
    if failed:
        typer.echo(f"cpbcg: verification failed for bucket(s) {', '.join(map(str, failed))}", err=True)
        raise typer.Exit(ExitCode.GATE_FAILED)
    if not result.complete:
        skipped = ", ".join(str(k.capture_num_tokens) for k in result.skipped)
        typer.echo(f"cpbcg: capture incomplete: bucket(s) {skipped} skipped (see skipped_buckets)", err=True)
        raise typer.Exit(ExitCode.CAPTURE_INCOMPLETE)


PROGRESS_LINES_AFTER_S = 10.0
"""Off a terminal, a run that has lasted this long prints one progress line per bucket step."""
PHASE_WORDS = {"sampling": "reading the trace and sampling batches per bucket", "setup": "building the proxy model",
               "capture": "capture", "verify": "verify"}


class CaptureProgress:
    """What `cpbcg capture` shows while it runs (stderr, rank 0 only): on a terminal a rich bar
    of the bucket steps (capture, then verification, per bucket) naming the phase and bucket in
    progress; elsewhere (CI logs), once the run has lasted `PROGRESS_LINES_AFTER_S`, one line per
    finished bucket step."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.total = 0
        self.done = 0
        self.began = time.perf_counter()
        self.phase_began = self.began
        self._stack = ExitStack()
        self._bar: Callable[..., object] | None = None

    def __enter__(self) -> "CaptureProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, buckets: int) -> None:
        self.total = 2 * buckets
        self._bar = self._stack.enter_context(progress_bar("capture", total=self.total, enabled=self.enabled))

    def phase(self, phase: str, bucket: int) -> None:
        self.phase_began = time.perf_counter()
        words = PHASE_WORDS.get(phase, phase) + (f" bucket {bucket:,}" if bucket else "")
        if self._bar is not None:
            self._bar(0, description=words)

    def step(self, phase: str, bucket: int) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar(1)
        now = time.perf_counter()
        if self.enabled and not sys.stderr.isatty() and now - self.began >= PROGRESS_LINES_AFTER_S:
            stderr_console().print(f"cpbcg: capture: {phase} bucket {bucket:,} done in {now - self.phase_began:.1f} s "
                                   f"({self.done}/{self.total} steps, {now - self.began:.0f} s so far)", highlight=False)


def wall_line(wall: dict) -> str:
    """One line: where a capture run's wall time went (the manifest's `wall_s`)."""
    parts = [f"setup {wall['setup_s']:.1f} s", f"trace sampling {wall['sampling_s']:.1f} s",
             f"capture {wall['capture_s']:.1f} s (warm-ups {wall['warmup_s']:.1f} s)",
             f"verification {wall['verify_s']:.1f} s ({wall['layouts']:,} layouts replayed; timed forwards {wall['timing_s']:.1f} s)"]
    other = wall["total_s"] - wall["setup_s"] - wall["sampling_s"] - wall["capture_s"] - wall["verify_s"]
    return f"wall time {wall['total_s']:.1f} s: " + ", ".join(parts) + f", other {max(other, 0.0):.1f} s"


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def bucket_table(doc: dict) -> Table:
    """Per-bucket table of a manifest document (capture order)."""
    from rich import box
    from rich.table import Table

    mode = "DRY RUN (no CUDA)" if doc["dry_run"] else doc["device_name"]
    model = doc["model"]
    title = (f"capture: {model['name']} x{model['num_layers']} layers {model['dtype']}, cp {doc['cp_size']} "
             f"(align {doc['align_size']}), {mode}; times in ms per rank, graph pool MiB (pool+ = growth of the "
             "shared pool, alone = this bucket's graphs alone)")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for name in ("bucket", "C(B)", "capture_s", "verify_s", "pool+", "alone", "replay", "eager", "raw", "checks", "overflow", "max_err", "ok"):
        table.add_column(name, justify="left" if name in ("ok", "overflow") else "right", no_wrap=True)
    for r in doc["buckets"]:
        mib = lambda key: None if r[key] is None else r[key] / 2**20  # noqa: E731
        overflow = {True: "refused", False: "NOT refused", None: "-"}[r["overflow_refused"]]
        wall = r.get("wall_s") or {}
        verify_s = wall.get("verify_s", 0.0) + wall.get("timing_s", 0.0) if wall else None
        table.add_row(str(r["capture_num_tokens"]), str(r["local_rows"]), f"{r['capture_s']:.3f}", _fmt(verify_s, ".3f"),
                      _fmt(mib("graph_bytes"), ".1f"), _fmt(mib("standalone_graph_bytes"), ".1f"),
                      _fmt(r["replay_ms"], ".3f"), _fmt(r["eager_ms"], ".3f"), _fmt(r["raw_replay_ms"], ".3f"), str(r["layouts_checked"]), overflow,
                      f"{r['max_abs_err']:.1e}", "yes" if r["verified"] else "NO")
    return table


def _render(doc: dict) -> None:
    stdout_console().print(bucket_table(doc))
    err = stderr_console()
    if doc["dry_run"]:
        err.print("dry run: no CUDA device, so the pieces ran eagerly on the CPU (no graph memory or timings).")
    tol = doc["tolerance"]
    err.print(f"tolerance ({tol['dtype']}): {tol['rule']}; graph replay must equal eager pieces bit for bit")
    if doc.get("wall_s"):
        err.print(wall_line(doc["wall_s"]), highlight=False)
    for s in doc["skipped_buckets"]:
        err.print(f"skipped bucket {s['capture_num_tokens']} ({s['cause']}): {s['reason']}")
