"""`cpbcg layout`'s own options, declared once on `LayoutOptions` (`Argument`, `Flag`); the
command line is derived from it (`cpbcg.cli.options.with_options`). Light: `layout --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import FORMAT_FLAG, Argument


@dataclass(frozen=True)
class LayoutOptions:
    """The batch `layout` explains and how it is shown (besides the shared deployment group)."""

    extend_seq_lens: Annotated[list[int], Argument("Extend lengths of the batch's requests (tokens).", ge=1, le=2**31 - 1)]
    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
