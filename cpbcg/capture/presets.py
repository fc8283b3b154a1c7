"""Model presets: the public dimensions of a transformer body, as plain YAML data.

Presets live in `cpbcg/configs/models/NAME.yaml`; `--preset` also takes a path to a YAML file
of the same shape. Only dimensions are stored (no weights): the proxy model draws random weights
from a seed. This module does not import torch, so presets can be listed and validated anywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path

import yaml

from cpbcg.errors import ConfigError

MODELS_PACKAGE = "cpbcg.configs"
MODELS_DIR = "models"
DTYPES = ("float32", "bfloat16", "float16")
OPTIONAL_KEYS = {"num_hidden_layers"}
"""Preset keys that may be left out."""


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
                raise ConfigError(f"model {self.name}: {f.name}: {value!r} is not a string")
            if f.name == "num_hidden_layers" and value is None:
                continue
            if f.name not in ("name", "dtype") and (type(value) is not int or value < 1):
                raise ConfigError(f"model {self.name}: {f.name}: {value!r} is not a positive integer")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"model {self.name}: num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_key_value_heads {self.num_key_value_heads}"
            )
        if self.dtype not in DTYPES:
            raise ConfigError(f"model {self.name}: dtype: {self.dtype!r} is not one of {', '.join(DTYPES)}")

    @property
    def q_width(self) -> int:
        """Query (and attention output) width per token: heads * head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Key (or value) width per token: kv_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    def to_dict(self) -> dict:
        return asdict(self)


def model_preset_names() -> list[str]:
    """Names of the model presets shipped with cpbcg."""
    folder = resources.files(MODELS_PACKAGE) / MODELS_DIR
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_model_preset(source: str) -> ModelDims:
    """Load a model preset by name or from a YAML file path.

    Raises `ConfigError` for an unknown preset, unreadable YAML, unknown or missing keys,
    or bad values (naming the key).
    """
    path = Path(source)
    if path.suffix in (".yaml", ".yml") and path.exists():
        label = str(path)
        try:
            text = path.read_text()
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{label}: not a text (UTF-8) YAML file") from exc
    else:
        preset = resources.files(MODELS_PACKAGE) / MODELS_DIR / f"{source}.yaml"
        if not preset.is_file():
            raise ConfigError(f"{source}: no such model preset (presets: {', '.join(model_preset_names())})")
        label, text = f"model preset {source}", preset.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a mapping of model dimensions")
    data.setdefault("name", path.stem)
    known = {f.name for f in fields(ModelDims)}
    unknown = sorted(str(key) for key in set(data) - known)
    missing = sorted(known - set(data) - OPTIONAL_KEYS)
    if unknown or missing:
        what = f"unknown key(s) {', '.join(unknown)}" if unknown else f"missing key(s) {', '.join(missing)}"
        raise ConfigError(f"{label}: {what}")
    return ModelDims(**data)
