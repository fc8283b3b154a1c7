"""Hand a bucket list over in the engine's own format (`cpbcg plan --emit ...`).

* `sglang`: the server flags (domain §5): `--cuda-graph-bs-prefill B1 B2 ...
  --cuda-graph-max-bs-prefill MAX`, plus `--enable-prefill-cp --attn-cp-size N --cp-strategy S`
  when `cp_size > 1`.
* `sglang-json`: the `--cuda-graph-config` JSON `{"prefill": {"bs": [...], "max_bs": MAX}}`.
* `yaml` / `json`: cpbcg's own bucket file `{capture_num_tokens: [...], ...metadata}`, which
  `--buckets FILE` reads back.
"""

from __future__ import annotations

import shlex
from enum import Enum

import orjson
import yaml

from cpbcg.errors import ConfigError
from cpbcg.planner.layout import CPLayout


class EmitFormat(str, Enum):
    """Export formats of `--emit`."""

    sglang = "sglang"
    sglang_json = "sglang-json"
    yaml = "yaml"
    json = "json"


def export_buckets(buckets: list[int], fmt: EmitFormat | str, cp: CPLayout, metadata: dict | None = None) -> str:
    """The text of `buckets` (ascending tokens) in `fmt`, ending with a newline.

    `metadata` (JSON-ready) goes into the yaml/json bucket file beside `capture_num_tokens`.
    Raises `ConfigError` for an empty list."""
    if not buckets:
        raise ConfigError("nothing to export: the bucket list is empty")
    buckets = sorted(int(b) for b in buckets)
    fmt = EmitFormat(fmt)
    if fmt is EmitFormat.sglang:
        return sglang_flags(buckets, cp) + "\n"
    if fmt is EmitFormat.sglang_json:
        return orjson.dumps({"prefill": {"bs": buckets, "max_bs": buckets[-1]}}).decode() + "\n"
    document = {"capture_num_tokens": buckets, **(metadata or {})}
    if fmt is EmitFormat.json:
        return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n"
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)


def sglang_flags(buckets: list[int], cp: CPLayout) -> str:
    """SGLang server flags capturing exactly `buckets` (domain §5)."""
    parts = ["--cuda-graph-bs-prefill", *map(str, buckets), "--cuda-graph-max-bs-prefill", str(buckets[-1])]
    if cp.cp_size > 1:
        parts += ["--enable-prefill-cp", "--attn-cp-size", str(cp.cp_size), "--cp-strategy", cp.strategy.value]
    return " ".join(parts)


def parse_sglang_flags(text: str) -> list[int]:
    """Buckets of a `--emit sglang` flags line (for round-trip tests and scripts).

    Raises `ConfigError` when `--cuda-graph-bs-prefill` is missing or not followed by integers."""
    words = shlex.split(text)
    for flag in ("--cuda-graph-bs-prefill", "--piecewise-cuda-graph-tokens"):
        if flag in words:
            values = []
            for word in words[words.index(flag) + 1 :]:
                if word.startswith("--"):
                    break
                if not word.isdigit():
                    raise ConfigError(f"{flag}: {word!r} is not a token count")
                values.append(int(word))
            if values:
                return values
    raise ConfigError("no --cuda-graph-bs-prefill list in the flags")
