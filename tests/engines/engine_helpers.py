"""Code the Ray and Dask workers of the engine tests import (this folder is on their PYTHONPATH)."""

from __future__ import annotations

import os

from contextembed.engines import BatchEmbedder


class DiesOnce(BatchEmbedder):
    """A BatchEmbedder whose process exits hard (like a killed worker) the first time it sees row
    ``victim``; ``marker`` records that it happened, so the retry goes through."""

    def __init__(self, *args, marker: str, victim: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.marker, self.victim = marker, victim

    def __call__(self, batch):
        if self.victim in batch.column("id").to_pylist() and not os.path.exists(self.marker):
            with open(self.marker, "w") as handle:
                handle.write(str(os.getpid()))
            os._exit(1)
        return super().__call__(batch)


def count_loads() -> None:
    """Wrap the loader of the encoder registry in this process to count its calls."""
    from contextembed.encoders import _registry

    if getattr(_registry.load_encoder, "calls", None) is not None:
        return

    def counting(*args, **kwargs):
        counting.calls += 1
        return original(*args, **kwargs)

    original = _registry.load_encoder
    counting.calls = 0
    _registry.load_encoder = counting


def loads() -> int:
    from contextembed.encoders import _registry

    return getattr(_registry.load_encoder, "calls", 0)
