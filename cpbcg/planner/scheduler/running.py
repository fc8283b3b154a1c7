"""The running (decoding) requests, event-driven: slots, resident KV, output reservation.

Every running request decodes one token per decode step (SGLang's running batch), so after
`step` global decode steps a request admitted at step `s0` with `d` tokens left to decode has
`F - step` left (`F = s0 + d`) and has written `kv_tokens + step - s0` KV tokens. SGLang 0.5.23
allocates KV in whole pages, so it holds those tokens rounded up to a page, counted from the
start of its sequence (a cached prefix before them is the cache's). Sums over the set are kept
in O(log n) per request: finishes in a heap by `F`, the requests whose remaining output is
above the clip (they reserve `clip` each) in a heap by the step they cross it, and the count
of requests per sequence-end residue modulo the page size (the page padding, O(page) to sum).
The event loop (simulation.py, kernel.py) keeps these sums inline, by the same arithmetic.
"""

from __future__ import annotations

import heapq


class RunningSet:
    """Requests in the decode batch. `step` counts decode steps run so far (all requests)."""

    def __init__(self, clip_max_new_tokens: int, page_size: int = 1):
        self.clip = clip_max_new_tokens
        self.page_size = page_size
        self._residues = [0] * page_size  # requests by (sequence length - step) mod page_size
        self.step = 0
        self._finish: list[tuple[int, int, int]] = []  # (finish step F, kv_tokens - s0, residue)
        self._above: list[int] = []  # F - clip of requests reserving `clip`
        self.num_requests = 0
        self._below_count = 0
        self._below_finish_sum = 0
        self._held_base_sum = 0

    def add(self, kv_tokens: int, decode_tokens: int, prefix_tokens: int = 0) -> None:
        """A request whose prefill just ended: `kv_tokens` computed (the cached `prefix_tokens`
        before them are not its own), `decode_tokens` >= 1 to go."""
        finish = self.step + decode_tokens
        residue = (prefix_tokens + kv_tokens - self.step) % self.page_size
        self._residues[residue] += 1
        heapq.heappush(self._finish, (finish, kv_tokens - self.step, residue))
        self._held_base_sum += kv_tokens - self.step
        self.num_requests += 1
        if decode_tokens > self.clip:
            heapq.heappush(self._above, finish - self.clip)
        else:
            self._below_count += 1
            self._below_finish_sum += finish

    @property
    def held_tokens(self) -> int:
        """KV tokens the running requests hold: whole pages of prompt and decoded tokens."""
        return self.held_tokens_at(self.step)

    def held_tokens_at(self, step: int) -> int:
        """KV tokens held after decode step `step` (>= `self.step`) if no request finished."""
        held = self._held_base_sum + self.num_requests * step
        page = self.page_size
        if page > 1:
            held += sum(count * (-(r + step) % page) for r, count in enumerate(self._residues) if count)
        return held

    @property
    def reserve_tokens(self) -> int:
        """Sum of `min(remaining output, clip)` (times `new_token_ratio` in the KV budget)."""
        above = len(self._above) * self.clip
        return above + self._below_finish_sum - self._below_count * self.step

    def steps_to_next_finish(self) -> int:
        """Decode steps until the next request finishes (>= 1; the set must not be empty)."""
        return self._finish[0][0] - self.step

    def advance(self, steps: int) -> int:
        """Run `steps` decode steps; returns how many requests finished."""
        self.step += steps
        above = self._above
        while above and above[0] <= self.step:
            crossing = heapq.heappop(above)
            self._below_count += 1
            self._below_finish_sum += crossing + self.clip
        finished = 0
        heap = self._finish
        while heap and heap[0][0] <= self.step:
            finish, base, residue = heapq.heappop(heap)
            self._held_base_sum -= base
            self._residues[residue] -= 1
            self._below_count -= 1
            self._below_finish_sum -= finish
            self.num_requests -= 1
            finished += 1
        return finished
