"""Capture manifests: what `cpbcg capture` measured, readable without torch.

`capture` writes one (atomically); `plan` reads its timings for the cost model and
`replay-check` reads its buckets and capacities. The schema (version `SCHEMA_VERSION`):

```
{
  "schema_version": 1,
  "cpbcg_version": "0.1.0", "torch_version": "2.x", "cuda_version": "12.x" | null,
  "device_name": "NVIDIA H200" | "cpu", "dry_run": false,
  "cp_size": 4, "cp_strategy": "zigzag", "align_size": 8,
  "capture_layout": "single_request", "max_context_size_tokens": null, "max_capture_requests": null,
  "max_padding_factor": 2.0,
  "model": {"preset": "tiny", "hidden_size": ..., "num_attention_heads": ..., "num_key_value_heads": ...,
            "head_dim": ..., "intermediate_size": ..., "dtype": "bfloat16", "num_layers": 2},
  "buckets": [{"capture_num_tokens": 2048, "local_rows": 512, "capture_s": 0.12,
               "graph_bytes": 123, "allocator_bytes": 456, "replay_ms": 0.8, "eager_ms": 2.1,
               "verified": true, "max_abs_err": 0.003, "layouts_checked": 3}, ...]
}
```
Bucket records are ordered as captured (largest first). Timing and memory fields may be null in
a dry run.

Extra keys written by `cpbcg capture` (optional for readers): top level `emulated_ranks` (all CP
ranks in one process), `seed`, `tolerance` (`atol`, `rtol`, `rule`), `skipped_buckets`
(`[{capture_num_tokens, reason}]`), `model.name`; per bucket `overflow_refused` (true when the
over-capacity probe was refused, null when the bucket admits none) and `layouts` (one entry per
replayed live batch: `kind`, `num_tokens`, `num_requests`, `local_rows`, `max_abs_err`,
`verified`, and for the probe `refused` and `message`).
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
from cpbcg.planner.capacity import CaptureLayout, CaptureSpec, capturable_buckets, local_capacity, minimum_capture_tokens
from cpbcg.planner.layout import CPLayout, CPStrategy
from cpbcg.planner.selector import BucketTable

SCHEMA_VERSION = 1
REQUIRED_KEYS = ("schema_version", "cp_size", "cp_strategy", "align_size", "capture_layout", "buckets")
MAX_MANIFEST_INT = 2**31 - 1
"""Largest count (tokens, rows, ranks, requests) a manifest may record."""
MEASURED_KEYS = ("capture_s", "graph_bytes", "replay_ms", "eager_ms")
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

    def fitted_cost_ms(self) -> tuple[float, float] | None:
        """Least-squares `(graph_fixed_ms, token_ms)` from the replay timings, or None if the
        manifest has fewer than two timed buckets (e.g. a dry run)."""
        timed = [(r["capture_num_tokens"], r["replay_ms"]) for r in self.records if r.get("replay_ms") is not None]
        if len(timed) < 2 or self.data.get("dry_run"):
            return None
        tokens, ms = np.array(timed, dtype=float).T
        slope, intercept = np.polyfit(tokens, ms, 1)
        return max(float(intercept), 0.0), max(float(slope), 0.0)

    def eager_fixed_ms(self) -> float | None:
        """Median of `eager_ms - replay_ms` over timed buckets plus the fitted fixed cost, or None."""
        fitted = self.fitted_cost_ms()
        pairs = [(r["eager_ms"], r["replay_ms"]) for r in self.records if r.get("eager_ms") is not None and r.get("replay_ms") is not None]
        if fitted is None or not pairs:
            return None
        return fitted[0] + max(float(np.median([e - g for e, g in pairs])), 0.0)


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest. Raises `ManifestError` for an unreadable file, a wrong
    schema version, missing keys or buckets, a bucket that failed verification (`"verified":
    false`), a negative or non-finite measurement, or capacities that contradict the capture model."""
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


def _check_capacities(manifest: Manifest, layout: CPLayout, spec: CaptureSpec) -> None:
    table = manifest.table()
    buckets = table.capture_num_tokens.tolist()
    try:
        kept = set(capturable_buckets(buckets, layout))
        expected = local_capacity(buckets, layout, spec)
    except CpbcgError as exc:
        raise ManifestError(f"{manifest.path}: the capture model refuses these settings: {exc}") from exc
    rule = "2*cp_size" if layout.strategy is CPStrategy.zigzag else "cp_size"
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
