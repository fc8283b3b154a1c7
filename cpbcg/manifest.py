"""Capture manifests: what `cpbcg capture` measured, readable without torch.

`capture` writes one (atomically, from a typed `CaptureResult` via
`cpbcg.outputs.documents.manifest_document`, where every JSON document is built); `plan` reads its timings for the cost model
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

Wall-time accounting (written since issue 34; absent or null in older manifests): per bucket
`wall_s` = {`estimate_s`, `standalone_s`, `warmup_s`, `capture_s` (the capture proper;
the record's own `capture_s` is warm-ups + capture), `verify_s`, `timing_s`, `layouts`,
`total_s`, `other_s` (the rest: rank agreement, bookkeeping)}; top level `wall_s` = {`setup_s`,
`sampling_s` (reading `--trace` and sampling batches), `capture_s`, `verify_s`, `total_s`,
and the buckets' `warmup_s`, `timing_s`, `layouts` summed}. Seconds of wall time on the
capturing machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from cpbcg.errors import CpbcgError, ManifestError
from cpbcg.inputs import load_json, read_input_bytes
from cpbcg.planner.choices import CaptureLayout, CPStrategy
from cpbcg.planner.model.capacity import CaptureSpec, capturable_buckets, local_capacity, minimum_capture_tokens
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.model.selector import BucketTable
from cpbcg.engines.sglang.release import RELEASE

SCHEMA_VERSION = 1
MANIFEST_KEYS = ("cp_size", "cp_strategy", "align_size", "capture_layout", "max_context_size_tokens", "max_capture_requests")
"""Config keys a capture manifest fixes (besides the buckets and, when recorded, the padding factor)."""
REQUIRED_KEYS = ("schema_version", "cp_size", "cp_strategy", "align_size", "capture_layout", "buckets")
MAX_MANIFEST_INT = 2**31 - 1
"""Largest count (tokens, rows, ranks, requests) a manifest may record."""
MEASURED_KEYS = ("capture_s", "graph_bytes", "standalone_graph_bytes", "allocator_bytes", "replay_ms", "eager_ms", "raw_replay_ms")
"""Per-bucket measurements: null (not measured) or a finite number >= 0."""
WALL_KEYS = ("estimate_s", "standalone_s", "warmup_s", "capture_s", "verify_s", "timing_s", "layouts", "total_s")
"""Per-bucket `wall_s` fields: absent, null or a finite number >= 0 (`other_s`, a difference, is not checked)."""


@dataclass(frozen=True)
class ManifestBucket:
    """One captured bucket as the manifest records it (the fields the readers use; the rest of
    the record stays in `Manifest.document`)."""

    capture_num_tokens: int
    """Global bucket `B` (tokens)."""
    local_rows: int
    """Local capacity `C(B)` as captured (rows per rank)."""
    replay_ms: float | None
    """Graph replay time of the capture layout (ms); None in a dry run."""
    eager_ms: float | None
    """The same pieces run eagerly (ms); None when not measured."""
    capture_s: float | None = None
    """Seconds the bucket's capture took, its two warm-ups included (wall time, also in a dry
    run); None when not recorded."""
    warmup_s: float | None = None
    """Of `capture_s`, the warm-ups (`wall_s.warmup_s`); None in manifests before issue 34."""
    wall_total_s: float | None = None
    """Wall seconds of the bucket's capture and verification steps (`wall_s.total_s`); None in
    manifests before issue 34."""


@dataclass(frozen=True)
class Manifest:
    """A loaded, validated capture manifest, typed: what `cpbcg capture` wrote from its
    `CaptureResult` (`cpbcg.outputs.documents.manifest_document`), read back into fields."""

    path: Path
    """Where it was read from."""
    cp_layout: CPLayout
    """CP size, strategy and row alignment the buckets were captured under."""
    capture_spec: CaptureSpec
    """Capture layout of the dummy batches."""
    max_padding_factor: float | None
    """The selector's padding limit recorded with the capture; None when not recorded."""
    buckets: tuple[ManifestBucket, ...]
    """Captured buckets, in capture order (largest first)."""
    dry_run: bool
    """True when no CUDA graph was captured (CPU dry run: capacities come from the model, no timings)."""
    num_layers: int | None
    """Proxy layers the timings were measured with (`model.num_layers`); None when missing."""
    num_hidden_layers: int | None
    """Layers of the real model (`model.num_hidden_layers`), if recorded."""
    document: dict[str, Any]
    """The whole JSON document (versions, device, per-layout checks, ...)."""

    def config_layer(self) -> dict[str, Any]:
        """The settings the manifest fixes, as config keys (`MANIFEST_KEYS`, `buckets`, and
        `max_padding_factor` when recorded): the one place a manifest merges into a deployment
        (`cpbcg.api.load_config_and_deployment` lays it over the config)."""
        cp, spec = self.cp_layout, self.capture_spec
        layer: dict[str, Any] = {
            "cp_size": cp.cp_size, "cp_strategy": cp.strategy.value, "align_size": self.document["align_size"],
            "capture_layout": spec.layout.value, "max_context_size_tokens": spec.max_context_size_tokens,
            "max_capture_requests": spec.max_capture_requests,
        }
        assert set(layer) == set(MANIFEST_KEYS)
        layer["buckets"] = self.table().capture_num_tokens.tolist()
        if self.max_padding_factor is not None:
            layer["max_padding_factor"] = self.max_padding_factor
        return layer

    def table(self) -> BucketTable:
        """Captured buckets with their recorded capacities, ascending."""
        return BucketTable.from_mapping({b.capture_num_tokens: b.local_rows for b in self.buckets})

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
        timed = [b for b in self.buckets if b.replay_ms is not None]
        if len(timed) < 2 or self.dry_run:
            return None
        proxy = self.num_layers
        if proxy is None:
            raise ManifestError(f"{self.path}: model.num_layers: missing, so its timings cannot be scaled to a model")
        target = num_layers if num_layers is not None else (self.num_hidden_layers or proxy)
        if type(target) is not int or target < 1:
            raise ManifestError(f"{self.path}: num_layers: {target!r} is not a positive integer")
        tokens, ms = np.array([(b.capture_num_tokens, b.replay_ms) for b in timed], dtype=float).T
        slope, intercept = (float(v) for v in np.polyfit(tokens, ms, 1))
        notes = []
        if intercept < 0 or slope < 0:
            notes.append(f"the replay fit ({intercept:.4g} ms + B*{slope:.4g}) went below 0 and was clamped to 0")
        graph_fixed, token = max(intercept, 0.0), max(slope, 0.0)
        pairs = [b.eager_ms - b.replay_ms for b in timed if b.eager_ms is not None and b.replay_ms is not None]
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

    def capture_s_per_layer(self) -> float | None:
        """Seconds one bucket's capture took per proxy layer, the warm-ups left out (mean over the
        buckets: `(capture_s - warmup_s) / model.num_layers`); None for a dry run (no graph was
        captured) or a manifest without capture timings or proxy layer count. Capture is host-bound
        (the kernels of every layer are recorded once per bucket), so the figure scales to another
        model by its layer count (docs/costs.md)."""
        if self.dry_run or not self.num_layers:
            return None
        times = [b.capture_s - (b.warmup_s or 0.0) for b in self.buckets if b.capture_s is not None]
        if not times:
            return None
        return max(sum(times) / len(times), 0.0) / self.num_layers

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
    other = _other_document(data)
    if other is not None:
        raise ManifestError(f"{path}: not a capture manifest ({other}); a manifest is what `cpbcg capture -o` writes")
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
    try:
        layout = CPLayout(data["cp_size"], CPStrategy(data["cp_strategy"]), data["align_size"])
        spec = CaptureSpec(CaptureLayout(data["capture_layout"]), data.get("max_context_size_tokens"), data.get("max_capture_requests"), RELEASE)
    except (ValueError, TypeError, CpbcgError) as exc:
        raise ManifestError(f"{path}: bad CP or capture settings: {exc}") from exc
    model = data.get("model")
    model = model if isinstance(model, dict) else {}
    buckets = tuple(ManifestBucket(r["capture_num_tokens"], r["local_rows"], r.get("replay_ms"), r.get("eager_ms"), r.get("capture_s"),
                                   (r.get("wall_s") or {}).get("warmup_s"), (r.get("wall_s") or {}).get("total_s")) for r in records)
    manifest = Manifest(path, layout, spec, data.get("max_padding_factor"), buckets, bool(data.get("dry_run")),
                        _layers(model.get("num_layers")), _layers(model.get("num_hidden_layers")), data)
    _check_capacities(manifest, layout, spec)
    return manifest


def _other_document(data: dict[str, Any]) -> str | None:
    """What another JSON document given as a manifest is, by the keys only it has, or None: a
    plan or replay-check report (`source` and `coverage`), a bucket file (`capture_num_tokens` or
    `prefill` at the top), a document with no `schema_version` or whose buckets are numbers."""
    if "source" in data and "coverage" in data:
        return "a plan or replay-check JSON report: pass its list with --buckets FILE from plan --emit json"
    if "capture_num_tokens" in data or "prefill" in data:
        return "a bucket file: pass it with --buckets"
    if "schema_version" not in data:
        return "no schema_version"
    buckets = data.get("buckets")
    if isinstance(buckets, list) and buckets and not any(isinstance(b, dict) for b in buckets):
        return "its buckets are plain token counts, not captured buckets"
    return None


def _layers(value: object) -> int | None:
    return value if type(value) is int and value >= 1 else None


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
        wall = record.get("wall_s")
        if wall is not None and not isinstance(wall, dict):
            raise ManifestError(f"{path}: buckets[{i}].wall_s: expected an object or null, got {type(wall).__name__} (bucket {bucket})")
        for key in WALL_KEYS:
            value = (wall or {}).get(key)
            if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or value < 0):
                raise ManifestError(f"{path}: buckets[{i}].wall_s.{key}: {value!r} is not a finite number >= 0 (bucket {bucket})")
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


def manifest_bytes(data: dict[str, Any]) -> bytes:
    """Serialise a manifest document (indented JSON, trailing newline)."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
