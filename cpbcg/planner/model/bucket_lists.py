"""Named bucket lists, engine-neutral: the peers' lists users compare against (docs/model.md,
docs/optimiser.md) and `CaptureLists`, what an engine hands the core of its own lists (its
default prefill list per chunk, the `--buckets NAME:MAX` names; SGLang 0.5.23's is
`cpbcg.engines.sglang.capture_lists.LISTS`, the seam in docs/architecture.md). `--buckets NAME:MAX`
and the comparison table both read `CaptureLists.named`; nothing registers itself by import.

Peers' lists are sized for their own engines; here they are stretched to `max_tokens` (the
prefill chunk) the way their rules continue, and evaluated under the engine's selector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from cpbcg.errors import ConfigError

MAX_BUCKET_TOKENS = 1 << 22
"""Largest bucket cpbcg accepts (4,194,304 tokens): 32x the largest chunked prefill in use."""
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


def uniform_buckets(max_tokens: int, count: int) -> list[int]:
    """`count` evenly spaced buckets ending at `max_tokens` (`ceil(max_tokens * i / count)`)."""
    _check(max_tokens)
    if count < 1:
        raise ConfigError(f"uniform list needs at least 1 bucket, got {count}")
    return sorted({-(-max_tokens * i // count) for i in range(1, count + 1)})


def _check(max_tokens: int) -> None:
    if max_tokens < 1:
        raise ConfigError(f"the largest bucket must be >= 1 token, got {max_tokens}")


def peer_lists(default: Callable[[int], list[int]]) -> dict[str, Callable[[int], list[int]]]:
    """The peers' lists of the comparison, by spec name: `pow2`, `vllm`, `trtllm`, and `uniform`
    with as many buckets as the engine's `default(max_tokens)` list."""
    def uniform(max_tokens: int) -> list[int]:
        _check(max_tokens)
        return uniform_buckets(max_tokens, len(default(max_tokens)))

    return {"pow2": pow2_buckets, "vllm": vllm_buckets, "trtllm": trtllm_buckets, "uniform": uniform}


@dataclass(frozen=True)
class CaptureLists:
    """An engine's prefill capture lists as the core reads them (the seam, docs/architecture.md);
    SGLang 0.5.23's is `cpbcg.engines.sglang.capture_lists.LISTS`."""

    default: Callable[[int], list[int]]
    """`max_tokens -> buckets` (tokens, ascending): the list the engine captures for a chunk when
    none is given. Raises `ConfigError` for a chunk it cannot build a list for."""
    default_max_tokens: int
    """The `MAX` of a named list given without one (`sglang-default` alone)."""
    named: Mapping[str, Callable[[int], list[int]]]
    """Every `--buckets NAME:MAX` generator, in the order messages list them."""
    baselines: tuple[str, ...]
    """The names in `named` of the side-by-side comparison (`plan --compare`), in its order."""

    @property
    def not_a_spec(self) -> str:
        """Why a spec that names no file, list or generator is refused."""
        return f"not a list like 2048,2304, a file, or one of {', '.join(f'{n}:MAX' for n in self.named)}"
