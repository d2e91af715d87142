"""Registered builders for spaCy configs. Names are versioned and never change once released.

``contextembed.Encoder.v1`` (``@misc``)
    which encoder the ``contextembed`` component runs (name or path, device, precision, windows).
``contextembed.Listener.v1`` (``@architectures``)
    the ``tok2vec`` of a downstream component (ner, tagger, textcat, spancat): chosen layers of the
    upstream encoder, pooled by a trainable scalar mix or a fixed combination, optionally projected.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from spacy.util import registry
from thinc.api import Linear, Model

from ..devices import check_cacheable_precision
from ..pooling.layers import COMBINES, LayerPooling, resolve_layers
from .layer_pooling import LayerPoolingLayer
from .listener import ContextListener
from .loader import EncoderLoader

Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]


@registry.misc("contextembed.Encoder.v1")
def encoder_v1(
    name: str,
    device: str = "auto",
    precision: Precision = "auto",
    window: Optional[int] = None,
    stride: Optional[int] = None,
    batch_tokens: int = 8192,
) -> EncoderLoader:
    """An encoder for the ``contextembed`` component, loaded on first use (never downloaded).

    Parameters
    ----------
    name : str
        What :func:`contextembed.load_encoder` takes: ``"minilm-l6"``, ``"glove-6b-50d"``, a model
        directory, a static-vectors file, or a hub id already in the local cache.
    device : str
        ``"auto"`` (CUDA when present, e.g. after ``spacy.require_gpu()``), ``"cpu"``, ``"cuda:0"``.
    precision : {"auto", "fp32", "bf16", "fp16", "int8"}
        Compute precision of torch encoders (features are float32 either way); ``"auto"`` follows
        :func:`contextembed.load_encoder` (bf16 on CUDA and on CPUs with native bf16, else fp32).
    window, stride : int, optional
        Pieces per window and between window starts for docs longer than the model takes;
        ``null``: the model's maximum and half of it.
    batch_tokens : int
        Padded pieces per forward pass.
    """
    check_cacheable_precision(precision, "contextembed.Encoder.v1")
    options: dict = {"device": device, "precision": precision, "batch_tokens": batch_tokens}
    if window is not None:
        options["window"] = window
    if stride is not None:
        options["stride"] = stride
    return EncoderLoader(name, options)


@registry.architectures("contextembed.Listener.v1")
def listener_v1(
    upstream: str = "*",
    layers: Union[int, list[int], str] = "all",
    combine: str = "scalar_mix",
    width: Optional[int] = None,
    layer_norm: bool = False,
    layer_dropout: float = 0.0,
) -> Model:
    """A ``tok2vec`` layer reading an upstream ``contextembed`` component.

    Parameters
    ----------
    upstream : str
        Name of the ``contextembed`` component, or ``"*"`` for the nearest one before.
    layers : int, list of int, "all" or "hidden"
        Encoder layers to use; negative ints count from the top (``[-4, -3, -2, -1]``: last four).
    combine : {"scalar_mix", "concat", "mean", "sum"}
        ``scalar_mix`` is ELMo's ``gamma * sum_k softmax(w)_k h_k``, trained by this component's
        loss (the encoder stays frozen); ``concat`` multiplies the width by the number of layers.
    width : int, optional
        Project the pooled vectors to this width with a trainable linear layer.
    layer_norm, layer_dropout : bool, float
        Scalar-mix options (see :class:`contextembed.ScalarMix`).

    Returns
    -------
    Model[List[Doc], List[Floats2d]]
        One ``(tokens, width)`` array per doc.
    """
    _check_layers(layers)
    if combine not in COMBINES:
        raise ValueError(
            f"contextembed.Listener.v1: combine={combine!r} is not one of {', '.join(map(repr, COMBINES))}"
        )
    LayerPooling(1, "all", combine, layer_norm, layer_dropout)  # checks the option combination
    if width is not None and width < 1:
        raise ValueError(f"contextembed.Listener.v1: width must be a positive int or null, got {width}")
    pooling = LayerPoolingLayer(combine, layer_norm, layer_dropout)
    projection = Linear(nO=width) if width is not None else None
    return ContextListener(upstream, layers, pooling, projection)


def _check_layers(layers) -> None:
    """Check the form of ``layers`` (the range is checked against the encoder at initialization)."""
    try:
        resolve_layers(layers, 1_000_000)
    except ValueError as error:
        raise ValueError(f"contextembed.Listener.v1: {error}") from None
