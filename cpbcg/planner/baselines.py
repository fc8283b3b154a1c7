"""Baseline bucket lists users compare against (domain §5, §7), registered in `NAMED_LISTS`
so that `--buckets pow2:8192`, `vllm:8192`, `trtllm:8192`, `uniform:8192` work everywhere.

Each generator takes the largest bucket `max_tokens` (the prefill chunk size). Peers' lists
are sized for their own engines; here they are stretched to `max_tokens` the way their rules
continue, and evaluated under SGLang's selector (the runtime being planned for).
"""

from __future__ import annotations

from cpbcg.errors import ConfigError
from cpbcg.planner.buckets import NAMED_LISTS, sglang_default_buckets


def pow2_buckets(max_tokens: int) -> list[int]:
    """Powers of two up to `max_tokens`, plus `max_tokens` itself if it is not one."""
    _check(max_tokens)
    out = [1 << i for i in range(max_tokens.bit_length()) if 1 << i <= max_tokens]
    return out if out[-1] == max_tokens else out + [max_tokens]


def vllm_buckets(max_tokens: int) -> list[int]:
    """vLLM `cudagraph_capture_sizes` rule: 1, 2, 4, step 8 to 256, step 16 up to the cap
    (`max_cudagraph_capture_size`, here `max_tokens`), plus the cap if off-grid."""
    _check(max_tokens)
    out = [1, 2, 4] + list(range(8, 257, 8)) + list(range(272, max_tokens + 1, 16))
    out = [b for b in out if b <= max_tokens]
    return out if out[-1] == max_tokens else out + [max_tokens]


def trtllm_buckets(max_tokens: int) -> list[int]:
    """TensorRT-LLM piecewise prefill sizes: powers of two to 128, then step 256 (its default
    stops at 3072; continued here to `max_tokens`), plus `max_tokens` if off-grid."""
    _check(max_tokens)
    out = [1 << i for i in range(8)] + list(range(256, max_tokens + 1, 256))
    out = [b for b in out if b <= max_tokens]
    return out if out[-1] == max_tokens else out + [max_tokens]


def uniform_buckets(max_tokens: int, count: int | None = None) -> list[int]:
    """`count` evenly spaced buckets ending at `max_tokens` (`ceil(max_tokens * i / count)`);
    `count` defaults to the size of SGLang's default list for `max_tokens`."""
    _check(max_tokens)
    count = len(sglang_default_buckets(max_tokens)) if count is None else count
    if count < 1:
        raise ConfigError(f"uniform list needs at least 1 bucket, got {count}")
    return sorted({-(-max_tokens * i // count) for i in range(1, count + 1)})


def _check(max_tokens: int) -> None:
    if max_tokens < 1:
        raise ConfigError(f"the largest bucket must be >= 1 token, got {max_tokens}")


BASELINES = {
    "sglang-default": sglang_default_buckets,
    "pow2": pow2_buckets,
    "vllm": vllm_buckets,
    "trtllm": trtllm_buckets,
    "uniform": uniform_buckets,
}
"""Baselines of the side-by-side report, by `--buckets` name."""

NAMED_LISTS.update({name: fn for name, fn in BASELINES.items() if name not in NAMED_LISTS})
