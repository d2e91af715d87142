"""A transformer's first layers alone: the layers above the last one a feature uses are never run.

A feature made of hidden states up to ``k`` (0: the embeddings) of an ``n``-layer encoder needs only
its first ``k`` layers (the seeds' "pruning", done exactly): ``layers=6`` runs half of a 12-layer
model, a learned mix of layers 0-8 runs eight. :func:`truncated` makes a view of the model whose
list of layers is cut after the ``k``-th, sharing every parameter with it (nothing is copied, and
the model is not changed: other threads may be running it).

The view must give the bits a full run gives for those layers. That holds for encoders whose
hidden states are each layer's output as it is (BERT, RoBERTa, MPNet, ELECTRA, DistilBERT,
DeBERTa); a model that treats its last layer's output apart (GPT-2 returns its last hidden state
after a final layer norm) would give other values at the cut. So :class:`LayerPruner` checks each
depth once, on a probe input, against the full model, bit for bit, and runs the full model where a
view differs or the model's list of layers is not found.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Optional

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: where encoders keep their list of layers (BERT-family ``encoder.layer``, DistilBERT
#: ``transformer.layer``, T5-style encoders ``block``, GPT-2 ``h``)
LAYER_LISTS = (("encoder", "layer"), ("transformer", "layer"), ("block",), ("encoder", "block"), ("h",),
               ("layers",), ("encoder", "layers"))


def layer_path(model: nn.Module, n_layers: int) -> Optional[tuple[str, ...]]:
    """The attribute path of ``model``'s list of ``n_layers`` layers, ``None`` if none is found."""
    for path in LAYER_LISTS:
        module: Optional[nn.Module] = model
        for name in path:
            module = getattr(module, name, None)
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return path
    return None


def truncated(model: nn.Module, path: tuple[str, ...], depth: int) -> nn.Module:
    """A view of ``model`` whose list of layers at ``path`` keeps its first ``depth`` layers.

    Each module along ``path`` is a shallow copy with its own table of children; parameters and
    buffers are the model's own.
    """
    view = _shallow(model)
    parent = view
    for name in path[:-1]:
        child = _shallow(getattr(parent, name))
        parent._modules[name] = child
        parent = child
    parent._modules[path[-1]] = nn.ModuleList(list(getattr(parent, path[-1]))[:depth])
    return view


def _shallow(module: nn.Module) -> nn.Module:
    clone = copy.copy(module)
    clone._modules = dict(module._modules)  # its own table of children: the model's stays as it is
    return clone


class LayerPruner:
    """The model to run for hidden states up to a depth: a checked :func:`truncated` view, or the
    full model.

    Parameters
    ----------
    model : nn.Module
        The encoder, run as ``model(**inputs, output_hidden_states=True)``.
    n_layers : int
        Its hidden states, embeddings included.
    probe : dict of Tensor
        A small input on the model's device, on which each view is checked once.
    """

    def __init__(self, model: nn.Module, n_layers: int, probe: dict) -> None:
        self.model, self.n_layers, self.probe = model, n_layers, probe
        self.path = layer_path(model, n_layers - 1)
        self._views: dict[int, nn.Module] = {}
        self._lock = threading.Lock()

    def model_for(self, depth: int) -> nn.Module:
        """What to run for hidden states ``0 .. depth``."""
        if depth >= self.n_layers - 1 or self.path is None:
            return self.model
        view = self._views.get(depth)
        if view is None:
            with self._lock:
                view = self._views.get(depth)
                if view is None:
                    view = self._views[depth] = self._checked(depth)
        return view

    @torch.inference_mode()
    def _checked(self, depth: int) -> nn.Module:
        view = truncated(self.model, self.path, depth)
        full = self.model(**self.probe, output_hidden_states=True).hidden_states
        cut = view(**self.probe, output_hidden_states=True).hidden_states
        if len(cut) == depth + 1 and all(torch.equal(a, b) for a, b in zip(full, cut)):
            return view
        logger.info("%s: the first %d layers alone do not give the full model's hidden states; every layer runs",
                    type(self.model).__name__, depth)
        return self.model


__all__ = ["LAYER_LISTS", "LayerPruner", "layer_path", "truncated"]
