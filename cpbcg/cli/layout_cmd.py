"""`cpbcg layout`: explain one batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import FormatOpt, OutputFormat
from cpbcg.cli.options import DeploymentOptions, with_options

if TYPE_CHECKING:

    pass


@app.command()
@error_boundary
@with_options(deployment=DeploymentOptions)
def layout(
    extend_seq_lens: Annotated[list[int], typer.Argument(help="Extend lengths of the batch's requests (tokens).", min=1, max=2**31 - 1, show_default=False)],
    output_format: FormatOpt = OutputFormat.table,
    *,
    deployment: DeploymentOptions,
) -> None:
    """Explain one batch: the zigzag blocks each rank holds, logical tokens and physical rows per
    rank, and which captured bucket the runtime would replay it in, and why.

    Example: `cpbcg layout --cp-size 4 1534 161 353` (needs 520 rows; bucket 2048 holds 512).
    """
    from cpbcg.commands import layout as layout_use_case
    from cpbcg.outputs.layout import write

    result = layout_use_case.layout(extend_seq_lens, deployment.config, deployment.overrides())
    write(result.explanation, result.deployment, output_format)




