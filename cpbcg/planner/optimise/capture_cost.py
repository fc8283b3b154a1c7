"""Rough capture cost of a bucket list: startup seconds and graph memory (labelled estimates).

More buckets cost startup time and graph memory, which is why `--target-coverage` asks for the
fewest buckets that reach a coverage target. Without a capture manifest the figures come from a
public measurement of SGLang prefill graphs (SGLang PR #31203, GB300, Kimi K2 TP4): prefill
capture up to 4096 tokens took 22.0 s and 0.26 GiB/GPU, up to 8192 tokens 31.5 s and
0.49 GiB/GPU; four buckets took 76.9 s. Graph memory lives in one shared pool that the largest
bucket sizes, so it scales with the largest bucket; time scales with the count. A manifest
(`cpbcg capture`) replaces both with this deployment's own measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

CITED_S_PER_BUCKET = 76.9 / 4
"""Capture seconds per bucket (SGLang PR #31203: four prefill buckets in 76.9 s on GB300)."""
CITED_MIB_PER_TOKEN = 0.49 * 1024 / 8192
"""Graph pool MiB per token of the largest bucket (SGLang PR #31203: 0.49 GiB/GPU at 8192)."""
CITED_SOURCE = "estimate from SGLang PR #31203 (GB300, Kimi K2): ~19 s per bucket, pool ~0.06 MiB per token of the largest bucket"


@dataclass(frozen=True)
class CaptureEstimate:
    """Estimated startup cost of capturing a list (per GPU)."""

    capture_s: float
    """Capture time of all buckets (s)."""
    graph_mib: float
    """Graph memory pool (MiB)."""
    source: str
    """Where the per-bucket figures come from (cited measurement or a manifest)."""


def estimate_capture(buckets: list[int], s_per_bucket: float | None = None, mib_per_token: float | None = None,
                     source: str | None = None) -> CaptureEstimate:
    """Capture time `len(buckets) * s_per_bucket` and pool memory `max(buckets) * mib_per_token`;
    the cited figures (module doc) stand in for what a manifest did not measure."""
    s = CITED_S_PER_BUCKET if s_per_bucket is None else s_per_bucket
    mib = CITED_MIB_PER_TOKEN if mib_per_token is None else mib_per_token
    label = source if source is not None and (s_per_bucket is not None or mib_per_token is not None) else CITED_SOURCE
    return CaptureEstimate(len(buckets) * s, max(buckets, default=0) * mib, label)
