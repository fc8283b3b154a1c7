"""`plan --plot`: the Pareto curve and the forward-size distribution with the chosen buckets (PNG)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cpbcg.planner.optimise.compare import Comparison
    from cpbcg.planner.optimise.recommend import Recommendation


def plot_png(rec: Recommendation, comparison: Comparison) -> bytes:
    """Pareto curve plus the batch-size distribution with the chosen buckets: the PNG's bytes
    (the command writes them with its other outputs, `cpbcg.atomic.OutputGroup`)."""
    import matplotlib

    from cpbcg.planner.words import counted

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=110)
    ks = [p.max_buckets for p in comparison.points]
    left.plot(ks, [p.modelled_ms / 1e3 for p in comparison.points], "o-", color="tab:blue", label="modelled time")
    left.set_xlabel("buckets (K)")
    left.set_ylabel("modelled prefill time (s)", color="tab:blue")
    left.set_title("Best list of at most K buckets")
    cov = left.twinx()
    cov.plot(ks, [100 * p.coverage for p in comparison.points], "s--", color="tab:green", label="graph batches")
    cov.set_ylabel("forwards replayed in graphs (%)", color="tab:green")
    cov.set_ylim(0, 100)  # a share: the axis stops at 100%
    cov.lines[-1].set_clip_on(False)  # markers at 100% stay whole
    beyond = []
    for r in comparison.reports[1:]:
        k = len(r.evaluation.buckets)
        if k <= max(ks):
            left.plot([k], [r.modelled_ms / 1e3], "x", markersize=9, label=r.name)
        else:
            beyond.append(f"{r.name} ({counted(k, 'bucket')})")
    if beyond:  # lists longer than the curve are said, not silently dropped
        left.plot([], [], " ", label=f"not drawn (more than {max(ks)} buckets): " + ", ".join(beyond))
    left.legend(loc="center right", fontsize=8)
    d = rec.demand
    right.hist(d.num_tokens, bins=120, weights=d.counts, color="tab:gray")
    right.set_yscale("log")
    for b in rec.buckets:
        right.axvline(b, color="tab:red", linewidth=0.6, alpha=0.7)
    right.set_xlabel("batch tokens n (red: recommended buckets)")
    right.set_ylabel("forwards")
    right.set_title(f"Batch sizes and the {counted(len(rec.buckets), 'recommended bucket')}")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()
