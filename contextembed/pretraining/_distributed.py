"""Running under ``torchrun --nproc_per_node N``: one process per device, DistributedDataParallel.

Outside ``torchrun`` (no ``WORLD_SIZE`` in the environment) everything runs in one process and the
functions here are no-ops. The backend is ``nccl`` on CUDA and ``gloo`` on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import settings
from .._runtime.devices import resolve_device
from ..errors import SettingError


@dataclass(frozen=True)
class DistributedContext:
    """Where this process sits: ``rank`` of ``world_size`` processes, on ``device``."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()

    def all_reduce_sums(self, values: dict[str, float]) -> dict[str, float]:
        """Sum every value over the processes (identity when alone)."""
        if not self.is_distributed or not values:
            return dict(values)
        keys = sorted(values)
        tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=self.comm_device)
        dist.all_reduce(tensor)
        return dict(zip(keys, tensor.tolist()))

    @property
    def comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")


def world_from_env() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from torchrun's environment (``(0, 1, 0)`` outside it),
    checked by :mod:`contextembed.settings` (``SettingError`` naming the variable)."""
    world_size = settings.whole_number("WORLD_SIZE", 1, minimum=1, hint="the number of processes torchrun started")
    if world_size == 1:
        return 0, 1, 0
    rank = settings.whole_number("RANK", -1, maximum=world_size - 1, hint=f"this process's rank of WORLD_SIZE={world_size}")
    if rank < 0:
        raise SettingError(f"WORLD_SIZE={world_size} but RANK is unset; start the processes with torchrun, which sets both")
    return rank, world_size, settings.whole_number("LOCAL_RANK", 0, hint="this process's rank on its machine")


def setup_distributed(device: str = "auto") -> DistributedContext:
    """Join the process group when run by torchrun, and pick this process's device.

    Parameters
    ----------
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda"``; under torchrun a CUDA device becomes
        ``cuda:LOCAL_RANK``.
    """
    rank, world_size, local_rank = world_from_env()
    resolved = resolve_device(device)
    if world_size == 1:
        return DistributedContext(device=resolved)
    if resolved.type == "cuda":
        resolved = torch.device("cuda", local_rank)
        torch.cuda.set_device(resolved)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if resolved.type == "cuda" else "gloo")
    return DistributedContext(rank=rank, world_size=world_size, local_rank=local_rank, device=resolved)


def teardown_distributed(context: DistributedContext) -> None:
    """Leave the process group (after a final barrier)."""
    if context.is_distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wrap_model(model: torch.nn.Module, context: DistributedContext) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` under torchrun, the model itself otherwise."""
    if not context.is_distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)
