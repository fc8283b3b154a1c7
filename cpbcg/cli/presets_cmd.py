"""`cpbcg presets`: list the deployment presets shipped with cpbcg.

parse (`PresetsOptions`, declared once in `cpbcg.commands.presets_options`) -> call
(`cpbcg.commands.presets.presets`) -> hand the rows to their output (`cpbcg.outputs.presets.write`).
"""

from __future__ import annotations

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.options import with_options
from cpbcg.commands.presets_options import PresetsOptions


@app.command()
@error_boundary
@with_options(options=PresetsOptions)
def presets(*, options: PresetsOptions) -> None:
    """List the shipped deployment presets (use one with `--config NAME`)."""
    from cpbcg.commands.presets import presets as preset_rows
    from cpbcg.outputs.presets import write

    write(preset_rows(), options.output_format)
