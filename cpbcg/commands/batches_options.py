"""`cpbcg batches`' own options, each declared once on `BatchesOptions` (its `Flag`; the field's
default); the command line is derived from it (`cpbcg.cli.options.with_options`). Light on purpose."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

from cpbcg.atomic import output_path
from cpbcg.settings import CONFIG_FLAG, Flag, Fold

FOLD_HELP = "Merge identical forwards into one line with a count: consecutive runs (keeps the order, streams), all (first-seen order), or none."


@dataclass(frozen=True)
class BatchesOptions:
    """Everything `batches` takes besides the shared trace, scheduler and server groups."""

    output: Annotated[Path, Flag(("--output", "-o"), "Batch trace to write (JSONL, written atomically); - for stdout.", parser=output_path, show_default=False)]
    fold: Annotated[Fold, Flag(("--fold",), FOLD_HELP)] = Fold.consecutive
    config: Annotated[Optional[str], CONFIG_FLAG] = None
