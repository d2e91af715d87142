"""Layer pooling: which of an encoder's layers to use, and how to combine them.

Two parameters pick every strategy, including each row of the BERT paper's Table 7:

``layers``
    an int (one layer; negative counts from the top), a sequence of ints, ``"all"`` (every layer,
    embedding output included) or ``"hidden"`` (all but the embedding layer, as AllenNLP mixes).
``combine``
    ``"concat"`` (widths add up), ``"sum"``, ``"mean"`` or ``"scalar_mix"`` (ELMo's trainable mix).

The modules are plain torch and take hidden states with the layer axis first:
``(layers, *, width)`` where ``*`` is any number of axes (``words``, or ``batch, seq``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Optional, Union, get_args

import numpy as np
import torch
from torch import nn

from .._inputs.options import check_choice

LayerSpec = Union[int, Sequence[int], Literal["all", "hidden"]]
Combine = Literal["concat", "sum", "mean", "scalar_mix"]
COMBINES: tuple[str, ...] = get_args(Combine)
#: the combinations without trainable weights (what ``doc.tensor`` and the CLI can use as they are)
FixedCombine = Literal["concat", "sum", "mean"]
#: the dtypes pooled features can be delivered in (float16: half the bytes, rounded where pooled)
OutputDtype = Literal["float32", "float16"]


def check_layer_spec(layers: LayerSpec) -> LayerSpec:
    """Check the form of a layer spec without an encoder (ranges are checked by :func:`resolve_layers`).

    A sequence of ints is a list, a tuple, a ``range`` or a 1-D integer array: something that can be
    read again. A generator, a set or another one-pass or unordered iterable is refused (it would be
    consumed by this check, or give the layers in no defined order).

    Raises
    ------
    ValueError
        An unknown string, a bool, a non-int index, an empty or repeated list, an array of another
        shape.
    TypeError
        An iterable that is not a sequence (a generator, a set, a dict), naming ``layers``.
    """
    if isinstance(layers, str):
        if layers not in ("all", "hidden"):
            raise ValueError(
                f"layers={layers!r} is not understood; expected an int, a list of ints, 'all' or 'hidden'"
            )
        return layers
    if isinstance(layers, (bool, np.bool_)):
        raise ValueError(f"layers={layers!r} is not a layer index")
    if _is_index(layers):
        return layers
    items = _indexes(layers)
    if not items:
        raise ValueError("layers=[] selects no layer; give at least one index")
    for item in items:
        if not _is_index(item):
            raise ValueError(f"layer index {item!r} is not an int")
    if len({int(item) for item in items}) != len(items):
        raise ValueError(f"layers={items!r} names a layer twice")
    return layers


def resolve_layers(layers: LayerSpec, n_layers: int) -> tuple[int, ...]:
    """Turn a layer spec into absolute layer indexes in ``range(n_layers)``.

    Layer 0 is the embedding output (the token layer for ELMo, the only layer of static vectors).

    Parameters
    ----------
    layers : int, sequence of int, "all" or "hidden"
        Negative ints count from the top (``-1`` is the last layer).
    n_layers : int
        How many layers the encoder has.

    Raises
    ------
    ValueError
        An index outside ``[-n_layers, n_layers)``, an empty or repeated selection, ``"hidden"``
        on a single-layer encoder, or an unknown string.
    """
    check_layer_spec(layers)
    if isinstance(layers, str):  # "all" or "hidden"
        if layers == "hidden" and n_layers < 2:
            raise ValueError(
                f"layers='hidden' needs an encoder with hidden layers; this one has {n_layers} "
                "layer (use layers='all' or 0)"
            )
        return tuple(range(0 if layers == "all" else 1, n_layers))
    if _is_index(layers):
        return (_absolute(int(layers), n_layers),)
    items = _indexes(layers)
    resolved = tuple(_absolute(item, n_layers) for item in items)
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"layers={list(items)!r} names a layer twice (resolved to {list(resolved)})")
    return resolved


def _indexes(layers) -> list:
    """The items of a sequence spec (a list, tuple, ``range`` or 1-D array), read without consuming it."""
    if isinstance(layers, np.ndarray):
        if layers.ndim != 1:
            raise ValueError(f"layers is an array of shape {layers.shape}; expected a 1-D array of layer indexes")
        return layers.tolist()
    if isinstance(layers, Sequence):
        return list(layers)
    if hasattr(layers, "__iter__"):
        raise TypeError(
            f"layers is a {type(layers).__name__} ({str(layers)[:40]!r}); expected an int, a sequence of ints "
            "(a list, tuple, range or 1-D array, read in its order), 'all' or 'hidden': pass e.g. list(layers)"
        )
    raise ValueError(f"layers={layers!r} is not understood; expected an int, a list of ints, 'all' or 'hidden'")


def _is_index(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _absolute(index, n_layers: int) -> int:
    index = int(index)
    if not -n_layers <= index < n_layers:
        raise ValueError(
            f"layer {index} is out of range for an encoder with {n_layers} layers; valid indexes are "
            f"{-n_layers}..{n_layers - 1} (0 is the embedding layer, -1 the last)"
        )
    return index % n_layers


def check_combine(combine: str) -> str:
    """Return ``combine`` if valid, else raise ``ValueError`` listing the valid values."""
    return check_choice("combine", combine, Combine)


def check_fixed_combine(combine: str, name: str = "combine") -> str:
    """A combination without trainable weights (for outputs nothing trains, e.g. ``doc.tensor``)."""
    check_combine(combine)
    if combine not in get_args(FixedCombine):
        raise ValueError(
            f"{name}={combine!r} has trainable weights and nothing trains them here; use one of "
            f"{', '.join(map(repr, get_args(FixedCombine)))} (train a scalar mix with a listener or an "
            "estimator's fit)"
        )
    return combine


def check_output_dtype(dtype: str, name: str = "dtype") -> str:
    """Return ``dtype`` if it is an :data:`OutputDtype`, else raise ``ValueError`` naming ``name``
    and listing them."""
    return check_choice(name, dtype, OutputDtype)


def as_output_dtype(rows: np.ndarray, dtype: str, where: Callable[[int], str], fix: str) -> np.ndarray:
    """``rows`` in ``dtype`` (an :data:`OutputDtype`), every value finite there.

    Parameters
    ----------
    rows : np.ndarray
        ``(rows, dim)`` features: float32, or already in ``dtype`` (rounded where they were pooled).
    dtype : {"float32", "float16"}
    where : callable
        ``where(row)`` names a row in errors (``"row 3 of out.npy"``, ``"sentence 2, word 0"``).
    fix : str
        What to do about a value beyond ``dtype``'s range (``"use dtype='float32'"``).

    Returns
    -------
    np.ndarray
        ``(rows, dim)`` C-contiguous in ``dtype`` (``rows`` itself when it already is).

    Raises
    ------
    ValueError
        Naming the first row that holds NaN or an infinity, or a value beyond float16's range (an
        infinity once rounded), never handed on as one.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # checked just below
        converted = np.ascontiguousarray(rows, dtype=dtype)
    finite = np.isfinite(converted)
    if finite.all():
        return converted
    row = int(np.argwhere(~finite)[0, 0])
    raise ValueError(f"{where(row)} {_not_finite(np.asarray(rows[row]), dtype, fix)}")


def _not_finite(source: np.ndarray, dtype: str, fix: str) -> str:
    """What is wrong with a row that is not finite in ``dtype`` (``source``: the row as it came)."""
    if np.isfinite(source).all():
        return f"exceeds the {dtype} range (largest magnitude {np.abs(source).max():.4g}); {fix}"
    if source.dtype != np.float32 and not np.isnan(source).any():  # rounded where it was pooled
        return f"is infinite in {dtype}: beyond its range (largest magnitude {np.finfo(dtype).max:.4g}) where it was " \
               f"rounded; {fix}"
    return "holds NaN or infinite values"


def check_mix_options(combine: str, layer_norm: bool = False, layer_dropout: float = 0.0) -> None:
    """The scalar-mix options: valid only with ``combine="scalar_mix"``, dropout in ``[0, 1)``."""
    check_combine(combine)
    if combine != "scalar_mix" and (layer_norm or layer_dropout):
        raise ValueError(
            f"layer_norm and layer_dropout apply to combine='scalar_mix' only, got combine={combine!r}"
        )
    if isinstance(layer_dropout, bool) or not isinstance(layer_dropout, (int, float)) or not 0.0 <= layer_dropout < 1.0:
        raise ValueError(f"layer_dropout must be in [0, 1), got {layer_dropout!r}")


class ScalarMix(nn.Module):
    r"""ELMo's scalar mix (Peters et al. 2018): ``mix = gamma * sum_k softmax(w)_k * h_k``.

    ``w`` starts at zeros (equal weights) and ``gamma`` at 1.0; both are trained by the downstream
    loss. With ``layer_norm=True`` each layer is first normalised with one mean and variance over
    all its (unmasked) elements, not per feature. ``layer_dropout`` drops whole layers from the
    softmax during training (as spacy-curated-transformers does), never all of them at once.

    Parameters
    ----------
    n_layers : int
        How many layers are mixed.
    layer_norm : bool
        Normalise each layer before mixing.
    layer_dropout : float
        Probability of dropping a layer's weight in training mode.
    trainable : bool
        Whether ``weights`` and ``gamma`` receive gradients.
    """

    def __init__(
        self,
        n_layers: int,
        layer_norm: bool = False,
        layer_dropout: float = 0.0,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"ScalarMix needs at least one layer, got n_layers={n_layers}")
        check_mix_options("scalar_mix", layer_norm, layer_dropout)
        self.n_layers = n_layers
        self.layer_norm = layer_norm
        self.layer_dropout = layer_dropout
        self.weights = nn.Parameter(torch.zeros(n_layers), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(()), requires_grad=trainable)

    def normalized_weights(self) -> torch.Tensor:
        """``softmax(w)``: ``(layers,)``."""
        return torch.softmax(self.weights, dim=0)

    def forward(self, hidden: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mix layers.

        Parameters
        ----------
        hidden : torch.Tensor
            ``(layers, *, width)``.
        mask : torch.Tensor, optional
            ``(*)`` bool, true at real positions; used only by ``layer_norm``.

        Returns
        -------
        torch.Tensor
            ``(*, width)``.
        """
        if hidden.shape[0] != self.n_layers:
            raise ValueError(
                f"ScalarMix was built for {self.n_layers} layers but received {hidden.shape[0]} "
                f"(hidden shape {tuple(hidden.shape)})"
            )
        logits = self.weights
        if self.training and self.layer_dropout > 0.0:
            drop = torch.rand_like(logits) < self.layer_dropout
            if bool(drop.all()):
                drop[torch.randint(self.n_layers, (1,))] = False
            logits = logits.masked_fill(drop, float("-inf"))
        # (layers,)
        weights = torch.softmax(logits, dim=0).to(hidden.dtype)
        if self.layer_norm:
            hidden = _masked_layer_norm(hidden, mask)
        # (layers, *, width) -> (*, width)
        mixed = torch.tensordot(weights, hidden, dims=([0], [0]))
        return self.gamma.to(hidden.dtype) * mixed


def _masked_layer_norm(hidden: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Normalise each layer by one mean/variance over its unmasked elements: ``(layers, *, width)``."""
    eps = 1e-12
    width = hidden.shape[-1]
    if mask is None:
        mask = torch.ones(hidden.shape[1:-1], dtype=torch.bool, device=hidden.device)
    # (1, *, 1)
    m = mask.to(hidden.dtype).unsqueeze(0).unsqueeze(-1)
    count = (m.sum() * width).clamp_min(1.0)
    dims = tuple(range(1, hidden.dim()))
    mean = (hidden * m).sum(dim=dims, keepdim=True) / count
    var = (((hidden - mean) * m) ** 2).sum(dim=dims, keepdim=True) / count
    return (hidden - mean) / torch.sqrt(var + eps)


class LayerPooling(nn.Module):
    """Select layers and combine them into one vector per position.

    Parameters
    ----------
    n_layers : int
        How many layers the encoder has (to resolve negative indexes and ``"all"``).
    layers : int, sequence of int, "all" or "hidden"
        Which layers to use (see :func:`resolve_layers`).
    combine : {"concat", "sum", "mean", "scalar_mix"}
        How to combine them. ``scalar_mix`` holds trainable parameters.
    layer_norm, layer_dropout : bool, float
        Passed to :class:`ScalarMix`; only valid with ``combine="scalar_mix"``.

    Notes
    -----
    ``forward`` accepts either all ``n_layers`` layers, or exactly the selected ones (as returned by
    ``encoder.encode(..., layers=pooling.layer_indexes)``).
    """

    def __init__(
        self,
        n_layers: int,
        layers: LayerSpec = "all",
        combine: Combine = "scalar_mix",
        layer_norm: bool = False,
        layer_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_mix_options(combine, layer_norm, layer_dropout)
        self.n_layers = n_layers
        self.layer_indexes = resolve_layers(layers, n_layers)
        self.combine = combine
        self.mix = (
            ScalarMix(len(self.layer_indexes), layer_norm, layer_dropout)
            if combine == "scalar_mix"
            else None
        )

    def to_state(self) -> dict:
        """Plain data (ints, floats, strings, a NumPy array) that :meth:`from_state` rebuilds this
        module from; what estimators persist instead of a torch module (safe for ``skops.io``)."""
        state = {"n_layers": self.n_layers, "layers": list(self.layer_indexes), "combine": self.combine}
        if self.mix is not None:
            state.update(
                weights=self.mix.weights.detach().cpu().numpy().astype("float32"),
                gamma=float(self.mix.gamma.detach()),
                layer_norm=bool(self.mix.layer_norm),
                layer_dropout=float(self.mix.layer_dropout),
            )
        return state

    @classmethod
    def from_state(cls, state: dict) -> "LayerPooling":
        """Rebuild a module written by :meth:`to_state` (in eval mode)."""
        mix_options = {"layer_norm": state.get("layer_norm", False), "layer_dropout": state.get("layer_dropout", 0.0)}
        pooling = cls(state["n_layers"], list(state["layers"]), state["combine"], **(mix_options if "weights" in state else {}))
        if pooling.mix is not None:
            with torch.no_grad():
                pooling.mix.weights.copy_(torch.as_tensor(state["weights"], dtype=torch.float32))
                pooling.mix.gamma.fill_(float(state["gamma"]))
        return pooling.eval()

    def output_width(self, width: int) -> int:
        """Width of the pooled vector given the width of one layer."""
        return width * len(self.layer_indexes) if self.combine == "concat" else width

    def select(self, hidden: torch.Tensor) -> torch.Tensor:
        """Keep the selected layers of ``(layers, *, width)`` (a no-op if already selected)."""
        n_given = hidden.shape[0]
        if n_given == len(self.layer_indexes) and n_given != self.n_layers:
            return hidden
        if n_given != self.n_layers:
            raise ValueError(
                f"expected hidden states with {self.n_layers} layers (all) or "
                f"{len(self.layer_indexes)} (the selected ones), got {n_given}"
            )
        if self.layer_indexes == tuple(range(n_given)):
            return hidden
        index = torch.tensor(self.layer_indexes, device=hidden.device)
        return hidden.index_select(0, index)

    def forward(self, hidden: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pool layers.

        Parameters
        ----------
        hidden : torch.Tensor
            ``(layers, *, width)``: all layers or the selected ones.
        mask : torch.Tensor, optional
            ``(*)`` bool, true at real positions (used by scalar mix layer norm).

        Returns
        -------
        torch.Tensor
            ``(*, out_width)`` with ``out_width = self.output_width(width)``.
        """
        return self.combine_selected(self.select(hidden), mask)

    def combine_selected(self, hidden: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Combine hidden states that are the selected layers, in ``layer_indexes`` order:
        ``(layers, *, width)`` -> ``(*, out_width)`` (unlike :meth:`forward`, never selects again,
        so a selection that reorders every layer is combined as given)."""
        if hidden.shape[0] != len(self.layer_indexes):
            raise ValueError(f"expected the {len(self.layer_indexes)} selected layers, got {hidden.shape[0]}")
        return _COMBINERS[self.combine](self, hidden, mask)


def _concat(pooling: LayerPooling, hidden: torch.Tensor, mask) -> torch.Tensor:
    # (layers, *, width) -> (*, layers, width) -> (*, layers * width), layer-major along the width
    return hidden.movedim(0, -2).reshape(*hidden.shape[1:-1], hidden.shape[0] * hidden.shape[-1])


def _sum(pooling: LayerPooling, hidden: torch.Tensor, mask) -> torch.Tensor:
    return hidden.sum(dim=0)


def _mean(pooling: LayerPooling, hidden: torch.Tensor, mask) -> torch.Tensor:
    return hidden.mean(dim=0)


def _scalar_mix(pooling: LayerPooling, hidden: torch.Tensor, mask) -> torch.Tensor:
    return pooling.mix(hidden, mask)


_COMBINERS = {"concat": _concat, "sum": _sum, "mean": _mean, "scalar_mix": _scalar_mix}


def check_rowwise_pooling(pooling: Optional[LayerPooling], n_layers: int, where: str) -> None:
    """Refuse a ``pooling`` that cannot combine ``n_layers`` selected layers of each row on its own
    (``None``: nothing to check): not a :class:`LayerPooling` (``TypeError``), one for another number
    of layers, or a scalar mix with ``layer_norm``, whose statistics span every row it is given
    (``ValueError``), each naming ``where``."""
    if pooling is None:
        return
    if not isinstance(pooling, LayerPooling):
        raise TypeError(f"{where}: pooling is a {type(pooling).__name__}; expected a LayerPooling")
    if len(pooling.layer_indexes) != n_layers:
        raise ValueError(f"{where}: the pooling combines {len(pooling.layer_indexes)} layers, but {n_layers} are "
                         "selected; build it for the selected layers")
    if pooling.mix is not None and pooling.mix.layer_norm:
        raise ValueError(f"{where}: a scalar mix with layer_norm normalises each layer over all the rows it is "
                         "given, so it cannot pool each text on its own; pool the layers of all texts at once")


def pool_layers_numpy(pooling: LayerPooling, hidden: np.ndarray) -> np.ndarray:
    """NumPy front of :meth:`LayerPooling.combine_selected` (no gradient): the selected layers
    ``(layers, rows, width)`` float32 -> ``(rows, dim)``, rows being words or pieces (a single layer with nothing to weigh is returned as
    it is, shared with the caller, not copied)."""
    if len(hidden) == 1 and pooling.combine in ("concat", "mean", "sum"):
        return hidden[0]  # one layer (static vectors): nothing to combine, and no torch call per sentence
    with torch.no_grad():
        return pooling.combine_selected(torch.from_numpy(np.ascontiguousarray(hidden))).numpy()
