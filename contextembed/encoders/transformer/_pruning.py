"""A transformer's first layers alone: the layers above the last one a feature uses are never run.

A feature made of hidden states up to ``k`` (0: the embeddings) of an ``n``-layer encoder needs only
its first ``k`` layers (the seeds' "pruning", done exactly): ``layers=6`` runs half of a 12-layer
model, a learned mix of layers 0-8 runs eight. The model's own forward runs as it is, and stops at
the ``k``-th layer: a forward pre-hook on each of its layers records the layer's input (the hidden
state before it) and, at the layer past the last one wanted, ends the forward pass. Nothing of the
model is copied or changed, and the cut applies only to the thread that asked for it (other
threads may run the whole model at the same time).

Hidden state ``i`` is the input of layer ``i`` for encoders that return each layer's output as it
is (BERT, RoBERTa, MPNet, ELECTRA, DistilBERT, DeBERTa); a model that changes what it returns (GPT-2
gives its last hidden state after a final layer norm) or whose layers are not found would give
other values. So :class:`LayerPruner` checks each depth once, on a probe input, against the whole
model's hidden states, bit for bit, and runs the whole model where they differ.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Optional

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: where encoders keep their list of layers (BERT-family ``encoder.layer``, DistilBERT
#: ``transformer.layer``, T5-style encoders ``block``, GPT-2 ``h``)
LAYER_LISTS = (("encoder", "layer"), ("transformer", "layer"), ("block",), ("encoder", "block"), ("h",),
               ("layers",), ("encoder", "layers"))


def layer_list(model: nn.Module, n_layers: int) -> Optional[nn.ModuleList]:
    """``model``'s list of ``n_layers`` layers, ``None`` if none is found."""
    for path in LAYER_LISTS:
        module: Optional[nn.Module] = model
        for name in path:
            module = getattr(module, name, None)
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return module
    return None


class _Cut(Exception):
    """Ends a forward pass at the layer past the last one wanted."""


class LayerPruner:
    """Hidden states ``0 .. depth`` of a model, computed by its first ``depth`` layers where that is
    checked to give the whole model's bits.

    Parameters
    ----------
    model : nn.Module
        The encoder, run as ``model(**inputs, output_hidden_states=True)``.
    n_layers : int
        Its hidden states, embeddings included.
    probe : dict of Tensor
        A small input on the model's device, on which each depth is checked once.
    """

    def __init__(self, model: nn.Module, n_layers: int, probe: dict) -> None:
        self.model, self.n_layers, self.probe = model, n_layers, probe
        self.layers = layer_list(model, n_layers - 1)
        self._checked: dict[int, bool] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        if self.layers is not None:
            for k, layer in enumerate(self.layers):
                layer.register_forward_pre_hook(self._hook(k), with_kwargs=True)

    def _hook(self, k: int):
        def record(module, args, kwargs):
            active = getattr(self._local, "active", None)
            if active is None:
                return None
            depth, states = active
            states.append(args[0] if args else kwargs["hidden_states"])
            if k == depth:
                raise _Cut
            return None

        return record

    def hidden_states(self, inputs: dict, depth: int) -> Sequence[torch.Tensor]:
        """Hidden states ``0 .. depth`` at least (the whole model's where it runs whole)."""
        if depth < self.n_layers - 1 and self.layers is not None and self._cut_gives_the_bits(depth):
            return self._cut(inputs, depth)
        return self.model(**inputs, output_hidden_states=True).hidden_states

    def runs_whole(self, depth: int) -> bool:
        """Whether hidden states up to ``depth`` take every layer (for tests and logs)."""
        return not (depth < self.n_layers - 1 and self.layers is not None and self._cut_gives_the_bits(depth))

    def _cut(self, inputs: dict, depth: int) -> list[torch.Tensor]:
        states: list[torch.Tensor] = []
        self._local.active = (depth, states)
        try:
            self.model(**inputs)
        except _Cut:
            pass
        finally:
            self._local.active = None
        return states

    @torch.inference_mode()
    def _cut_gives_the_bits(self, depth: int) -> bool:
        known = self._checked.get(depth)
        if known is not None:
            return known
        with self._lock:
            if depth not in self._checked:
                whole = self.model(**self.probe, output_hidden_states=True).hidden_states
                cut = self._cut(self.probe, depth)
                same = len(cut) == depth + 1 and all(torch.equal(a, b) for a, b in zip(whole, cut))
                if not same:
                    logger.info("%s: its first %d layers alone do not give the whole model's hidden states; every "
                                "layer runs", type(self.model).__name__, depth)
                self._checked[depth] = same
        return self._checked[depth]


__all__ = ["LAYER_LISTS", "LayerPruner", "layer_list"]
