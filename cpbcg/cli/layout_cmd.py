"""`cpbcg layout`: explain one batch.

parse (`LayoutOptions`, declared once in `cpbcg.commands.layout_options`, and the deployment group)
-> call (`cpbcg.commands.layout.layout`) -> hand the report to its output (`cpbcg.outputs.layout.write`).
"""

from __future__ import annotations

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.options import DeploymentOptions, with_options
from cpbcg.commands.layout_options import LayoutOptions


@app.command()
@error_boundary
@with_options(options=LayoutOptions, deployment=DeploymentOptions)
def layout(*, options: LayoutOptions, deployment: DeploymentOptions) -> None:
    """Explain one batch: the zigzag blocks each rank holds, logical tokens and physical rows per
    rank, and which captured bucket the runtime would replay it in, and why.

    Example: `cpbcg layout --cp-size 4 1534 161 353` (needs 520 rows; bucket 2048 holds 512).
    """
    from cpbcg.commands import layout as layout_use_case
    from cpbcg.outputs.layout import write

    result = layout_use_case.layout(options.extend_seq_lens, deployment.config, deployment.overrides())
    write(result.explanation, result.deployment, options.output_format)
