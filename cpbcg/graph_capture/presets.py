"""Model presets: the public dimensions of a transformer body, as plain YAML data.

Presets live in `cpbcg/configs/models/NAME.yaml`; `--preset` also takes a path to a YAML file
of the same shape. Only dimensions are stored (no weights): the proxy model draws random weights
from a seed. This module does not import torch, so presets can be listed and validated anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from cpbcg.planner.document import document
from cpbcg.errors import ConfigError, located
from cpbcg.inputs import load_yaml, path_exists, read_input_bytes, yaml_key_lines

MODELS_PACKAGE = "cpbcg.configs"
MODELS_DIR = "models"
DTYPES = ("float32", "bfloat16", "float16")
OPTIONAL_KEYS = {"num_hidden_layers"}
"""Preset keys that may be left out."""


class _DimError(ConfigError):
    """A bad model dimension: `model NAME: KEY: problem`, with the key kept for the file's line."""

    def __init__(self, name: str, key: str, problem: str, keyed: bool = True) -> None:
        super().__init__(f"model {name}: {key}: {problem}" if keyed else f"model {name}: {problem}")
        self.key, self.problem, self.keyed = key, problem, keyed


@dataclass(frozen=True)
class ModelDims:
    """Dimensions of one transformer layer (what the proxy model is built from)."""

    name: str
    """Preset name (e.g. `llama-3.1-70b`)."""
    hidden_size: int
    """Residual stream width (elements per token)."""
    num_attention_heads: int
    """Query heads."""
    num_key_value_heads: int
    """Key/value heads (GQA groups); divides `num_attention_heads`."""
    head_dim: int
    """Elements per head."""
    intermediate_size: int
    """Gated MLP width (elements per token)."""
    dtype: str
    """Parameter and activation dtype: float32, bfloat16 or float16."""
    num_hidden_layers: int | None = None
    """Layers of the real model (scales the proxy's timings in the cost model); None = unknown."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "dtype") and not isinstance(value, str):
                raise _DimError(self.name, f.name, f"{value!r} is not a string")
            if f.name == "num_hidden_layers" and value is None:
                continue
            if f.name not in ("name", "dtype") and (type(value) is not int or value < 1):
                raise _DimError(self.name, f.name, f"{value!r} is not a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise _DimError(self.name, "num_attention_heads", f"num_attention_heads {self.num_attention_heads} is not a "
                            f"multiple of num_key_value_heads {self.num_key_value_heads}", keyed=False)
        if self.dtype not in DTYPES:
            raise _DimError(self.name, "dtype", f"{self.dtype!r} is not one of {', '.join(DTYPES)}")

    @property
    def q_width(self) -> int:
        """Query (and attention output) width per token: heads * head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (or value) width per token: kv_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    def to_dict(self) -> dict:
        return document(self)


def model_preset_names() -> list[str]:
    """Names of the model presets shipped with cpbcg."""
    folder = resources.files(MODELS_PACKAGE) / MODELS_DIR
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_model_preset(source: str) -> ModelDims:
    """Load a model preset by name or from a YAML file path, through `cpbcg.inputs` (the one safe
    input path: a FIFO or device is refused before it is opened, a duplicate key names both lines).

    Raises `ConfigError` (`FILE:LINE: KEY: ...`) for an unknown preset, unreadable YAML, unknown
    or missing keys, or bad values.
    """
    path = Path(source)
    if path.suffix in (".yaml", ".yml") and path_exists(path):
        label = str(path)
        try:
            text = read_input_bytes(path).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{label}: not a text (UTF-8) YAML file") from exc
        data = load_yaml(text, label)
    else:
        preset = resources.files(MODELS_PACKAGE) / MODELS_DIR / f"{source}.yaml"
        if not _is_preset_name(source) or not preset.is_file():
            raise ConfigError(f"{source}: no such model preset (presets: {', '.join(model_preset_names())})")
        label, text = f"model preset {source}", preset.read_text()
        data = load_yaml(text, label)
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a mapping of model dimensions")
    lines = yaml_key_lines(text)
    known = {f.name for f in fields(ModelDims)}
    unknown = sorted(str(key) for key in set(data) - known)
    if unknown:
        raise ConfigError(located(label, lines.get((unknown[0],)), f"unknown key(s) {', '.join(unknown)}"))
    missing = sorted(known - set(data) - OPTIONAL_KEYS - {"name"})
    if missing:
        raise ConfigError(f"{label}: missing key(s) {', '.join(missing)}")
    data.setdefault("name", path.stem)
    try:
        return ModelDims(**data)
    except _DimError as exc:  # name the line of the bad key
        raise ConfigError(located(label, lines.get((exc.key,)), exc.problem, exc.key if exc.keyed else None)) from None


def _is_preset_name(source: str) -> bool:
    return bool(source) and len(source) <= 100 and "/" not in source and "\\" not in source and "\0" not in source
