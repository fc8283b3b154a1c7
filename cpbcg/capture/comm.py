"""CP rank groups: which ranks this process runs, and how rows are gathered across ranks.

* `EmulatedGroup`: all `cp_size` ranks in one process (one GPU, or CPU); the gather is a
  concatenation in rank order.
* `NcclGroup`: one rank per process under `torchrun --nproc-per-node CP -m cpbcg capture`;
  the gather is `all_gather_into_tensor` over NCCL. Rank 0 writes results.

Both return gathered rows as `[cp_size * rows, ...]`, rank 0's rows first.
"""

from __future__ import annotations

import os
from typing import Protocol

import torch

from cpbcg.errors import CaptureError


class RankGroup(Protocol):
    cp_size: int
    """Number of CP ranks."""
    local_ranks: tuple[int, ...]
    """Ranks this process computes."""
    is_writer: bool
    """True on the process that prints and writes the manifest."""

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor: ...


class EmulatedGroup:
    """Every rank in this process; gather = concatenation."""

    is_writer = True

    def __init__(self, cp_size: int) -> None:
        self.cp_size = cp_size
        self.local_ranks = tuple(range(cp_size))

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor:
        """`{rank: [rows, ...]}` for every rank → `[cp_size*rows, ...]`."""
        return torch.cat([per_rank[r] for r in range(self.cp_size)])


class NcclGroup:
    """One rank per process (torchrun); gather = NCCL all_gather."""

    def __init__(self, cp_size: int, rank: int) -> None:
        self.cp_size = cp_size
        self.local_ranks = (rank,)
        self.is_writer = rank == 0

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor:
        """`{my_rank: [rows, ...]}` → `[cp_size*rows, ...]` gathered from every process."""
        import torch.distributed as dist

        (local,) = per_rank.values()
        local = local.contiguous()
        out = local.new_empty((self.cp_size * local.shape[0], *local.shape[1:]))
        dist.all_gather_into_tensor(out, local)
        return out


def world_size_from_env() -> int:
    """`WORLD_SIZE` set by torchrun (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_group(cp_size: int, want_cuda: bool) -> tuple[RankGroup, torch.device]:
    """Pick the group and device: torchrun with NCCL when `WORLD_SIZE > 1`, else emulation on
    `cuda:0` (when `want_cuda` and CUDA is present) or the CPU.

    Raises `CaptureError` if a torchrun world does not equal `cp_size` or has no CUDA.
    """
    world = world_size_from_env()
    if world == 1:
        use_cuda = want_cuda and torch.cuda.is_available()
        return EmulatedGroup(cp_size), torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    if world != cp_size:
        raise CaptureError(f"torchrun started {world} processes but --cp-size is {cp_size}; they must be equal")
    if not torch.cuda.is_available():
        raise CaptureError("multi-process capture (torchrun) needs CUDA and NCCL; run without torchrun for a dry run")
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    return NcclGroup(cp_size, dist.get_rank()), torch.device("cuda", local_rank)
