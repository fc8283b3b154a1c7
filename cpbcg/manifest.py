"""Capture manifests: what `cpbcg capture` measured, readable without torch.

`capture` writes one (atomically, from a typed `CaptureResult` via `manifest_document`, the one
place capture results become JSON); `plan` reads its timings for the cost model
(`Manifest.fitted_cost`) and `replay-check` reads its buckets and capacities. The schema
(version `SCHEMA_VERSION`):

```
{
  "schema_version": 1,
  "cpbcg_version": "0.1.0", "torch_version": "2.x", "cuda_version": "12.x" | null,
  "device_name": "NVIDIA H200" | "cpu", "dry_run": false, "complete": true,
  "cp_size": 4, "cp_strategy": "zigzag", "align_size": 8,
  "capture_layout": "single_request", "max_context_size_tokens": null, "max_capture_requests": null,
  "max_padding_factor": 2.0,
  "model": {"preset": "tiny", "hidden_size": ..., "num_attention_heads": ..., "num_key_value_heads": ...,
            "head_dim": ..., "intermediate_size": ..., "dtype": "bfloat16",
            "num_layers": 2, "num_hidden_layers": 64 | null},
  "buckets": [{"capture_num_tokens": 2048, "local_rows": 512, "capture_s": 0.12,
               "graph_bytes": 123, "standalone_graph_bytes": 456, "allocator_bytes": 789,
               "replay_ms": 0.8, "eager_ms": 2.1, "raw_replay_ms": 0.5,
               "verified": true, "graph_matches_eager": true, "max_abs_err": 0.003,
               "layouts_checked": 3}, ...],
  "skipped_buckets": [{"capture_num_tokens": 16384, "local_rows": 4096,
                       "cause": "out_of_memory", "reason": "..."}]
}
```
Bucket records are ordered as captured (largest first). Timing and memory fields are null in a
dry run, else finite and >= 0. `graph_bytes` is the growth of the one shared graph pool when the
bucket was captured (what the server pays for it after the larger buckets); `standalone_graph_bytes`
the pool of that bucket's graphs captured alone. `model.num_layers` is the proxy's layer count,
`model.num_hidden_layers` the real model's (timings scale by their ratio in `fitted_cost`).

Extra keys written by `cpbcg capture` (optional for readers): top level `emulated_ranks` (all CP
ranks in one process), `seed`, `tolerance` (`dtype`, `atol`, `rtol`, `noise_factor`, `rule`),
`attention_kernels` (SDPA kernel per call site), `model.name`; per bucket `overflow_refused`
(true when the over-capacity probes were refused, null when the bucket admits none), `layouts`
(one entry per replayed live batch: `kind`, `extend_seq_lens`, `num_tokens`, `num_requests`,
`local_rows`, `max_abs_err`, `tolerance`, `noise_floor`, `graph_matches_eager`, `verified`) and
`probes` (`extend_seq_lens`, `num_tokens`, `local_rows`, `refused`, `message`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from cpbcg.errors import CpbcgError, ManifestError
from cpbcg.inputs import load_json, read_input_bytes
from cpbcg.planner.model.capacity import CaptureLayout, CaptureSpec, capturable_buckets, local_capacity, minimum_capture_tokens
from cpbcg.planner.model.layout import CPLayout, CPStrategy
from cpbcg.planner.model.selector import BucketTable

if TYPE_CHECKING:  # typed records of the capture package (not imported at run time)
    from cpbcg.capture.records import BucketResult, CaptureResult

SCHEMA_VERSION = 1
REQUIRED_KEYS = ("schema_version", "cp_size", "cp_strategy", "align_size", "capture_layout", "buckets")
MAX_MANIFEST_INT = 2**31 - 1
"""Largest count (tokens, rows, ranks, requests) a manifest may record."""
MEASURED_KEYS = ("capture_s", "graph_bytes", "standalone_graph_bytes", "allocator_bytes", "replay_ms", "eager_ms", "raw_replay_ms")
"""Per-bucket measurements: null (not measured) or a finite number >= 0."""


@dataclass(frozen=True)
class Manifest:
    """A loaded, validated capture manifest."""

    path: Path
    """Where it was read from."""
    data: dict[str, Any]
    """The whole document."""

    @property
    def cp_layout(self) -> CPLayout:
        return CPLayout(self.data["cp_size"], CPStrategy(self.data["cp_strategy"]), self.data["align_size"])

    @property
    def capture_spec(self) -> CaptureSpec:
        return CaptureSpec(
            CaptureLayout(self.data["capture_layout"]),
            self.data.get("max_context_size_tokens"),
            self.data.get("max_capture_requests"),
        )

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.data["buckets"]

    def table(self) -> BucketTable:
        """Captured buckets with their recorded capacities, ascending."""
        return BucketTable.from_mapping({r["capture_num_tokens"]: r["local_rows"] for r in self.records})

    @property
    def num_layers(self) -> int | None:
        """Proxy layers the timings were measured with (`model.num_layers`)."""
        return self.data.get("model", {}).get("num_layers")  # checked by `_check_model`

    @property
    def num_hidden_layers(self) -> int | None:
        """Layers of the real model (`model.num_hidden_layers`), if recorded."""
        return self.data.get("model", {}).get("num_hidden_layers")  # checked by `_check_model`

    def fitted_cost(self, num_layers: int | None = None) -> "FittedCost | None":
        """The cost model fitted to the replay timings and scaled to `num_layers` layers
        (default: the real model's `num_hidden_layers`, else the proxy's own count).

        `replay_ms(B) = graph_fixed_ms + B * token_ms` by least squares over the timed buckets,
        `eager_fixed_ms = graph_fixed_ms + median(eager_ms - replay_ms)` (the capture layout has
        `n = B` tokens, so the per-token parts cancel); then every term times
        `num_layers / model.num_layers` (per-layer work and launches dominate both paths).
        None for a dry run or fewer than two timed buckets. Raises `ManifestError` for a
        manifest without `model.num_layers` or a `num_layers` below 1.
        """
        timed = [r for r in self.records if r.get("replay_ms") is not None]
        if len(timed) < 2 or self.data.get("dry_run"):
            return None
        proxy = self.num_layers
        if proxy is None:
            raise ManifestError(f"{self.path}: model.num_layers: missing, so its timings cannot be scaled to a model")
        target = num_layers if num_layers is not None else (self.num_hidden_layers or proxy)
        if type(target) is not int or target < 1:
            raise ManifestError(f"{self.path}: num_layers: {target!r} is not a positive integer")
        tokens, ms = np.array([(r["capture_num_tokens"], r["replay_ms"]) for r in timed], dtype=float).T
        slope, intercept = (float(v) for v in np.polyfit(tokens, ms, 1))
        notes = []
        if intercept < 0 or slope < 0:
            notes.append(f"the replay fit ({intercept:.4g} ms + B*{slope:.4g}) went below 0 and was clamped to 0")
        graph_fixed, token = max(intercept, 0.0), max(slope, 0.0)
        pairs = [r["eager_ms"] - r["replay_ms"] for r in timed if r.get("eager_ms") is not None]
        eager_fixed = None
        if pairs:
            eager_fixed = graph_fixed + float(np.median(pairs))
            if eager_fixed < 0:
                notes.append(f"eager forwards ran {-float(np.median(pairs)):.4g} ms faster than replays (median), "
                             "so eager_fixed_ms is not fitted")
                eager_fixed = None
        else:
            notes.append("no eager timings, so eager_fixed_ms is not fitted")
        scale = target / proxy
        return FittedCost(graph_fixed * scale, token * scale, None if eager_fixed is None else eager_fixed * scale,
                          proxy, target, "; ".join(notes))

    def fitted_cost_ms(self) -> tuple[float, float] | None:
        """`(graph_fixed_ms, token_ms)` of `fitted_cost()` (scaled to the real model), or None."""
        fit = self.fitted_cost()
        return None if fit is None else (fit.graph_fixed_ms, fit.token_ms)

    def eager_fixed_ms(self) -> float | None:
        """`eager_fixed_ms` of `fitted_cost()` (scaled to the real model), or None when not fitted."""
        fit = self.fitted_cost()
        return None if fit is None else fit.eager_fixed_ms


@dataclass(frozen=True)
class FittedCost:
    """Cost-model terms fitted to a manifest's timings, scaled to a model's layer count."""

    graph_fixed_ms: float
    """Fixed time of one graph replay (ms), scaled."""
    token_ms: float
    """Time per bucket token (ms), scaled."""
    eager_fixed_ms: float | None
    """Fixed time of one eager forward (ms), scaled; None when it could not be fitted (see `note`)."""
    proxy_layers: int
    """Layers the timings were measured with."""
    model_layers: int
    """Layers the terms are scaled to."""
    note: str
    """Empty, or what was clamped or left unfitted and why (one line)."""

    @property
    def scale(self) -> float:
        return self.model_layers / self.proxy_layers


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest. Raises `ManifestError` for an unreadable file, a wrong
    schema version, missing keys or buckets, a bucket that failed verification (`"verified":
    false`), a negative or non-finite measurement, a `model` section that is not an object or
    whose layer counts are not positive integers, or capacities that contradict the capture model."""
    path = Path(path)
    data = load_json(read_input_bytes(path, error=ManifestError, what="manifest"), str(path), ManifestError, what="manifest")
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: manifest must be a JSON object")
    if type(data.get("schema_version")) is not int or data.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(
            f"{path}: schema_version {data.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ManifestError(f"{path}: missing key(s) {', '.join(missing)}")
    records = data["buckets"]
    if not isinstance(records, list) or not records:
        raise ManifestError(f"{path}: buckets: no captured buckets")
    _check_records(path, records)
    _check_settings(path, data)
    _check_model(path, data)
    manifest = Manifest(path, data)
    try:
        layout, spec = manifest.cp_layout, manifest.capture_spec
    except (ValueError, TypeError, CpbcgError) as exc:
        raise ManifestError(f"{path}: bad CP or capture settings: {exc}") from exc
    _check_capacities(manifest, layout, spec)
    return manifest


def _check_records(path: Path, records: list[Any]) -> None:
    seen: set[int] = set()
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise ManifestError(f"{path}: buckets[{i}]: expected an object, got {type(record).__name__}")
        for key in ("capture_num_tokens", "local_rows"):
            value = record.get(key)
            if type(value) is not int or not 1 <= value <= MAX_MANIFEST_INT:
                raise ManifestError(f"{path}: buckets[{i}].{key}: {value!r} is not a positive integer <= {MAX_MANIFEST_INT}")
        if record["capture_num_tokens"] in seen:
            raise ManifestError(f"{path}: buckets[{i}]: bucket {record['capture_num_tokens']} is recorded twice")
        bucket = record["capture_num_tokens"]
        if record.get("verified") is False:
            raise ManifestError(f"{path}: bucket {bucket} failed verification in the capture; recapture it or drop it")
        for key in MEASURED_KEYS:
            value = record.get(key)
            if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or value < 0):
                raise ManifestError(f"{path}: buckets[{i}].{key}: {value!r} is not a finite number >= 0 (bucket {bucket})")
        seen.add(record["capture_num_tokens"])


def _check_settings(path: Path, data: dict[str, Any]) -> None:
    """Types of the scalar settings (a bool or a string is not a count)."""
    for key, nullable in (("cp_size", False), ("align_size", True), ("max_context_size_tokens", True), ("max_capture_requests", True)):
        value = data.get(key)
        if (value is None and nullable) or (type(value) is int and 1 <= value <= MAX_MANIFEST_INT):
            continue
        raise ManifestError(f"{path}: {key}: {value!r} is not a positive integer <= {MAX_MANIFEST_INT}")
    for key, enum in (("cp_strategy", CPStrategy), ("capture_layout", CaptureLayout)):
        if data.get(key) not in [member.value for member in enum]:
            raise ManifestError(f"{path}: {key}: {data.get(key)!r} is not one of {', '.join(m.value for m in enum)}")
    factor = data.get("max_padding_factor")
    if factor is not None and (type(factor) not in (int, float) or factor < 1):
        raise ManifestError(f"{path}: max_padding_factor: {factor!r} is not a number >= 1")
    if factor is not None and factor > 100:
        raise ManifestError(f"{path}: max_padding_factor: {factor!r} is above 100")


MODEL_COUNT_KEYS = ("num_layers", "num_hidden_layers")
"""Layer counts of the manifest's `model` section: null / absent, or an integer in [1, MAX_MANIFEST_INT]."""


def _check_model(path: Path, data: dict[str, Any]) -> None:
    """The `model` section, when present, is an object whose layer counts are null or positive
    integers (a string, 0, -1 or `true` would silently leave the cost model unscaled)."""
    model = data.get("model", {})
    if not isinstance(model, dict):
        raise ManifestError(f"{path}: model: expected an object, got {'null' if model is None else type(model).__name__}")
    for key in MODEL_COUNT_KEYS:
        value = model.get(key)
        if value is not None and not (type(value) is int and 1 <= value <= MAX_MANIFEST_INT):
            raise ManifestError(f"{path}: model.{key}: {value!r} is not a positive integer <= {MAX_MANIFEST_INT}")


def _check_capacities(manifest: Manifest, layout: CPLayout, spec: CaptureSpec) -> None:
    table = manifest.table()
    buckets = table.capture_num_tokens.tolist()
    try:
        kept = set(capturable_buckets(buckets, layout))
        expected = local_capacity(buckets, layout, spec)
    except CpbcgError as exc:
        raise ManifestError(f"{manifest.path}: the capture model refuses these settings: {exc}") from exc
    rule = layout.model.min_capture_rule
    for bucket in buckets:
        if bucket not in kept:
            raise ManifestError(
                f"{manifest.path}: bucket {bucket} is below {rule}={minimum_capture_tokens(layout)} and cannot be captured with {layout.strategy.value}"
            )
    for bucket, got, want in zip(table.capture_num_tokens, table.capacity_rows, expected):
        if got != want:
            raise ManifestError(
                f"{manifest.path}: bucket {bucket}: local_rows {got} contradicts the capture model "
                f"(cp_size {layout.cp_size}, {layout.strategy.value}, align {layout.align_rows}, "
                f"{spec.layout.value} capture gives {want})"
            )


def manifest_document(result: "CaptureResult") -> dict[str, Any]:
    """The manifest of a `cpbcg.capture.CaptureResult`: versions, device, CP and capture
    settings, model, one record per captured bucket (capture order), skipped buckets with
    reasons. The one place capture results become JSON-ready data."""
    s, dims, tol = result.settings, result.dims, result.tolerance
    versions = dict(result.versions)
    return {
        "schema_version": SCHEMA_VERSION,
        "cpbcg_version": versions.get("cpbcg"), "torch_version": versions.get("torch"), "cuda_version": versions.get("cuda"),
        "device_name": result.device_name, "dry_run": result.dry_run, "complete": result.complete,
        "emulated_ranks": result.emulated_ranks,
        "cp_size": s.cp_layout.cp_size, "cp_strategy": s.cp_layout.strategy.value, "align_size": s.cp_layout.align_rows,
        "capture_layout": s.capture_spec.layout.value, "max_context_size_tokens": s.capture_spec.max_context_size_tokens,
        "max_capture_requests": s.capture_spec.max_capture_requests, "max_padding_factor": s.max_padding_factor,
        "model": {**asdict(dims), "preset": s.preset, "dtype": result.dtype, "num_layers": s.num_layers},
        "seed": s.seed,
        "tolerance": {"dtype": tol.dtype, "atol": tol.atol, "rtol": tol.rtol, "noise_factor": tol.noise_factor, "rule": tol.rule},
        "attention_kernels": dict(result.attention_kernels),
        "buckets": [_bucket_record(b) for b in result.buckets],
        "skipped_buckets": [asdict(k) for k in result.skipped],
    }


def _bucket_record(b: "BucketResult") -> dict[str, Any]:
    timing = {"replay_ms": None, "eager_ms": None, "raw_replay_ms": None} if b.timing is None else asdict(b.timing)
    layouts = [{"kind": c.kind, "extend_seq_lens": list(c.extend_seq_lens), "num_tokens": c.num_tokens,
                "num_requests": len(c.extend_seq_lens), "local_rows": c.local_rows, "max_abs_err": c.max_abs_err,
                "tolerance": c.tolerance, "noise_floor": c.noise_floor, "graph_matches_eager": c.graph_matches_eager,
                "verified": c.verified} for c in b.layouts]
    probes = [{"extend_seq_lens": list(p.extend_seq_lens), "num_tokens": sum(p.extend_seq_lens), "local_rows": p.local_rows,
               "refused": p.refused, "message": p.message} for p in b.probes]
    return {
        **asdict(b.capture), **timing, "verified": b.verified, "graph_matches_eager": b.graph_matches_eager,
        "max_abs_err": b.max_abs_err, "layouts_checked": len(b.layouts),
        "overflow_refused": all(p.refused for p in b.probes) if b.probes else None,
        "layouts": layouts, "probes": probes,
    }


def manifest_bytes(data: dict[str, Any]) -> bytes:
    """Serialise a manifest document (indented JSON, trailing newline)."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
