"""Bucket lists: SGLang's default prefill list, named generators, explicit lists and files.

A bucket spec (what `--buckets` and the config's `buckets:` take) is one of:

* `sglang-default:MAX_BS` — SGLang's default prefill list, newer releases (an off-grid
  `MAX_BS` is appended). `sglang-default` alone means `MAX_BS = 8192` (H100/H200 default
  `chunked_prefill_size`).
* `sglang-legacy:MAX_BS` — the same grid, older releases (no off-grid `MAX_BS`).
* other named generators registered in `NAMED_LISTS` (e.g. `pow2:8192`).
* `2048,2304,...` — an explicit list.
* a path to a YAML or JSON file: a list of ints, cpbcg's own bucket file
  (`{"capture_num_tokens": [...]}`), or an SGLang `--cuda-graph-config` JSON
  (`{"prefill": {"bs": [...], "max_bs": N}}`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import orjson
import yaml

from cpbcg.errors import ConfigError

MAX_BUCKET_TOKENS = 1 << 22
"""Largest bucket cpbcg accepts (4,194,304 tokens): 32x the largest chunked prefill in use."""
DEFAULT_MAX_BS = 8192
"""SGLang's default `chunked_prefill_size` (hence prefill `max_bs`) on 80-160 GB GPUs."""

_SGLANG_GRID = (  # (start, stop inclusive, step) — domain brief §5
    (4, 32, 4),
    (48, 256, 16),
    (288, 512, 32),
    (576, 1024, 64),
    (1280, 4096, 256),
)


def sglang_default_buckets(max_bs: int = DEFAULT_MAX_BS, append_max_bs: bool = True) -> list[int]:
    """SGLang's default prefill `capture_num_tokens` for `max_bs` (domain §5).

    4..32 step 4, 48..256 step 16, 288..512 step 32, 576..1024 step 64, 1280..4096 step 256,
    4608..max_bs step 512, keeping `<= max_bs`. Newer releases append an off-grid `max_bs`
    (`append_max_bs=True`); older ones do not (3000 → last bucket 2816).
    Counts: 2048 → 42, 4096 → 50, 8192 → 58, 16384 → 74. Raises `ConfigError` if `max_bs < 4`.
    """
    if not 4 <= max_bs <= MAX_BUCKET_TOKENS:
        raise ConfigError(f"max_bs must be between 4 and {MAX_BUCKET_TOKENS}, got {max_bs}")
    grid = [b for start, stop, step in _SGLANG_GRID for b in range(start, stop + 1, step)]
    grid += list(range(4608, max_bs + 1, 512))
    kept = [b for b in grid if b <= max_bs]
    if append_max_bs and kept[-1] != max_bs:
        kept.append(max_bs)
    return kept


def _sglang_legacy(max_bs: int) -> list[int]:
    return sglang_default_buckets(max_bs, append_max_bs=False)


NAMED_LISTS: dict[str, Callable[[int], list[int]]] = {
    "sglang-default": sglang_default_buckets,
    "sglang-legacy": _sglang_legacy,
}
"""Named bucket generators `name:MAX_TOKENS`; other modules register baselines here."""


def parse_bucket_spec(spec: str | list[int], *, base_dir: Path | None = None) -> list[int]:
    """Resolve a bucket spec (see module doc) into a sorted, de-duplicated list of tokens.

    Raises `ConfigError` naming the spec or file for anything unreadable or not a positive int.
    """
    if isinstance(spec, list):
        return _validated(spec, "buckets")
    text = str(spec).strip()
    if not text:
        raise ConfigError("buckets: the bucket spec is empty")
    name, _, arg = text.partition(":")
    if name in NAMED_LISTS:
        return _validated(NAMED_LISTS[name](_int_arg(arg, text)), text)
    path = Path(text) if base_dir is None or Path(text).is_absolute() else base_dir / text
    if path.suffix.lower() in {".yaml", ".yml", ".json"} or path.exists():
        return read_bucket_file(path)
    if all(part.strip().isdigit() for part in text.split(",")):
        return _validated([int(p) for p in text.split(",")], text)
    known = ", ".join(f"{n}:MAX" for n in NAMED_LISTS)
    raise ConfigError(f"buckets: cannot read {text!r}: not a list like 2048,2304, a file, or one of {known}")


def read_bucket_file(path: Path) -> list[int]:
    """Read a YAML/JSON bucket file (list, cpbcg bucket file, or SGLang cuda-graph-config)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read bucket file: {exc.strerror}") from exc
    try:
        data = orjson.loads(raw) if path.suffix.lower() == ".json" else yaml.safe_load(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    if isinstance(data, dict) and "capture_num_tokens" in data:
        data = data["capture_num_tokens"]
    elif isinstance(data, dict) and isinstance(data.get("prefill"), dict):
        prefill = data["prefill"]
        if "bs" in prefill:
            data = prefill["bs"]
        elif "max_bs" in prefill:
            data = sglang_default_buckets(_positive(prefill["max_bs"], f"{path}: prefill.max_bs"))
        else:
            raise ConfigError(f"{path}: prefill needs 'bs' or 'max_bs'")
    if not isinstance(data, list):
        raise ConfigError(
            f"{path}: expected a list of buckets, {{capture_num_tokens: [...]}} or {{prefill: {{bs: [...]}}}}"
        )
    return _validated(data, str(path))


def _int_arg(arg: str, text: str) -> int:
    if not arg and not text.endswith(":"):
        return DEFAULT_MAX_BS
    if not arg.isdigit():
        raise ConfigError(f"buckets: {text!r}: the part after ':' must be a token count")
    return int(arg)


def _positive(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {value!r} is not a positive integer")
    if value > MAX_BUCKET_TOKENS:
        raise ConfigError(f"{where}: {value} is above the largest supported bucket {MAX_BUCKET_TOKENS}")
    return value


def _validated(values: list, where: str) -> list[int]:
    if not values:
        raise ConfigError(f"{where}: the bucket list is empty")
    for i, value in enumerate(values):
        _positive(value, f"{where}: bucket {i}")
    return sorted(set(values))


from cpbcg.planner import baselines as _baselines  # noqa: E402,F401  (registers pow2, vllm, trtllm, uniform)


def parse_positive_list(text: str, key: str) -> list[int]:
    """`"8192,4096"` -> `[4096, 8192]` (sorted, unique). ASCII digits only (`"²"` is no count).
    Raises `ConfigError` naming `key` for anything else."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdigit() and len(p) <= 8 and 0 < int(p) <= MAX_BUCKET_TOKENS for p in parts):
        raise ConfigError(f"{key}: {text[:60]!r} is not a list of token counts between 1 and {MAX_BUCKET_TOKENS}, like 8192,4096")
    return sorted({int(p) for p in parts})
