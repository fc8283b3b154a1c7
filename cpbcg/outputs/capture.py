"""`cpbcg capture`'s result rendered: the per-bucket table (stdout), the notes and the wall-time
line (stderr), the JSON capture manifest (`-o`, written atomically), the failure lines and the
exit code; and the progress shown while it runs (`CaptureProgress`)."""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from cpbcg.atomic import write_atomic
from cpbcg.errors import ExitCode
from cpbcg.outputs.console import echo, progress_bar, release_stderr, stderr_console, stderr_is_terminal, stdout_console

if TYPE_CHECKING:
    from rich.table import Table

    from cpbcg.graph_capture.records import CaptureResult

PROGRESS_LINES_AFTER_S = 10.0
"""Off a terminal, a run that has lasted this long prints one progress line per bucket step."""
PHASE_WORDS = {"sampling": "reading the trace and sampling batches per bucket", "setup": "building the proxy model",
               "capture": "capture", "verify": "verify"}


class CaptureOutputOptions(Protocol):
    """The options this output reads (`cpbcg.commands.capture_options.CaptureOptions`)."""

    @property
    def output(self) -> Path | None: ...


def write(result: CaptureResult, options: CaptureOutputOptions) -> ExitCode:
    """Everything `capture` shows and writes for `result` (nothing on the torchrun ranks other
    than 0): the table, the notes, the manifest at `options.output`; the exit code
    (`GATE_FAILED`: a bucket failed verification, `CAPTURE_INCOMPLETE`: a bucket was skipped)."""
    from cpbcg.outputs.documents import dumps, manifest_document

    if not result.is_writer:
        return ExitCode.OK
    doc = manifest_document(result)
    render(doc)
    if options.output is not None:
        write_atomic(options.output, dumps(doc))
        stderr_console().print(f"wrote {options.output}")
    else:
        stderr_console().print("no manifest written (add -o manifest.json for plan and replay-check)")
    failed = [r["capture_num_tokens"] for r in doc["buckets"] if not r["verified"]]
    if failed:
        _error_line(f"cpbcg: verification failed for bucket(s) {', '.join(map(str, failed))}")
        return ExitCode.GATE_FAILED
    if not result.complete:
        skipped = ", ".join(str(k.capture_num_tokens) for k in result.skipped)
        _error_line(f"cpbcg: capture incomplete: bucket(s) {skipped} skipped (see skipped_buckets)")
        return ExitCode.CAPTURE_INCOMPLETE
    return ExitCode.OK


def _error_line(text: str) -> None:
    echo(text, err=True)


class CaptureProgress:
    """What `cpbcg capture` shows while it runs (stderr, rank 0 only): on a terminal a rich bar
    of the bucket steps (capture, then verification, per bucket) naming the phase and bucket in
    progress; elsewhere (CI logs), once the run has lasted `PROGRESS_LINES_AFTER_S`, one line per
    finished bucket step. Both give an ETA once a bucket is verified (`eta_s`). `enabled` None:
    on torchrun's rank 0 only (`RANK`)."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = os.environ.get("RANK", "0") == "0" if enabled is None else enabled
        self.total = 0
        self.done = 0
        self.began = time.perf_counter()
        self.phase_began = self.began
        self.captured: list[int] = []
        """Buckets captured so far (the ones verification will replay)."""
        self.verified_tokens = 0
        self.verify_began: float | None = None
        self._stack = ExitStack()
        self._bar: Callable[..., object] | None = None

    def __enter__(self) -> "CaptureProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def start(self, buckets: int) -> None:
        release_stderr()  # the input was good: a long run starts, its notes show as it goes
        self.total = 2 * buckets
        self._bar = self._stack.enter_context(progress_bar("capture", total=self.total, enabled=self.enabled))

    def eta_s(self, now: float) -> float | None:
        """Seconds left, estimated once a bucket is verified: verification dominates a run, and
        its time so far per bucket token times the tokens of the buckets still to verify (an
        assumption: a bucket's verification costs in proportion to its tokens; the largest go
        first, so the estimate errs long). None before."""
        if self.verify_began is None or not self.verified_tokens:
            return None
        left = sum(self.captured) - self.verified_tokens
        return max(left, 0) * (now - self.verify_began) / self.verified_tokens

    def _eta_words(self, now: float) -> str:
        eta = self.eta_s(now)
        return "" if eta is None else f", about {eta:.0f} s left"

    def phase(self, phase: str, bucket: int) -> None:
        self.phase_began = time.perf_counter()
        if phase == "verify" and self.verify_began is None:
            self.verify_began = self.phase_began
        words = PHASE_WORDS.get(phase, phase) + (f" bucket {bucket:,}" if bucket else "")
        if self._bar is not None:
            self._bar(0, description=words + self._eta_words(self.phase_began))

    def step(self, phase: str, bucket: int) -> None:
        self.done += 1
        if phase == "capture":
            self.captured.append(bucket)
        elif phase == "verify":
            self.verified_tokens += bucket
        if self._bar is not None:
            self._bar(1)
        now = time.perf_counter()
        if self.enabled and not stderr_is_terminal() and now - self.began >= PROGRESS_LINES_AFTER_S:
            stderr_console().print(f"cpbcg: capture: {phase} bucket {bucket:,} done in {now - self.phase_began:.1f} s "
                                   f"({self.done}/{self.total} steps, {now - self.began:.0f} s so far{self._eta_words(now)})",
                                   highlight=False)


def wall_line(wall: dict[str, Any]) -> str:
    """One line: where a capture run's wall time went (the manifest's `wall_s`)."""
    parts = [f"setup {wall['setup_s']:.1f} s", f"trace sampling {wall['sampling_s']:.1f} s",
             f"capture {wall['capture_s']:.1f} s (warm-ups {wall['warmup_s']:.1f} s)",
             f"verification {wall['verify_s']:.1f} s ({wall['layouts']:,} layouts replayed; timed forwards {wall['timing_s']:.1f} s)"]
    other = wall["total_s"] - wall["setup_s"] - wall["sampling_s"] - wall["capture_s"] - wall["verify_s"]
    return f"wall time {wall['total_s']:.1f} s: " + ", ".join(parts) + f", other {max(other, 0.0):.1f} s"


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def bucket_table(doc: dict[str, Any]) -> Table:
    """Per-bucket table of a manifest document (capture order)."""
    from rich import box
    from rich.table import Table

    mode = "DRY RUN (no CUDA)" if doc["dry_run"] else doc["device_name"]
    model = doc["model"]
    title = (f"capture: {model['name']} x{model['num_layers']} layers {model['dtype']}, cp {doc['cp_size']} "
             f"(align {doc['align_size']}), {mode}; times in ms per rank, graph pool MiB (pool+ = growth of the "
             "shared pool, alone = this bucket's graphs alone)")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for name in ("bucket", "C(B)", "capture_s", "verify_s", "pool+", "alone", "replay", "eager", "raw", "checks", "overflow", "max_err", "ok"):
        table.add_column(name, justify="left" if name in ("ok", "overflow") else "right", no_wrap=True)
    for r in doc["buckets"]:
        mib = lambda key: None if r[key] is None else r[key] / 2**20  # noqa: E731
        overflow = {True: "refused", False: "NOT refused", None: "-"}[r["overflow_refused"]]
        wall = r.get("wall_s") or {}
        verify_s = wall.get("verify_s", 0.0) + wall.get("timing_s", 0.0) if wall else None
        table.add_row(str(r["capture_num_tokens"]), str(r["local_rows"]), f"{r['capture_s']:.3f}", _fmt(verify_s, ".3f"),
                      _fmt(mib("graph_bytes"), ".1f"), _fmt(mib("standalone_graph_bytes"), ".1f"),
                      _fmt(r["replay_ms"], ".3f"), _fmt(r["eager_ms"], ".3f"), _fmt(r["raw_replay_ms"], ".3f"), str(r["layouts_checked"]), overflow,
                      f"{r['max_abs_err']:.1e}", "yes" if r["verified"] else "NO")
    return table


def render(doc: dict[str, Any]) -> None:
    """A manifest document as people read it: the bucket table on stdout, the dry-run note, the
    tolerance rule, the wall-time line and the skipped buckets on stderr."""
    stdout_console().print(bucket_table(doc))
    err = stderr_console()
    if doc["dry_run"]:
        err.print("dry run: no CUDA device, so the pieces ran eagerly on the CPU (no graph memory or timings).")
    tol = doc["tolerance"]
    err.print(f"tolerance ({tol['dtype']}): {tol['rule']}; graph replay must equal eager pieces bit for bit")
    if doc.get("wall_s"):
        err.print(wall_line(doc["wall_s"]), highlight=False)
    for s in doc["skipped_buckets"]:
        err.print(f"skipped bucket {s['capture_num_tokens']} ({s['cause']}): {s['reason']}")
