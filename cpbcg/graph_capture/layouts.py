"""Live layouts to replay per bucket: the capture layout, adversarial ones, and trace samples.

Adversarial layouts need the most local rows a bucket admits (`rows <= C(B)`, `n <= B`): many
short requests of `2*cp_size + 1` tokens each put their one extra token in block 0, which rank 0
owns, so rank 0 fills up while the others stay short (docs/model.md "Layout"). The overflow probe is one
more such request: it needs more rows than `C(B)` and must be refused, never truncated.
Pure numpy (no torch), using the planner's own rules (`CPLayout.model`, `cpbcg.planner.model.strategy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cpbcg.planner.model.capacity import CaptureSpec, capture_pieces
from cpbcg.planner.model.layout import CPLayout
from cpbcg.planner.sampling import sample_graph_batches
from cpbcg.planner.model.selector import BucketTable
from cpbcg.assembly.sources import open_batches


@dataclass(frozen=True)
class LiveLayout:
    """One batch to replay in a bucket."""

    kind: str
    """`capture`, `many_short`, `long_plus_short`, `trace` or `overflow_probe`."""
    extend_seq_lens: tuple[int, ...]
    """Extend tokens per request."""

    @property
    def num_tokens(self) -> int:
        return sum(self.extend_seq_lens)


def rows_needed(extend_seq_lens: list[int] | tuple[int, ...], cp: CPLayout) -> int:
    """Physical CP-local rows the batch needs (the strategy model's `rows_of`)."""
    return cp.model.rows_of(extend_seq_lens)


def _longest_tail(prefix: list[int], budget: int, capacity: int, cp: CPLayout) -> int | None:
    """Largest tail length in [min_request_tokens, budget] keeping rows <= capacity (rows grow with it)."""
    low, high, best = cp.model.min_request_tokens, budget, None
    while low <= high:
        mid = (low + high) // 2
        if rows_needed([mid, *prefix], cp) <= capacity:
            best, low = mid, mid + 1
        else:
            high = mid - 1
    return best


def _most_requests(short: int, bucket: int, capacity: int, cp: CPLayout) -> int:
    """Most `short`-token requests with `count*short <= bucket` and rows <= capacity (both grow
    with the count, so a binary search finds the same count as adding one request at a time)."""
    low, high = 0, bucket // short
    while low < high:
        mid = (low + high + 1) // 2
        if rows_needed([short] * mid, cp) <= capacity:
            low = mid
        else:
            high = mid - 1
    return low


def adversarial_layouts(bucket: int, capacity: int, cp: CPLayout) -> list[LiveLayout]:
    """Worst admitted layouts for one bucket, plus an overflow probe when one exists.

    `many_short`: as many `2cp+1`-token requests as fit, then the longest tail that still fits.
    `long_plus_short`: one long request and a few short ones (like `[1534, 161, 353]`).
    `overflow_probe`: `n <= B` but `rows > C(B)`; the harness must refuse it.
    """
    short = cp.model.adversarial_request_tokens
    count = _most_requests(short, bucket, capacity, cp)
    out: list[LiveLayout] = []
    if count:
        shorts = [short] * count
        tail = _longest_tail(shorts, bucket - short * count, capacity, cp)
        out.append(LiveLayout("many_short", tuple(([tail] if tail else []) + shorts)))
        few = [short] * max(1, count // 8)
        long = _longest_tail(few, bucket - short * len(few), capacity, cp)
        if long:
            out.append(LiveLayout("long_plus_short", (long, *few)))
    probe = [short] * (count + 1)
    if sum(probe) <= bucket and rows_needed(probe, cp) > capacity:
        out.append(LiveLayout("overflow_probe", tuple(probe)))
    return out


def bucket_layouts(bucket: int, capacity: int, cp: CPLayout, spec: CaptureSpec) -> list[LiveLayout]:
    """The capture layout first, then the adversarial ones (duplicates dropped)."""
    layouts = [LiveLayout("capture", tuple(capture_pieces(bucket, cp, spec)))]
    seen = {layouts[0].extend_seq_lens}
    for layout in adversarial_layouts(bucket, capacity, cp):
        if layout.extend_seq_lens not in seen:
            seen.add(layout.extend_seq_lens)
            layouts.append(layout)
    return layouts


def sample_trace_batches(
    trace: Path, table: BucketTable, cp: CPLayout, max_padding_factor: float, samples: int, seed: int
) -> dict[int, list[LiveLayout]]:
    """Up to `samples` batches of `trace` per bucket, among those the runtime selector replays
    in that bucket: the batch needing the most rows first, then a seeded uniform sample
    (`cpbcg.planner.sampling.sample_graph_batches`, one streaming pass)."""
    got = sample_graph_batches(open_batches(trace), table, cp, max_padding_factor, samples, seed, per_bucket=True)
    out: dict[int, list[LiveLayout]] = {}
    for top in got.heaviest:
        picked = got.for_bucket(top.capture_num_tokens)[: max(samples, 0)]
        out[top.capture_num_tokens] = list(dict.fromkeys(LiveLayout("trace", b.extend_seq_lens) for b in picked))
    return out
