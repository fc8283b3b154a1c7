"""The one safe way to read a whole input file (configs, bucket files, manifests).

Every reader here refuses hostile input with a one-line `CpbcgError` naming the file and line,
instead of hanging, exhausting memory or raising a Python exception:

* `read_input_bytes` stats the path before opening it and refuses anything that is not a
  regular file (a FIFO would block forever, `/dev/zero` never ends, a directory is no file),
  and any file above `MAX_INPUT_BYTES`.
* `load_yaml` parses with PyYAML's safe loader (no `!!python` tags) and refuses duplicate keys
  (naming both lines), aliases whose expansion exceeds `MAX_YAML_NODES` nodes (the
  "billion laughs" bomb), nesting deeper than `MAX_DEPTH`, and integers longer than
  `MAX_INT_DIGITS` digits.
* `load_json` does the same for JSON (duplicate keys by both lines, depth, long integers,
  NaN/Infinity).
* `check_inputs` checks, before a command starts work, that every input it was given exists
  and is a readable regular file, so an input the command ends up not using is still checked.
* `file_identity` is what makes two names one file (`a.jsonl`, `./sub/../a.jsonl`, its absolute
  path, a hard or symbolic link): the one key every "same file" question is answered by.

Python's `str.isdigit` accepts digits such as '²'; integers here are ASCII `0-9` only.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping, Optional

from cpbcg.errors import ConfigError, CpbcgError, short_repr

from cpbcg.input_limits import MAX_DEPTH, MAX_INPUT_BYTES, MAX_INT_DIGITS, MAX_YAML_NODES

__all__ = [
    "MAX_DEPTH", "MAX_INPUT_BYTES", "MAX_INT_DIGITS", "MAX_YAML_NODES", "check_inputs", "decode_text", "load_json",
    "file_identity", "load_yaml", "path_exists", "read_input_bytes", "regular_file_problem", "short_repr", "yaml_key_lines",
]


def regular_file_problem(path: Path) -> Optional[str]:
    """Why `path` cannot be read as a whole input file, or None if it is a regular file.

    Uses `os.stat` only: a FIFO or device is never opened here.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    except ValueError:  # a NUL character in the name
        return "cannot read: the name holds a NUL character"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a FIFO, socket or device); give a file"
    return None


def file_identity(path: str | os.PathLike[str]) -> object:
    """The identity of the file `path` names, equal for every name of one file: `(st_dev, st_ino)`
    of the file (links followed), else its absolute normalised path (a file that does not exist
    yet, or cannot be stat'ed: its reader reports what is wrong with it). `-` (standard input)
    is itself."""
    if os.fspath(path) == "-":
        return "-"
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return os.path.abspath(os.fspath(path))
    return info.st_dev, info.st_ino


def path_exists(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names anything (False, not an error, for a name too long or with a NUL)."""
    try:
        os.stat(path)
    except (OSError, ValueError):  # missing, name too long, embedded NUL
        return False
    return True


def read_input_bytes(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_INPUT_BYTES, error: type[CpbcgError] = ConfigError, what: str = ""
) -> bytes:
    """The whole content of the regular file `path`, at most `max_bytes` bytes.

    Raises `error` (`FILE: ...`, or `FILE: cannot read WHAT: ...`) for a missing or unreadable
    path, a directory, a FIFO or device (refused before it is opened, so a FIFO never blocks),
    or a larger file.
    """
    path = Path(path)
    prefix = f"{path}: cannot read {what}: " if what else f"{path}: "
    problem = regular_file_problem(path)
    if problem is not None:
        raise error(prefix + problem)
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise error(prefix + f"{exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise error(prefix + f"larger than the {max_bytes >> 20} MiB limit")
    return data


def decode_text(data: bytes, label: str, error: type[CpbcgError] = ConfigError) -> str:
    """`data` as UTF-8 text (a BOM is dropped). Raises `error` naming the line of a bad byte or
    a NUL (UTF-16 text without a byte-order mark is valid UTF-8 with a NUL in every other byte),
    with the encoding the data looks like (`encoding_hint`)."""
    nul = data.find(b"\x00")
    if nul >= 0:  # valid UTF-8, but no text: UTF-16 without a byte-order mark, or binary data
        from cpbcg.planner.traces.text import encoding_hint

        hint = encoding_hint(data)
        line = data[:nul].count(b"\n") + 1
        raise error(f"{label}:{line}: not UTF-8 text: {hint}" if hint else f"{label}:{line}: not text (a NUL byte at byte {nul})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        from cpbcg.planner.traces.text import encoding_hint

        line = data[: exc.start].count(b"\n") + 1
        hint = encoding_hint(data)
        raise error(f"{label}:{line}: not UTF-8 text: {hint}" if hint else f"{label}:{line}: not UTF-8 text (byte {exc.start})") from None


def check_inputs(inputs: Mapping[str, Optional[str | os.PathLike[str]]], error: type[CpbcgError] = ConfigError) -> None:
    """Refuse, before any work, an input path that is missing, a directory or not a regular file.

    Keys name the input for the message (a config key or whatever the caller uses); None values
    (not given) and `-` (standard input) are skipped. Raises `error` (`NAME PATH: ...`).
    """
    for name, path in inputs.items():
        if path is None or str(path) == "-":
            continue
        problem = regular_file_problem(Path(path))
        if problem is not None:
            raise error(f"{name} {path}: {problem}")


# --------------------------------------------------------------------------- YAML


def load_yaml(text: str | bytes, label: str, error: type[CpbcgError] = ConfigError) -> Any:
    """Parse one YAML document safely (see module doc). Raises `error` as `LABEL:LINE: ...`.
    PyYAML is imported here, when a YAML input is read (`cpbcg.yaml_input`), not with this module."""
    from cpbcg.yaml_input import parse_yaml

    if isinstance(text, bytes):
        text = decode_text(text, label, error)
    return parse_yaml(text, label, error)


def yaml_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every mapping key and list item in a YAML document already loaded by
    `load_yaml`, by key path (`("scheduler", "rate")`, `("buckets", "1")`), for messages."""
    from cpbcg.yaml_input import key_lines

    return key_lines(text)


# --------------------------------------------------------------------------- JSON


class _Duplicates(dict):
    """A JSON object that repeated a key (`duplicate`, the first repeated one)."""

    duplicate: str


class _LongInt:
    """An integer literal longer than `MAX_INT_DIGITS` (kept as its digit count)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and not isinstance(out, _Duplicates):
            out = _Duplicates(out)
            out.duplicate = key
        out[key] = value
    return out


def _bounded_int(text: str) -> int | _LongInt:
    digits = len(text.lstrip("-"))
    return _LongInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _first_refused(value: Any) -> tuple[str, Any] | None:
    """`(key path, what)` of the first repeated key (`what`: the `_Duplicates` object) or long
    integer (`what`: the `_LongInt`) in document order, or None. Paths read `prefill.bs`,
    `buckets[3]`; iterative, so safe at any depth."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _LongInt):
            return path, item
        if isinstance(item, _Duplicates):
            return (f"{path}.{item.duplicate}" if path else item.duplicate), item
        if isinstance(item, dict):
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), v) for k, v in item.items()]))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(item)]))
    return None


def load_json(data: str | bytes, label: str, error: type[CpbcgError] = ConfigError, what: str = "") -> Any:
    """Parse JSON strictly (see module doc). Raises `error` as `LABEL:LINE: KEY: ...` (`what`,
    e.g. "manifest", names the document in a syntax error); a duplicate key names both its lines.

    orjson checks the syntax first (fast, with line numbers; it refuses NaN, Infinity and
    numbers that overflow a double); the standard parser then finds duplicate keys and long
    integers (orjson keeps the last duplicate and turns integers above 2**64 into floats).
    """
    import orjson  # noqa: PLC0415

    raw = data.encode() if isinstance(data, str) else data
    noun = f"{what} is " if what else ""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        message = str(exc.msg).split(":")[0]
        raise error(f"{label}:{exc.lineno}: {noun}not valid JSON ({message})") from None
    text = decode_text(raw, label, error)
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_bounded_int)
    except RecursionError:
        raise error(f"{label}: nested more than {MAX_DEPTH} levels deep") from None
    refused = _first_refused(value)
    if refused is not None:
        key, item = refused
        shown = f"{short_repr(key)[1:-1]}: " if key else ""
        if isinstance(item, _Duplicates):
            lines = duplicate_key_lines(text, item.duplicate)
            where = f"{label}:{lines[1]}" if lines else label
            first = f" (first on line {lines[0]})" if lines else ""
            raise error(f"{where}: {shown}duplicate key{first}")
        long_int = re.search(r"[0-9]{%d,}" % (MAX_INT_DIGITS + 1), text)
        line = f":{text.count(chr(10), 0, long_int.start()) + 1}" if long_int else ""
        raise error(f"{label}{line}: {shown}integer of {item.digits} digits; at most {MAX_INT_DIGITS} are accepted")
    if _depth(value) > MAX_DEPTH:
        raise error(f"{label}: nested more than {MAX_DEPTH} levels deep")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of lists and dicts (iterative: safe at any depth)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def duplicate_key_lines(text: str, key: str) -> Optional[tuple[int, int]]:
    """Lines `(first, second)` of the first key `key` repeated within one JSON object of `text`
    (already known to parse), or None. A small scanner: strings, objects and arrays only."""
    stack: list[Optional[dict[str, int]]] = []
    line, i, n = 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == '"':
            end = _string_end(text, i)
            j = end
            while j < n and text[j] in " \t\r\n":
                j += 1
            if stack and stack[-1] is not None and j < n and text[j] == ":" and json.loads(text[i:end]) == key:
                if key in stack[-1]:
                    return stack[-1][key], line
                stack[-1][key] = line
            line += text.count("\n", i, end)
            i = end
            continue
        elif ch in "{[":
            stack.append({} if ch == "{" else None)
        elif ch in "}]" and stack:
            stack.pop()
        i += 1
    return None


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return len(text)

