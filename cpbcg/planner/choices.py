"""The planner's enumerated settings, in a module that imports nothing heavy (the CLI declares
its options from these without loading numpy)."""

from __future__ import annotations

from enum import Enum


class CPStrategy(str, Enum):
    """How a prefill batch is split across CP ranks (SGLang `--cp-strategy`)."""

    zigzag = "zigzag"
    interleave = "interleave"


class CaptureLayout(str, Enum):
    """Shape of the dummy batch a bucket is captured from."""

    single_request = "single_request"
    context_bounded = "context_bounded"


class EmitFormat(str, Enum):
    """Export formats of `--emit` (`cpbcg.planner.export`)."""

    sglang = "sglang"
    sglang_json = "sglang-json"
    yaml = "yaml"
    json = "json"


class Objective(str, Enum):
    """What the optimiser minimises: `coverage` (most forwards in graphs, then least modelled
    time) or `time` (least modelled time alone)."""

    coverage = "coverage"
    time = "time"


class Fold(str, Enum):
    """How identical forwards are merged into one batch-trace line with a `count`."""

    consecutive = "consecutive"
    all = "all"
    none = "none"
