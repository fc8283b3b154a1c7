"""What an SGLang server log says about its deployment, launch by launch: settings, the values
the server resolved, the captured list, capture cost.

A log is a sequence of launches (restarts, notebooks that start several servers): a new launch
begins at a settings dump or a launch command line once the current launch already has one (or
has run forwards). Each launch's lines are read into its own `LogSettings`:

* the settings dump, `server_args=ServerArgs(k=v, ...)` (older releases, a Python repr) or
  `server_args={'k': v, ...}` (0.5.23, `ServerArgs.resolved_dict`): parsed with `ast` (values as
  literals, never evaluated; a value that is not a literal, such as an enum repr, is skipped);
* the launch command line (`python -m sglang.launch_server --attn-cp-size 4 ...`, `sglang serve
  ...`), parsed with `shlex` (`launch_flags`; the settings when the launch has no dump);
* the values the scheduler resolved, `max_total_num_tokens=..., chunked_prefill_size=...,
  max_prefill_tokens=..., max_running_requests=..., context_len=...` (`Scheduler.__init__`,
  every release), and start-up overrides (`Automatically turn off --chunked-prefill-size`,
  0.5.23 `arg_groups/model_hook.py`): they win over the dump, which prints what was asked;
* the captured prefill list: `Capture cuda graph num tokens [...]` (piecewise runner) or
  `Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[...], avail mem=...`
  (0.5.23 `cuda_graph_setup.capture_prefill_graph`);
* per-bucket capture memory from the progress lines, largest bucket first, each printed before
  its bucket is captured: `Capturing num tokens (num_tokens=8192 avail_mem=44.04 GB)` (0.5.23:
  `Capturing prefill shape (...)`): bucket `i` used `avail_mem[i] - avail_mem[i+1]`, the last
  one `avail_mem[last] - avail mem` of the end line;
* the end line: `Capture ... end. Time elapsed: 12.34 s. mem usage=2.50 GB. avail mem=...` or
  `Capture target prefill CUDA graph end. elapsed=12.34 s, mem usage=2.50 GB, avail mem=... GB.`;
* the rank prefixes (`[date PP1 ATTN_CP2 TP2]`): 0.5.23's scheduler prints `PPn` only when
  `pp_size > 1` and `ATTN_CPn` only when `attn_cp_size > 1` (`run_scheduler_process`), so the
  layout a prefix shows is read when no setting states it;
* the SGLang version where the log prints it, and the date of the first dated line.

What the log does not state is inferred where the log shows it (each with its evidence): CP from
the prefixes, no CP for a release before attention CP (a dump without `attn_cp_size`, a version
before `CP_FIRST_VERSION` or a date before `CP_FIRST_DATE`). Every setting keeps its line.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Sequence

from cpbcg.engines.sglang.args import SERVER_ARGS
from cpbcg.planner.hardware import gpu_from_device_name
from cpbcg.planner.traces.log_scan import lines_with
from cpbcg.planner.traces.text import TracePath, display, is_stdin, iter_blob_chunks

MARK = b"Prefill batch"
DETECT_BYTES = 256 << 20
"""Format detection and the settings scan look this far (bytes, decompressed) for the first `Prefill batch` line."""
CP_FIRST_VERSION = (0, 5, 9)
"""The first release with attention CP (`attn_cp_size`, `ATTN_CP` rank prefixes; SGLang PR #17213): read
from the released wheels on PyPI, 0.5.8's `server_args.py` has no `attn_cp_size` and 0.5.9's (files dated
2026-02-23) has it."""
CP_FIRST_DATE = "2026-01-16"
"""Logs dated before SGLang PR #17213 (attention CP) was opened ran a release without it."""
BREAKABLE_PREFILL_FIRST_DATE = "2026-05-04"
"""A log dated before this ran a release without breakable prefill CUDA graphs by default (its prefill ran
eagerly, or in torch.compile piecewise graphs that print their own capture lines): the per-phase graph
backends came with SGLang PR #23906 (sgl-project/sglang, "[Refactor] Cuda Graph Runner/Backend Refactor",
opened 2026-04-28, in review on 2026-05-04), and the first release that makes breakable the default is later
still (`BREAKABLE_PREFILL_FIRST_VERSION`); a date cut-off errs towards "graphs on"."""
BREAKABLE_PREFILL_FIRST_VERSION = (0, 5, 15)
"""The first release whose prefill CUDA graphs are breakable by default on CUDA, read from the released wheels
on PyPI: 0.5.11-0.5.13 carry breakable graphs only behind `--enable-breakable-cuda-graph` (default False, prefill
in torch.compile piecewise graphs); 0.5.14 has the per-phase backends with prefill defaulting to
`tc_piecewise` (`cuda_graph_config.py`); 0.5.15 (files dated 2026-07-10) is the first whose
`default_prefill_backend()` returns `breakable` on CUDA."""

TIMESTAMP = rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?"
"""SGLang's log-line timestamp, as its logging prints it (`2026-11-02 10:00:01`; ISO `T` and a
fraction after `.` or `,` taken too), no group; its first 10 bytes are the date. The one spelling of
it: every pattern of the log readers (`sglang_log`, `sglang_requests`) is built on it."""
_DATE = re.compile(TIMESTAMP)
_VERSION = re.compile(rb"\bsglang(?:[ _-]?version)?\s*(?:==|[:=]|\s)\s*v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+)?)", re.IGNORECASE)
_ARGS = re.compile(rb"server_args\s*=\s*(ServerArgs\(|\{)")
_LAUNCH = re.compile(rb"(?:sglang\.launch_server|launch_server\.py|\bsglang serve)\b(.*)")
_CAPTURE_LIST = re.compile(rb"Capture (?:cuda graph num tokens|[a-z ]*prefill [A-Za-z ]*graph begin\.[^\n]*?num_tokens=)\s*\[([\d,\s]*)\]")
_CAPTURE_STEP = re.compile(rb"Capturing (?:num tokens|prefill shape) \(num_tokens=(\d+) avail_mem=([\d.]+) GB\)")
_CAPTURE_END = re.compile(rb"Capture ([^\n]*?)end\. (?:Time elapsed: |elapsed=)([\d.]+) ?s[.,] mem usage=([\d.]+) GB[.,] avail mem=([\d.]+) GB")
_RESOLVED = re.compile(rb"\b(max_total_num_tokens|chunked_prefill_size|max_prefill_tokens|max_running_requests|context_len)=(-?\d{1,12})\b")
_RESOLVED_ANY = re.compile(rb"\b(max_total_num_tokens|chunked_prefill_size|max_prefill_tokens|max_running_requests|context_len)=([^,\s]*)")
_CAPTURE_LIST_ANY = re.compile(rb"Capture (?:cuda graph num tokens|[a-z ]*prefill [A-Za-z ]*graph begin\.[^\n]*?num_tokens=)\s*\[([^\]]*)\]")
_READ_ARGS = ("attn_cp_size", "tp_size", "pp_size", "dp_size", "chunked_prefill_size", "page_size", "max_prefill_tokens",
              "prefill_max_requests", "max_running_requests")
"""Integer dump fields the plan reads: one printed with a value that is no positive integer (None aside; chunk -1 is off) is said."""
MAX_UNREADABLE_SHOWN = 5
"""Unreadable start-up lines named one by one in the note (the rest are counted)."""
_TURN_OFF = re.compile(rb"Automatically turn off --([a-z][a-z-]*)")
_DEVICE_NAME = re.compile(rb"device_name=([A-Za-z][A-Za-z0-9_-]{1,80})")
_GPU_NAMED = re.compile(rb"\b((?:NVIDIA|AMD)[ _][A-Za-z0-9][A-Za-z0-9_ -]{1,60})")
"""A GPU named in a line as the driver names it (`NVIDIA H100 80GB HBM3`, `AMD Instinct MI300X`): read when its words name a
catalogue GPU (`hardware.gpu_from_device_name`), so `NVIDIA driver` or `NVIDIA_VISIBLE_DEVICES` name none."""
_BACKEND_PRINTED = re.compile(rb"\bUse ([a-z][a-z0-9_]{1,30}) (?:backend by default|as (?:the |default )?attention backend|attention backend)\b")
"""The attention backend a server printed it chose (0.5.23 `_attention_backend_default`: `Attention backend not specified.
Use fa3 backend by default.`; the model overrides: `Use trtllm_mla as attention backend on sm100 for ...`, `Use dsa
attention backend for DeepSeek with DSA.`)."""
_AVAIL_MEM = re.compile(rb"\bavail mem=(\d{1,4}(?:\.\d+)?) ?GB(?:[.,] mem usage=(\d{1,4}(?:\.\d+)?) ?GB)?")
"""SGLang's free-memory readings (`Load weight begin. avail mem=78.50 GB`; `Load weight end. ..., avail mem=60.00 GB,
mem usage=15.00 GB`): GiB (`get_available_gpu_memory` divides by 1 << 30). Only the weight-loading lines are read: the
later ones (memory pool, capture) come after the KV pool took most of the memory."""
"""The GPU as torch names it, in the MoE kernel-config lines (`fused_moe_triton_config.py`: `Config file not found at
.../E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json`)."""
_MODEL_CLASS = re.compile(rb"Load weight end\.[^\n]*?\btype=([A-Za-z_][A-Za-z0-9_]{0,80})\b")
"""0.5.23 `model_runner.py`: `Load weight end. elapsed=..., type=LlamaForCausalLM, avail mem=...`: the model class loaded."""
_STARTUP = re.compile(rb"Load weight (?:begin|end)|Capture (?:cuda graph|[a-z ]*prefill [A-Za-z ]*graph) (?:num tokens|begin)")
"""Lines a server prints only while it starts (loading weights, capturing graphs): after a launch's forwards they are
held until a settings dump (a restart: they begin it) or a forward (they were the running server's) follows."""
_PP_GRAPHS_OFF = b"Disabling breakable prefill CUDA graph by default for pipeline"
_RANK_PREFIX = re.compile(rb"\[" + TIMESTAMP + rb"((?: [A-Z][A-Z_]*\d+)+)\s*\]")
RANK_TAG = re.compile(rb"([A-Z][A-Z_]*?)(\d+)(?=\s|$)")
"""One rank tag of a log line's prefix (`TP0`, `DP1`, `PP0`): its name and number; the one reading of
rank tags, for the settings scan and the forward reader (`sglang_log`)."""
_ANY_PREFIX = re.compile(rb"\[" + TIMESTAMP + rb"((?: [A-Z][A-Z_]*\d+)*)\s*\]")
_SCHEDULER_LINE = re.compile(rb"\[" + TIMESTAMP + rb"\]\s*(?:Load weight|Capture|max_total_num_tokens=)")
"""A scheduler's start-up line under a dated prefix without rank tags (`tp_size` 1, no CP, no PP in 0.5.23)."""
INTERESTING = re.compile(
    rb"Prefill batch|server_args\s*=|launch_server|sglang serve|max_total_num_tokens=|Automatically turn off|Captur|Load weight|Disabling breakable|"
    rb"device_name=| backend by default|attention backend|NVIDIA[ _]|AMD[ _]Instinct|"
    + _VERSION.pattern.replace(rb"\bsglang", rb"\b(?i:sglang)"))
"""The one line prefilter of the log reader: a line without any of these carries nothing it reads."""
INTERESTING_LITERALS = (b"server_args", b"launch_server", b"max_total_num_tokens=", b"Automatically turn off", b"Captur",
                        b"Load weight", b"Disabling breakable", b"device_name=", b" backend by default", b"attention backend",
                        b"NVIDIA ", b"NVIDIA_", b"AMD Instinct", b"AMD_Instinct")
INTERESTING_FOLDED = (b"sglang",)
"""Literals one of which every match of `INTERESTING` but `Prefill batch` holds: `INTERESTING_LITERALS`
as written, `INTERESTING_FOLDED` in any letter case (`sglang serve` and the version): where
`settings_lines` looks (`log_scan.lines_with`)."""

_FLAG_NAMES = {"tp": "tp_size", "dp": "dp_size", "pp": "pp_size", "piecewise_cuda_graph_tokens": "cuda_graph_bs_prefill",
               "piecewise_cuda_graph_max_tokens": "cuda_graph_max_bs_prefill"}
_BOOL_FLAGS = {"enable_mixed_chunk", "enable_prefill_cp", "disable_cuda_graph", "disable_prefill_cuda_graph", "enable_lora",
               "enable_piecewise_cuda_graph", "disable_piecewise_cuda_graph", "enable_request_time_stats_logging", "log_requests"}
_SCHEDULER_ARGS = tuple(arg for arg in SERVER_ARGS if arg.key.startswith("scheduler.") and arg.written)
"""The scheduler's server arguments the deploy flags write, which a log's settings are read back by
(`cpbcg.settings` declares them: `sglang_field`, `deployed`)."""
_SCHEDULER_KEYS = tuple(sorted((arg.field for arg in _SCHEDULER_ARGS if not arg.switch),
                               key=lambda name: name not in ("chunked_prefill_size", "page_size")))
"""Those with a value, the chunk and the page size first (the settings a plan reads first), then in declaration order."""
_SCHEDULER_SWITCHES = tuple(arg.field for arg in _SCHEDULER_ARGS if arg.switch)
"""Those that are on or off (`enable_mixed_chunk`)."""
_KEY_OF = {arg.field: arg.key for arg in _SCHEDULER_ARGS}
"""Their config keys by `ServerArgs` field."""
_RESOLVED_KEYS = ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests")
_PREFILL_GRAPH_KEYS = ("cuda_graph_config", "cuda_graph_backend_prefill", "disable_prefill_cuda_graph", "enable_piecewise_cuda_graph",
                       "disable_piecewise_cuda_graph", "piecewise_cuda_graph_tokens", "piecewise_cuda_graph_max_tokens",
                       "cuda_graph_bs_prefill", "cuda_graph_max_bs_prefill")
"""Dump fields of some prefill-graph setting: a full dump with none of them is from a release without prefill graphs."""


@dataclass(frozen=True)
class LogSetting:
    """One deployment setting the log states (or shows)."""

    key: str
    """cpbcg config key (`cp_size`, `scheduler.chunked_prefill_size`, `buckets`)."""
    value: Any
    """The value, in cpbcg's units (tokens, a bucket list)."""
    origin: str
    """Where it was read: `server_args.attn_cp_size, line 3`, `capture lines, line 40`."""
    line: int = 0
    """Line of the log it was read from (0: none, e.g. a setting inferred from the version)."""
    inferred: bool = False
    """Shown by the log (rank prefixes, the release) rather than stated by a setting."""


@dataclass(frozen=True)
class CaptureCost:
    """Prefill-graph capture cost measured by the server (its start-up log, one launch)."""

    bucket_gb: dict[int, float]
    """GiB of graph memory per bucket (`avail_mem` steps; the last from the end line), as printed."""
    total_gb: float | None
    """`mem usage` of the prefill capture's end line (GiB), or None."""
    capture_s: float | None
    """Time the prefill capture took (s), or None."""
    date: str
    """Date of the log (`YYYY-MM-DD`), '' when no line is dated."""
    total_line: int = 0
    """Line of the end line (`mem usage`, the capture time), 0 without one."""
    backend: str = ""
    """The graph backend the capture lines name: `breakable` (`... begin. backend=breakable`), another
    `backend=` value, `piecewise` (the piecewise runner's `Capture cuda graph num tokens`); '' when not printed."""
    list_line: int = 0
    """Line of the capture's list line (0: none)."""


@dataclass(frozen=True)
class LogSettings:
    """What one launch of an SGLang log says about its deployment (module doc)."""

    settings: tuple[LogSetting, ...] = ()
    """cpbcg config values stated or shown by the launch, in config-key order."""
    server_args: dict[str, Any] = field(default_factory=dict)
    """Every literal value of the settings dump (or the launch flags, `-` turned to `_`)."""
    args_line: int = 0
    """Line of the dump or flags line (0: none)."""
    captured: tuple[int, ...] = ()
    """The captured prefill bucket list (tokens, ascending), empty when not printed."""
    capture: CaptureCost | None = None
    """Measured capture cost, or None when the launch has no capture lines."""
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
    launch: int = 1
    """1-based launch of the log these settings belong to."""
    first_line: int = 1
    """First line of the launch."""
    flags: dict[str, tuple[Any, int]] = field(default_factory=dict)
    """The launch command's flags as SGLang names them (`attn_cp_size`) -> (value, line)."""
    resolved: dict[str, tuple[Any, int]] = field(default_factory=dict)
    """Values the server printed it resolved (`max_total_num_tokens`, `chunked_prefill_size`, ...,
    start-up overrides: `chunked_prefill_size` -1) -> (value, line); they win over the dump."""
    ranks: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Rank-prefix tags seen (`PP`, `ATTN_CP`, `CP`, `TP`, `DP`) -> (ranks seen: highest index + 1, first line)."""
    prefill_graphs_origin: str = ""
    """Where `prefill_graphs` was read (`capture lines, line 40`, `server_args.disable_cuda_graph, line 3`)."""
    version_line: int = 0
    """Line that printed the version (0: none)."""
    dump_line: int = 0
    """Line of the settings dump (0: the launch printed none)."""
    capture_line: int = 0
    """Line of the prefill capture line (0: none); with `captured` empty, one that listed no bucket (`num_tokens=[]`)."""
    unreadable: tuple[tuple[int, str], ...] = ()
    """Start-up lines (or values on them) of a shape the launch reads but unusable: (line, what), in
    log order; each is skipped (the setting is taken as not printed) and said (`unreadable_note`)."""
    architecture: tuple[str, int] | None = None
    """The model class the server loaded (`Load weight end. ... type=X`) and its line; None when not printed."""
    device_name: tuple[str, int] | None = None
    """The GPU as torch names it (`NVIDIA_H100_80GB_HBM3`, `_DEVICE_NAME`) and its line; None when not printed."""
    graph_forward: tuple[str, int] | None = None
    """The launch's first `Prefill batch` line whose verdict says the forward ran in a graph (`cuda graph: True`):
    (its label, line); None when none was read. A fact that wins over anything inferred about `prefill_graphs`."""
    memory_seen: tuple[float, int] | None = None
    """The most GPU memory the launch shows (GiB): the largest `avail mem` of a `Load weight begin` line, or of a
    `Load weight end` line with the `mem usage` beside it added, and its line; None when none was printed (an end
    line's free memory alone, the weights' size unsaid, is not read). About the GPU's memory less the CUDA context."""
    attention_backend: tuple[str, int] | None = None
    """The attention backend the server printed it chose (`_BACKEND_PRINTED`) and its line; None when not printed."""

    def overrides(self) -> dict[str, Any]:
        """Dotted config keys -> values, for `load_config` (a layer under the command line)."""
        return {s.key: s.value for s in self.settings}

    def sglang_flags(self) -> dict[str, tuple[Any, int]]:
        """What the launch asked for, as SGLang names its flags (`attn_cp_size`, `cuda_graph_config`)
        -> (value, line): the dump's values where it printed one, the launch command's otherwise.
        The values the server resolved from them are `resolved` (they win where both exist)."""
        out = dict(self.flags)
        if self.dump_line:
            out.update({k: (v, self.dump_line) for k, v in self.server_args.items()})
        return out

    def setting(self, key: str) -> LogSetting | None:
        """The setting of config key `key`, or None when the launch neither states nor shows it."""
        return next((s for s in self.settings if s.key == key), None)

    def resolved_by_server(self) -> tuple[str, ...]:
        """Config keys whose value the settings dump states as None (`page_size=None`): the
        server resolved them at start-up from its other settings (0.5.23 `ServerArgs.__post_init__`),
        so they are neither read from the log nor assumed, but the resolved server's."""
        return tuple(f"scheduler.{name}" for name in ("page_size", "chunked_prefill_size")
                     if name in self.server_args and self.server_args[name] is None)

    def version_tuple(self) -> tuple[int, ...] | None:
        if self.version is None:
            return None
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])

    def prefill_graphs_at(self) -> tuple[str, int | None]:
        """`prefill_graphs_origin` split into what was read and its line (`server_args.disable_cuda_graph`,
        3); the line None when the origin names none."""
        m = re.fullmatch(r"(.*), line (\d+)", self.prefill_graphs_origin)
        return (m.group(1), int(m.group(2))) if m else (self.prefill_graphs_origin, None)

    def pp_size(self) -> int:
        """Pipeline stages: `pp_size` of the dump or flags, else the `PP` prefixes seen (1 without either)."""
        stated = _int(self.server_args.get("pp_size"))
        return stated if stated is not None and stated >= 1 else self.ranks.get("PP", (1, 0))[0]

    def to_dict(self) -> dict[str, object]:
        """A launch's settings for JSON: each with its value, source and line; the values the server
        resolved and the launch flags (each with its line); the version; the prefill-graph state."""
        return {
            "sglang_version": self.version, "version_line": self.version_line or None,
            "settings": [{"key": s.key, "value": s.value, "source": s.origin, "line": s.line or None, "inferred": s.inferred}
                         for s in self.settings],
            "resolved": {k: {"value": v, "line": at} for k, (v, at) in self.resolved.items()},
            "launch_flags": {k: {"value": v, "line": at} for k, (v, at) in self.flags.items()},
            "prefill_graphs": self.prefill_graphs, "prefill_graphs_source": self.prefill_graphs_origin or None,
            "rank_prefixes": {k: {"ranks": n, "line": at} for k, (n, at) in self.ranks.items()},
            "notes": list(self.notes),
            **({"unreadable": [{"line": line, "what": what} for line, what in self.unreadable]} if self.unreadable else {}),
        }


def read_log_settings(path: TracePath | str) -> LogSettings:
    """Settings of the launch that runs a log's first forward (module doc), reading its start-up
    output: up to the first `Prefill batch` line, at most `DETECT_BYTES`. Standard input is read
    from its kept head (`stdin_head`), the same bytes a file's reader sees first. Raises
    `TraceError` only when the file cannot be read."""
    scan = LaunchScan(display(path))
    if is_stdin(path):
        from cpbcg.planner.traces.stdin import stdin_head

        head, complete = stdin_head()
        stop = head.find(MARK)
        scan.feed(1, head[:stop] if stop >= 0 else head if complete else head[:head.rfind(b"\n") + 1])
        _first_forward_prefix(scan, 1, head, stop)
        return scan.launches()[-1]
    seen = 0
    for first, blob in iter_blob_chunks(path, 4 << 20):
        stop = blob.find(MARK)
        scan.feed(first, blob if stop < 0 else blob[:stop])
        _first_forward_prefix(scan, first, blob, stop)
        seen += len(blob)
        if stop >= 0 or seen >= DETECT_BYTES:
            break
    return scan.launches()[-1]


def settings_lines(blob: bytes) -> list[tuple[int, bytes]]:
    """`(offset, line)` of every line of `blob` (whole lines) that `INTERESTING` matches and that
    holds no `Prefill batch` (the lines `LaunchScan.line` reads), in order: the lines holding one
    of `INTERESTING_LITERALS` or `INTERESTING_FOLDED` (`log_scan.lines_with`, so a log's forward
    and decode lines cost no regex), then `INTERESTING` on each."""
    out = []
    for start in lines_with(blob, INTERESTING_LITERALS, INTERESTING_FOLDED):
        end = blob.find(b"\n", start)
        line = blob[start:len(blob) if end < 0 else end]
        if MARK not in line and (m := INTERESTING.search(blob, start, start + len(line) + 256)) is not None and m.start() < start + len(line):
            out.append((start, line))
    return out


VERDICT = re.compile(rb"\b(cuda|npu|cpu|musa|xpu) graph: (True|False)\b")
"""A `Prefill batch` line's verdict: whether its forward ran in a graph (`cuda graph: True`), as the server printed it."""


FOLLOWING_PREFIX_LINES = 4096
"""Lines after a log's first `Prefill batch` whose rank prefixes the settings scan reads (the other
ranks' copies of the first forwards: `ATTN_CP0..N-1` shows the CP size a launch does not state)."""


def _first_forward_prefix(scan: "LaunchScan", first: int, blob: bytes, stop: int) -> None:
    """The rank prefix and verdict of the first `Prefill batch` line (at `stop` in `blob`), as its reader sees them."""
    if stop < 0:
        return
    start, end = blob.rfind(b"\n", 0, stop) + 1, blob.find(b"\n", stop)
    line_no = first + blob.count(b"\n", 0, start)
    _graph_verdict(scan, blob[stop:end if end >= 0 else len(blob)], line_no)
    _forward_size(scan, blob[stop:end if end >= 0 else len(blob)], line_no)
    prefixes = list(_ANY_PREFIX.finditer(blob, start, stop))
    if prefixes:
        scan.prefix(prefixes[-1].group(1), line_no)
    # The other ranks' copies of the first forwards follow: their prefixes show the CP size (ATTN_CP0..N-1),
    # as the whole log's reader sees them. Read on through the Prefill batch lines of this launch in
    # this blob, up to its next settings line (a later launch may differ).
    at = blob.find(b"\n", stop)
    for _ in range(FOLLOWING_PREFIX_LINES):
        if at < 0:
            break
        start, at, line_no = at + 1, blob.find(b"\n", at + 1), line_no + 1
        line = blob[start:at] if at >= 0 else blob[start:]
        if MARK not in line:
            if INTERESTING.search(line):
                break
            continue
        cut = line.find(MARK)
        prefixes = list(_ANY_PREFIX.finditer(line, 0, cut))
        if prefixes:
            scan.prefix(prefixes[-1].group(1), line_no)
        _graph_verdict(scan, line[cut:], line_no)
        _forward_size(scan, line[cut:], line_no)


_NEW_TOKENS = re.compile(rb"#new-token: (\d{1,9})\b")
CHUNK_SHOWN_AT_LEAST = 3
"""A launch that states no chunk shows it when its largest `Prefill batch` (new tokens, a multiple of 1024) recurs
this often among the first forwards: chunked prefill cuts every long request at exactly the chunk."""


def _forward_size(scan: "LaunchScan", body: bytes, line_no: int) -> None:
    """A `Prefill batch` line's new-token count (`body`, the line from `Prefill batch` on), for the chunk it shows."""
    if (m := _NEW_TOKENS.search(body)) is not None:
        scan.forward_size(int(m.group(1)), line_no)


def _graph_verdict(scan: "LaunchScan", body: bytes, line_no: int) -> None:
    """A `Prefill batch` line's verdict (`body`, the line from `Prefill batch` on), read as its reader reads it."""
    if (m := VERDICT.search(body)) is not None and m.group(2) == b"True":
        scan.graph_verdict(line_no, m.group(1).decode() + " graph")


class LaunchScan:
    """The settings side of the log reader: feed it lines (`line`) or blobs (`feed`, prefiltered by
    `INTERESTING`); it splits them into launches (module doc) and keeps each launch's readings.
    `launches()` gives every launch's `LogSettings` so far (at least one)."""

    def __init__(self, path: str = ""):
        self.path = path
        self._scans = [_Scan(1, 1, path)]
        self._pending: list[tuple[bytes, int]] = []
        """Start-up lines (weights, graph capture) read after the current launch's forwards: a restart's when a settings
        dump or launch command follows them (they begin that launch), the current launch's when a forward does."""

    @property
    def current(self) -> int:
        """1-based launch being read."""
        return len(self._scans)

    def feed(self, first: int, blob: bytes) -> None:
        """Every interesting settings line of `blob` (whole lines from line `first`); `Prefill batch`
        lines are the forwards' (`sglang_log`), skipped here."""
        line_no, at = first, 0
        for m in INTERESTING.finditer(blob):
            start = blob.rfind(b"\n", 0, m.start()) + 1
            if start < at:
                continue
            end = blob.find(b"\n", m.start())
            end = len(blob) if end < 0 else end
            line_no += blob.count(b"\n", at, start)
            at = end
            line = blob[start:end]
            if MARK not in line:
                self.line(line, line_no)

    def line(self, line: bytes, line_no: int) -> bool:
        """Read one settings line; True when it began a new launch."""
        scan = self._scans[-1]
        dump = _ARGS.search(line)
        flags = None if dump else _LAUNCH.search(line)
        new = (dump is not None and (scan.dump_line or scan.forwards)) or (flags is not None and (scan.args_line or scan.forwards))
        if not new and dump is None and flags is None and scan.forwards and (self._pending or _STARTUP.search(line)):
            self._pending.append((line, line_no))  # a restart's (with what follows), if its settings follow; else this launch's
            return False
        if new:
            pending, self._pending = self._pending, []
            scan = _Scan(len(self._scans) + 1, pending[0][1] if pending else line_no, self.path)
            self._scans.append(scan)
            for early, at in pending:  # printed before the dump by the restarted server: its own
                scan.line(early, at)
        scan.line(line, line_no, dump, flags)
        return bool(new)

    def prefix(self, tags: bytes, line_no: int) -> None:
        """A rank prefix's tags (`PP1 ATTN_CP2 TP2`) seen on line `line_no` of the current launch."""
        self._scans[-1].prefix(tags, line_no)

    def forward(self, count: int = 1, graph_line: int = 0, graph_label: str = "") -> None:
        """The current launch ran `count` forwards (later dumps begin a new launch); `graph_line`
        (0: none) the first of them whose verdict (`graph_label: True`) says it ran in a graph."""
        pending, self._pending = self._pending, []
        for line, line_no in pending:  # start-up lines a forward follows: no restart, the current launch's
            self._scans[-1].line(line, line_no)
        self._scans[-1].forwards += count
        self.graph_verdict(graph_line, graph_label)

    def forward_size(self, tokens: int, line_no: int) -> None:
        """A `Prefill batch` line of the current launch (line `line_no`) prefilled `tokens` new tokens."""
        scan = self._scans[-1]
        top, count, first = scan.largest_forward
        if tokens > top:
            scan.largest_forward = (tokens, 1, line_no)
        elif tokens == top:
            scan.largest_forward = (top, count + 1, first)

    def graph_verdict(self, line_no: int, label: str) -> None:
        """A `Prefill batch` line of the current launch (line `line_no`, 0: none) says `label: True`."""
        scan = self._scans[-1]
        if line_no and scan.graph_forward is None:
            scan.graph_forward = (label or "cuda graph", line_no)

    def launches(self) -> list[LogSettings]:
        return [replace(s.result(), path=self.path) for s in self._scans]

    def launch(self, index: int) -> LogSettings:
        """`LogSettings` of launch `index` (1-based) as read so far."""
        return replace(self._scans[index - 1].result(), path=self.path)


class _Scan:
    def __init__(self, launch: int, first_line: int, path: str = "") -> None:
        self.launch, self.first_line, self.path = launch, first_line, path
        self.unreadable: list[tuple[int, str]] = []
        self.steps_line = 0
        self.args: dict[str, Any] = {}
        self.args_line = self.dump_line = 0
        self.from_flags = False
        self.flags: dict[str, tuple[Any, int]] = {}
        self.resolved: dict[str, tuple[Any, int]] = {}
        self.ranks: dict[str, tuple[int, int]] = {}
        self.captured: list[int] = []
        self.captured_line = 0
        self.capture_backend = ""
        self.steps: dict[int, float] = {}
        self.end: tuple[float, float, float, int] | None = None
        self.unused_end: str | None = None
        """The first capture end line not taken as the prefill capture cost, and why (said in a note when none was taken)."""
        self.version: str | None = None
        self.version_line = 0
        self.date = ""
        self.forwards = 0
        self.turned_off = False
        self.plain_prefix_line = 0
        self.architecture: tuple[str, int] | None = None
        self.device_name: tuple[str, int] | None = None
        self.graph_forward: tuple[str, int] | None = None
        self.memory_seen: tuple[float, int] | None = None
        self.attention_backend: tuple[str, int] | None = None
        self.largest_forward: tuple[int, int, int] = (0, 0, 0)
        """The largest `Prefill batch` new-token count read, how many lines printed it, the first of them."""

    def prefix(self, tags: bytes, line_no: int) -> None:
        if not tags.strip():
            self.plain_prefix_line = self.plain_prefix_line or line_no
        for m in RANK_TAG.finditer(tags.strip()):
            name, n = m.group(1).decode(), int(m.group(2)) + 1
            seen = self.ranks.get(name)
            if seen is None or n > seen[0]:
                self.ranks[name] = (n, seen[1] if seen else line_no)

    def line(self, line: bytes, line_no: int, dump: re.Match[bytes] | None = None, flags: re.Match[bytes] | None = None) -> None:
        if not self.date and (m := _DATE.search(line)):
            self.date = m.group()[:10].decode()
        if self.version is None and (m := _VERSION.search(line)):
            self.version, self.version_line = m.group(1).decode(), line_no
        if self.architecture is None and (m := _MODEL_CLASS.search(line)):
            self.architecture = (m.group(1).decode(), line_no)
        if self.device_name is None and (m := _DEVICE_NAME.search(line)):
            self.device_name = (m.group(1).decode(), line_no)
        elif self.device_name is None and (m := _GPU_NAMED.search(line)) and gpu_from_device_name(m.group(1).decode()) is not None:
            self.device_name = (m.group(1).decode().strip(), line_no)
        if self.attention_backend is None and (m := _BACKEND_PRINTED.search(line)):
            self.attention_backend = (m.group(1).decode(), line_no)
        for m in _AVAIL_MEM.finditer(line) if b"Load weight" in line else ():  # later readings are after the KV pool took its share
            if b"Load weight begin" not in line and not m.group(2):
                continue  # free memory after the weights, their size unsaid: says nothing of the GPU's size
            gib = float(m.group(1)) + (float(m.group(2)) if m.group(2) else 0.0)
            if self.memory_seen is None or gib > self.memory_seen[0]:
                self.memory_seen = (round(gib, 2), line_no)
        if (m := _RANK_PREFIX.search(line)) is not None:
            self.prefix(m.group(1), line_no)
        elif _SCHEDULER_LINE.search(line):
            self.prefix(b"", line_no)
        if dump is not None and not self.dump_line:
            text = line[dump.start(1):].decode("utf-8", "replace")
            parsed = parse_args_dump(text)
            if parsed:
                self.args, self.args_line, self.dump_line, self.from_flags = parsed, line_no, line_no, False
                self.unreadable += [(line_no, what) for what in unusable_args(text, parsed)]
            else:
                why = "its brackets never close (a cut or wrapped line)" if _balanced(text) is None else "no value in it is a literal"
                self.unreadable.append((line_no, f"a settings dump `server_args={text[:30]}...` that cannot be read: {why}"))
        elif flags is not None and not self.flags:
            parsed = parse_launch_flags(flags.group(1).decode("utf-8", "replace"))
            if parsed:
                self.flags = {k: (v, line_no) for k, v in parsed.items()}
                if not self.args:
                    self.args, self.args_line, self.from_flags = parsed, line_no, True
        if b"max_total_num_tokens=" in line:
            for m in _RESOLVED_ANY.finditer(line):
                if not re.fullmatch(rb"-?\d{1,12}", m.group(2)):
                    self.unreadable.append((line_no, f"the resolved value {m.group(1).decode()}={_shown(m.group(2))} is not an integer"))
            for m in _RESOLVED.finditer(line):
                if not (self.turned_off and m.group(1) == b"chunked_prefill_size"):
                    self.resolved.setdefault(m.group(1).decode(), (int(m.group(2)), line_no))
        if (m := _TURN_OFF.search(line)) and m.group(1) == b"chunked-prefill-size":  # an override wins, whichever line comes first
            self.resolved["chunked_prefill_size"] = (-1, line_no)
            self.turned_off = True
        if _PP_GRAPHS_OFF in line:  # 0.5.23 `_apply_cuda_graph_compatibility`: PP turns breakable prefill graphs off
            self.resolved.setdefault("prefill_graphs", (False, line_no))
        if (m := _CAPTURE_LIST_ANY.search(line)) and not self.captured:
            words = [w.strip() for w in m.group(1).split(b",") if w.strip()]
            if all(re.fullmatch(rb"\d{1,12}", w) and int(w) >= 1 for w in words):
                self.captured = sorted({int(w) for w in words})
                self.captured_line = line_no
                named = re.search(rb"backend=(\w+)", line)
                self.capture_backend = named.group(1).decode() if named else ("piecewise" if b"cuda graph num tokens" in line else "")
            else:  # refused: never the source of the list or of the graph state
                self.unreadable.append((line_no, f"a capture line listing num_tokens=[{_shown(m.group(1))}]: a bucket is a positive token "
                                                 "count, so the list is not read from it"))
        for m in _CAPTURE_STEP.finditer(line):  # tqdm redraws: keep the first reading per bucket
            self.steps.setdefault(int(m.group(1)), float(m.group(2)))
            self.steps_line = self.steps_line or line_no
        if (m := _CAPTURE_END.search(line)) and self.steps and self.end is None and not _is_decode(m.group(1)):
            self.end = (float(m.group(2)), float(m.group(3)), float(m.group(4)), line_no)
        elif m is not None and self.unused_end is None:
            label = m.group(1).decode("utf-8", "replace").strip()
            why = (f"`Capture {label} end` names no prefill or piecewise graph: the decode graphs' capture (the one runner "
                   "older releases have), not the prefill list's" if _is_decode(m.group(1)) else
                   "no per-bucket prefill progress line (`Capturing num tokens (...)`) before it: not attributable to prefill buckets")
            self.unused_end = (f"{self.path or 'log'}:{line_no}: the capture end line ({m.group(3).decode()} GB, {m.group(2).decode()} s) is not used as "
                               f"the prefill capture cost: {why}")

    def result(self) -> LogSettings:
        a = self.args
        where = f"{'launch flags' if self.from_flags else 'server_args'}"
        settings: list[LogSetting] = []

        def put(key: str, value: Any, name: str) -> None:
            settings.append(LogSetting(key, value, f"{where}.{name}, line {self.args_line}", self.args_line))

        cp = _int(a.get("attn_cp_size"))
        if cp is not None and cp >= 1:
            put("cp_size", cp, "attn_cp_size")
        else:
            shown = self._cp_shown()
            if shown is not None:
                cp = shown.value
                settings.append(shown)
        if a.get("cp_strategy") in ("zigzag", "interleave") and (cp or 1) > 1:
            put("cp_strategy", a["cp_strategy"], "cp_strategy")
        graphs, graphs_origin = self._prefill_graphs()
        (listed, listed_from), (top, top_from) = _prefill_bs(a), _prefill_max_bs(a)
        if self.captured:
            settings.append(LogSetting("buckets", list(self.captured), f"capture lines, line {self.captured_line}", self.captured_line))
        elif graphs is False:
            pass  # a list configured for graphs that were off was never deployed
        elif listed:
            put("buckets", listed, listed_from)
        elif top is not None:
            put("buckets", f"sglang-default:{top}", top_from)
        for name in _SCHEDULER_KEYS:
            if name in self.resolved and name in _RESOLVED_KEYS:
                value, at = self.resolved[name]
                if value >= 1 or (name == "chunked_prefill_size" and value == -1):
                    settings.append(LogSetting(_KEY_OF[name], value, f"resolved by the server, line {at}", at))
                    continue
            value = _int(a.get(name))
            if value is not None and (value >= 1 or (name == "chunked_prefill_size" and value == -1)):
                put(_KEY_OF[name], value, name)
        largest, count, at = self.largest_forward
        chunk_key = _KEY_OF["chunked_prefill_size"]
        if (count >= CHUNK_SHOWN_AT_LEAST and largest % 1024 == 0 and not any(s.key == chunk_key for s in settings)
                and "chunked_prefill_size" not in a):  # the chunk the forwards show (a dump's None: resolved, not shown)
            settings.append(LogSetting(chunk_key, largest, f"the Prefill batch lines: {count} forwards of exactly {largest} "
                                       f"new tokens, the largest read (chunked prefill cuts long requests at the chunk), first line {at}",
                                       at, True))
        for name in _SCHEDULER_SWITCHES:
            if isinstance(a.get(name), bool):
                put(_KEY_OF[name], a[name], name)
        return LogSettings(
            tuple(settings), dict(a), self.args_line, tuple(self.captured), self._cost(), self.version, self.date,
            graphs, bool(a.get("enable_lora") or a.get("lora_paths")), self._notes(cp, graphs, graphs_origin), "",
            self.launch, self.first_line, dict(self.flags), dict(self.resolved), dict(self.ranks), graphs_origin, self.version_line,
            self.dump_line, self.captured_line, tuple(self.unreadable), self.architecture, self.device_name, self.graph_forward,
            memory_seen=self.memory_seen, attention_backend=self.attention_backend,
        )

    def _cp_shown(self) -> LogSetting | None:
        """cp_size as the launch shows it without stating it (module doc), or None."""
        for tag in ("ATTN_CP", "CP"):
            if tag in self.ranks:
                n, at = self.ranks[tag]
                if n < 2:  # printed only when attn_cp_size > 1, yet one rank seen: the size is not shown
                    return None
                return LogSetting("cp_size", n, f"rank prefixes {tag}0..{n - 1}, line {at}", at, True)
        if self.dump_line and "attn_cp_size" not in self.args and "tp_size" in self.args:
            return LogSetting("cp_size", 1, f"server_args has no attn_cp_size (a release before attention CP), line {self.dump_line}",
                              self.dump_line, True)
        version = None if self.version is None else tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])
        if version is not None and version < CP_FIRST_VERSION:
            return LogSetting("cp_size", 1, f"SGLang {self.version} predates attention CP (first in "
                              f"{'.'.join(map(str, CP_FIRST_VERSION))}), line {self.version_line}", self.version_line, True)
        if self.date and self.date < CP_FIRST_DATE:
            return LogSetting("cp_size", 1, f"the log is dated {self.date}, before attention CP (SGLang PR #17213, {CP_FIRST_DATE})", 0, True)
        if (self.ranks or self.plain_prefix_line) and (version is None or version >= CP_FIRST_VERSION):
            tags = " ".join(sorted(self.ranks)) or "no tags"
            first = min([at for _, at in self.ranks.values()] + ([self.plain_prefix_line] if self.plain_prefix_line else []))
            return LogSetting("cp_size", 1, f"rank prefixes ({tags}) carry no ATTN_CP tag, printed when attn_cp_size > 1, line {first}",
                              first, True)
        return None

    def _prefill_graphs(self) -> tuple[bool | None, str]:
        """Whether prefill graphs were on and where that was read. What the server printed it did
        wins over what its settings imply: capture lines (measured), then a `Prefill batch` line
        whose verdict says it ran in a graph (0.5.23 prints `cuda graph: True` only for a forward
        replayed from a captured graph); else the start-up settings (`_settings_graphs`)."""
        if self.captured or self.steps:
            return True, f"capture lines, line {self.captured_line or self.steps_line}"
        if self.graph_forward is not None:
            return True, f"the Prefill batch lines' verdicts ({self.graph_forward[0]}: True), line {self.graph_forward[1]}"
        return self._settings_graphs()

    def _settings_graphs(self) -> tuple[bool | None, str]:
        """Whether the start-up settings turn prefill graphs on or off, and where that was read."""
        a, at = self.args, f"line {self.args_line}"
        where = "launch flags" if self.from_flags else "server_args"
        if "prefill_graphs" in self.resolved:
            return False, f"resolved by the server (pipeline parallelism), line {self.resolved['prefill_graphs'][1]}"
        backend = _prefill_phase(a).get("backend") or a.get("cuda_graph_backend_prefill")
        if backend == "disabled" or a.get("disable_prefill_cuda_graph") is True:
            return False, f"{where}.{'cuda_graph_config.prefill.backend' if backend == 'disabled' else 'disable_prefill_cuda_graph'}, {at}"
        if backend in ("breakable", "full"):
            return True, f"{where}.cuda_graph_config.prefill.backend {backend}, {at}"
        if "enable_piecewise_cuda_graph" in a or "disable_piecewise_cuda_graph" in a:  # the piecewise runner decides, not disable_cuda_graph
            if a.get("disable_piecewise_cuda_graph") is True:
                return False, f"{where}.disable_piecewise_cuda_graph, {at}"
            if a.get("enable_piecewise_cuda_graph") is True:
                return True, f"{where}.enable_piecewise_cuda_graph, {at}"
            if a.get("enable_piecewise_cuda_graph") is False:
                return False, f"{where}.enable_piecewise_cuda_graph False, {at}"
            return None, ""
        if a.get("disable_cuda_graph") is True:  # 0.5.23 `cuda_graph_hook`: turns both phases off
            return False, f"{where}.disable_cuda_graph, {at}"
        if self.dump_line and "tp_size" in a and not any(k in a for k in _PREFILL_GRAPH_KEYS):
            return False, (f"server_args has none of the prefill-graph settings 0.5.23 prints (a release before prefill CUDA graphs, "
                           f"or a dump cut short), line {self.dump_line}")
        return self._release_graphs()

    def _release_graphs(self) -> tuple[bool | None, str]:
        """False, and why, when the log's release predates breakable prefill graphs: its printed version below
        `BREAKABLE_PREFILL_FIRST_VERSION`, or (none printed) its date before `BREAKABLE_PREFILL_FIRST_DATE`."""
        version = None if self.version is None else tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])
        first = ".".join(map(str, BREAKABLE_PREFILL_FIRST_VERSION))
        if version is not None and version < BREAKABLE_PREFILL_FIRST_VERSION:
            return False, (f"SGLang {self.version} predates breakable prefill CUDA graphs by default (first in {first}), line {self.version_line}")
        if version is None and self.date and self.date < BREAKABLE_PREFILL_FIRST_DATE:
            return False, (f"the log is dated {self.date}, before breakable prefill CUDA graphs (SGLang PR #23906, "
                           f"{BREAKABLE_PREFILL_FIRST_DATE}), line {self.first_line}")
        return None, ""

    def _cost(self) -> CaptureCost | None:
        if not self.steps:
            return None
        order = sorted(self.steps, reverse=True)  # captured largest first
        gb = {}
        for i, b in enumerate(order):
            nxt = self.steps[order[i + 1]] if i + 1 < len(order) else (self.end[2] if self.end else None)
            if nxt is not None:
                gb[b] = round(max(self.steps[b] - nxt, 0.0), 2)
        return CaptureCost(gb, self.end[1] if self.end else None, self.end[0] if self.end else None, self.date,
                           self.end[3] if self.end else 0, self.capture_backend, self.captured_line)

    def _notes(self, cp: int | None, graphs: bool | None, graphs_origin: str) -> tuple[str, ...]:
        a, notes = self.args, []
        if cp is not None and cp > 1 and self.args:
            tp, pp = _int(a.get("tp_size")) or 1, _int(a.get("pp_size")) or 1
            if not a.get("enable_prefill_cp", True) or pp != 1 or tp != cp:
                notes.append(f"attn_cp_size {cp} with tp_size {tp}, pp_size {pp}, enable_prefill_cp {a.get('enable_prefill_cp')}: "
                             "SGLang 0.5.23 captures no CP prefill graph here (supports_prefill_cp_bcg)")
        if self.graph_forward is not None and not (self.captured or self.steps):
            stated, origin = self._settings_graphs()
            if stated is False:
                notes.append(f"the settings say prefill graphs were off ({origin}), but the Prefill batch line {self.graph_forward[1]} says "
                             f"`{self.graph_forward[0]}: True`: the forwards' verdicts win, prefill graphs taken as on")
        if graphs is False and _prefill_bs(a)[0]:
            notes.append(f"prefill graphs were off ({graphs_origin}): the listed {_prefill_bs(a)[1]} was not deployed")
        if self.unused_end is not None and self.end is None:
            notes.append(self.unused_end)
        said = unreadable_note(self.path, self.unreadable)
        return tuple(notes) + ((said,) if said else ())


def unreadable_note(path: str, unreadable: "Sequence[tuple[int, str]]") -> str | None:
    """One line counting a launch's unreadable start-up lines and naming the first
    `MAX_UNREADABLE_SHOWN` as `FILE:LINE: what` (`LogSettings.unreadable`), or None without any."""
    if not unreadable:
        return None
    shown = "; ".join(f"{path or 'log'}:{line}: {what}" for line, what in unreadable[:MAX_UNREADABLE_SHOWN])
    more = f"; and {len(unreadable) - MAX_UNREADABLE_SHOWN} more" if len(unreadable) > MAX_UNREADABLE_SHOWN else ""
    return (f"{len(unreadable)} unreadable start-up {'entries' if len(unreadable) > 1 else 'entry'} skipped (each setting taken as not "
            f"printed): {shown}{more}")


def unusable_args(text: str, parsed: dict[str, Any]) -> list[str]:
    """What a settings dump prints for the integer fields the plan reads (`_READ_ARGS`) that is no
    usable value: not a literal (`chunked_prefill_size=nan`), or not a positive integer (None is
    the server's to resolve; `chunked_prefill_size` -1 is chunking off)."""
    out = []
    for name in _READ_ARGS:
        m = re.search(rf"(?:\b{name}\s*=|['\"]{name}['\"]\s*:)\s*([^,)}}]*)", text)
        if m is None:
            continue
        value = parsed.get(name, m)
        if value is None or (type(value) is int and (value >= 1 or (name == "chunked_prefill_size" and value == -1))):
            continue
        out.append(f"server_args.{name} {m.group(1).strip()[:30]} is not a positive integer")
    return out


def _shown(raw: bytes, limit: int = 40) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[:limit] + "..."


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
