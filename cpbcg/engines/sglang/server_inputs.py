"""The start-up resolution's inputs at the input edge: a launch command (words or a file of
them), a model's Hugging Face `config.json` and a GPU name, read and checked here, handed to
the pure `cpbcg.engines.sglang.startup.resolve_server`. Errors are one line (`ConfigError`, exit 2):
`FILE: KEY: ...`, `--server-args: --page-size: ...`, `--gpu: unknown GPU ...`."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from cpbcg.errors import ConfigError
from cpbcg.inputs import decode_text, load_json, path_exists, read_input_bytes
from cpbcg.planner.hardware import GPU, ModelSpec, gpu_by_name, model_spec_from_config
from cpbcg.engines.sglang.startup import parse_launch_words, server_words
from cpbcg.engines.sglang.server import Given

PRESET_PACKAGE = "cpbcg.configs"


def launch_words(value: str | list[str], origin: str) -> tuple[list[str], str]:
    """The words of a launch command and where they came from: `@FILE` or the path of an
    existing file (read, shell syntax), else the text itself (split as a shell would), or a
    list of words (a config's `server.args: [...]`). `origin` names where the value was given
    (`--server-args`, `cfg.yaml:3: server.args`). Raises `ConfigError`, also for no words (an
    empty value, or a file of blank lines or only comments: no launch command, not the default server)."""
    if isinstance(value, list):
        return [str(w) for w in value], origin
    text = value.strip()
    if not text:
        raise ConfigError(f"{origin}: empty launch command")
    path = Path(text[1:] if text.startswith("@") else text)
    if text.startswith("@") or (not text.startswith("-") and " " not in text and path_exists(path)):
        label = str(path)
        packaged = resources.files(PRESET_PACKAGE) / str(path)
        if not path_exists(path) and not path.is_absolute() and packaged.is_file():
            text, label = packaged.read_text(), f"preset file {path}"
        else:
            text = decode_text(read_input_bytes(path, what="the launch command"), label)
        origin = label
    try:
        words = server_words(text)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    if not words:  # a file of blank lines or only comments is no launch command, as `--server-args ""` is none
        raise ConfigError(f"{origin}: empty launch command (no words: blank, or only comments)")
    return words, origin


def launch_flags(value: str | list[str], origin: str, unrecognized: list[str] | None = None) -> dict[str, Given]:
    """`parse_launch_words` on `launch_words`, errors as `ORIGIN: --flag: ...` (flags 0.5.23 does
    not know go to `unrecognized` when it is given)."""
    words, label = launch_words(value, origin)
    try:
        return parse_launch_words(words, "launch command", unrecognized)
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None


MODEL_PRESET_SUFFIX = ".config.json"
"""A model preset is `cpbcg/configs/models/NAME.config.json` (a public Hugging Face `config.json`)."""


def model_preset_names() -> list[str]:
    """Names of the model presets shipped in `cpbcg/configs/models/` (`llama-3.1-70b`, ...)."""
    folder = resources.files(PRESET_PACKAGE) / "models"
    return sorted(p.name[: -len(MODEL_PRESET_SUFFIX)] for p in folder.iterdir() if p.name.endswith(MODEL_PRESET_SUFFIX))


def model_spec(path_text: str, origin: str) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face `config.json`: a path, a file shipped with the presets
    (`models/NAME.config.json`), or a model preset's name (`llama-3.1-70b`, `model_preset_names`).
    Raises `ConfigError` (`FILE: KEY: ...`; an unknown name lists the presets)."""
    path = Path(path_text)
    packaged = resources.files(PRESET_PACKAGE) / path_text
    named = resources.files(PRESET_PACKAGE) / "models" / f"{path_text}{MODEL_PRESET_SUFFIX}"
    is_name = bool(path_text) and "/" not in path_text and "\\" not in path_text and not path_text.endswith(".json")
    if not path_exists(path) and not path.is_absolute() and packaged.is_file():
        label, raw = f"preset file {path_text}", packaged.read_bytes()
    elif not path_exists(path) and is_name and len(path_text) <= 100 and named.is_file():
        label, raw = f"preset {path_text} (models/{path_text}{MODEL_PRESET_SUFFIX})", named.read_bytes()
    else:
        if not path_exists(path):
            presets = f" (nor a model preset: {', '.join(model_preset_names())})" if is_name else ""
            raise ConfigError(f"{origin}: {path_text[:200]}: no such file{presets}")
        label, raw = str(path), read_input_bytes(path, what="the model config")
    data: Any = load_json(raw, label, what="a Hugging Face config.json")
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a JSON object (a Hugging Face config.json), got {type(data).__name__}")
    try:
        return model_spec_from_config(data, label)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def gpu(name: str, origin: str) -> GPU:
    """The catalogue GPU `name`. Raises `ConfigError` naming the known ones."""
    try:
        return gpu_by_name(name)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
