"""SGLang 0.5.23's decode CUDA graphs: the list it captures and the rule it replays by.

Each function restates one 0.5.23 function (named in its docstring); tests/test_decode_rules.py
runs the wheel's own function against it on random settings (tests/sglang_oracle.py).

* `decode_cuda_graph_batch_sizes`: `arg_groups/cuda_graph_hook.py::generate_decode_cuda_graph_batch_sizes`;
* `default_decode_max_bs` / `decode_graph_list`: `arg_groups/memory_hook.py::handle_gpu_memory_settings`
  (the default `max_bs` by GPU memory and TP, lowered to `--max-running-requests`, then the list);
* `decode_batch_size_alignment`: `utils/common.py::get_cuda_graph_batch_size_alignment`;
* `decode_batch_sizes_to_capture`: `model_executor/runner/base_cuda_graph_runner.py::get_batch_sizes_to_capture`;
* `decode_replay_sizes`: `decode_cuda_graph_runner.py::can_run_graph` and `_pad_to_bucket`.

Not modelled (said where it matters): Qwen3-VL's `expand_multimodal_decode_graph_to_running_limit`,
the CPU graph list (`--device cpu`), ragged speculative verify graphs, and whether DP attention
needs gathered buffers (`require_gathered_buffer`: given as `gathered_buffer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import NDArray


class DecodeBackend(str, Enum):
    """`--cuda-graph-backend-decode` (0.5.23 `cuda_graph_config.Backend`, decode phase)."""

    full = "full"
    breakable = "breakable"
    disabled = "disabled"


DECODE_FLAGS = ("--cuda-graph-bs-decode", "--cuda-graph-max-bs-decode", "--cuda-graph-backend-decode")
"""0.5.23's decode-phase graph flags (also `--cuda-graph-config '{"decode": {...}}'`,
`--disable-decode-cuda-graph`, `--disable-cuda-graph`, `--disable-cuda-graph-padding`)."""

GRAPH_RESERVE_MIB_PER_BS = 2
"""Memory 0.5.23 reserves per decode `max_bs` for graph buffers (MiB; `reserve_for_graph_mb`,
`arg_groups/memory_hook.py`: `max_bs * 2` in its docstring; more under DP attention)."""


def decode_cuda_graph_batch_sizes(max_bs: int, *, speculative: bool = False, disable_padding: bool = False) -> list[int]:
    """The decode sizes 0.5.23 captures by default for `max_bs` (requests, ascending; `max_bs`
    always last): 1, 2, 4, 8, 12, 16-256 step 8, 272-496 step 16, 512-max_bs step 32; with
    speculative decoding 1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8, 272-max_bs step 16;
    every size 1..max_bs with `--disable-cuda-graph-padding` (it wins over speculative).

    Restates `generate_decode_cuda_graph_batch_sizes` (`arg_groups/cuda_graph_hook.py`)."""
    if disable_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def default_decode_max_bs(gpu_memory_mib: float | None, tp_size: int) -> int:
    """0.5.23's decode `max_bs` when none is given, by GPU memory (MiB, as
    `get_device_memory_capacity` reports it; None: unknown) and TP size: 8 under 20 GiB; 48 (TP < 4)
    or 160 under 35 GiB; 32 or 160 under 60 GiB; 256 or 512 under 160 GiB; 512 above; 160 unknown.

    Restates the GPU-dependent defaults of `handle_gpu_memory_settings` (`arg_groups/memory_hook.py`)."""
    if gpu_memory_mib is None:
        return 160
    if gpu_memory_mib < 20 * 1024:
        return 8
    if gpu_memory_mib < 35 * 1024:
        return 48 if tp_size < 4 else 160
    if gpu_memory_mib < 60 * 1024:
        return 32 if tp_size < 4 else 160
    if gpu_memory_mib < 160 * 1024:
        return 256 if tp_size < 4 else 512
    return 512


@dataclass(frozen=True)
class DecodeGraphList:
    """The decode list as 0.5.23's start-up resolution leaves it (`cuda_graph_config.decode`)."""

    bs: tuple[int, ...]
    """`cuda_graph_config.decode.bs` (requests, as given or generated; not yet filtered)."""
    max_bs: int
    """`cuda_graph_config.decode.max_bs`."""
    rule: str
    """Where `max_bs` came from, in words."""


def decode_graph_list(*, gpu_memory_mib: float | None, tp_size: int, max_bs: int | None = None, bs: list[int] | None = None,
                      max_running_requests: int | None = None, speculative: bool = False,
                      disable_padding: bool = False) -> DecodeGraphList:
    """The decode list and `max_bs` 0.5.23 resolves (GPU device): `max_bs` given, else
    `default_decode_max_bs`; a default `max_bs` above a given `--max-running-requests` is lowered
    to it (a given `max_bs` never is); a given list sets `max_bs = max(bs)`, else the list is
    `decode_cuda_graph_batch_sizes(max_bs)`. Raises ValueError for an empty or non-positive list.

    Restates `handle_gpu_memory_settings` (`arg_groups/memory_hook.py`, the decode part)."""
    if bs is not None and (not bs or min(bs) <= 0):
        raise ValueError(f"--cuda-graph-bs-decode: positive batch sizes needed, got {bs}")
    resolved, rule = max_bs, "given"
    if resolved is None:
        resolved = default_decode_max_bs(gpu_memory_mib, tp_size)
        rule = "0.5.23 default by GPU memory and TP" if gpu_memory_mib is not None else "0.5.23 default (GPU memory unknown)"
        if max_running_requests is not None and resolved > max_running_requests:
            resolved, rule = max_running_requests, "0.5.23 default lowered to --max-running-requests"
    if bs is not None:
        return DecodeGraphList(tuple(bs), max(bs), "max of --cuda-graph-bs-decode")
    return DecodeGraphList(tuple(decode_cuda_graph_batch_sizes(resolved, speculative=speculative, disable_padding=disable_padding)),
                           resolved, rule)


def decode_batch_size_alignment(*, two_batch_overlap: bool = False, gathered_buffer: bool = False, attn_tp_size: int = 1,
                                attn_cp_size: int = 1, hip: bool = False) -> int:
    """The multiple a decode graph's token rows must be: 2 with two-batch overlap, times the
    attention TP size where gathered buffers are used (DP attention), times the attention CP size
    where that is not already a divisor (not on ROCm).

    Restates `get_cuda_graph_batch_size_alignment` (`utils/common.py`)."""
    alignment = 1
    if two_batch_overlap:
        alignment *= 2
    if gathered_buffer:
        alignment *= attn_tp_size
    if not hip and alignment % attn_cp_size != 0:
        alignment *= attn_cp_size
    return alignment


def decode_batch_sizes_to_capture(bs: list[int] | tuple[int, ...], req_pool_size: int, *, alignment: int = 1,
                                  captured_req_width: int = 1, two_batch_overlap: bool = False) -> list[int]:
    """The decode sizes the runner captures (ascending, unique): the request pool (`--max-running-requests`
    per rank) rounded up to `alignment` is added when the list goes above it; sizes whose
    `bs x width` is not a multiple of `alignment` are dropped (width: `captured_req_width`, 1
    under two-batch overlap), so are sizes above the rounded pool. An operator's `1, 2` vanish
    under an alignment of 4. Raises ValueError when nothing is left (0.5.23 asserts).

    Restates `get_batch_sizes_to_capture` (`model_executor/runner/base_cuda_graph_runner.py`)."""
    sizes = list(bs)
    width = 1 if two_batch_overlap else captured_req_width
    pool = -(-req_pool_size // alignment) * alignment
    if max(sizes) > pool:
        sizes.append(pool)
    sizes = sorted({s for s in sizes if s * width % alignment == 0 and s <= pool})
    if sizes and sizes[0] <= 0:
        raise ValueError(f"decode CUDA graph sizes must be positive, got {sizes[0]} (0.5.23 asserts capture_bs[0] > 0)")
    if not sizes:
        raise ValueError(f"no decode CUDA graph size is left to capture (alignment {alignment}, request pool {req_pool_size})")
    return sizes


def decode_replay_sizes(batch_sizes: NDArray[np.int64], captured: list[int] | tuple[int, ...]) -> NDArray[np.int64]:
    """The captured size each decode batch replays (int64, shape of `batch_sizes`): the smallest
    captured size at or above it, 0 where it runs eagerly (above the largest captured size, the
    runner's `max_bs`). No padding-factor limit applies to decode. `batch_sizes`: running requests
    per step (under DP attention with gathered buffers, the largest rank's).

    Restates `DecodeCudaGraphRunner.can_run_graph` (`bs <= max_bs`, padding on) and
    `_pad_to_bucket` (`decode_cuda_graph_runner.py`, `base_cuda_graph_runner.py`)."""
    table = np.asarray(sorted(captured), dtype=np.int64)
    sizes = np.asarray(batch_sizes, dtype=np.int64)
    index = np.searchsorted(table, sizes, side="left")
    out = np.zeros(sizes.shape, dtype=np.int64)
    fits = index < len(table)
    out[fits] = table[index[fits]]
    return out
