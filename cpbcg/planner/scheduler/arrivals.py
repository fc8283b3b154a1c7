"""Requests in arrival order, pulled from a stream of `RequestChunk`s on demand (bounded memory)."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from cpbcg.planner.traces.records import RequestChunk
from cpbcg.planner.scheduler.settings import SchedulerSettings


Item = tuple[int, "list[int] | None", int, int]
"""A waiting-queue item: `(input_tokens, hash_ids or None, output_tokens, images)`."""


class Arrivals:
    """Hands out waiting-queue items `(input_tokens, hash_ids or None, output_tokens, images)`
    (`images`: the request's image count, 0 when the trace has none).

    Arrival times are the trace's (gaps divided by `time_scale`, origin at the first request),
    or a seeded Poisson process at `rate` requests/s for chunks without them. Requests without
    output lengths get `default_output_tokens`. `progress(requests)` is called after each chunk.
    """

    def __init__(
        self,
        chunks: Iterable[RequestChunk],
        settings: SchedulerSettings,
        keep_hashes: bool,
        progress: Callable[[int], None] | None = None,
    ):
        self._chunks = iter(chunks)
        self._rng = np.random.default_rng(settings.seed)
        self._rate, self._scale, self._keep_hashes = settings.rate, settings.time_scale, keep_hashes
        self._default_output = settings.default_output_tokens
        self._progress = progress
        self._origin_s: float | None = None
        self._clock_s = 0.0
        self.requests = self.input_tokens = self.output_tokens = self.default_outputs = 0
        self.synthetic = False

    def next_chunk(self) -> tuple[list[float], list[Item]] | None:
        """The next non-empty chunk's arrival times (s, from the origin, scaled) and waiting-queue
        items, in trace order; None at the end of the trace."""
        while True:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            times, items = self._items_of(chunk)
            if items:
                return times, items

    def next_chunk_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """`next_chunk` as arrays: arrival times [n] float64 (s) and input, output and image
        counts [n] int64 (hash ids are not kept: the compiled loop runs without a prefix cache)."""
        while True:
            chunk = next(self._chunks, None)
            if chunk is None:
                return None
            times, outputs, images = self._arrays_of(chunk)
            if len(times):
                return times, chunk.input_tokens.astype(np.int64, copy=False), outputs, images

    def _items_of(self, chunk: RequestChunk) -> tuple[list[float], list[Item]]:
        times, outputs, images = self._arrays_of(chunk)
        hashes = chunk.hash_ids if self._keep_hashes and chunk.hash_ids is not None else [None] * len(times)
        return times.tolist(), list(zip(chunk.input_tokens.tolist(), hashes, outputs.tolist(), images.tolist()))

    def _arrays_of(self, chunk: RequestChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrival times [n] float64 (s), output and image counts [n] int64 of a chunk; counts
        its requests and tokens and reports progress."""
        n = chunk.num_requests
        if chunk.arrival_s is None:
            self.synthetic = True
            times = self._clock_s + np.cumsum(self._rng.exponential(1.0 / self._rate, n)) / self._scale
        else:
            if self._origin_s is None and n:
                self._origin_s = float(chunk.arrival_s[0])
            times = (chunk.arrival_s - (self._origin_s or 0.0)) / self._scale
        if n:
            self._clock_s = float(times[-1])
        outputs = getattr(chunk, "output_tokens", None)
        if outputs is None:
            outputs = np.full(n, self._default_output, dtype=np.int64)
            self.default_outputs += n
        images = getattr(chunk, "num_images", None)
        self.requests += n
        self.input_tokens += int(chunk.input_tokens.sum())
        self.output_tokens += int(outputs.sum())
        if self._progress is not None:
            self._progress(self.requests)
        return (np.asarray(times, dtype=np.float64), np.asarray(outputs, dtype=np.int64),
                np.zeros(n, dtype=np.int64) if images is None else np.asarray(images, dtype=np.int64))
