"""Output files: checked before any work is done, then written atomically.

`check_outputs` refuses, before a command starts its work, an output that is a directory or
is written as one (`newdir/`), lies in a missing or read-only directory, names the same file as an input, or names the same file as
another output. `write_atomic` writes to a temporary file beside the target and renames it over
the target, so readers see the old file or the whole new one, never half of one; an
`OutputGroup` does so for all the outputs of one command together (all or none).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Optional

from cpbcg.errors import ConfigError

STDOUT = "-"
"""An output path meaning standard output."""


class OutputPath(type(Path())):  # type: ignore[misc]
    """A `Path` that keeps the text it was given in `given`: `Path("newdir/")` drops the `/`
    that says the user meant a directory."""

    given: str


def input_path(text: str) -> Path:
    """Typer `parser=` for input file options (`--trace`, `--fit-trace`): the path, refusing an
    empty or blank name (an unset shell variable, `-t "$TRACE"`), which `Path("")` would read as
    `.`, the current directory, and plan every file in it (`ValueError`: the option's usage error)."""
    if not text.strip():
        raise ValueError("an empty path (an unset shell variable?): give a file, a directory, a glob or - for standard input")
    return Path(text)


def output_path(text: str) -> Path:
    """Typer `parser=` for output options: the path, remembering the text as given so that
    `check_outputs` and `write_atomic` can refuse `-o newdir/`. Never raises."""
    path = OutputPath(text)
    path.given = text
    return path


def directory_problem(path: str | os.PathLike[str]) -> Optional[str]:
    """Why `path` names a directory rather than a file (`newdir/`, `.`, an existing directory),
    or None. A plain `pathlib.Path` has lost a trailing `/`: pass the text as given, or an
    `OutputPath` from `output_path`."""
    text = getattr(path, "given", None) or os.fspath(path)
    if text.endswith(("/", os.sep)):
        return "names a directory (ends in '/'); give a file name"
    if Path(text).name in ("", ".", "..") or Path(text).is_dir():
        return "is a directory, not a file"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _cannot_create_in(directory: Path) -> Optional[str]:
    """Why a file cannot be created in `directory`, or None: found by creating (and removing) an
    empty temporary file there, as `OutputGroup.write` will: `os.access` alone passes for root in a
    directory no one can write (`/proc`)."""
    if not os.access(directory, os.W_OK):
        return f"directory {directory} is not writable"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".cpbcg-check.", suffix=".tmp", dir=directory)
    except OSError as exc:
        return f"cannot create a file in {directory} ({exc.strerror or exc})"
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return None


def check_outputs(
    outputs: Mapping[str, Optional[str | os.PathLike[str]]], inputs: Mapping[str, Optional[str | os.PathLike[str]]] = {}
) -> None:
    """Refuse unusable output paths up front. Keys are option names (`--json`), for the message.

    Raises `ConfigError` for: an output that is or names a directory (`newdir/`: pass the text,
    not a `Path`, to keep the `/`), whose directory is missing or where no file can be created, that is the same
    file as an input, or the same path as another output.
    """
    seen: dict[Path, str] = {}
    for option, given in outputs.items():
        if given is None or str(given) == STDOUT:
            continue
        problem = directory_problem(given)
        if problem is not None:
            raise ConfigError(f"{option} {getattr(given, 'given', None) or given}: {problem}")
        path = Path(given)
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise ConfigError(f"{option} {path}: directory {parent} does not exist")
        if not (path.exists() and not path.is_file()):  # a device or pipe is written in place
            problem = _cannot_create_in(parent)
            if problem is not None:
                raise ConfigError(f"{option} {path}: {problem}")
        for in_option, source in inputs.items():
            if source is not None and (_same_file(path, Path(source)) or path.resolve() == Path(source).resolve()):
                raise ConfigError(f"{option} {path}: is the same file as {in_option}; refusing to overwrite an input")
        key = path.resolve()
        if key in seen:
            raise ConfigError(f"{option} {path}: is also the output of {seen[key]}")
        seen[key] = option


def write_atomic(path: str | os.PathLike[str], data: bytes | str | Iterable[bytes]) -> None:
    """Write `data` (bytes, text, or an iterable of byte chunks written as they come, so a
    long output streams in bounded memory) to `path` so that readers see either the old file or
    the whole new one (an `OutputGroup` of one file).

    The new file gets the usual permissions (0666 less the umask). A target that exists and is
    not a regular file (a device or pipe) is written in place. Raises `OSError` naming `path` if
    it cannot be written or names a directory (`IsADirectoryError` for `out/` or a directory); no partial file is ever left behind.
    """
    with OutputGroup() as group:
        group.write(path, data)


class OutputGroup:
    """The output files of one command, committed together or not at all.

    `write` stages each regular file in a temporary file beside its target (written and
    synced); leaving the `with` block commits: devices and pipes (`/dev/null`, `/dev/full`) are
    written first, in place, then every staged file is renamed over its target. An exception
    inside the block, or a failed write, removes every temporary file and renames none, so a
    failed `--emit -o /dev/full` leaves no `--plot` file behind. Raises `OSError` naming the
    path that could not be written (`IsADirectoryError` for `out/`).
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []
        self._in_place: list[tuple[Path, list[bytes]]] = []

    def __enter__(self) -> "OutputGroup":
        return self

    def write(self, path: str | os.PathLike[str], data: bytes | str | Iterable[bytes]) -> None:
        """Stage `data` for `path` (see `write_atomic` for what `data` may be)."""
        problem = directory_problem(path)
        if problem is not None:
            raise IsADirectoryError(21, problem, os.fspath(path))
        target = Path(path)
        chunks = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, (bytes, bytearray)) else data
        if target.exists() and not target.is_file():  # /dev/null, a FIFO, /dev/stdout: never rename over it
            self._in_place.append((target, list(chunks)))
            return
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or ".")
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(target)) from None
        self._staged.append((tmp, target))
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.writelines(chunks)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o666 & ~_umask())
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(target)) from None

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self._commit()
        finally:
            for tmp, _ in self._staged:
                Path(tmp).unlink(missing_ok=True)

    def _commit(self) -> None:
        for target, chunks in self._in_place:
            try:
                with open(target, "wb") as handle:
                    handle.writelines(chunks)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from None
        for tmp, target in self._staged:
            try:
                os.replace(tmp, target)
            except OSError as exc:
                raise OSError(exc.errno, exc.strerror, str(target)) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
