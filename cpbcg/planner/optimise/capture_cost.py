"""Capture cost of a bucket list: start-up seconds and graph memory per GPU, per model and GPU.

Without a measurement the figures are estimates from published measurements of SGLang's
breakable prefill graphs (`published.py`, docs/costs.md):

* capture time `startup + K * per_shape`: a fixed start-up plus one shape's capture per bucket,
  scaled by the model's layers (host-bound: not by the layer's width);
* graph memory `pool(rows of the largest bucket) + moe_caches(rows of every bucket) + K * per_graph`:
  one shared pool that the largest bucket's CP-local rows size (rows per rank, not global tokens:
  doubling cp and the chunk leaves it unchanged), for MoE the fused-MoE caches each graph holds
  for its own rows (summed over the list), plus a small per-graph term. A list whose largest bucket serves a
  full chunk also removes the eager activation peak of that chunk (`eager_peak_removed_mib`),
  so the net cost (`net_mib`) can fall below zero.

An SGLang server log's capture lines (or a manifest) replace the estimate: the figures are then
"measured", with the total the log printed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpbcg.planner.hardware import GPU, ModelSpec
from cpbcg.planner.costs import published as pub

__all__ = ["CaptureEstimate", "CaptureModel", "capture_model", "measured_capture_model"]


@dataclass(frozen=True)
class CaptureEstimate:
    """Capture cost of one list (per GPU)."""

    capture_s: float
    """Capture time of all buckets (s)."""
    graph_mib: float
    """Graph memory: the shared pool plus the per-graph term (MiB)."""
    source: str
    """Where the figures come from (the published fit and the model it was scaled to, or a measurement)."""
    eager_peak_removed_mib: float = 0.0
    """The eager activation peak of a full chunk the list removes (MiB; 0 unless its largest bucket serves the chunk)."""
    range_factor: float = 1.0
    """The figures hold within times or divided by this (1: measured)."""
    measured: bool = False
    """Whether the figures were measured on this deployment (a log or a manifest)."""

    @property
    def net_mib(self) -> float:
        """`graph_mib - eager_peak_removed_mib` (MiB; below 0: less memory than no graphs)."""
        return self.graph_mib - self.eager_peak_removed_mib

    def describe(self) -> str:
        """`123 s (82-185 s) and 456 MiB (304-684 MiB)` (one line, no source)."""
        f = self.range_factor
        if f <= 1.0:
            return f"{self.capture_s:,.0f} s and {self.graph_mib:,.0f} MiB"
        return (f"{self.capture_s:,.0f} s ({self.capture_s / f:,.0f}-{self.capture_s * f:,.0f} s) and {self.graph_mib:,.0f} MiB "
                f"({self.graph_mib / f:,.0f}-{self.graph_mib * f:,.0f} MiB)")


@dataclass(frozen=True)
class CaptureModel:
    """Capture cost as a function of the bucket count K and the largest bucket (its tokens and
    CP-local rows): what the optimiser's budgets bound (`within`) and what reports print (`estimate`)."""

    startup_s: float
    """Fixed start-up (s)."""
    s_per_graph: float
    """Capture seconds per bucket."""
    mib_per_row: float
    """Pool MiB per CP-local row of the largest bucket (estimate)."""
    mib_per_token: float
    """Pool MiB per token of the largest bucket (a measurement on this deployment)."""
    mib_per_graph: float
    """MiB each graph holds besides the pool."""
    chunk_tokens: int
    """The chunk (tokens): a largest bucket at least this large serves a full chunk in a graph."""
    eager_peak_mib: float
    """The eager activation peak of a full chunk (MiB) such a list removes."""
    source: str
    range_factor: float = 1.0
    measured: bool = False
    mib_per_graph_row: float = 0.0
    """MiB each graph holds per CP-local row of its own (MoE: its fused-MoE caches; 0 dense)."""

    def capture_s(self, k: int | np.ndarray) -> float | np.ndarray:
        """Capture seconds of `k` buckets (int or array)."""
        return self.startup_s + k * self.s_per_graph

    def graph_mib(self, k: int | np.ndarray, largest_tokens: int | np.ndarray, largest_rows: int | np.ndarray,
                  rows_sum: float | np.ndarray | None = None) -> float | np.ndarray:
        """Graph MiB of `k` buckets whose largest has `largest_tokens` tokens and `largest_rows`
        CP-local rows, and whose rows sum to `rows_sum` (None: `k * largest_rows`, the most they
        can sum to, which is what the budgets bound)."""
        rows_all = k * largest_rows if rows_sum is None else rows_sum
        return (self.mib_per_row * largest_rows + self.mib_per_token * largest_tokens + k * self.mib_per_graph
                + self.mib_per_graph_row * rows_all)

    def within(self, k: int, sizes: np.ndarray, rows: np.ndarray, max_capture_s: float | None, max_graph_mib: float | None) -> np.ndarray:
        """[len(sizes)] bool: whether a list of `k` buckets whose largest is `sizes[i]` (CP-local
        capacity `rows[i]`) keeps within both budgets (None: no budget)."""
        ok = np.ones(len(sizes), dtype=bool)
        if max_capture_s is not None and float(self.capture_s(k)) > max_capture_s:
            ok[:] = False
        if max_graph_mib is not None:
            ok &= np.asarray(self.graph_mib(k, sizes, rows), dtype=np.float64) <= max_graph_mib
        return ok

    def estimate(self, buckets: list[int], largest_rows: int) -> CaptureEstimate:
        """The figures of `buckets` (tokens) whose largest holds `largest_rows` CP-local rows."""
        k, top = len(buckets), max(buckets, default=0)
        removed = self.eager_peak_mib if k and top >= self.chunk_tokens else 0.0
        rows_sum = largest_rows * sum(buckets) / top if top else 0.0  # each bucket's rows in proportion to its tokens
        return CaptureEstimate(float(self.capture_s(k)) if k else 0.0, float(self.graph_mib(k, top, largest_rows, rows_sum)) if k else 0.0,
                               self.source, removed, self.range_factor, self.measured)


def capture_model(model: ModelSpec | None, gpu: GPU | None, tp: int, chunk_tokens: int, chunk_rows: int, dp: int = 1) -> CaptureModel:
    """The published fit scaled to `model` at TP `tp` and attention DP `dp` (None: `hardware.ASSUMED_MODEL`,
    said in the source); `chunk_rows` are a full chunk's CP-local rows (the eager peak a full-chunk list removes)."""
    spec, _, assumed = pub.assumptions(model, gpu)
    per_shape = pub.capture_seconds_per_shape(spec)
    at = f"TP {tp}" + (f", attention DP {dp}" if dp > 1 else "") + (f", {spec.quant_method}" if spec.quant_method else "")
    source = (f"estimate for {pub.describe(spec)} at {at} ({assumed + '; ' if assumed else ''}{per_shape:.2f} s per shape "
              f"({pub.FITTED.capture_ms_per_layer:g} ms x {spec.num_hidden_layers} layers) + {pub.FITTED.capture_startup_s:g} s start-up, "
              f"pool {pub.FITTED.pool_fraction:.2f} x rows x {pub.pool_bytes_per_row(spec, tp, dp):,.0f} B"
              + (f" + MoE caches of every graph's rows x {pub.moe_cache_bytes_per_row(spec, tp, dp):,.0f} B" if spec.num_experts else "")
              + "; fitted to SGLang blog 2026-08-15 prefill-build and cg-memory, breakable graphs; docs/costs.md)")
    return CaptureModel(
        startup_s=pub.FITTED.capture_startup_s, s_per_graph=per_shape, mib_per_row=pub.graph_pool_mib(spec, 1, tp, dp=dp), mib_per_token=0.0,
        mib_per_graph=pub.per_graph_mib(spec), mib_per_graph_row=pub.moe_cache_mib(spec, 1, tp, dp=dp), chunk_tokens=chunk_tokens,
        eager_peak_mib=pub.eager_peak_mib(spec, chunk_rows, tp, dp=dp),
        source=source, range_factor=max(pub.CAPTURE_RANGE, pub.MEMORY_RANGE),
    )


def measured_capture_model(estimate: CaptureModel, s_per_bucket: float | None, mib_per_token: float | None, source: str,
                           mib_scale: float | None = None) -> CaptureModel:
    """`estimate` with what a log or manifest measured on this deployment replacing its terms:
    `s_per_bucket` (the measured total over the buckets captured), `mib_per_token` (the largest
    bucket's pool over its tokens) or `mib_scale` (the measured graph memory over the estimate of
    the list captured, which scales every memory term: for MoE, whose caches follow every graph's
    rows, not only the largest's). A figure not measured stays estimated (and the label says so)."""
    memory = mib_per_token is not None or mib_scale is not None
    if s_per_bucket is None and not memory:
        return estimate
    kept = [] if s_per_bucket is not None and memory else ["capture time" if s_per_bucket is None else "graph memory"]
    label = source + (f"; {kept[0]} estimated ({estimate.source})" if kept else "")
    scale = 1.0 if mib_scale is None else mib_scale
    by_token = mib_per_token is not None and mib_scale is None
    return CaptureModel(
        startup_s=estimate.startup_s if s_per_bucket is None else 0.0,
        s_per_graph=estimate.s_per_graph if s_per_bucket is None else s_per_bucket,
        mib_per_row=0.0 if by_token else estimate.mib_per_row * scale,
        mib_per_token=mib_per_token if by_token and mib_per_token is not None else 0.0,
        mib_per_graph=0.0 if by_token else estimate.mib_per_graph * scale,
        mib_per_graph_row=0.0 if by_token else estimate.mib_per_graph_row * scale,
        chunk_tokens=estimate.chunk_tokens, eager_peak_mib=estimate.eager_peak_mib, source=label,
        range_factor=estimate.range_factor if kept else 1.0, measured=not kept,
    )
