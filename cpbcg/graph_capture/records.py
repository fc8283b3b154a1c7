"""Typed results of `cpbcg capture` (no torch): settings in, records out.

`run_capture(CaptureSettings) -> CaptureResult`; `cpbcg.manifest.manifest_document` is the one
place that turns a `CaptureResult` into JSON. `replay_batches` returns `BatchReplay`s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cpbcg.graph_capture.presets import ModelDims
from cpbcg.planner.deployment import Deployment
from cpbcg.planner.document import document
from cpbcg.planner.model.capacity import CaptureSpec
from cpbcg.planner.model.layout import CPLayout

SkipCause = Literal["estimate", "out_of_memory", "capture_error", "rank_disagreement"]


@dataclass(frozen=True)
class CaptureSettings:
    """What to capture and how: the one `Deployment` (CP layout, capture layout, padding factor,
    buckets) plus the capture-only options. Plain data; `cpbcg.api.capture` builds it."""

    deployment: Deployment
    """The deployment whose `buckets` are captured (those below the smallest capturable size are
    dropped), with its CP layout (zigzag only), capture layout and padding factor."""
    preset: str = "tiny"
    """Model preset name or model YAML path (`cpbcg.graph_capture.presets`)."""
    num_layers: int = 2
    """Proxy layers captured (each adds one attention break)."""
    dtype: str | None = None
    """`float32`, `bfloat16` or `float16`; None = the preset's dtype."""
    seed: int = 0
    """Seed of weights, inputs and trace sampling."""
    trace: Path | None = None
    """Batch or request trace whose routed batches are replayed per bucket; None = none."""
    samples: int = 2
    """Trace batches replayed per bucket (the heaviest plus a seeded sample)."""
    dry_run: bool = False
    """Run the pieces eagerly (no CUDA graphs) even where CUDA is present."""

    @property
    def cp_layout(self) -> CPLayout:
        """CP size, strategy and row alignment of the deployment."""
        return self.deployment.cp

    @property
    def capture_spec(self) -> CaptureSpec:
        """Capture layout of the dummy batch (single request or context-bounded)."""
        return self.deployment.capture

    @property
    def max_padding_factor(self) -> float:
        """Selector's padding limit (routes `trace` samples; docs/model.md, SGLang 0.5.23's replay selector)."""
        return self.deployment.max_padding_factor

    @property
    def buckets(self) -> tuple[int, ...]:
        """`capture_num_tokens` to capture (the deployment's list)."""
        return self.deployment.buckets


@dataclass(frozen=True)
class CaptureRecord:
    """What capturing one bucket cost. Memory is read after `synchronize()` + `empty_cache()`."""

    capture_num_tokens: int
    """Global bucket `B` (tokens)."""
    local_rows: int
    """Local capacity `C(B)` (rows per rank)."""
    capture_s: float
    """Seconds for the two warm-ups plus the capture of every piece into the shared pool."""
    graph_bytes: int | None
    """Growth of the shared graph pool when this bucket was captured (bytes, >= 0); None in a dry run."""
    standalone_graph_bytes: int | None
    """Pool bytes of this bucket's graphs captured alone into a private pool (bytes, >= 0); None in a dry run."""
    allocator_bytes: int | None
    """Growth of the caching allocator's reserved memory across the capture (bytes, >= 0); None in a dry run."""


@dataclass(frozen=True)
class BucketWall:
    """Where one bucket's wall time went (seconds, `time.perf_counter`), phase by phase, in the
    order they run: the phases plus `other_s` make `total_s`."""

    estimate_s: float
    """Memory estimate against the free memory before building the bucket."""
    standalone_s: float
    """Capturing the bucket alone into a private pool, to read its graph memory alone (0 in a dry run)."""
    warmup_s: float
    """The two warm-up runs of every piece before capture (part of `CaptureRecord.capture_s`)."""
    capture_s: float
    """Capturing the pieces into the shared pool (the rest of `CaptureRecord.capture_s`)."""
    verify_s: float
    """Choosing the live layouts (adversarial ones and trace samples), replaying each and comparing
    it with the same pieces run eagerly and with the float32 unsharded reference (`layouts` of
    them, over-capacity probes included)."""
    timing_s: float
    """The timed forwards of the capture layout (graph replay, eager, raw replay; 0 in a dry run)."""
    layouts: int
    """Live layouts and probes replayed in verification."""
    total_s: float
    """From the bucket's memory estimate to the end of its verification (its two steps; the
    other buckets' steps in between are not counted)."""

    @property
    def other_s(self) -> float:
        """`total_s` less the phases: rank agreement, bookkeeping, memory reads."""
        return self.total_s - (self.estimate_s + self.standalone_s + self.warmup_s + self.capture_s + self.verify_s + self.timing_s)


@dataclass(frozen=True)
class RunWall:
    """Where a capture run's wall time went (seconds): `setup_s + sampling_s + capture_s +
    verify_s` plus bookkeeping make `total_s`."""

    setup_s: float
    """Building the proxy model and its float32 reference, the rank group and the backend."""
    sampling_s: float
    """Reading `--trace` and picking the batches each bucket replays (0 without a trace)."""
    capture_s: float
    """The capture step of every bucket (estimates, warm-ups, captures)."""
    verify_s: float
    """The verification step of every bucket (layout replays, comparisons, timed forwards)."""
    total_s: float
    """The whole `run_capture`."""


@dataclass(frozen=True)
class LayoutCheck:
    """One live batch replayed in one bucket and compared."""

    kind: str
    """`capture`, `many_short`, `long_plus_short`, `trace` or `batch`."""
    extend_seq_lens: tuple[int, ...]
    """Extend tokens per request."""
    local_rows: int
    """CP-local rows per rank the batch needs (`<= C(B)`)."""
    max_abs_err: float
    """Largest |graph output - reference| over real tokens; the reference is the unsharded
    forward in float32 (inf if the output is not finite)."""
    tolerance: float
    """Largest error accepted (see `Tolerance`)."""
    noise_floor: float | None
    """|unsharded forward in the model dtype - float32 reference| (low precision only; else None)."""
    graph_matches_eager: bool
    """The graph replay equals the same pieces run eagerly on the same sharded input, bit for bit."""

    @property
    def verified(self) -> bool:
        return self.graph_matches_eager and self.max_abs_err <= self.tolerance

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_seq_lens)


@dataclass(frozen=True)
class ProbeCheck:
    """A live batch with `n <= B` but more rows than `C(B)`: it must be refused."""

    extend_seq_lens: tuple[int, ...]
    """Extend tokens per request."""
    local_rows: int
    """Rows per rank it needs (`> C(B)`)."""
    refused: bool
    """True when the harness refused it (never truncated)."""
    message: str
    """The runtime's refusal message (empty if not refused)."""


@dataclass(frozen=True)
class BucketTiming:
    """Per-rank milliseconds of one CP forward of the capture layout (CUDA events)."""

    replay_ms: float
    """Graph pieces through the replay wrapper (copy-in, replay, clone-out) plus eager attention."""
    eager_ms: float
    """The same pieces run eagerly through the same wrapper, plus the same attention."""
    raw_replay_ms: float
    """`graph.replay()` of every piece back to back (no copies, no attention)."""


@dataclass(frozen=True)
class BucketResult:
    """One captured bucket: capture cost, timings and verification."""

    capture: CaptureRecord
    """Capture measurements."""
    timing: BucketTiming | None
    """None in a dry run."""
    layouts: tuple[LayoutCheck, ...]
    """Live batches replayed and compared, capture layout first."""
    probes: tuple[ProbeCheck, ...]
    """Over-capacity probes (empty when the bucket admits none)."""
    wall: BucketWall | None = None
    """Where this bucket's wall time went; None when not accounted."""

    @property
    def capture_num_tokens(self) -> int:
        return self.capture.capture_num_tokens

    @property
    def verified(self) -> bool:
        """Every layout verified and every probe refused."""
        return all(c.verified for c in self.layouts) and all(p.refused for p in self.probes)

    @property
    def max_abs_err(self) -> float:
        return max((c.max_abs_err for c in self.layouts), default=0.0)

    @property
    def graph_matches_eager(self) -> bool:
        return all(c.graph_matches_eager for c in self.layouts)

    def to_dict(self) -> dict[str, object]:
        """The manifest's record of this bucket (`cpbcg.outputs.documents.manifest_document`): capture
        measurements, timings, verification, each layout and probe, the wall time."""
        timing = {"replay_ms": None, "eager_ms": None, "raw_replay_ms": None} if self.timing is None else document(self.timing)
        layouts = [{"kind": c.kind, "extend_seq_lens": list(c.extend_seq_lens), "num_tokens": c.num_tokens,
                    "num_requests": len(c.extend_seq_lens), "local_rows": c.local_rows, "max_abs_err": c.max_abs_err,
                    "tolerance": c.tolerance, "noise_floor": c.noise_floor, "graph_matches_eager": c.graph_matches_eager,
                    "verified": c.verified} for c in self.layouts]
        probes = [{"extend_seq_lens": list(p.extend_seq_lens), "num_tokens": sum(p.extend_seq_lens), "local_rows": p.local_rows,
                   "refused": p.refused, "message": p.message} for p in self.probes]
        return {
            **document(self.capture), **timing, "verified": self.verified, "graph_matches_eager": self.graph_matches_eager,
            "max_abs_err": self.max_abs_err, "layouts_checked": len(self.layouts),
            "overflow_refused": all(p.refused for p in self.probes) if self.probes else None,
            "layouts": layouts, "probes": probes,
            "wall_s": None if self.wall is None else document(self.wall, extra={"other_s": self.wall.other_s}),
        }


@dataclass(frozen=True)
class SkippedBucket:
    """A bucket that was not captured or not verified, with the reason."""

    capture_num_tokens: int
    """Global bucket `B` (tokens)."""
    local_rows: int
    """Local capacity `C(B)` (rows per rank)."""
    cause: SkipCause
    """`estimate` (refused before building), `out_of_memory`, `capture_error`, or
    `rank_disagreement` (another CP rank failed on it)."""
    reason: str
    """One line: what failed."""


@dataclass(frozen=True)
class Tolerance:
    """How a layout's error is judged for the model dtype."""

    dtype: str
    """Model dtype."""
    atol: float
    """Absolute part (model dtype units)."""
    rtol: float
    """Relative part, times `max|reference|` (float32 only; 0 for low precision)."""
    noise_factor: float
    """Times the measured noise floor (low precision only; 0 for float32)."""

    @property
    def rule(self) -> str:
        if self.noise_factor:
            return f"max_abs_err <= {self.noise_factor:g} * noise_floor + {self.atol:g}"
        return f"max_abs_err <= {self.atol:g} + {self.rtol:g} * max|reference|"


@dataclass(frozen=True)
class CaptureResult:
    """Everything one capture run found (rank 0's view; ranks agree on every bucket's status)."""

    settings: CaptureSettings
    """What was asked."""
    dims: ModelDims
    """Model dimensions of the preset."""
    dtype: str
    """Dtype the proxy ran in."""
    device_name: str
    """`torch.cuda.get_device_name`, or `cpu`."""
    dry_run: bool
    """True when the pieces ran eagerly (no CUDA graphs, no timings or memory)."""
    emulated_ranks: bool
    """All CP ranks in one process."""
    versions: tuple[tuple[str, str | None], ...]
    """`(("cpbcg", ...), ("torch", ...), ("cuda", ... or None))`."""
    attention_kernels: tuple[tuple[str, str], ...]
    """SDPA kernel chosen per attention call site (`cp_attention`, `reference`, ...)."""
    tolerance: Tolerance
    """Verification rule."""
    buckets: tuple[BucketResult, ...]
    """Captured buckets, in capture order (largest first)."""
    skipped: tuple[SkippedBucket, ...]
    """Buckets not captured or not verified."""
    is_writer: bool = True
    """False on the torchrun ranks other than 0 (they print and write nothing)."""
    wall: RunWall | None = None
    """Where the run's wall time went; None when not accounted."""

    @property
    def complete(self) -> bool:
        """Every requested bucket captured (none skipped)."""
        return not self.skipped

    @property
    def verified(self) -> bool:
        """Every captured bucket verified."""
        return all(b.verified for b in self.buckets)


@dataclass(frozen=True)
class BatchReplay:
    """One batch routed by the runtime selector and, when it replays in a graph, verified."""

    extend_seq_lens: tuple[int, ...]
    """The batch (tokens per request)."""
    bucket: int | None
    """Bucket it replayed in; None when the selector runs it eagerly."""
    eager_reason: str | None
    """Why it runs eagerly (`cpbcg.planner.model.selector.EAGER_REASONS` value), else None."""
    rescued: bool
    """The natural bucket lacked capacity and a larger one took it."""
    verified: bool | None
    """Graph output matched the reference (None when eager; False when the bucket was skipped)."""
    max_abs_err: float | None
    """Largest error against the reference (None when eager)."""
    replay_ms: float | None
    """Per-rank forward time (None when eager or in a dry run)."""
    skip_reason: str | None = None
    """Why its bucket could not be captured (then `verified` is False); None otherwise."""
