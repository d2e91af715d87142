"""Registered builders for spaCy configs. Names are versioned and never change once released.

``contextembed.Encoder.v2`` (``@misc``)
    which encoder the ``contextembed`` component runs (name or path, device, precision, backend,
    windows).
``contextembed.Encoder.v1`` (``@misc``)
    the first, without ``backend`` (the torch path); pipelines saved with it keep loading.
``contextembed.Listener.v2`` (``@architectures``)
    the ``tok2vec`` of a downstream component (ner, tagger, textcat, spancat): chosen layers of the
    upstream encoder, pooled by the ``pooling`` sub-layer chosen in the config, optionally projected.
``contextembed.ScalarMix.v1``, ``ConcatLayers.v1``, ``MeanLayers.v1``, ``SumLayers.v1`` (``@layers``)
    the poolings a listener can use: ``(layers, tokens, width)`` -> ``(tokens, out_width)``.
``contextembed.Listener.v1`` (``@architectures``)
    the first listener, with the pooling named by strings (``combine``, ``layer_norm``,
    ``layer_dropout``); it builds the same model as v2 with the matching pooling layer, so pipelines
    saved with it keep loading.
"""

from __future__ import annotations

from typing import Optional, Union

from spacy.util import registry
from thinc.api import Linear, Model

from .._runtime.backends import Backend
from .._inputs.bounds import check_values
from .._runtime.devices import Precision
from ..pooling._layers import check_mix_options
from ._combine_layers import CombineLayers
from ._listener import ContextListener
from ._loader import EncoderLoader
from ._scalar_mix import ScalarMix
from ._settings import ENCODER_BOUNDS


@registry.misc("contextembed.Encoder.v2")
def encoder_v2(
    name: str,
    device: str = "auto",
    precision: Precision = "auto",
    backend: Backend = "torch",
    window: Optional[int] = None,
    stride: Optional[int] = None,
    batch_tokens: Optional[int] = None,
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
        Which to choose for a task and a machine: ``docs/choosing.md``.
    backend : {"torch", "openvino", "auto"}
        What runs a transformer's forward pass: its own PyTorch
        forward, OpenVINO on a cached export (CPU, the ``openvino`` extra), or the faster of the two
        as measured when the encoder loads. Like ``device`` and ``precision`` it may differ when a
        saved pipeline is loaded: the encoder is frozen and its features are computed again.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    window, stride : int, optional
        Pieces per window and between window starts for docs longer than the model takes;
        ``null``: the model's maximum and half of it.
    batch_tokens : int, optional
        Padded pieces per forward pass; ``null``: the encoder's default for the device.
    """
    check_values({"window": window, "stride": stride, "batch_tokens": batch_tokens}, ENCODER_BOUNDS)
    options: dict = {"device": device, "precision": precision, "backend": backend}
    if batch_tokens is not None:
        options["batch_tokens"] = batch_tokens
    if window is not None:
        options["window"] = window
    if stride is not None:
        options["stride"] = stride
    return EncoderLoader(name, options)


@registry.misc("contextembed.Encoder.v1")
def encoder_v1(
    name: str,
    device: str = "auto",
    precision: Precision = "auto",
    window: Optional[int] = None,
    stride: Optional[int] = None,
    batch_tokens: Optional[int] = None,
) -> EncoderLoader:
    """:func:`encoder_v2` on the torch backend (the first version, which had no ``backend``)."""
    return encoder_v2(name, device, precision, "torch", window, stride, batch_tokens)


@registry.architectures("contextembed.Listener.v2")
def listener_v2(
    pooling: Model,
    upstream: str = "*",
    layers: Union[int, list[int], str] = "all",
    width: Optional[int] = None,
) -> Model:
    """A ``tok2vec`` layer reading an upstream ``contextembed`` component.

    Parameters
    ----------
    pooling : Model[Floats3d, Floats2d]
        How the chosen layers become one vector per token: ``contextembed.ScalarMix.v1`` (trained
        by this component's loss; the encoder stays frozen), ``contextembed.ConcatLayers.v1``,
        ``MeanLayers.v1`` or ``SumLayers.v1``.
    upstream : str
        Name of the ``contextembed`` component, or ``"*"`` for the nearest one before.
    layers : int, list of int, "all" or "hidden"
        Encoder layers to use; negative ints count from the top (``[-4, -3, -2, -1]``: last four).
    width : int, optional
        Project the pooled vectors to this width with a trainable linear layer.

    Returns
    -------
    Model[List[Doc], List[Floats2d]]
        One ``(tokens, width)`` array per doc.
    """
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise ValueError(f"contextembed listener: width must be a positive int or null, got {width!r}")
    projection = Linear(nO=width) if width is not None else None
    return ContextListener(upstream, layers, pooling, projection)


@registry.architectures("contextembed.Listener.v1")
def listener_v1(
    upstream: str = "*",
    layers: Union[int, list[int], str] = "all",
    combine: str = "scalar_mix",
    width: Optional[int] = None,
    layer_norm: bool = False,
    layer_dropout: float = 0.0,
) -> Model:
    """:func:`listener_v2` with the pooling named by ``combine`` (and the scalar-mix options).

    ``combine`` is typed ``str`` (not :data:`~contextembed.pooling._layers.Combine`) so that
    :func:`~contextembed.pooling._layers.check_mix_options` reports a bad value in this library's words.

    ``combine="scalar_mix"`` is ELMo's ``gamma * sum_k softmax(w)_k h_k`` with ``layer_norm`` and
    ``layer_dropout`` (see :class:`contextembed.ScalarMix`); ``concat`` multiplies the width by the
    number of layers; ``mean`` and ``sum`` keep it.
    """
    check_mix_options(combine, layer_norm, layer_dropout)
    pooling = ScalarMix(layer_norm, layer_dropout) if combine == "scalar_mix" else CombineLayers(combine)
    return listener_v2(pooling, upstream, layers, width)


@registry.layers("contextembed.ScalarMix.v1")
def scalar_mix_v1(layer_norm: bool = False, layer_dropout: float = 0.0) -> Model:
    """ELMo's trainable scalar mix of the chosen layers (the formula: :class:`contextembed.ScalarMix`)."""
    return ScalarMix(layer_norm, layer_dropout)


@registry.layers("contextembed.ConcatLayers.v1")
def concat_layers_v1() -> Model:
    """The chosen layers concatenated along the width (layer-major)."""
    return CombineLayers("concat")


@registry.layers("contextembed.MeanLayers.v1")
def mean_layers_v1() -> Model:
    """The mean of the chosen layers."""
    return CombineLayers("mean")


@registry.layers("contextembed.SumLayers.v1")
def sum_layers_v1() -> Model:
    """The sum of the chosen layers."""
    return CombineLayers("sum")


__all__ = ["concat_layers_v1", "encoder_v1", "encoder_v2", "listener_v1", "listener_v2", "mean_layers_v1",
           "scalar_mix_v1", "sum_layers_v1"]
