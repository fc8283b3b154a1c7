"""What a simulation saw and did: the running tally and the frozen `SimulationSummary`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cpbcg.planner.decode_steps import DecodeSteps

if TYPE_CHECKING:
    from cpbcg.planner.scheduler.arrivals import Arrivals
    from cpbcg.planner.scheduler.settings import SchedulerSettings


@dataclass(frozen=True)
class SimulationSummary:
    """What the simulation saw and did (all counts over the whole trace)."""

    requests: int
    """Requests read from the trace."""
    input_tokens: int
    """Prompt tokens of all requests."""
    cached_tokens: int
    """Prompt tokens served from the prefix cache (not prefilled)."""
    extend_tokens: int
    """Tokens prefilled: `input_tokens - cached_tokens` = the sum of the forwards' prefill parts."""
    batches: int
    """Prefill forwards formed."""
    chunked_requests: int
    """Requests cut into more than one chunk."""
    simulated_s: float
    """Simulated time from the first arrival to the end of the last prefill forward (s)."""
    busy_s: float
    """Simulated time spent in prefill forwards (s)."""
    max_waiting: int
    """Most requests waiting at once (queue length when a forward was formed)."""
    synthetic_arrivals: bool
    """Arrival times were drawn (Poisson at `rate`) because the trace has none."""
    decode: bool = False
    """Decode was simulated (the fields below are zero otherwise)."""
    output_tokens: int = 0
    """Output tokens of all requests (the trace's, or `default_output_tokens` each)."""
    default_output_requests: int = 0
    """Requests that got `default_output_tokens` because the trace has no output length."""
    decode_steps: int = 0
    """Decode-only forwards (steps of the running batch) run."""
    decode_s: float = 0.0
    """Time in decode-only steps within `simulated_s` (s)."""
    blocked_decode_s: float = 0.0
    """Part of `decode_s` run while requests waited that slots or KV kept out (s)."""
    drain_s: float = 0.0
    """Decode after the last prefill forward until the last request finished (s)."""
    decoded_tokens: int = 0
    """Tokens decoded (one per running request per decode step or mixed forward)."""
    mixed_decode_tokens: int = 0
    """Decode tokens run inside prefill forwards (`enable_mixed_chunk`)."""
    max_running: int = 0
    """Most requests decoding at once."""
    peak_kv_tokens: int = 0
    """Most KV tokens resident at once (running requests and the in-progress chunk)."""
    kv_pool_tokens: int | None = None
    """The KV pool in force (`max_total_tokens`), None when unbounded."""
    kv_limited_forwards: int = 0
    """Prefill admissions stopped by the KV budget (`NO_TOKEN`)."""
    slot_limited_forwards: int = 0
    """Prefill admissions stopped by the request slots (`max_running_requests`)."""
    kv_oversized_requests: int = 0
    """Requests that did not fit an empty KV pool and were admitted anyway."""
    retraction_points: int = 0
    """Decode runs whose KV outgrew the pool: SGLang 0.5.23 retracts (requeues) requests there;
    cpbcg keeps them running, so the forwards after the first one are approximate."""
    decode_batches: DecodeSteps = DecodeSteps()
    """Decode-only steps per running batch size (every step; what decode CUDA graphs serve)."""


def backlog_fraction(s: SimulationSummary) -> float:
    """Share of simulated time the server worked while prefill work was pending: prefill
    forwards plus decode steps with requests kept waiting (= prefill busy without decode).
    Near 1, load rather than the traffic's shape decides the forwards."""
    return (s.busy_s + s.blocked_decode_s) / s.simulated_s if s.simulated_s else 0.0


class Tally:
    """Mutable counters of a running simulation."""

    def __init__(self) -> None:
        self.cached_tokens = self.extend_tokens = self.batches = self.chunked_requests = 0
        self.max_waiting = self.decode_steps = self.decoded_tokens = self.mixed_decode_tokens = 0
        self.max_running = self.peak_kv_tokens = 0
        self.kv_limited_forwards = self.slot_limited_forwards = self.kv_oversized_requests = 0
        self.retraction_points = 0
        self.busy_s = self.decode_s = self.blocked_decode_s = 0.0
        self.forced_pending = False
        self.window: tuple[float, float, float] | None = None  # (end s, decode s, blocked s)
        self.decode_hist = np.zeros(1, dtype=np.int64)  # decode-only steps per running batch size

    def close_window(self, now_s: float) -> None:
        """A prefill forward ended at `now_s`: the summary's time window reaches this far."""
        self.window = (now_s, self.decode_s, self.blocked_decode_s)

    def summary(self, arrivals: Arrivals, settings: SchedulerSettings, start_s: float, end_s: float) -> SimulationSummary:
        decode = settings.decode
        window_end_s, decode_s, blocked_s = self.window or (start_s, 0.0, 0.0)
        return SimulationSummary(
            requests=arrivals.requests,
            input_tokens=arrivals.input_tokens,
            cached_tokens=self.cached_tokens,
            extend_tokens=self.extend_tokens,
            batches=self.batches,
            chunked_requests=self.chunked_requests,
            simulated_s=max(0.0, window_end_s - start_s),
            busy_s=self.busy_s,
            max_waiting=self.max_waiting,
            synthetic_arrivals=arrivals.synthetic,
            decode=decode,
            output_tokens=arrivals.output_tokens,
            default_output_requests=arrivals.default_outputs,
            decode_steps=self.decode_steps,
            decode_s=decode_s,
            blocked_decode_s=blocked_s,
            drain_s=max(0.0, end_s - window_end_s),
            decoded_tokens=self.decoded_tokens,
            mixed_decode_tokens=self.mixed_decode_tokens,
            max_running=self.max_running,
            peak_kv_tokens=self.peak_kv_tokens,
            kv_pool_tokens=settings.kv_pool_tokens,
            kv_limited_forwards=self.kv_limited_forwards,
            slot_limited_forwards=self.slot_limited_forwards,
            kv_oversized_requests=self.kv_oversized_requests,
            retraction_points=self.retraction_points,
            decode_batches=DecodeSteps.from_histogram(self.decode_hist),
        )
