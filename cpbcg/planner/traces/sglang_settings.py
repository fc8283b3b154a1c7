"""What an SGLang server log says about its deployment: settings, the captured list, capture cost.

Read from the start of the log up to its first `Prefill batch` line (start-up output):

* the settings dump, `server_args=ServerArgs(k=v, ...)` (older releases, a Python repr) or
  `server_args={'k': v, ...}` (0.5.23, `ServerArgs.resolved_dict`): parsed with `ast` (values as
  literals, never evaluated; a value that is not a literal, such as an enum repr, is skipped);
* or, without a dump, the launch command line (`python -m sglang.launch_server --attn-cp-size 4 ...`,
  `sglang serve ...`), parsed with `shlex`;
* the captured prefill list: `Capture cuda graph num tokens [...]` (piecewise runner) or
  `Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[...], avail mem=...`
  (0.5.23 `cuda_graph_setup.capture_prefill_graph`);
* per-bucket capture memory from the progress lines, largest bucket first, each printed before
  its bucket is captured: `Capturing num tokens (num_tokens=8192 avail_mem=44.04 GB)` (0.5.23:
  `Capturing prefill shape (...)`): bucket `i` used `avail_mem[i] - avail_mem[i+1]`, the last
  one `avail_mem[last] - avail mem` of the end line;
* the end line: `Capture ... end. Time elapsed: 12.34 s. mem usage=2.50 GB. avail mem=...` or
  `Capture target prefill CUDA graph end. elapsed=12.34 s, mem usage=2.50 GB, avail mem=... GB.`;
* the SGLang version where the log prints it, and the date of the first dated line.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

from cpbcg.planner.traces.sglang_log import DETECT_BYTES, MARK
from cpbcg.planner.traces.text import TracePath, display, is_stdin, iter_blob_chunks

_DATE = re.compile(rb"(\d{4}-\d\d-\d\d)[ T]\d\d:\d\d:\d\d")
_VERSION = re.compile(rb"\bsglang(?:[ _-]?version)?\s*(?:==|[:=]|\s)\s*v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)", re.IGNORECASE)
_ARGS = re.compile(rb"server_args\s*=\s*(ServerArgs\(|\{)")
_LAUNCH = re.compile(rb"(?:sglang\.launch_server|launch_server\.py|\bsglang serve)\b(.*)")
_CAPTURE_LIST = re.compile(rb"Capture (?:cuda graph num tokens|[a-z ]*prefill [A-Za-z ]*graph begin\.[^\n]*?num_tokens=)\s*\[([\d,\s]*)\]")
_CAPTURE_STEP = re.compile(rb"Capturing (?:num tokens|prefill shape) \(num_tokens=(\d+) avail_mem=([\d.]+) GB\)")
_CAPTURE_END = re.compile(rb"Capture ([^\n]*?)end\. (?:Time elapsed: |elapsed=)([\d.]+) ?s[.,] mem usage=([\d.]+) GB[.,] avail mem=([\d.]+) GB")
_CAPTURE_BEGIN_PREFILL = re.compile(rb"Capture [a-z ]*prefill|Capture piecewise|Capture cuda graph num tokens", re.IGNORECASE)

_FLAG_NAMES = {"tp": "tp_size", "dp": "dp_size", "pp": "pp_size", "piecewise_cuda_graph_tokens": "cuda_graph_bs_prefill",
               "piecewise_cuda_graph_max_tokens": "cuda_graph_max_bs_prefill"}
_BOOL_FLAGS = {"enable_mixed_chunk", "enable_prefill_cp", "disable_cuda_graph", "disable_prefill_cuda_graph", "enable_lora",
               "enable_piecewise_cuda_graph", "disable_piecewise_cuda_graph", "enable_request_time_stats_logging", "log_requests"}


@dataclass(frozen=True)
class LogSetting:
    """One deployment setting the log states."""

    key: str
    """cpbcg config key (`cp_size`, `scheduler.chunked_prefill_size`, `buckets`)."""
    value: Any
    """The value, in cpbcg's units (tokens, a bucket list)."""
    origin: str
    """Where it was read: `server_args.attn_cp_size (line 3)`, `capture lines (line 40)`."""


@dataclass(frozen=True)
class CaptureCost:
    """Prefill-graph capture cost measured by the server (its start-up log)."""

    bucket_gb: dict[int, float]
    """GiB of graph memory per bucket (`avail_mem` steps; the last from the end line), as printed."""
    total_gb: float | None
    """`mem usage` of the prefill capture's end line (GiB), or None."""
    capture_s: float | None
    """Time the prefill capture took (s), or None."""
    date: str
    """Date of the log (`YYYY-MM-DD`), '' when no line is dated."""


@dataclass(frozen=True)
class LogSettings:
    """What the start of an SGLang log says about the deployment (module doc)."""

    settings: tuple[LogSetting, ...] = ()
    """cpbcg config values stated by the log, in config-key order."""
    server_args: dict[str, Any] = field(default_factory=dict)
    """Every literal value of the settings dump (or the launch flags, `-` turned to `_`)."""
    args_line: int = 0
    """Line of the dump or flags line (0: none)."""
    captured: tuple[int, ...] = ()
    """The captured prefill bucket list (tokens, ascending), empty when not printed."""
    capture: CaptureCost | None = None
    """Measured capture cost, or None when the log has no capture lines."""
    version: str | None = None
    """SGLang version as printed, or None."""
    date: str = ""
    """Date of the first dated line (`YYYY-MM-DD`)."""
    prefill_graphs: bool | None = None
    """False when prefill graphs were off, True when on, None when the log does not say."""
    lora: bool = False
    """LoRA adapters were enabled (LoRA prefills run eagerly)."""
    notes: tuple[str, ...] = ()
    """What the log says that changes how to read it (CP graphs impossible, page rounding)."""
    path: str = ""
    """The log, as named in messages."""

    def overrides(self) -> dict[str, Any]:
        """Dotted config keys -> values, for `load_config` (a layer under the command line)."""
        return {s.key: s.value for s in self.settings}

    def version_tuple(self) -> tuple[int, ...] | None:
        if self.version is None:
            return None
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])


def read_log_settings(path: TracePath | str) -> LogSettings:
    """Settings of an SGLang log (module doc), reading its start-up output: up to the first
    `Prefill batch` line, at most `DETECT_BYTES`. Standard input is not read (it is read once,
    by the forwards): an empty `LogSettings`. Raises `TraceError` only when the file cannot be read."""
    if is_stdin(path):
        return LogSettings(path=display(path))
    state = _Scan()
    seen = 0
    for first, blob in iter_blob_chunks(path, 4 << 20):
        stop = blob.find(MARK)
        state.scan(first, blob if stop < 0 else blob[:stop])
        seen += len(blob)
        if stop >= 0 or seen >= DETECT_BYTES:
            break
    return replace(state.result(), path=display(path))


class _Scan:
    def __init__(self) -> None:
        self.args: dict[str, Any] = {}
        self.args_line = 0
        self.from_flags = False
        self.captured: list[int] = []
        self.captured_line = 0
        self.steps: dict[int, float] = {}
        self.end: tuple[float, float, float] | None = None
        self.version: str | None = None
        self.date = ""

    def scan(self, first: int, blob: bytes) -> None:
        if not self.date and (m := _DATE.search(blob)):
            self.date = m.group(1).decode()
        if self.version is None and (m := _VERSION.search(blob)):
            self.version = m.group(1).decode()
        line_no = first
        for line in blob.split(b"\n"):
            self._line(line, line_no)
            line_no += 1

    def _line(self, line: bytes, line_no: int) -> None:
        if (m := _ARGS.search(line)) and (not self.args or self.from_flags):
            parsed = parse_args_dump(line[m.start(1):].decode("utf-8", "replace"))
            if parsed:
                self.args, self.args_line, self.from_flags = parsed, line_no, False
        elif not self.args and (m := _LAUNCH.search(line)):
            parsed = parse_launch_flags(m.group(1).decode("utf-8", "replace"))
            if parsed:
                self.args, self.args_line, self.from_flags = parsed, line_no, True
        if (m := _CAPTURE_LIST.search(line)) and not self.captured:
            self.captured = sorted({int(t) for t in re.findall(rb"\d+", m.group(1))})
            self.captured_line = line_no
        for m in _CAPTURE_STEP.finditer(line):  # tqdm redraws: keep the first reading per bucket
            self.steps.setdefault(int(m.group(1)), float(m.group(2)))
        if (m := _CAPTURE_END.search(line)) and self.steps and self.end is None and not _is_decode(m.group(1)):
            self.end = (float(m.group(2)), float(m.group(3)), float(m.group(4)))

    def result(self) -> LogSettings:
        a = self.args
        where = f"{'launch flags' if self.from_flags else 'server_args'}"
        settings: list[LogSetting] = []

        def put(key: str, value: Any, name: str) -> None:
            settings.append(LogSetting(key, value, f"{where}.{name}, line {self.args_line}"))

        cp = _int(a.get("attn_cp_size"))
        if cp is not None and cp >= 1:
            put("cp_size", cp, "attn_cp_size")
        if a.get("cp_strategy") in ("zigzag", "interleave") and (cp or 1) > 1:
            put("cp_strategy", a["cp_strategy"], "cp_strategy")
        (listed, listed_from), (top, top_from) = _prefill_bs(a), _prefill_max_bs(a)
        if self.captured:
            settings.append(LogSetting("buckets", list(self.captured), f"capture lines, line {self.captured_line}"))
        elif listed:
            put("buckets", listed, listed_from)
        elif top is not None:
            put("buckets", f"sglang-default:{top}", top_from)
        for name in ("chunked_prefill_size", "page_size", "max_prefill_tokens", "prefill_max_requests", "max_running_requests"):
            value = _int(a.get(name))
            if value is not None and (value >= 1 or (name == "chunked_prefill_size" and value == -1)):
                put(f"scheduler.{name}", value, name)
        if isinstance(a.get("enable_mixed_chunk"), bool):
            put("scheduler.enable_mixed_chunk", a["enable_mixed_chunk"], "enable_mixed_chunk")
        return LogSettings(
            tuple(settings), dict(a), self.args_line, tuple(self.captured), self._cost(), self.version, self.date,
            _prefill_graphs(a, bool(self.captured or self.steps)), bool(a.get("enable_lora") or a.get("lora_paths")), self._notes(cp),
        )

    def _cost(self) -> CaptureCost | None:
        if not self.steps:
            return None
        order = sorted(self.steps, reverse=True)  # captured largest first
        gb = {}
        for i, b in enumerate(order):
            nxt = self.steps[order[i + 1]] if i + 1 < len(order) else (self.end[2] if self.end else None)
            if nxt is not None:
                gb[b] = round(max(self.steps[b] - nxt, 0.0), 2)
        return CaptureCost(gb, self.end[1] if self.end else None, self.end[0] if self.end else None, self.date)

    def _notes(self, cp: int | None) -> tuple[str, ...]:
        a, notes = self.args, []
        if cp is not None and cp > 1:
            tp, pp = _int(a.get("tp_size")) or 1, _int(a.get("pp_size")) or 1
            if not a.get("enable_prefill_cp", True) or pp != 1 or tp != cp:
                notes.append(f"attn_cp_size {cp} with tp_size {tp}, pp_size {pp}, enable_prefill_cp {a.get('enable_prefill_cp')}: "
                             "SGLang 0.5.23 captures no CP prefill graph here (supports_prefill_cp_bcg)")
        return tuple(notes)


def _is_decode(label: bytes) -> bool:
    low = label.lower()
    return b"decode" in low or b"verify" in low or (b"prefill" not in low and b"piecewise" not in low)


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _prefill_phase(a: dict[str, Any]) -> dict[str, Any]:
    config = a.get("cuda_graph_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    phase = config.get("prefill") if isinstance(config, dict) else None
    return phase if isinstance(phase, dict) else {}


def _prefill_bs(a: dict[str, Any]) -> tuple[list[int], str]:
    """The explicit prefill list and the setting it came from, or `([], '')`."""
    for name, value in (("cuda_graph_config.prefill.bs", _prefill_phase(a).get("bs")), ("cuda_graph_bs_prefill", a.get("cuda_graph_bs_prefill")),
                        ("piecewise_cuda_graph_tokens", a.get("piecewise_cuda_graph_tokens"))):
        if isinstance(value, (list, tuple)) and value and all(type(v) is int and v >= 1 for v in value):
            return sorted(set(value)), name
    return [], ""


def _prefill_max_bs(a: dict[str, Any]) -> tuple[int | None, str]:
    """The prefill list's largest bucket and the setting it came from, or `(None, '')`."""
    for name, value in (("cuda_graph_config.prefill.max_bs", _prefill_phase(a).get("max_bs")),
                        ("cuda_graph_max_bs_prefill", a.get("cuda_graph_max_bs_prefill")),
                        ("piecewise_cuda_graph_max_tokens", a.get("piecewise_cuda_graph_max_tokens"))):
        if type(value) is int and value >= 1:
            return value, name
    return None, ""


def _prefill_graphs(a: dict[str, Any], captured: bool) -> bool | None:
    backend = _prefill_phase(a).get("backend") or a.get("cuda_graph_backend_prefill")
    if a.get("disable_cuda_graph") is True or a.get("disable_prefill_cuda_graph") is True or backend == "disabled":
        return False
    if a.get("disable_piecewise_cuda_graph") is True:
        return False
    if captured or backend in ("breakable", "full") or a.get("enable_piecewise_cuda_graph") is True:
        return True
    if a.get("enable_piecewise_cuda_graph") is False and backend is None:
        return False
    return None


def parse_args_dump(text: str) -> dict[str, Any]:
    """The literal values of a `ServerArgs(k=v, ...)` repr or a `{'k': v, ...}` dict (the text
    may run on after the closing bracket). `ast` reads the literals (never `eval`); a value that
    is not a literal is skipped. Returns {} when nothing could be read."""
    body = _balanced(text)
    if body is None:
        return {}
    try:
        node = ast.parse(body, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return _pairs(body)
    out: dict[str, Any] = {}
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg is not None:
                _literal(out, kw.arg, kw.value)
    elif isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                _literal(out, k.value, v)
    return out


def _literal(out: dict[str, Any], key: str, node: ast.AST) -> None:
    try:
        out[key] = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass


def _structure(text: str, opening: str = "([{", closing: str = ")]}") -> Iterator[tuple[int, str, int]]:
    """`(index, character, depth after it)` of every character of `text` outside string quotes
    (backslash escapes respected); `opening` brackets add one to the depth, `closing` take one."""
    depth, quote, escape = 0, "", False
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
            continue
        depth += (ch in opening) - (ch in closing)
        yield i, ch, depth


def _balanced(text: str) -> str | None:
    """`text` up to the bracket closing its first `(` or `{`, quotes respected; None if unclosed."""
    for i, ch, depth in _structure(text):
        if ch in ")]}" and depth == 0:
            return text[:i + 1]
    return None


def _pairs(body: str) -> dict[str, Any]:
    """Fallback for a dump `ast` cannot parse as a whole (enum reprs such as `<X.Y: 'y'>`):
    split at top-level commas, read each `k=v` / `'k': v` value that is a literal."""
    inner = body[body.find("(") + 1 if body.startswith("ServerArgs") else 1:-1]
    cuts = [i for i, ch, depth in _structure(inner, "([{<", ")]}>") if ch == "," and depth == 0]
    parts = [inner[a + 1:b] for a, b in zip([-1, *cuts], [*cuts, len(inner)])]
    out: dict[str, Any] = {}
    for part in parts:
        m = re.match(r"\s*(?:'([A-Za-z_]\w*)'\s*:|([A-Za-z_]\w*)\s*=)\s*(.*)$", part, re.S)
        if m is None:
            continue
        try:
            out[m.group(1) or m.group(2)] = ast.literal_eval(m.group(3).strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    return out


def parse_launch_flags(text: str) -> dict[str, Any]:
    """Server settings from a launch command line's flags (`--attn-cp-size 4 --enable-mixed-chunk
    --cuda-graph-bs-prefill 512 1024`): names with `-` turned to `_` (`--tp` is `tp_size`), integers
    and lists of integers read as such, `--cuda-graph-config` as JSON. {} when it has no flags."""
    try:
        words = shlex.split(text, comments=False)
    except ValueError:
        words = text.split()
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--"):
            continue
        name, eq, value = word[2:].partition("=")
        name = name.replace("-", "_")
        name = _FLAG_NAMES.get(name, name)
        values = [value] if eq else []
        while not eq and i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        if not values:
            out[name] = True if name in _BOOL_FLAGS or name.startswith(("enable_", "disable_")) else None
            continue
        if name == "cuda_graph_config":
            try:
                out[name] = json.loads(" ".join(values))
            except ValueError:
                pass
            continue
        ints = [int(v) for v in values if re.fullmatch(r"\d+", v)]
        if len(ints) == len(values):
            out[name] = ints if name == "cuda_graph_bs_prefill" or len(ints) > 1 else ints[0]
        elif len(values) == 1:
            out[name] = {"true": True, "false": False}.get(values[0].lower(), values[0])
    return out
