"""`cpbcg capture`'s own options, each declared once on `CaptureOptions` (its `Flag`: flags, help,
bounds; the field's default); the command line is derived from it (`cpbcg.cli.options.with_options`)
and the use case (`cpbcg.commands.capture.run`) reads it. Light on purpose (no torch, no planner):
`cpbcg capture --help` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

from cpbcg.atomic import output_path
from cpbcg.settings import Flag

MAX_LAYERS = 256
"""Most proxy layers `--layers` accepts (real models have at most a few hundred)."""


class Dtype(str, Enum):
    """Dtypes the proxy model runs in (`cpbcg.graph_capture.presets.DTYPES`)."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


@dataclass(frozen=True)
class CaptureOptions:
    """Everything `capture` takes besides the shared deployment settings (`CaptureDeploymentOptions`)."""

    preset: Annotated[str, Flag(("--preset", "-p"), "Model preset (gpt-oss-120b, llama-3.1-70b, qwen3-32b, tiny) or a model YAML file.")] = "tiny"
    layers: Annotated[int, Flag(("--layers",), "Proxy transformer layers (each adds one break).", ge=1, le=MAX_LAYERS)] = 2
    trace: Annotated[Optional[Path], Flag(("--trace", "-t"), "Batch trace (JSONL of extend_seq_lens) or request trace (Mooncake JSONL, Azure CSV, vidur/Sarathi CSV, any CSV/JSONL with --length-field), .gz ok; request traces go through the scheduler simulation (docs/scheduler.md). Omit for the embedded default workload.", show_default=False)] = None
    samples: Annotated[int, Flag(("--samples",), "Trace batches replayed per bucket (with --trace): the heaviest plus random ones.", ge=0, le=1024)] = 2
    output: Annotated[Optional[Path], Flag(("--output", "-o"), "Write the capture manifest (JSON, atomic).", parser=output_path, show_default=False)] = None
    dtype: Annotated[Optional[Dtype], Flag(("--dtype",), "Override the preset dtype.", show_default=False)] = None
    seed: Annotated[int, Flag(("--seed",), "Seed of weights, inputs and trace sampling.", ge=0, le=2**63 - 1)] = 0
    dry_run: Annotated[bool, Flag(("--dry-run",), "Run the pieces eagerly even if CUDA is present (under torchrun: CPU ranks over gloo).")] = False
