"""What several commands share between parsing and their one library call: the traces as given
(files, directories, globs; none twice), the load model of a trace without timestamps, and the
settings each launch of a server log is compared under. Nothing here words a note or renders."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from cpbcg.engines.sglang.server import resolved_server
from cpbcg.api import load_config_and_deployment
from cpbcg.config import load_config
from cpbcg.errors import TraceError
from cpbcg.bucket_files import is_bucket_file
from cpbcg.inputs import file_identity, path_exists
from cpbcg.settings import setting
from cpbcg.planner.deployment import Deployment
from cpbcg.engines.sglang.observed import LaunchModel, assumed_settings
from cpbcg.engines.sglang.logs.settings import LogSettings

if TYPE_CHECKING:
    from cpbcg.manifest import Manifest


def trace_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Trace files from paths as given: a directory stands for its files (not hidden, sorted by
    name), a glob (`day-*.csv`) that names no file for the files it matches (sorted), `-` for
    standard input. Raises `TraceError` for a directory or glob with no file."""
    out: list[Path] = []
    for given in paths:
        if isinstance(given, str) and not given.strip():  # `Path("")` is `.`: every file of the current directory
            raise TraceError("an empty trace path (an unset shell variable?): give a file, a directory, a glob or - for standard input")
        path = Path(given)
        try:
            is_dir, exists = path.is_dir(), path.exists()
        except OSError:  # e.g. a name too long: the reader reports it
            is_dir, exists = False, True
        if is_dir:
            files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                raise TraceError(f"{given}: a directory without trace files")
            out += files
        elif str(given) != "-" and not exists and any(c in str(given) for c in "*?["):
            files = sorted(Path(p) for p in glob.glob(str(given)) if Path(p).is_file())
            if not files:
                raise TraceError(f"{given}: no file matches this pattern")
            out += files
        else:
            out.append(path)
    return out


FILE_SETTINGS = ("buckets", "server.args", "server.model_config")
"""Config keys whose command-line value may name a file the command reads (a bucket file, the
launch command's `@FILE`, the model's `config.json`)."""


def input_files(config: str | None, overrides: Mapping[str, object], **named: object) -> dict[str, str | Path | None]:
    """The files a command reads, keyed by the option that names them, for `check_outputs`
    (which owns the rule that no output overwrites an input): `--config` and the file-valued
    settings among `overrides` (`FILE_SETTINGS`: `--buckets FILE`, `--server-args @FILE`,
    `--model-config FILE`) where they name an existing file (a preset's name is none), then
    `named` (`trace=`, `manifest=`; a sequence, such as `--fit-trace`'s, gives one entry per
    path; an underscore in a name is shown as `-`)."""
    files: dict[str, str | Path | None] = {}
    if config is not None and path_exists(Path(config)):
        files["--config"] = config
    for key in FILE_SETTINGS:
        value = overrides.get(key)
        if not isinstance(value, str):
            continue
        text = value.strip()
        path = text[1:] if key == "server.args" and text.startswith("@") else text
        if text and path_exists(Path(path)) and (key != "buckets" or is_bucket_file(path)):
            files[setting(key).flag or key] = path
    for name, value in named.items():
        option = "--" + name.replace("_", "-")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        for i, one in enumerate(values):
            if one is not None:
                files[option if i == 0 else f"{option} {one}"] = one  # type: ignore[assignment]
    return files


def refuse_repeated(paths: Sequence[Path]) -> None:
    """`TraceError` when one trace file (or standard input) is given twice, directly or through a
    directory or glob: each trace is one server's traffic, and planning it twice would count its
    forwards twice without a word."""
    seen: dict[object, Path] = {}
    for path in paths:
        key = file_identity(path)
        if key in seen:
            same = "" if str(seen[key]) == str(path) else f" (as {seen[key]} too)"
            raise TraceError(f"{path}: the same trace is given twice{same}; give each trace once")
        seen[key] = path


def load_model_rates(config: str | None, overrides: Mapping[str, object], rates: str | None) -> str | None:
    """`rates` (`auto`: the rate picker's, `traffic.untimed_rates`), or None (the scheduler's one
    `rate`) when the config or `overrides` set `scheduler.rate`: the one load model of `plan`,
    `replay-check` and `batches` for a request trace without timestamps."""
    if rates is None or overrides.get("scheduler.rate") is not None:
        return None
    return None if "rate" in load_config(config, {k: v for k, v in overrides.items() if k == "scheduler.rate"}).scheduler.model_fields_set else rates


def launch_resolver(config: str | None, overrides: Mapping[str, object] | None = None,
                    manifest: Manifest | None = None) -> Callable[[LogSettings], LaunchModel]:
    """LogSettings of one launch -> the `LaunchModel` it is compared under (what `cpbcg.api.plan`
    and `cpbcg.api.check` take as `resolve_launch`): the config, the launch's settings and
    `overrides` layered as for the plan (`load_config_and_deployment`); launches with equal
    settings share one."""
    cache: dict[str, Deployment] = {}
    fixed: tuple[str, ...] = ()
    if manifest is not None:  # the module is loaded with the manifest (`plan` without one never needs it)
        from cpbcg.manifest import MANIFEST_KEYS

        fixed = (*MANIFEST_KEYS, "buckets")

    def resolve(log: LogSettings) -> LaunchModel:
        key = repr([sorted(part.items(), key=lambda kv: kv[0]) for part in (log.overrides(), log.sglang_flags(), log.resolved)])
        if key not in cache:
            cache[key] = load_config_and_deployment(config, overrides, manifest=manifest, log=log)[1]
        dep = cache[key]
        table = manifest.table() if manifest is not None else dep.table()
        return LaunchModel(table, dep.cp, dep.max_padding_factor, assumed_settings(log, dep, overrides, fixed), resolved_server(dep), dep)
    return resolve
