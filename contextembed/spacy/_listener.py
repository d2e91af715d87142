"""The listener layer: a downstream component's view of an upstream ``contextembed`` component.

``Model[List[Doc], List[Floats2d]]``: for each doc, the chosen encoder layers are pooled by the
``pooling`` sub-layer (``contextembed.ScalarMix.v1``, ``ConcatLayers.v1``, ``MeanLayers.v1`` or
``SumLayers.v1``: any ``Model[Floats3d, Floats2d]`` over ``(layers, tokens, width)``) and optionally
projected by a second sub-layer. The upstream component encodes each batch once and sends it to all
its listeners; a listener that gets docs it was not sent (a frozen upstream, a pipeline that batches
differently) asks the upstream to encode them, so it never fails and never reads stale features.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional, Union

import numpy as np
from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d

from ..pooling._layers import check_layer_spec, resolve_layers
from ._doc_features import DocFeatures, FeatureCache
from ._upstream import Upstream

LayersConfig = Union[int, list[int], str]


class ContextListener(Model):
    """Listens to the ``contextembed`` component named ``upstream_name`` (``"*"``: any).

    Parameters
    ----------
    upstream_name : str
        Name of the upstream component, or ``"*"`` for the first ``contextembed`` component.
    layers : int, list of int, "all" or "hidden"
        Encoder layers to pool (negative counts from the top); checked against the encoder when
        the pipeline is initialized.
    pooling : Model
        ``(layers, tokens, width)`` -> ``(tokens, out_width)``, e.g.
        :func:`~contextembed.spacy.architectures.scalar_mix_v1` or
        :func:`~contextembed.spacy.architectures.concat_layers_v1`.
    projection : Model, optional
        A ``Floats2d -> Floats2d`` layer applied after pooling (``Linear`` for ``width``).
    """

    name = "contextembed_listener"

    def __init__(
        self,
        upstream_name: str,
        layers: LayersConfig,
        pooling: Model,
        projection: Optional[Model] = None,
    ) -> None:
        check_layer_spec(layers)
        sublayers = [pooling] if projection is None else [pooling, projection]
        width = projection.maybe_get_dim("nO") if projection is not None else None
        Model.__init__(
            self,
            self.name,
            forward,
            init=init,
            layers=sublayers,
            dims={"nO": width},
            attrs={"upstream": upstream_name, "layers": layers},
        )
        self.upstream_name = upstream_name
        #: the linked component, set by ``ContextEmbedder.add_listener``
        self.upstream: Optional[Upstream] = None
        self.cache = FeatureCache()

    def receive(self, docs: Sequence[Doc], features: Sequence[DocFeatures]) -> None:
        """Take the features the upstream component computed for a batch."""
        self.cache.put(docs, features)

    def connected_upstream(self) -> Upstream:
        """The linked upstream component; raise a readable error when there is none."""
        if self.upstream is None:
            raise ValueError(
                f"a contextembed listener (upstream={self.upstream_name!r}) is not connected to any "
                "'contextembed' component: add one before the listening component, e.g. "
                "nlp.add_pipe('contextembed', first=True), and set the listener's upstream to its "
                "name or '*'"
            )
        return self.upstream

    def layer_indexes(self) -> tuple[int, ...]:
        """The absolute encoder layers this listener pools, resolved against the upstream encoder."""
        upstream = self.connected_upstream()
        n_layers = upstream.encoder.n_layers
        try:
            return resolve_layers(self.attrs["layers"], n_layers)
        except ValueError as error:
            raise ValueError(
                f"contextembed listener (upstream={self.upstream_name!r}): layers="
                f"{self.attrs['layers']!r} does not fit the encoder {upstream.encoder.spec!r}: {error}"
            ) from None

    def doc_layers(self, docs: Sequence[Doc]) -> list[np.ndarray]:
        """The pooled layers of each doc: ``(layers, tokens, width)`` float32 per doc.

        Taken from the batches the upstream sent, else from layers stored on the doc, else
        computed by the upstream encoder now.
        """
        upstream = self.connected_upstream()
        index = self.layer_indexes()
        found: list[Optional[np.ndarray]] = []
        for doc in docs:
            features = self.cache.get(doc) or upstream.stored_features(doc)
            found.append(None if features is None else features.select(index))
        missing = [i for i, array in enumerate(found) if array is None]
        if missing:
            computed = upstream.encode_docs([docs[i] for i in missing], index)
            for i, features in zip(missing, computed):
                found[i] = features.select(index)  # a cached entry may hold more layers
        return found  # type: ignore[return-value]


def init(model: ContextListener, X=None, Y=None) -> None:
    """Size the pooling (and projection) from the upstream encoder."""
    upstream = model.connected_upstream()
    pooling = model.layers[0]
    _set_dim(pooling, "nL", len(model.layer_indexes()))
    _set_dim(pooling, "nI", upstream.feature_width)
    pooling.initialize()
    width = pooling.get_dim("nO")
    if len(model.layers) > 1:
        projection = model.layers[1]
        _set_dim(projection, "nI", width)
        projection.initialize()
        width = projection.get_dim("nO")
    _set_dim(model, "nO", width)


def _set_dim(layer: Model, name: str, value: int) -> None:
    if layer.maybe_get_dim(name) != value:
        layer.set_dim(name, value, force=True)


def forward(model: ContextListener, docs: list[Doc], is_train: bool) -> tuple[list[Floats2d], Callable]:
    """Pool (and project) the upstream features of each doc: ``List[(tokens, nO)]``."""
    if not docs:
        return [], _no_backprop
    lengths = [len(doc) for doc in docs]
    # (layers, tokens, width) over all docs of the batch
    X = model.ops.asarray3f(np.concatenate(model.doc_layers(docs), axis=1))
    Y, backprop_layers = _pool(model, X, is_train)
    outputs = _split(model, Y, lengths)

    def backprop(d_outputs: list[Floats2d]) -> list:
        # (tokens, nO)
        dY = model.ops.xp.concatenate(list(d_outputs), axis=0) if d_outputs else Y[:0]
        backprop_layers(dY)
        return []

    return outputs, backprop


def _pool(model: ContextListener, X, is_train: bool) -> tuple[Floats2d, Callable]:
    """Run pooling and projection: ``(layers, tokens, width)`` -> ``(tokens, nO)``."""
    Y, backprop_pool = model.layers[0](X, is_train)
    if len(model.layers) == 1:
        return Y, backprop_pool
    Z, backprop_projection = model.layers[1](Y, is_train)

    def backprop(dZ):
        return backprop_pool(backprop_projection(dZ))

    return Z, backprop


def _split(model: Model, Y: Floats2d, lengths: list[int]) -> list[Floats2d]:
    ends = np.cumsum(lengths)
    return [Y[end - n : end] for n, end in zip(lengths, ends)]


def _no_backprop(d_outputs) -> list:
    return []
