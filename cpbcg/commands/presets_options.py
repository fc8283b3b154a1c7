"""`cpbcg presets`' own options, declared once on `PresetsOptions` (`Flag`); the command line is
derived from it (`cpbcg.cli.options.with_options`). Light: `presets --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import FORMAT_FLAG


@dataclass(frozen=True)
class PresetsOptions:
    """How `presets` shows the list."""

    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
