"""`SchedulerSettings`: what the scheduler simulation assumes, as a plain frozen dataclass.

Field names follow SGLang's server arguments and environment variables where they exist;
`cpbcg.config.SchedulerConfig.to_settings()` validates YAML/CLI values and converts to this.
The planner never imports the pydantic config. A new scheduler setting is its declaration in
`cpbcg.settings` (type, bounds, unit, help, flag, SGLang field) and its field here: the config
model, the command-line option, the deploy flags and the log reader follow from the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

CLIP_MAX_NEW_TOKENS = 4096
"""SGLang's `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION` default (schedule_policy.py)."""
DEFAULT_MAX_TOTAL_TOKENS = 1 << 20
"""KV pool assumed when none is given (tokens); see docs/scheduler.md "Defaults"."""
MAX_REQ_TO_TOKEN_SLOTS = 4096
"""Upper clamp of SGLang's `req_to_token_pool` size (model_runner `max_num_reqs`)."""


def largest_forward_tokens(chunked_prefill_size: int, max_prefill_tokens: int) -> int:
    """The largest prefill forward the scheduler forms (tokens): the chunk, or `max_prefill_tokens`
    when chunking is off (`chunked_prefill_size` -1). The one statement of this rule: the default
    bucket list (`cpbcg.config.default_bucket_spec`), the recommendation's and the guarantee's
    largest forward (`SchedulerSettings.largest_forward_tokens`) all take it."""
    return chunked_prefill_size if chunked_prefill_size > 0 else max_prefill_tokens


@dataclass(frozen=True)
class SchedulerSettings:
    """Settings of the scheduler simulation (docs/scheduler.md). Times in ms or s as named."""

    chunked_prefill_size: int = 8192
    """Chunk budget of one prefill forward (tokens); -1 disables chunking."""
    max_prefill_tokens: int = 16384
    """Token budget of one prefill forward (tokens)."""
    prefill_max_requests: int | None = None
    """Most requests in one prefill forward; None = unlimited."""
    max_running_requests: int | None = None
    """Request slots: running (decoding) requests plus those of the forward being formed.
    None = unlimited without decode, `min(max_total_tokens // 2, 4096)` with decode (SGLang)."""
    prefix_cache: str | int = "off"
    """`off`, `unlimited`, or an LRU size in tokens (over 512-token `hash_ids` blocks)."""
    prefill_fixed_ms: float = 5.0
    """Fixed time of one prefill forward (ms)."""
    prefill_tokens_per_s: float = 40000.0
    """Prefill throughput (tokens/s): a forward of n tokens takes `prefill_fixed_ms + n / this`."""
    rate: float = 4.0
    """Poisson arrival rate for traces without timestamps (requests/s)."""
    time_scale: float = 1.0
    """Inter-arrival gaps are divided by this."""
    seed: int = 0
    """Seed of the synthetic arrivals."""
    decode: bool = True
    """Simulate decode: running requests hold slots and KV and decode steps take time."""
    page_size: int = 1
    """KV page size (tokens): charges are page-rounded, chunks cut to a page boundary."""
    max_total_tokens: int | None = DEFAULT_MAX_TOTAL_TOKENS
    """KV pool (tokens) with decode; None = unbounded."""
    enable_mixed_chunk: bool = False
    """Run running requests' decode tokens inside prefill forwards (SGLang --enable-mixed-chunk)."""
    default_output_tokens: int = 256
    """Output length (tokens) assumed for requests whose trace has none."""
    decode_fixed_ms: float | None = None
    """Fixed time of one decode step (ms); None = `prefill_fixed_ms`."""
    decode_ms_per_request: float | None = None
    """Decode time per running request per step (ms); None = `1000 / prefill_tokens_per_s`
    (one token of the prefill model)."""
    init_new_token_ratio: float = 0.7
    """SGLang `SGLANG_INIT_NEW_TOKEN_RATIO` (x `schedule_conservativeness` 1.0)."""
    min_new_token_ratio_factor: float = 0.14
    """SGLang `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`: min ratio = init x this."""
    new_token_ratio_decay_steps: int = 600
    """SGLang `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`: decode steps from init to min ratio."""
    clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS
    """SGLang `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`: cap of the per-request output reservation."""
    decode_graph_max_bs: int | None = None
    """Largest running batch a decode step runs in a CUDA graph (the captured decode `max_bs`);
    a step above it runs eagerly and takes `eager_decode_factor` x the step time, so eager decode
    lengthens every running request's stay (the decode fall-off feedback). None: every decode
    step takes the graph step time (the default; `cpbcg.api.decode_loads` sets it)."""
    eager_decode_factor: float = 1.0
    """Eager / graph decode step time above `decode_graph_max_bs` (an assumption: `cpbcg.engines.sglang.decode_plan`)."""

    def __post_init__(self) -> None:
        if self.chunked_prefill_size != -1 and self.chunked_prefill_size < self.page_size:
            raise ValueError("chunked_prefill_size must be -1 or at least page_size (no chunk could be cut)")

    @property
    def chunk_tokens(self) -> int | None:
        """Chunk budget, None when chunking is disabled."""
        return None if self.chunked_prefill_size == -1 else self.chunked_prefill_size

    @property
    def largest_forward_tokens(self) -> int:
        """The largest prefill forward (tokens): `largest_forward_tokens` of these settings."""
        return largest_forward_tokens(int(self.chunked_prefill_size), int(self.max_prefill_tokens))

    @property
    def decode_step_fixed_ms(self) -> float:
        return self.prefill_fixed_ms if self.decode_fixed_ms is None else self.decode_fixed_ms

    @property
    def decode_step_ms_per_request(self) -> float:
        if self.decode_ms_per_request is None:
            return 1000.0 / self.prefill_tokens_per_s
        return self.decode_ms_per_request

    @property
    def kv_pool_tokens(self) -> int | None:
        """KV pool in force: only with decode (without it nothing stays resident)."""
        return self.max_total_tokens if self.decode else None

    @property
    def request_slots(self) -> int | None:
        """`max_running_requests` in force (derived with decode when unset, as SGLang does)."""
        if self.max_running_requests is not None or not self.decode:
            return self.max_running_requests
        if self.max_total_tokens is None:
            return MAX_REQ_TO_TOKEN_SLOTS
        return max(1, min(self.max_total_tokens // 2, MAX_REQ_TO_TOKEN_SLOTS))

    @property
    def min_new_token_ratio(self) -> float:
        return min(self.init_new_token_ratio * self.min_new_token_ratio_factor, 1.0)

    @property
    def new_token_ratio_decay(self) -> float:
        """Ratio lost per decode step (SGLang's `new_token_ratio_decay`)."""
        return (self.init_new_token_ratio - self.min_new_token_ratio) / self.new_token_ratio_decay_steps
