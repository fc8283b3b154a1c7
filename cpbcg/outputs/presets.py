"""`cpbcg presets` rendered: the presets' table (rich), or their JSON list; every `--format` has
its arm (`assert_never`)."""

from __future__ import annotations

from typing import Protocol, Sequence

from cpbcg.outputs.console import OutputFormat, assert_never, print_json, stdout_console

COLUMNS = ("name", "cp_size", "strategy", "chunked_prefill_size", "buckets", "gpu", "CP graphs (SGLang 0.5.23)")


class PresetView(Protocol):
    """What this output reads of a preset row (`cpbcg.commands.presets.PresetRow`)."""

    @property
    def name(self) -> str: ...
    @property
    def cp_size(self) -> int: ...
    @property
    def cp_strategy(self) -> str: ...
    @property
    def chunked_prefill_size(self) -> int: ...
    @property
    def buckets(self) -> str: ...
    @property
    def gpu(self) -> str: ...
    @property
    def graphs_text(self) -> str: ...
    def to_dict(self) -> dict[str, object]: ...


def write(rows: Sequence[PresetView], output_format: OutputFormat) -> None:
    """The presets on stdout in `output_format`: JSON is a list of one object per preset (its fields)."""
    if output_format is OutputFormat.json:
        from cpbcg.outputs.documents import dumps

        print_json(dumps([row.to_dict() for row in rows]))
    elif output_format is OutputFormat.table:
        from rich.table import Table

        table = Table(title="Deployment presets (cpbcg/configs/)", title_justify="left")
        for column in COLUMNS:
            table.add_column(column)
        for row in rows:
            table.add_row(*map(str, (row.name, row.cp_size, row.cp_strategy, row.chunked_prefill_size, row.buckets, row.gpu, row.graphs_text)))
        stdout_console().print(table)
    else:
        assert_never(output_format)
