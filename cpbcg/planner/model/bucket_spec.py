"""Bucket lists: the engine's named lists (`CaptureLists`), explicit lists and files.

A bucket spec (what `--buckets` and the config's `buckets:` take) is one of (the named lists as
SGLang 0.5.23 gives them, `cpbcg.engines.sglang.capture_lists.LISTS`):

* `sglang-default:MAX_BS` — SGLang's default prefill list as SGLang main's released generator
  builds it (`ServerArgs._generate_piecewise_cuda_graph_tokens`): the grid kept `<= MAX_BS`,
  no off-grid `MAX_BS` appended (3000 → last bucket 2816). `sglang-default` alone means
  `MAX_BS = 8192` (the H100/H200 default `chunked_prefill_size`). `sglang-legacy:MAX_BS` is
  an older name for the same list.
* `sglang-append:MAX_BS` — the same grid with an off-grid `MAX_BS` appended so that the
  largest bucket is the budget (3000 → ..., 2816, 3000), as ladders built on SGLang's grid
  outside SGLang's own server arguments do.
* the other generators of `CaptureLists.named` (e.g. `pow2:8192`).
* `2048,2304,...` — an explicit list. A spec made only of digits, commas, signs and spaces is
  always read as a list (never tried as a file name), and only ASCII digits count.
* a path to a YAML or JSON file (a regular file of at most 16 MiB): a list of ints, cpbcg's own
  bucket file (`{"capture_num_tokens": [...]}`), or an SGLang `--cuda-graph-config` JSON
  (`{"prefill": {"bs": [...], "max_bs": N}}`). Files are read at the input edge
  (`cpbcg.bucket_files`); this module parses what was read (`buckets_of_document`) and reads
  no file itself.

Messages start with the spec or file (`2048,x: bucket 1: ...`, `b.yaml: ...`) and never
name a command-line flag; the config loader prefixes the file and key.
"""

from __future__ import annotations

import re
import shlex
from typing import Callable, Sequence

import orjson

from cpbcg.errors import ConfigError, located
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS, CaptureLists

MAX_INT_DIGITS = 20
"""Longest integer text `parse_positive_int` reads (any 64-bit integer fits)."""

_ASCII_INT = re.compile(r"[0-9]+")
_LIST_CHARS = frozenset(", \t+-")
_SHELL_SYNTAX = re.compile(r"['\"\\]|[^\S \t\r\n]")
"""What makes `shlex.split` differ from `str.split`: a quote, an escape, or whitespace a shell
does not split on (`\v`, `\f`, Unicode spaces)."""


def flag_words(text: str) -> list[str]:
    """The words of a flags line as a POSIX shell splits them (`shlex.split`); `ConfigError`
    for text no shell reads (an unbalanced quote, a trailing escape). The one split of every
    reader of a flags file. Text without quotes, escapes or whitespace other than a shell's
    (` \t\r\n`) splits as `str.split` splits it, at C speed (a 100,000-bucket line in ms)."""
    if not _SHELL_SYNTAX.search(text):
        return text.split()
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(f"not a flags line a shell can split: {str(exc).lower()}") from None


def parse_sglang_flags(text: str) -> list[int]:
    """Buckets of a `--emit sglang` or `--emit sglang-json` flags line (round trips, scripts).

    Reads `--cuda-graph-bs-prefill B ...` (or its alias `--piecewise-cuda-graph-tokens`) or
    `--cuda-graph-config JSON`, the JSON shell-quoted (`'{"prefill": {"bs": [...]}}'`, as
    `--emit sglang-json` writes it) or bare (as earlier versions wrote it: split on whitespace). Raises `ConfigError` when neither is there
    or the values are not token counts, or when more than one of them gives the list, or the
    line cannot be split as a shell would."""
    words = flag_words(text)
    given = [w for w in words if w in ("--cuda-graph-config", "--cuda-graph-bs-prefill", "--piecewise-cuda-graph-tokens")]
    if len(given) > 1:
        raise ConfigError(f"the bucket list is given {len(given)} times ({', '.join(given)}): keep one")
    if "--cuda-graph-config" in words[:-1]:
        raw = words[words.index("--cuda-graph-config") + 1]
        bare = text.split()
        if raw.startswith("{") and '"' not in raw and "--cuda-graph-config" in bare[:-1]:  # shlex took the bare JSON's quotes
            raw = bare[bare.index("--cuda-graph-config") + 1]
        try:
            values = orjson.loads(raw)["prefill"]["bs"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"--cuda-graph-config: not a prefill bucket config: {raw[:60]!r}") from exc
        if isinstance(values, list) and values and all(type(v) is int and v > 0 for v in values):
            return sorted(values)
        raise ConfigError("--cuda-graph-config: prefill.bs must be a list of positive token counts")
    for flag in ("--cuda-graph-bs-prefill", "--piecewise-cuda-graph-tokens"):
        if flag in words:
            values = []
            for word in words[words.index(flag) + 1 :]:
                if word.startswith("--"):
                    break
                if not (word.isascii() and word.isdigit()):
                    raise ConfigError(f"{flag}: {word[:20]!r} is not a token count")
                values.append(int(word))
            if values:
                return values
    raise ConfigError("no --cuda-graph-bs-prefill list in the flags")


def parse_positive_int(text: str, where: str, *, maximum: int | None = None, allow_zero: bool = False) -> int:
    """The integer written in `text`: ASCII digits `0-9` only (surrounding spaces allowed).

    `str.isdigit` and `int()` accept '²' or Arabic-Indic digits; this does not. Raises
    `ConfigError` (`WHERE: 'TEXT' is not a positive integer`) for anything else, for more than
    `MAX_INT_DIGITS` digits, for 0 unless `allow_zero`, and for a value above `maximum`.
    """
    stripped = str(text).strip()
    kind = "a non-negative" if allow_zero else "a positive"
    if not _ASCII_INT.fullmatch(stripped) or len(stripped) > MAX_INT_DIGITS:
        raise ConfigError(f"{where}: {_show(repr(stripped))} is not {kind} integer")
    value = int(stripped)
    if value == 0 and not allow_zero:
        raise ConfigError(f"{where}: 0 is not {kind} integer")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}: {value} is above the largest accepted value {maximum}")
    return value


def parse_bucket_spec(spec: str | list[int], read_file: Callable[[str], list[int]] | None = None, *, lists: CaptureLists) -> list[int]:
    """Resolve a bucket spec (see module doc) into a sorted list of tokens, duplicates kept (SGLang
    0.5.23 drops them when it prepares the list; `PreparedBuckets.note` says how many).

    The planner reads no files: a spec that is neither a list nor a named generator is handed to
    `read_file(spec)` (`cpbcg.bucket_files.read_bucket_file`, the input edge), and without one
    it is refused. `lists`: the engine's named lists (`cpbcg.engines.sglang.capture_lists.LISTS`).
    Raises `ConfigError` naming the spec or file for anything unreadable or not a
    positive int (at most `MAX_BUCKET_TOKENS`).
    """
    if isinstance(spec, list):
        return _validated(spec, "bucket list")
    text = str(spec).strip()
    if not text:
        raise ConfigError("the bucket spec is empty")
    if all(ch.isdigit() or ch in _LIST_CHARS for ch in text):
        parts = text.split(",")
        if parts[-1].strip() == "" and len(parts) > 1:
            parts = parts[:-1]
        return sorted(_bucket(p, f"{_show(text)}: bucket {i}") for i, p in enumerate(parts))
    name, _, arg = text.partition(":")
    if name in lists.named:
        try:
            generated = lists.named[name](_int_arg(arg, text, lists.default_max_tokens))
        except ConfigError as exc:
            if str(exc).startswith(_show(text)):
                raise
            raise ConfigError(f"{_show(text)}: {exc}") from None
        return _validated(generated, _show(text))
    if read_file is not None:
        return read_file(text)
    raise ConfigError(f"cannot read {_show(text)!r}: {lists.not_a_spec}")


def buckets_of_document(data: object, where: str, line_of: Callable[[tuple[str, ...]], int] | None = None, *,
                        lists: CaptureLists) -> list[int]:
    """The buckets of a parsed bucket document (already read at the input edge,
    `cpbcg.bucket_files`): a list of ints, cpbcg's own bucket file (`{"capture_num_tokens": [...]}`),
    or an SGLang `--cuda-graph-config` (`{"prefill": {"bs": [...]}}` or `{"prefill": {"max_bs": N}}`).
    `line_of(key path)` gives the line of a key or list item (`("prefill", "bs", "2")`; default:
    line 1). `lists.default(max_bs)`: the list of a `prefill.max_bs` alone (the engine's default).
    Raises `ConfigError` (`WHERE:LINE: KEY: ...`; line 1 for the document's shape) for anything else or a bucket that is not a positive int."""
    line = line_of or (lambda path: 1)
    prefix: tuple[str, ...] = ()
    if isinstance(data, dict) and "capture_num_tokens" in data:
        data, prefix = data["capture_num_tokens"], ("capture_num_tokens",)
    elif isinstance(data, dict) and isinstance(data.get("prefill"), dict):
        prefill = data["prefill"]
        if "bs" in prefill:
            data, prefix = prefill["bs"], ("prefill", "bs")
        elif "max_bs" in prefill:
            at = located(where, line(("prefill", "max_bs")), "", "prefill.max_bs").removesuffix(": ")
            data = lists.default(_positive(prefill["max_bs"], lambda: at))
        else:
            raise ConfigError(located(where, line(("prefill",)), "needs 'bs' (a bucket list) or 'max_bs'", "prefill"))
    if not isinstance(data, list):
        got = f"a mapping with keys {', '.join(map(str, data))}" if isinstance(data, dict) and data else type(data).__name__
        got = "an empty document" if data is None else got
        hint = (" (this is a deployment config: pass it with --config)"
                if isinstance(data, dict) and any(k in data for k in _CONFIG_KEYS) else "")
        raise ConfigError(located(where, line(prefix), f"expected a list of buckets, {{capture_num_tokens: [...]}} or "
                                  f"{{prefill: {{bs: [...]}}}}, got {_show(got, 60)}{hint}", ".".join(prefix) or None))
    return _validated(data, where, lambda i: line((*prefix, str(i))) if line_of else None, prefix_key=".".join(prefix))


_CONFIG_KEYS = ("cp_size", "cp_strategy", "scheduler", "cost", "gates", "max_padding_factor", "buckets", "capture_layout")
"""Keys of a deployment config, to tell a config passed as a bucket file."""


def buckets_of_flags(text: str, where: str) -> list[int]:
    """The prefill buckets of SGLang server flags (`plan --emit sglang|sglang-json` output),
    read at the input edge. Raises `ConfigError` (`WHERE: ...`)."""
    try:
        flags = parse_sglang_flags(text)
    except ConfigError as exc:
        raise ConfigError(located(where, _flag_line(text, str(exc)), str(exc))) from None
    return _validated(flags, located(where, _flag_line(text, "--cuda-graph-bs-prefill"), "").removesuffix(": "))


def _flag_line(text: str, message: str) -> int:
    """The line of the flag a message starts with (`--cuda-graph-bs-prefill: ...`), else line 1
    (a flags file is one shell line; a failed split concerns it as a whole)."""
    flag = re.match(r"--[A-Za-z0-9-]+", message)
    if flag:
        for number, line in enumerate(text.splitlines(), start=1):
            if flag.group() in line:
                return number
    return 1


def _int_arg(arg: str, text: str, default: int) -> int:
    if not arg and not text.endswith(":"):
        return default
    if not _ASCII_INT.fullmatch(arg.strip()) or len(arg.strip()) > MAX_INT_DIGITS:
        raise ConfigError(f"{_show(text)}: the part after ':' must be a token count")
    return int(arg)


def _bucket(text: str, where: str) -> int:
    return parse_positive_int(text, where, maximum=MAX_BUCKET_TOKENS)


def _positive(value: object, where: Callable[[], str]) -> int:
    """`value` as a bucket; `where()` (made only for an error: finding a line may parse the file
    again) locates it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where()}: {_show(value)} is not a positive integer")
    if value > MAX_BUCKET_TOKENS:
        raise ConfigError(f"{where()}: {_show(value)} is above the largest supported bucket {MAX_BUCKET_TOKENS}")
    return value


def _validated(values: Sequence[object], where: str, line_of: Callable[[int], int | None] | None = None, prefix_key: str = "") -> list[int]:
    """`values` checked as buckets; `line_of(i)` the line of item `i` in a file (None: no line)."""
    line = line_of or (lambda i: None)
    if not values:
        raise ConfigError(located(where, line(0) if line_of else None, "the bucket list is empty", prefix_key or None))
    # duplicates kept: SGLang drops them, and the capture note says so (`PreparedBuckets.note`)
    return sorted(_positive(value, lambda: located(where, line(i), "", f"bucket {i}").removesuffix(": ")) for i, value in enumerate(values))


def _show(value: object, limit: int = 40) -> str:
    """A value for a message, cut to `limit` characters (a 4,000-character spec stays readable)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."




def parse_positive_list(text: str, key: str) -> list[int]:
    """`"8192,4096"` -> `[4096, 8192]` (sorted; one trailing comma allowed, as in a bucket
    list). ASCII digits only (`"²"` is no count). Raises `ConfigError` naming `key` for anything
    else, an empty item (`8192,,4096`) or a count given twice (as `--time-scale` does)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 1 and not parts[-1]:
        parts = parts[:-1]
    if not parts or not all(p.isascii() and p.isdigit() and len(p) <= 8 and 0 < int(p) <= MAX_BUCKET_TOKENS for p in parts):
        raise ConfigError(f"{key}: {text[:60]!r} is not a list of token counts between 1 and {MAX_BUCKET_TOKENS}, like 8192,4096")
    values = [int(p) for p in parts]
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise ConfigError(f"{key}: {twice} is given twice")
    return sorted(values)
