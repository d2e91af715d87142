"""Thinc layer: a fixed combination of the encoder's layers (``concat``, ``mean`` or ``sum``),
``(layers, tokens, width)`` -> ``(tokens, out_width)``.

No parameters, so nothing to train; the combination is the core's
(:class:`contextembed.pooling.LayerPooling`), run on the thinc ops' array through DLPack (no copy on
either side). :func:`pool_layers` is the same step for callers outside a model (``doc.tensor``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from thinc.api import Model
from thinc.types import Floats2d, Floats3d
from thinc.util import torch2xp, xp2torch

from ..pooling._layers import FixedCombine, LayerPooling, check_fixed_combine


def CombineLayers(combine: FixedCombine) -> Model[Floats3d, Floats2d]:
    """Build the layer (registered as ``contextembed.ConcatLayers.v1``, ``MeanLayers.v1``,
    ``SumLayers.v1``).

    Dimensions ``nL`` and ``nI`` are inferred from the first input or set by the listener; ``nO`` is
    ``nL * nI`` for ``concat`` (layer-major along the width), else ``nI``.
    """
    check_fixed_combine(combine)
    return Model(
        f"contextembed_{combine}",
        forward,
        init=init,
        dims={"nL": None, "nI": None, "nO": None},
        attrs={"combine": combine},
    )


def init(model: Model, X: Floats3d | None = None, Y=None) -> None:
    if X is not None:
        model.set_dim("nL", X.shape[0])
        model.set_dim("nI", X.shape[2])
    n_layers, width = model.get_dim("nL"), model.get_dim("nI")
    model.set_dim("nO", n_layers * width if model.attrs["combine"] == "concat" else width)


def forward(model: Model, X: Floats3d, is_train: bool) -> tuple[Floats2d, Callable]:
    """Combine ``X`` ``(layers, tokens, width)``; the backward pass has no parameter to reach."""
    n_layers = model.get_dim("nL")
    if X.shape[0] != n_layers:
        raise ValueError(f"{model.name} was built for {n_layers} layers but received {X.shape[0]}")
    Y = pool_layers(model.ops, X, model.attrs["combine"])
    return Y, lambda dY: model.ops.alloc3f(*X.shape)


@torch.no_grad()
def pool_layers(ops, X: Floats3d, combine: FixedCombine) -> Floats2d:
    """``(layers, tokens, width)`` -> ``(tokens, out_width)`` with the core module, on ``ops``' device."""
    module = LayerPooling(X.shape[0], "all", combine)
    return torch2xp(module(xp2torch(ops.asarray(X))), ops=ops)


__all__ = ["CombineLayers", "pool_layers"]
