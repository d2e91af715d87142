"""Thinc layer that pools layers the way :class:`contextembed.pooling.LayerPooling` does.

``scalar_mix`` runs the core torch module. The fixed combinations (``concat`` layer-major along
the width, ``mean``, ``sum``) have no parameters and no gradient to pass on, so they run directly on
the thinc ops' arrays (one copy instead of a torch round trip); a test checks them against the
core module. The scalar-mix weights and gamma are thinc parameters (``weights`` ``(layers,)``, ``gamma``
``(1,)``), so they are serialized with the downstream component and updated by its optimizer. The
forward pass calls the core torch module with those parameters (``torch.func.functional_call``), so
the formula, layer norm and layer dropout are the core's own; the gradient reaches the
parameters through torch autograd and stops there (the encoder is frozen).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from thinc.api import Model
from thinc.types import Floats2d, Floats3d
from thinc.util import torch2xp, xp2torch

from ..pooling.layers import Combine, LayerPooling, check_combine


def LayerPoolingLayer(
    combine: Combine = "scalar_mix", layer_norm: bool = False, layer_dropout: float = 0.0
) -> Model[Floats3d, Floats2d]:
    """Build the layer: ``(layers, tokens, width)`` -> ``(tokens, out_width)``.

    Dimensions ``nL`` (layers) and ``nI`` (width) are inferred from the first input or set by the
    listener before :meth:`initialize`; ``nO`` is ``nL * nI`` for ``concat``, else ``nI``.
    """
    check_combine(combine)
    LayerPooling(1, "all", combine, layer_norm, layer_dropout)  # validates the option combination
    params = {"weights": None, "gamma": None} if combine == "scalar_mix" else {}
    return Model(
        f"contextembed_{combine}",
        forward,
        init=init,
        dims={"nL": None, "nI": None, "nO": None},
        params=params,
        attrs={"combine": combine, "layer_norm": layer_norm, "layer_dropout": layer_dropout},
    )


def init(model: Model, X: Floats3d | None = None, Y=None) -> None:
    if X is not None:
        model.set_dim("nL", X.shape[0])
        model.set_dim("nI", X.shape[2])
    n_layers, width = model.get_dim("nL"), model.get_dim("nI")
    model.set_dim("nO", n_layers * width if model.attrs["combine"] == "concat" else width)
    if model.attrs["combine"] == "scalar_mix":
        # ELMo's initialisation: equal weights (zero logits), gamma 1
        model.set_param("weights", model.ops.alloc1f(n_layers))
        model.set_param("gamma", model.ops.asarray1f([1.0]))


def forward(model: Model, X: Floats3d, is_train: bool) -> tuple[Floats2d, Callable]:
    """Pool ``X`` ``(layers, tokens, width)`` into ``(tokens, out_width)``."""
    n_layers = model.get_dim("nL")
    if X.shape[0] != n_layers:
        raise ValueError(f"{model.name} was built for {n_layers} layers but received {X.shape[0]}")
    combine = model.attrs["combine"]
    if combine in _FIXED:
        Y = _FIXED[combine](model.ops.xp, X)
        return Y, lambda dY: model.ops.alloc3f(*X.shape)
    return _scalar_mix_forward(model, X, is_train)


def _concat(xp, X: Floats3d) -> Floats2d:
    # (layers, tokens, width) -> (tokens, layers * width), layer-major along the width
    return xp.ascontiguousarray(X.transpose(1, 0, 2)).reshape(X.shape[1], X.shape[0] * X.shape[2])


_FIXED: dict[str, Callable] = {
    "concat": _concat,
    "mean": lambda xp, X: X.mean(axis=0),
    "sum": lambda xp, X: X.sum(axis=0),
}
FIXED_COMBINES: tuple[str, ...] = tuple(_FIXED)


def pool_fixed(xp, X: Floats3d, combine: str) -> Floats2d:
    """A parameter-free combination: ``(layers, tokens, width)`` -> ``(tokens, out_width)``."""
    return _FIXED[combine](xp, X)


def _scalar_mix_forward(model: Model, X: Floats3d, is_train: bool) -> tuple[Floats2d, Callable]:
    """The core torch scalar mix, run with this layer's thinc parameters."""
    n_layers = model.get_dim("nL")
    module = LayerPooling(n_layers, "all", model.attrs["combine"], model.attrs["layer_norm"], model.attrs["layer_dropout"])
    module.train(is_train)
    # (layers, tokens, width)
    hidden = xp2torch(model.ops.asarray(X))
    leaves = _torch_params(model, hidden.device, is_train)
    with torch.set_grad_enabled(is_train and bool(leaves)):
        params = {f"mix.{name}": value.reshape(module.mix.get_parameter(name).shape) for name, value in leaves.items()}
        # (tokens, out_width)
        output = torch.func.functional_call(module, params, (hidden,))
    Y = torch2xp(output.detach(), ops=model.ops)

    def backprop(dY: Floats2d) -> Floats3d:
        if leaves:
            torch.autograd.backward(output, xp2torch(model.ops.asarray(dY), device=output.device))
            for name, leaf in leaves.items():
                model.inc_grad(name, torch2xp(leaf.grad, ops=model.ops))
        # the encoder is frozen: no gradient flows into its features
        return model.ops.alloc3f(*X.shape)

    return Y, backprop


def _torch_params(model: Model, device: torch.device, is_train: bool) -> dict[str, torch.Tensor]:
    """The thinc parameters (``weights`` ``(layers,)``, ``gamma`` ``(1,)``) as torch leaf tensors."""
    return {
        name: xp2torch(model.get_param(name), requires_grad=is_train, device=device)
        for name in model.param_names
    }


__all__ = ["FIXED_COMBINES", "LayerPoolingLayer", "pool_fixed"]
