"""Decode steps by running batch size: what decode CUDA graphs serve (engine-neutral).

A decode graph is chosen per decode step by the number of requests decoding in it, so the
traffic a decode list is judged on is the distribution of decode steps over the running batch
size. The scheduler simulation produces it exactly (every decode-only step, `scheduler.kernel`);
an SGLang log gives a sample of it (one `Decode batch` line every `decode_log_interval` steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from numpy.typing import NDArray


def _ints(values: object) -> NDArray[np.int64]:
    return np.asarray(values, dtype=np.int64).reshape(-1)


@dataclass(frozen=True)
class DecodeSteps:
    """Decode-only steps per running batch size: `batch_sizes` (requests, int64, ascending,
    unique, > 0) and `steps` (int64, same shape: decode steps run at that size). With
    `sampled_every` > 1 each step stands for that many (a log's 1-in-N sample)."""

    batch_sizes: NDArray[np.int64] = field(default_factory=lambda: _ints([]), compare=False)
    steps: NDArray[np.int64] = field(default_factory=lambda: _ints([]), compare=False)
    sampled_every: int = 1
    """Steps each counted step stands for (1: every step counted; `decode_log_interval` for a log)."""

    @classmethod
    def from_histogram(cls, histogram: Iterable[int] | NDArray[np.int64], sampled_every: int = 1) -> "DecodeSteps":
        """From `histogram[bs]` = steps at running batch `bs` (index 0 ignored)."""
        hist = _ints(list(histogram) if not isinstance(histogram, np.ndarray) else histogram)
        sizes = np.flatnonzero(hist)
        sizes = sizes[sizes > 0]
        return cls(sizes.astype(np.int64), hist[sizes].astype(np.int64), sampled_every)

    @classmethod
    def from_samples(cls, batch_sizes: Iterable[int] | NDArray[np.int64], sampled_every: int = 1) -> "DecodeSteps":
        """From one running batch size per sampled step."""
        sizes, counts = np.unique(_ints(list(batch_sizes) if not isinstance(batch_sizes, np.ndarray) else batch_sizes),
                                  return_counts=True)
        keep = sizes > 0
        return cls(sizes[keep].astype(np.int64), counts[keep].astype(np.int64), sampled_every)

    @staticmethod
    def merge(parts: Iterable["DecodeSteps"]) -> "DecodeSteps":
        """The steps of all `parts` together (their `sampled_every` must agree; else the largest is kept)."""
        parts = [p for p in parts if p.num_steps]
        if not parts:
            return DecodeSteps()
        sizes = np.concatenate([p.batch_sizes for p in parts])
        steps = np.concatenate([p.steps for p in parts])
        unique, inverse = np.unique(sizes, return_inverse=True)
        return DecodeSteps(unique.astype(np.int64), np.bincount(inverse, weights=steps, minlength=len(unique)).astype(np.int64),
                           max(p.sampled_every for p in parts))

    @property
    def num_steps(self) -> int:
        """Decode steps counted (not scaled by `sampled_every`)."""
        return int(self.steps.sum())

    @property
    def max_batch(self) -> int:
        """Largest running batch seen (0 without steps)."""
        return int(self.batch_sizes[-1]) if len(self.batch_sizes) else 0

    def quantile(self, q: float) -> int:
        """Smallest running batch size covering at least `q` (0-1) of the steps (0 without steps)."""
        if not self.num_steps:
            return 0
        cum = np.cumsum(self.steps)
        return int(self.batch_sizes[np.searchsorted(cum, q * cum[-1] - 1e-9, side="left")])

    def to_dict(self) -> dict[str, object]:
        """JSON-able: the sizes, the steps and the sampling."""
        return {"batch_sizes": self.batch_sizes.tolist(), "steps": self.steps.tolist(), "sampled_every": self.sampled_every}
