"""The bucket spec at the input edge: files are read here, through `cpbcg.inputs`, and only the
parsed values reach the planner (`cpbcg.planner.model.bucket_spec` reads no files).

`cpbcg.outputs.exports.export_buckets` writes a list the way `--emit` hands it over; the bucket
files it writes (`yaml`, `json`) are the ones `read_bucket_file` reads back.

`resolve_bucket_spec(spec)` is the one place a spec (`--buckets`, a config's `buckets:`) becomes
a bucket list: lists and named generators are the planner's to parse; anything else is a file
(`read_bucket_file`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable


from cpbcg.errors import ConfigError
from cpbcg.inputs import load_json, load_yaml, path_exists, read_input_bytes, yaml_key_lines
from cpbcg.engines.sglang.capture_lists import LISTS
from cpbcg.planner.model.bucket_spec import buckets_of_document, buckets_of_flags, flag_words, parse_bucket_spec

BUCKET_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".txt", ".sh", ".flags")
"""Suffixes that make a spec a file even before it exists (so a missing one says "no such file"):
bucket lists (YAML, JSON) and flags files (`--emit sglang` output, a launch script)."""


def resolve_bucket_spec(spec: str | list[int]) -> list[int]:
    """A bucket spec (see `cpbcg.planner.model.bucket_spec`) as a sorted, de-duplicated list of
    tokens, files included, SGLang 0.5.23's named lists (`capture_lists.LISTS`). Raises `ConfigError` naming the spec or `FILE:LINE`."""
    return parse_bucket_spec(spec, read_file=_read_spec_file, lists=LISTS)


def is_bucket_file(spec: object) -> bool:
    """Whether the spec names a file (a YAML/JSON name, or anything that exists on disk)."""
    return isinstance(spec, str) and (Path(spec).suffix.lower() in BUCKET_FILE_SUFFIXES or path_exists(spec))


def _read_spec_file(text: str) -> list[int]:
    if not is_bucket_file(text):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise ConfigError(f"cannot read {shown!r}: {LISTS.not_a_spec}")
    return read_bucket_file(Path(text))


def read_bucket_file(path: str | Path) -> list[int]:
    """Read a YAML/JSON bucket file (list, cpbcg bucket file, or SGLang cuda-graph-config), or
    the SGLang server flags `plan --emit sglang|sglang-json` wrote (a file starting with `--`).

    Refuses (`ConfigError`, `FILE:LINE: ...`) a FIFO, device or directory before opening it, a
    file above 16 MiB, duplicate keys, alias bombs, deep nesting and non-integer buckets.
    """
    path = Path(path)
    raw = read_input_bytes(path)
    if raw.lstrip().startswith(b"--"):
        return buckets_of_flags(raw.decode("utf-8", "replace"), str(path))
    data = load_json(raw, str(path)) if path.suffix.lower() == ".json" else _plain_list(raw)
    if data is None:
        data = load_yaml(raw, str(path))
    items = _item_lines(raw, data)
    return buckets_of_document(data, str(path), _line_finder(raw) if items is None else lambda key: items(key), lists=LISTS)


def _item_lines(raw: bytes, data: object) -> Callable[[tuple[str, ...]], int] | None:
    """`line_of(key path)` of a top-level list of integers without PyYAML (a second parse of a
    100,000-item list costs it seconds): the line of the i-th integer token, from the block items
    (`- 8`) or the numbers of a flow list; None for any other document."""
    if not (isinstance(data, list) and data and all(type(v) is int for v in data)):
        return None
    text = raw.removeprefix(b"\xef\xbb\xbf")
    tokens = _BLOCK_ITEM if not text.lstrip().startswith(b"[") else _FLOW_NUMBER
    starts = [m.start() for m in tokens.finditer(text)]
    if len(starts) != len(data):
        return None

    def line_of(key: tuple[str, ...]) -> int:
        return text.count(b"\n", 0, starts[int(key[0])]) + 1 if len(key) == 1 and key[0].isdigit() and int(key[0]) < len(starts) else 1

    return line_of


_LINE = rb"(?:- +-?(?:0|[1-9][0-9]{0,17}) *(?: #[^\n]*)?|[ \t]*(?:#[^\n]*)?)"
_BLOCK_LIST = re.compile(rb"(?:%s\r?\n)*%s" % (_LINE, _LINE))
"""A block list of one decimal integer per line at column 0 (`- 8`, `- -16  # note`), blank and
comment lines between: what PyYAML reads as a list of those integers (no octal `010`, no `1_000`,
no indentation: anything else goes to PyYAML)."""
_BLOCK_ITEM = re.compile(rb"^- +(-?[0-9]+)", re.MULTILINE)
_FLOW_NUMBER = re.compile(rb"-?[0-9]+")


def _plain_list(raw: bytes) -> list[int] | None:
    """A YAML bucket file that is a plain list of integers, read at C speed: a flow list that is
    also JSON (`[8, 16]`), or a block list of one integer per line (`- 8`, comments allowed);
    None for anything else (PyYAML reads it: a 100,000-item list costs it seconds). The same
    values PyYAML gives."""
    text = raw.removeprefix(b"\xef\xbb\xbf")
    if text.lstrip().startswith(b"["):
        import orjson

        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        return data if isinstance(data, list) and all(type(v) is int for v in data) else None
    if _BLOCK_LIST.fullmatch(text):
        items = [int(v) for v in _BLOCK_ITEM.findall(text)]
        return items or None
    return None


def _line_finder(raw: bytes) -> Callable[[tuple[str, ...]], int]:
    """`line_of(key path)`: the line of a key or list item of a document already loaded (its
    nearest enclosing key's when it has none; line 1 for the whole document)."""
    lines: dict[tuple[str, ...], int] | None = None

    def line_of(path: tuple[str, ...]) -> int:
        nonlocal lines
        if lines is None:
            try:
                lines = yaml_key_lines(raw.decode("utf-8-sig", "replace"))
            except Exception:  # noqa: BLE001 — a location is a courtesy; the error it decorates is the one to report
                lines = {}
        while path and path not in lines:
            path = path[:-1]
        return lines[path] if path else 1

    return line_of


def flags_file_words(spec: str) -> list[str] | None:
    """The words of an SGLang flags file named by a bucket spec (`plan --emit sglang` output, a
    file starting with `--`), or None when the spec names no such file (or it cannot be split)."""
    path = Path(spec) if spec and "," not in spec else None
    if path is None or not path_exists(path) or not path.is_file():  # path_exists: a name too long is no file, not an error
        return None
    raw = read_input_bytes(path)
    if not raw.lstrip().startswith(b"--"):
        return None
    try:
        return flag_words(raw.decode("utf-8", "replace"))
    except ConfigError:
        return None


