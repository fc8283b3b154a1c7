"""CP rank groups: which ranks this process runs, and how rows are gathered across ranks.

* `EmulatedGroup`: all `cp_size` ranks in one process (one GPU, or CPU); the gather is a
  concatenation in rank order.
* `DistGroup`: one rank per process under `torchrun --nproc-per-node CP -m cpbcg capture`;
  the gather is `all_gather` over NCCL (or gloo on the CPU for a dry run). Rank 0 writes
  results. Ranks `agree` on every bucket's status (an all-reduce of a flag), so a bucket that
  fails on one rank is skipped on all of them and nobody waits in a gather for a rank that left.

Both return gathered rows as `[cp_size * rows, ...]`, rank 0's rows first.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Protocol

import torch

from cpbcg.errors import CaptureError


PROCESS_GROUP_TIMEOUT_S = 600
"""Seconds a collective may wait for a rank before the process group gives up (a rank that dies
inside a forward would otherwise leave the others waiting for NCCL's default 10-30 minutes)."""


class RankGroup(Protocol):
    cp_size: int
    """Number of CP ranks."""
    local_ranks: tuple[int, ...]
    """Ranks this process computes."""
    is_writer: bool
    """True on the process that prints and writes the manifest."""

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor: ...

    def agree(self, status: int) -> int: ...


class EmulatedGroup:
    """Every rank in this process; gather = concatenation."""

    is_writer = True

    def __init__(self, cp_size: int) -> None:
        self.cp_size = cp_size
        self.local_ranks = tuple(range(cp_size))

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor:
        """`{rank: [rows, ...]}` for every rank → `[cp_size*rows, ...]`."""
        return torch.cat([per_rank[r] for r in range(self.cp_size)])

    def agree(self, status: int) -> int:
        """One process: its own status."""
        return status


class DistGroup:
    """One rank per process (torchrun); gather = all_gather over NCCL (CUDA) or gloo (dry run)."""

    def __init__(self, cp_size: int, rank: int, device: torch.device) -> None:
        self.cp_size = cp_size
        self.local_ranks: tuple[int, ...] = (rank,)
        self.is_writer = rank == 0
        self.device = device

    def gather(self, per_rank: dict[int, torch.Tensor]) -> torch.Tensor:
        """`{my_rank: [rows, ...]}` → `[cp_size*rows, ...]` gathered from every process."""
        import torch.distributed as dist

        (local,) = per_rank.values()
        parts = [torch.empty_like(local) for _ in range(self.cp_size)]
        dist.all_gather(parts, local.contiguous())
        return torch.cat(parts)

    def agree(self, status: int) -> int:
        """The largest status over all ranks (0 = ok on every rank): every rank then takes the
        same decision for a bucket (keep it, or skip it on all ranks)."""
        import torch.distributed as dist

        flag = torch.tensor([status], dtype=torch.int64, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())


def world_size_from_env() -> int:
    """`WORLD_SIZE` set by torchrun (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_group(cp_size: int, want_cuda: bool) -> tuple[RankGroup, torch.device]:
    """Pick the group and device: under torchrun (`WORLD_SIZE > 1`) one rank per process,
    NCCL on `cuda:LOCAL_RANK`, or gloo on the CPU when `want_cuda` is false (a dry run); without
    torchrun, emulation of every rank on `cuda:0` (when `want_cuda` and CUDA is present) or the CPU.

    Raises `CaptureError` if a torchrun world does not equal `cp_size`, if CUDA is wanted but
    missing, or if `LOCAL_RANK` names no visible device.
    """
    world = world_size_from_env()
    if world == 1:
        use_cuda = want_cuda and torch.cuda.is_available()
        return EmulatedGroup(cp_size), torch.device("cuda", 0) if use_cuda else torch.device("cpu")
    if world != cp_size:
        raise CaptureError(f"torchrun started {world} processes but cp_size is {cp_size}; they must be equal")
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not want_cuda:
        device, backend = torch.device("cpu"), "gloo"
    else:
        if not torch.cuda.is_available():
            raise CaptureError("multi-process capture (torchrun) needs CUDA and NCCL; set dry_run for a CPU run over gloo")
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise CaptureError(f"LOCAL_RANK {local_rank} but only {count} CUDA device(s) are visible; start at most {count} processes per node")
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    if not dist.is_initialized():
        timeout = timedelta(seconds=PROCESS_GROUP_TIMEOUT_S)
        if backend == "nccl":
            dist.init_process_group(backend, timeout=timeout, device_id=device)
        else:
            dist.init_process_group(backend, timeout=timeout)
    return DistGroup(cp_size, dist.get_rank(), device), device
