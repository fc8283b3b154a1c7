"""`cpbcg presets`: list the deployment presets shipped with cpbcg."""

from __future__ import annotations

from cpbcg.cli.app import app, error_boundary
from cpbcg.cli.common import stdout_console


@app.command()
@error_boundary
def presets() -> None:
    """List the shipped deployment presets (use one with `--config NAME`)."""
    from rich.table import Table

    from cpbcg.commands.presets import preset_table

    table = Table(title="Deployment presets (cpbcg/configs/)", title_justify="left")
    for column in ("name", "cp_size", "strategy", "chunked_prefill_size", "buckets", "gpu", "CP graphs (SGLang 0.5.23)"):
        table.add_column(column)
    for row in preset_table():
        table.add_row(*map(str, row))
    stdout_console().print(table)
