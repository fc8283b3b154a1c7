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
    """Export formats of `--emit` (`cpbcg.engines.sglang.export`)."""

    sglang = "sglang"
    sglang_json = "sglang-json"
    yaml = "yaml"
    json = "json"

    @property
    def description(self) -> str:
        """What the format writes, for `--emit`'s help (`emit_help`)."""
        return _EMIT_DESCRIPTIONS[self]


_EMIT_DESCRIPTIONS = {EmitFormat.sglang: "server flags with the CP and scheduler flags", EmitFormat.sglang_json: "--cuda-graph-config",
                      EmitFormat.yaml: "bucket file for --buckets", EmitFormat.json: "bucket file for --buckets"}
"""Each `--emit` format's description (a format without one fails at import: `emit_help`)."""


def emit_choices() -> str:
    """Every `--emit` format, as a usage message names them: `sglang|sglang-json|yaml|json`."""
    return "|".join(f.value for f in EmitFormat)


def emit_help() -> str:
    """`--emit`'s list of formats, each with what it writes (neighbours writing the same thing
    joined: `yaml|json (bucket file for --buckets)`), from `EmitFormat` itself."""
    groups: list[tuple[list[str], str]] = []
    for fmt in EmitFormat:
        if groups and groups[-1][1] == fmt.description:
            groups[-1][0].append(fmt.value)
        else:
            groups.append(([fmt.value], fmt.description))
    return ", ".join(f"{'|'.join(names)} ({what})" for names, what in groups)


if set(_EMIT_DESCRIPTIONS) != set(EmitFormat):
    raise ImportError(f"EmitFormat {sorted(set(EmitFormat) - set(_EMIT_DESCRIPTIONS))} without a description in _EMIT_DESCRIPTIONS")


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


TRACE_FORMAT_ALIASES = {"vllm": "vllm-bench"}
"""Other accepted spellings of a trace format name."""


class TraceFormat(str, Enum):
    """What a trace holds (`--trace-format`); `auto` detects it from the first line. The names
    of `cpbcg.assembly.registry.FORMATS` in detection order, kept here so the CLI needs no
    numpy; the registry refuses to load if they differ. Aliases (`TRACE_FORMAT_ALIASES`) are
    accepted: `TraceFormat("vllm") is TraceFormat.vllm_bench`."""

    auto = "auto"
    batches = "batches"
    parquet = "parquet"
    vllm_bench = "vllm-bench"
    jsonl = "jsonl"
    csv = "csv"
    mooncake = "mooncake"
    aibrix = "aibrix"
    sglang_requests = "sglang-requests"
    sglang_log = "sglang-log"
    azure = "azure"
    burstgpt = "burstgpt"
    splitwise = "splitwise"
    vidur = "vidur"

    @classmethod
    def _missing_(cls, value: object) -> "TraceFormat | None":
        alias = TRACE_FORMAT_ALIASES.get(value) if isinstance(value, str) else None
        return None if alias is None else cls(alias)


TRACE_FORMAT_NAMES: tuple[str, ...] = tuple(f.value for f in TraceFormat if f is not TraceFormat.auto)
"""`--trace-format` names of the registered trace formats, in detection order (`TraceFormat`
without `auto`)."""


def trace_format_name(text: str) -> str:
    """The registered name of `--trace-format TEXT`: `auto`, a name of `TRACE_FORMAT_NAMES`, or
    an alias; `ValueError` for anything else (exact spelling: `AUTO` and `''` are refused)."""
    name = TRACE_FORMAT_ALIASES.get(text, text)
    if name != "auto" and name not in TRACE_FORMAT_NAMES:
        raise ValueError(f"{text[:40]!r} is not a trace format; choose one of: auto, {', '.join(TRACE_FORMAT_NAMES)}")
    return name
