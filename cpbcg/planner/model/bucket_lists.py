"""Every named bucket list, in one registry: SGLang's default prefill list and the peers' lists
users compare against (docs/model.md, docs/optimiser.md). `--buckets NAME:MAX` and the comparison table both read
`NAMED_LISTS`; nothing registers itself by import.

Peers' lists are sized for their own engines; here they are stretched to `max_tokens` (the
prefill chunk) the way their rules continue, and evaluated under SGLang's selector.
"""

from __future__ import annotations

from typing import Callable

from cpbcg.errors import ConfigError

MAX_BUCKET_TOKENS = 1 << 22
"""Largest bucket cpbcg accepts (4,194,304 tokens): 32x the largest chunked prefill in use."""
DEFAULT_MAX_BS = 8192
"""SGLang's default `chunked_prefill_size` (hence prefill `max_bs`) on 80-160 GB GPUs."""
_SGLANG_GRID = (  # (start, stop inclusive, step) — docs/model.md "SGLang's default list"
    (4, 32, 4),
    (48, 256, 16),
    (288, 512, 32),
    (576, 1024, 64),
    (1280, 4096, 256),
)


def sglang_default_buckets(max_bs: int = DEFAULT_MAX_BS, append_max_bs: bool = False) -> list[int]:
    """SGLang's default prefill `capture_num_tokens` for `max_bs` (docs/model.md "SGLang's default list").

    4..32 step 4, 48..256 step 16, 288..512 step 32, 576..1024 step 64, 1280..4096 step 256,
    4608..max_bs step 512, keeping `<= max_bs`: what SGLang main's released
    `_generate_piecewise_cuda_graph_tokens` returns (no off-grid `max_bs`: 3000 → last bucket
    2816). `append_max_bs=True` appends an off-grid `max_bs` (`sglang-append`).
    Counts (on-grid `max_bs`): 2048 → 42, 4096 → 50, 8192 → 58, 16384 → 74.
    Raises `ConfigError` unless `4 <= max_bs <= MAX_BUCKET_TOKENS`.
    """
    if isinstance(max_bs, bool) or not isinstance(max_bs, int) or not 4 <= max_bs <= MAX_BUCKET_TOKENS:
        raise ConfigError(f"max_bs must be between 4 and {MAX_BUCKET_TOKENS}, got {str(max_bs)[:40]}")
    grid = [b for start, stop, step in _SGLANG_GRID for b in range(start, stop + 1, step)]
    grid += list(range(4608, max_bs + 1, 512))
    kept = [b for b in grid if b <= max_bs]
    if append_max_bs and kept[-1] != max_bs:
        kept.append(max_bs)
    return kept


def sglang_append_buckets(max_bs: int = DEFAULT_MAX_BS) -> list[int]:
    """SGLang's grid with an off-grid `max_bs` appended (3000 → ..., 2816, 3000)."""
    return sglang_default_buckets(max_bs, append_max_bs=True)


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


BASELINES: dict[str, Callable[[int], list[int]]] = {
    "sglang-default": sglang_default_buckets,
    "pow2": pow2_buckets,
    "vllm": vllm_buckets,
    "trtllm": trtllm_buckets,
    "uniform": uniform_buckets,
}
"""The lists of the side-by-side comparison (`plan --compare`), by spec name."""

NAMED_LISTS: dict[str, Callable[[int], list[int]]] = {
    **BASELINES,
    "sglang-append": sglang_append_buckets,
    "sglang-legacy": sglang_default_buckets,
}
"""Every `--buckets NAME:MAX` generator (`sglang-legacy` is an alias of `sglang-default`)."""
