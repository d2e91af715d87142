"""Thinc layer: ELMo's trainable scalar mix of the encoder's layers, ``(layers, tokens, width)`` ->
``(tokens, width)``.

The weights and gamma are thinc parameters (``weights`` ``(layers,)``, ``gamma`` ``(1,)``), so they
are serialized with the downstream component and updated by its optimizer. The forward pass runs
the core torch module (:class:`contextembed.pooling.LayerPooling` with ``combine="scalar_mix"``)
with those parameters through ``torch.func.functional_call``, so the formula, layer norm and layer
dropout are the core's own; the gradient reaches the parameters through torch autograd and stops
there (the encoder is frozen).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from thinc.api import Model
from thinc.types import Floats2d, Floats3d
from thinc.util import torch2xp, xp2torch

from ..pooling._layers import LayerPooling, check_mix_options


def ScalarMix(layer_norm: bool = False, layer_dropout: float = 0.0) -> Model[Floats3d, Floats2d]:
    """Build the layer (registered as ``contextembed.ScalarMix.v1``).

    Dimensions ``nL`` (layers) and ``nI`` (width) are inferred from the first input or set by the
    listener before initialization; ``nO`` is ``nI``.

    Parameters
    ----------
    layer_norm : bool
        Normalise each layer (one mean and variance over all its elements) before mixing.
    layer_dropout : float
        Probability of dropping a whole layer from the mix in training.
    """
    check_mix_options("scalar_mix", layer_norm, layer_dropout)
    return Model(
        "contextembed_scalar_mix",
        forward,
        init=init,
        dims={"nL": None, "nI": None, "nO": None},
        params={"weights": None, "gamma": None},
        attrs={"combine": "scalar_mix", "layer_norm": layer_norm, "layer_dropout": layer_dropout},
    )


def init(model: Model, X: Floats3d | None = None, Y=None) -> None:
    if X is not None:
        model.set_dim("nL", X.shape[0])
        model.set_dim("nI", X.shape[2])
    n_layers = model.get_dim("nL")
    model.set_dim("nO", model.get_dim("nI"))
    # ELMo's initialisation: equal weights (zero logits), gamma 1
    model.set_param("weights", model.ops.alloc1f(n_layers))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def forward(model: Model, X: Floats3d, is_train: bool) -> tuple[Floats2d, Callable]:
    """Mix ``X`` ``(layers, tokens, width)`` into ``(tokens, width)`` with the core torch module."""
    n_layers = model.get_dim("nL")
    if X.shape[0] != n_layers:
        raise ValueError(f"{model.name} was built for {n_layers} layers but received {X.shape[0]}")
    module = LayerPooling(n_layers, "all", "scalar_mix", model.attrs["layer_norm"], model.attrs["layer_dropout"])
    module.train(is_train)
    # (layers, tokens, width)
    hidden = xp2torch(model.ops.asarray(X))
    leaves = {name: xp2torch(model.get_param(name), requires_grad=is_train, device=hidden.device)
              for name in ("weights", "gamma")}
    with torch.set_grad_enabled(is_train):
        params = {f"mix.{name}": value.reshape(module.mix.get_parameter(name).shape) for name, value in leaves.items()}
        # (tokens, width)
        output = torch.func.functional_call(module, params, (hidden,))
    Y = torch2xp(output.detach(), ops=model.ops)

    def backprop(dY: Floats2d) -> Floats3d:
        if is_train:
            torch.autograd.backward(output, xp2torch(model.ops.asarray(dY), device=output.device))
            for name, leaf in leaves.items():
                model.inc_grad(name, torch2xp(leaf.grad, ops=model.ops))
        # the encoder is frozen: no gradient flows into its features
        return model.ops.alloc3f(*X.shape)

    return Y, backprop


__all__ = ["ScalarMix"]
