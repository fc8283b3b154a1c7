"""SGLang 0.5.23's prefill capture lists: the default list for a chunk and the named lists
`--buckets NAME:MAX` takes (docs/model.md "SGLang's default list").

The default list restates `generate_prefill_cuda_graph_batch_sizes` (0.5.23
`arg_groups/cuda_graph_hook.py`, the same grid as SGLang main's released
`ServerArgs._generate_piecewise_cuda_graph_tokens`). `LISTS` hands it, with the peers' lists of
`cpbcg.planner.model.bucket_lists`, to the engine-neutral core (`CaptureLists`, the seam in
docs/architecture.md).
"""

from __future__ import annotations

from cpbcg.errors import ConfigError
from cpbcg.planner.model.bucket_lists import MAX_BUCKET_TOKENS, CaptureLists, peer_lists

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
    4608..max_bs step 512, keeping `<= max_bs`: what 0.5.23's `generate_prefill_cuda_graph_batch_sizes`
    (`arg_groups/cuda_graph_hook.py`) and SGLang main's released `_generate_piecewise_cuda_graph_tokens`
    return (no off-grid `max_bs`: 3000 → last bucket 2816). `append_max_bs=True` appends an
    off-grid `max_bs` (`sglang-append`).
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


_BASELINES = {"sglang-default": sglang_default_buckets, **peer_lists(sglang_default_buckets)}

LISTS = CaptureLists(
    default=sglang_default_buckets,
    default_max_tokens=DEFAULT_MAX_BS,
    named={**_BASELINES, "sglang-append": sglang_append_buckets, "sglang-legacy": sglang_default_buckets},
    baselines=tuple(_BASELINES),
)
"""SGLang 0.5.23's capture lists as the core reads them: the default list for a chunk, `sglang-default`
alone meaning `MAX = 8192`, every `--buckets NAME:MAX` generator (`sglang-legacy` is an alias of
`sglang-default`) and the lists of the side-by-side comparison (`plan --compare`)."""
