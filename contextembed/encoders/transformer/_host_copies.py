"""Device-to-host copies of what a batch computed, consumed when they are ready.

On a CPU a tensor is already on the host: :meth:`HostCopies.put` hands its array to the consumer at
once (batches may run in several threads at a time, :mod:`contextembed._runtime.streams`; nothing is kept);
so does any other device but CUDA, after a plain copy.

On CUDA the batches run one after another in the caller's thread. A copy into pageable memory makes
the host wait for the GPU and then copy again; instead each result is copied with
``non_blocking=True`` into one of two pinned staging buffers, reused from batch to batch, and handed
to its consumer only when the next result is put (or at :meth:`HostCopies.flush`): the host lays out
one batch's rows while the GPU computes the next. Two buffers, because the one being consumed must
not be overwritten by the copy in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import numpy as np
import torch

Consumer = Callable[[np.ndarray], None]


class HostCopies:
    """Copies of device tensors to the host, each handed to its consumer once complete.

    Parameters
    ----------
    device : torch.device
        Where the tensors given to :meth:`put` live.
    """

    def __init__(self, device: torch.device) -> None:
        self.staged = device.type == "cuda"
        self._buffers: list[Optional[torch.Tensor]] = [None, None]
        self._turn = 0
        #: the copy in flight: its event, its host view and its consumer
        self._pending: Optional[tuple[torch.cuda.Event, torch.Tensor, Consumer]] = None

    def put(self, tensor: torch.Tensor, consume: Consumer) -> None:
        """Copy ``tensor`` to the host and call ``consume`` with it as a NumPy array: now on a CPU;
        on CUDA once the copy is complete (at the next :meth:`put` or at :meth:`flush`)."""
        if not self.staged:
            consume(tensor.cpu().numpy())  # the tensor itself on a CPU; another device (MPS) copies and waits
            return
        host = self._buffer(tensor)
        host.copy_(tensor, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.flush()
        self._pending = (event, host, consume)

    def flush(self) -> None:
        """Hand the copy in flight (if any) to its consumer, waiting for it to complete."""
        if self._pending is None:
            return
        event, host, consume = self._pending
        self._pending = None
        event.synchronize()
        consume(host.numpy())

    def _buffer(self, tensor: torch.Tensor) -> torch.Tensor:
        """A pinned host view of ``tensor``'s shape and dtype in the buffer whose turn it is (grown
        when too small)."""
        self._turn = 1 - self._turn
        nbytes = tensor.numel() * tensor.element_size()
        buffer = self._buffers[self._turn]
        if buffer is None or buffer.numel() < nbytes:
            buffer = self._buffers[self._turn] = torch.empty(max(nbytes, 1 << 20), dtype=torch.uint8, pin_memory=True)
        return buffer[:nbytes].view(tensor.dtype).view(tensor.shape)
