"""`cpbcg capture`: capture and replay breakable CUDA graphs per bucket and prove they fit.

parse (`CaptureOptions`, declared once in `cpbcg.commands.capture_options`, and the deployment
settings) -> call (`cpbcg.commands.capture.run`) -> hand the result to its output
(`cpbcg.outputs.capture.write`). Torch is imported by the capture run only, so `import cpbcg.cli`,
`cpbcg capture --help` and `cpbcg plan` stay torch-free.
"""

from __future__ import annotations

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.options import CaptureDeploymentOptions, with_options
from cpbcg.commands.capture_options import CaptureOptions


@app.command()
@error_boundary
@with_options(options=CaptureOptions, deployment=CaptureDeploymentOptions)
def capture(*, options: CaptureOptions, deployment: CaptureDeploymentOptions) -> None:
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
    from cpbcg.commands.capture import run
    from cpbcg.outputs.capture import CaptureProgress, write

    with CaptureProgress() as progress:
        result = run(options, deployment.config, deployment.overrides(), on_start=progress.start, on_step=progress.step,
                     on_phase=progress.phase)
    code = write(result, options)
    if code:
        raise typer.Exit(code)
