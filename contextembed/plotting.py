"""Figures of what an estimator learned: the scalar mix's weight per layer (matplotlib, the ``plot`` extra).

The figure shows which layers a task uses: one bar per selected layer, its height the layer's
softmax weight ``softmax(w)_k`` in ``mix = gamma * sum_k softmax(w)_k * h_k``, and ``gamma`` in
the title (or in the legend, for a tagger that stacks several mixed encoders).

>>> from contextembed.plotting import plot_layer_weights
>>> ax = plot_layer_weights(tagger)  # doctest: +SKIP
>>> ax.figure.savefig("weights.png")  # doctest: +SKIP

Every estimator of :mod:`contextembed.sklearn` that learns a mix gives its weights through
``learned_layer_weights()`` (a list of :class:`LayerWeights`); this module draws them and imports
nothing of scikit-learn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .errors import missing_extra

#: how far the weights of an array may sum from 1 (they are a softmax)
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class LayerWeights:
    """One learned scalar mix, labelled.

    Attributes
    ----------
    name : str
        What learned it (``"TokenEmbedder('minilm-l6')"``); empty for bare weights.
    layers : tuple of str
        One label per selected layer (``"layer 3"``).
    weights : np.ndarray
        ``(layers,)`` softmax weights: non-negative, summing to 1.
    gamma : float or None
        The mix's learned scale.
    """

    name: str
    layers: tuple[str, ...]
    weights: np.ndarray
    gamma: Optional[float] = None


def estimator_name(estimator: object, encoder) -> str:
    """``"TokenEmbedder('minilm-l6')"``: the estimator's class and its encoder (a path by its last part)."""
    spec = os.fspath(encoder)
    return f"{type(estimator).__name__}({os.path.basename(spec.rstrip('/' + os.sep)) or spec!r})"


def layer_labels(layer_indexes: Sequence[int]) -> tuple[str, ...]:
    """``("layer 0", "layer 3", ...)``: the encoder's absolute layer numbers (0: its embeddings)."""
    return tuple(f"layer {int(i)}" for i in layer_indexes)


def plot_layer_weights(source, ax=None, *, layer_names: Optional[Sequence[str]] = None,
                       gamma: Optional[float] = None):
    """A bar chart of learned layer weights.

    Parameters
    ----------
    source : fitted estimator or array-like
        An estimator of :mod:`contextembed.sklearn` that learned a scalar mix (TextEmbedder,
        TokenEmbedder or TextPairEmbedder fitted with ``y`` and ``combine="scalar_mix"``; a
        SequenceTagger or BiLSTMCRFTagger whose embedder has ``combine="scalar_mix"`` over several
        layers), or ``(layers,)`` softmax weights (e.g. ``mix_weights_``).
    ax : matplotlib.axes.Axes, optional
        Where to draw; default a new figure's.
    layer_names : sequence of str, optional
        One label per weight (weights given as an array only; default ``"layer 0"``, ...).
    gamma : float, optional
        The mix's scale, shown in the title (weights given as an array only).

    Returns
    -------
    matplotlib.axes.Axes

    Raises
    ------
    MissingDependencyError
        matplotlib is not installed (``pip install ".[plot]"``).
    ValueError
        The estimator learned no layer weights (its ``combine`` is fixed, it selected one layer,
        or it was fitted without ``y``); the message says which and how to learn them. Weights
        that are not a softmax (negative, not finite, not summing to 1), or ``layer_names`` of
        another length.
    TypeError
        ``source`` is neither; ``layer_names`` or ``gamma`` given with an estimator (it has its own).
    sklearn.exceptions.NotFittedError
        The estimator is not fitted.
    """
    _check_matplotlib()
    mixes = _layer_weights(source, layer_names, gamma)
    if ax is None:
        import matplotlib.pyplot as plt

        width = sum(len(mix.weights) + 1 for mix in mixes)
        figure, ax = plt.subplots(figsize=(max(5.0, 0.55 * width + 1.5), 3.5))
        _draw(ax, mixes)
        figure.tight_layout()
        return ax
    _draw(ax, mixes)
    return ax


def _check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise missing_extra("matplotlib", "plot", "plot_layer_weights") from None


# -- what to draw -------------------------------------------------------------------------------


def _layer_weights(source, layer_names, gamma) -> list[LayerWeights]:
    if hasattr(source, "learned_layer_weights"):
        if layer_names is not None or gamma is not None:
            raise TypeError(f"layer_names and gamma are read from the fitted {type(source).__name__}; pass them only "
                            "with an array of weights")
        return source.learned_layer_weights()
    return [_from_array(source, layer_names, gamma)]


def _from_array(source, layer_names, gamma) -> LayerWeights:
    try:
        weights = np.asarray(source, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"plot_layer_weights takes a fitted contextembed estimator or an array of layer weights, got "
                        f"{type(source).__name__} ({str(source)[:40]!r})") from None
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError(f"layer weights must be a non-empty 1-D array (one weight per layer), got shape {weights.shape}")
    if not np.isfinite(weights).all() or (weights < 0).any() or abs(weights.sum() - 1.0) > SUM_TOLERANCE:
        raise ValueError(f"layer weights must be softmax weights (finite, non-negative, summing to 1), got "
                         f"{np.array2string(weights, precision=3)} (sum {weights.sum():.4g}); pass the normalised "
                         "weights (mix_weights_), not the mix's logits")
    labels = layer_labels(range(len(weights))) if layer_names is None else tuple(map(str, layer_names))
    if len(labels) != len(weights):
        raise ValueError(f"layer_names has {len(labels)} names for {len(weights)} weights; give one name per weight")
    if gamma is not None and (isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.number))
                              or not math.isfinite(gamma)):
        raise ValueError(f"gamma must be a finite number, got {gamma!r}")
    return LayerWeights("", labels, weights, None if gamma is None else float(gamma))


# -- drawing ------------------------------------------------------------------------------------


def _draw(ax, mixes: list[LayerWeights]) -> None:
    """One group of bars per mix, a gap between groups; gamma in the title (one mix) or legend."""
    ticks, labels = [], []
    start = 0
    for mix in mixes:
        x = np.arange(start, start + len(mix.weights))
        bars = ax.bar(x, mix.weights, label=_caption(mix))
        ax.bar_label(bars, fmt="%.2f", fontsize="small")
        ticks.extend(x.tolist())
        labels.extend(mix.layers)
        start += len(mix.weights) + 1
    ax.set_xticks(ticks, labels, rotation=90 if len(ticks) > 12 else 0)
    ax.set_xlabel("layer")
    ax.set_ylabel("softmax weight")
    headroom = 1.15 if len(mixes) == 1 else 1.2 + 0.13 * len(mixes)  # the legend's lines above the bars
    ax.set_ylim(0, max(1e-9, max(float(mix.weights.max()) for mix in mixes)) * headroom)
    if len(mixes) == 1:
        ax.set_title("\n".join(filter(None, [_caption(mixes[0], "learned layer weights"), mixes[0].name])),
                     fontsize="medium")
    else:
        ax.set_title("learned layer weights", fontsize="medium")
        ax.legend(fontsize="small", loc="upper left")


def _caption(mix: LayerWeights, name: str = "") -> str:
    """``"TokenEmbedder('minilm-l6') (gamma = 1.23)"``: what learned the weights (``name``, else the
    mix's own), and its scale."""
    gamma = "" if mix.gamma is None else f"gamma = {mix.gamma:.3g}"
    name = name or mix.name
    return f"{name} ({gamma})" if name and gamma else name or gamma


__all__ = ["LayerWeights", "estimator_name", "layer_labels", "plot_layer_weights"]
