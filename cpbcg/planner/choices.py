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


class Fold(str, Enum):
    """How identical forwards are merged into one batch-trace line with a `count`."""

    consecutive = "consecutive"
    all = "all"
    none = "none"
