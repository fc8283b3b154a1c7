"""`cpbcg check-server`'s own options, declared once on `CheckServerOptions` (`Flag`); the command
line is derived from it (`cpbcg.cli.options.with_options`). Light: `check-server --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

from cpbcg.outputs.console import OutputFormat
from cpbcg.settings import CONFIG_FLAG, FORMAT_FLAG


@dataclass(frozen=True)
class CheckServerOptions:
    """The config `check-server` starts from and how the verdict is shown (besides the server group)."""

    config: Annotated[Optional[str], CONFIG_FLAG] = None
    output_format: Annotated[OutputFormat, FORMAT_FLAG] = OutputFormat.table
