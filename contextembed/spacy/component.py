"""The ``contextembed`` pipeline component: frozen encoder features for every spaCy token.

On ``nlp(text)`` / ``nlp.pipe(texts)`` it encodes each doc (one row per token), writes the default
pooled features to ``doc.tensor`` and installs user hooks so that ``token.vector``,
``span.vector``, ``doc.vector`` and ``similarity`` use them. During a batch every listener gets the
layers it pools; the doc keeps all layers (``doc._.contextembed[name]``) only with
``store_layers=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import srsly
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.vocab import Vocab
from thinc.api import Model, NumpyOps, Optimizer

from ..encoders.identity import ModelIdentity
from ..pooling.layers import FixedCombine, LayerSpec, check_fixed_combine, check_layer_spec, resolve_layers
from ..pooling.subword import SubwordPooling
from .encoder_layer import ContextEncoder
from .features import DocFeatures
from .hooks import install_hooks
from .combine_layers import pool_layers
from .listener import ContextListener
from .loader import EncoderLoader, save_encoder

NUMPY_OPS = NumpyOps()
#: Doc extension holding ``{component name: (layers, tokens, width)}`` when ``store_layers=True``
DOC_EXTENSION = "contextembed"
ENCODER_DIR = "encoder"
#: key of the encoder's identity in the serialized cfg
IDENTITY_KEY = "encoder_identity"

DEFAULT_CONFIG = {
    "encoder": {
        "@misc": "contextembed.Encoder.v1",
        "name": "minilm-l6",
        "device": "auto",
        "precision": "auto",
        "window": None,
        "stride": None,
        "batch_tokens": None,
    },
    "subword_pooling": "first",
    "tensor_layers": -1,
    "tensor_combine": "mean",
    "store_layers": False,
    "embed_weights": False,
    "cache_mb": 0,
}



@Language.factory("contextembed", default_config=DEFAULT_CONFIG)
def make_contextembed(
    nlp: Language,
    name: str,
    encoder: EncoderLoader,
    subword_pooling: SubwordPooling,
    tensor_layers: Union[int, list[int], str],
    tensor_combine: str,
    store_layers: bool,
    embed_weights: bool,
    cache_mb: float,
) -> "ContextEmbedder":
    """Build the component (the encoder itself loads on first use, never by download)."""
    return ContextEmbedder(
        nlp.vocab,
        ContextEncoder(encoder, subword_pooling, cache_mb),
        name=name,
        tensor_layers=tensor_layers,
        tensor_combine=tensor_combine,
        store_layers=store_layers,
        embed_weights=embed_weights,
    )


class ContextEmbedder(TrainablePipe):
    """Frozen contextual features for spaCy tokens, shared with listeners.

    Parameters
    ----------
    vocab : Vocab
        The pipeline's vocabulary.
    model : ContextEncoder
        The thinc layer around the encoder.
    name : str
        Component name (listeners name it as their ``upstream``).
    tensor_layers : int, list of int, "all" or "hidden"
        Layers pooled into ``doc.tensor``.
    tensor_combine : {"mean", "sum", "concat"}
        How they are combined for ``doc.tensor``.
    store_layers : bool
        Keep all computed layers on ``doc._.contextembed[name]`` ``(layers, tokens, width)``.
    embed_weights : bool
        ``to_disk`` writes the encoder's weights into the pipeline instead of its name.

    Notes
    -----
    The factory's ``cache_mb`` (default 0) keeps the features of docs seen before, keyed by their
    token texts, up to that many megabytes: with a frozen encoder this makes every ``spacy train``
    epoch after the first skip the encoder.
    """

    def __init__(
        self,
        vocab: Vocab,
        model: ContextEncoder,
        name: str = "contextembed",
        *,
        tensor_layers: LayerSpec = -1,
        tensor_combine: FixedCombine = "mean",
        store_layers: bool = False,
        embed_weights: bool = False,
    ) -> None:
        _check_tensor_pooling(tensor_layers, tensor_combine)
        self.vocab = vocab
        self.model = model
        self.name = name
        self.listener_map: dict[str, list[ContextListener]] = {}
        self.cfg: dict[str, Any] = {
            "tensor_layers": tensor_layers,
            "tensor_combine": tensor_combine,
            "store_layers": store_layers,
            "embed_weights": embed_weights,
        }
        if not Doc.has_extension(DOC_EXTENSION):
            Doc.set_extension(DOC_EXTENSION, default=None)

    # -- the encoder ----------------------------------------------------------------------------

    @property
    def encoder(self):
        """The frozen :class:`contextembed.Encoder` (loaded on first access)."""
        return self.model.encoder

    @property
    def feature_width(self) -> int:
        """Width of one layer's token vector."""
        return self.model.feature_width

    def tensor_layer_indexes(self) -> tuple[int, ...]:
        """The absolute encoder layers pooled into ``doc.tensor``."""
        try:
            return resolve_layers(self.cfg["tensor_layers"], self.encoder.n_layers)
        except ValueError as error:
            raise ValueError(
                f"component {self.name!r}: tensor_layers={self.cfg['tensor_layers']!r} does not fit "
                f"the encoder {self.encoder.spec!r}: {error}"
            ) from None

    # -- listeners (the spaCy ListenedToComponent protocol) -------------------------------------

    @property
    def listeners(self) -> list[ContextListener]:
        return [m for c in self.listening_components for m in self.listener_map[c]]

    @property
    def listening_components(self) -> list[str]:
        return list(self.listener_map.keys())

    def add_listener(self, listener: ContextListener, component_name: str) -> None:
        """Link a listener of a downstream component (spaCy calls this)."""
        self.listener_map.setdefault(component_name, [])
        if listener not in self.listener_map[component_name]:
            self.listener_map[component_name].append(listener)
        listener.upstream = self

    def remove_listener(self, listener: ContextListener, component_name: str) -> bool:
        """Unlink a listener (spaCy calls this when listeners are replaced)."""
        listeners = self.listener_map.get(component_name, [])
        if listener not in listeners:
            return False
        listeners.remove(listener)
        if not listeners:
            del self.listener_map[component_name]
        if listener.upstream is self:
            listener.upstream = None
        return True

    def find_listeners(self, component) -> None:
        """Link every :class:`ContextListener` in ``component`` whose upstream is ``*`` or this name."""
        if not isinstance(getattr(component, "model", None), Model):
            return
        for node in component.model.walk():
            if isinstance(node, ContextListener) and node.upstream_name in ("*", self.name):
                # with several contextembed components, '*' listens to the nearest one before it
                self.add_listener(node, component.name)

    def _own_listeners(self) -> list[ContextListener]:
        return [listener for listener in self.listeners if listener.upstream is self]

    def _needed_layers(self) -> tuple[int, ...]:
        """Union of the layers ``doc.tensor`` and the listeners pool (all with ``store_layers``)."""
        if self.cfg["store_layers"]:
            return tuple(range(self.encoder.n_layers))
        needed = set(self.tensor_layer_indexes())
        for listener in self._own_listeners():
            needed.update(listener.layer_indexes())
        return tuple(sorted(needed))

    # -- processing -----------------------------------------------------------------------------

    def __call__(self, doc: Doc) -> Doc:
        """Encode one doc (see :meth:`pipe`); anything but a ``Doc`` is a ``TypeError``."""
        check_doc(doc, "the doc")
        return super().__call__(doc)

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Encode a stream of docs in batches; an item that is not a ``Doc`` is a ``TypeError``
        naming its position in the stream."""
        checked = (check_doc(doc, f"item {i} of the stream") for i, doc in enumerate(stream))
        return super().pipe(checked, batch_size=batch_size)

    def predict(self, docs: Iterable[Doc]) -> list[DocFeatures]:
        """Encode a batch: one :class:`DocFeatures` ``(layers, tokens, width)`` per doc."""
        docs = list(docs)
        self.model.layer_index = self._needed_layers()
        features = self.model.predict(docs)
        for listener in self._own_listeners():
            listener.receive(docs, features)
        return features

    def set_annotations(self, docs: Sequence[Doc], features: Sequence[DocFeatures]) -> None:
        """Write the default pooling to ``doc.tensor``, install vector hooks, store layers if asked."""
        index, combine = self.tensor_layer_indexes(), self.cfg["tensor_combine"]
        for doc, feats in zip(docs, features):
            # (layers, tokens, width) -> (tokens, out_width)
            doc.tensor = np.ascontiguousarray(pool_layers(NUMPY_OPS, feats.select(index), combine))
            install_hooks(doc)
            if self.cfg["store_layers"]:
                stored = dict(doc._.get(DOC_EXTENSION) or {})
                stored[self.name] = feats.data
                doc._.set(DOC_EXTENSION, stored)

    def encode_docs(self, docs: Sequence[Doc], layer_index: tuple[int, ...]) -> list[DocFeatures]:
        """Encode ``docs`` now with the encoder layers ``layer_index`` (for listeners sent other docs)."""
        return self.model.encode(docs, layer_index)

    def stored_features(self, doc: Doc) -> Optional[DocFeatures]:
        """All layers stored on ``doc`` by this component (``store_layers=True``), or ``None``."""
        stored = doc._.get(DOC_EXTENSION) if Doc.has_extension(DOC_EXTENSION) else None
        if not stored or self.name not in stored:
            return None
        data = stored[self.name]
        return DocFeatures(data, tuple(range(data.shape[0])))

    def update(
        self,
        examples: Iterable[Example],
        *,
        drop: float = 0.0,
        sgd: Optional[Optimizer] = None,
        losses: Optional[dict[str, float]] = None,
    ) -> dict[str, float]:
        """Encode the batch and send it to the listeners; the encoder itself is frozen."""
        losses = {} if losses is None else losses
        examples = list(examples)
        validate_examples(examples, "ContextEmbedder.update")
        losses.setdefault(self.name, 0.0)
        self.predict([eg.predicted for eg in examples])
        return losses

    def get_loss(self, examples, scores) -> None:
        return None

    def finish_update(self, sgd: Optimizer) -> None:
        """Nothing to update: the encoder is frozen and the mixes live in the listeners."""

    def initialize(self, get_examples: Callable[[], Iterable[Example]], *, nlp: Optional[Language] = None) -> None:
        """Load the encoder and check the pooling settings and listeners against it."""
        self.tensor_layer_indexes()
        if nlp is not None:
            check_listener_upstreams(nlp)
        for listener in self._own_listeners():
            listener.layer_indexes()

    def add_label(self, label: str) -> int:
        raise NotImplementedError(f"the {self.name!r} component has no labels")

    # -- serialization --------------------------------------------------------------------------

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Write cfg (and the encoder's weights with ``embed_weights=True``) under ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path / "cfg", self._cfg_with_identity())
        if self.cfg["embed_weights"] and ENCODER_DIR not in exclude:
            save_encoder(self.encoder, path / ENCODER_DIR)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ContextEmbedder":
        """Read cfg; use an embedded encoder when the directory holds one."""
        path = Path(path)
        if (path / "cfg").exists():
            self._read_cfg(srsly.read_json(path / "cfg"))
        if (path / ENCODER_DIR).is_dir() and ENCODER_DIR not in exclude:
            self.model.loader.use_embedded(path / ENCODER_DIR)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """Serialize cfg only; the encoder is referred to by name (``embed_weights`` needs to_disk)."""
        return srsly.msgpack_dumps({"cfg": self._cfg_with_identity()})

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ContextEmbedder":
        self._read_cfg(srsly.msgpack_loads(bytes_data)["cfg"])
        return self

    def _cfg_with_identity(self) -> dict:
        """cfg plus the encoder's identity (location and file fingerprint), so that a loaded
        pipeline refuses another model found under the same name or path."""
        return {**self.cfg, IDENTITY_KEY: self.model.loader.identify().as_dict()}

    def _read_cfg(self, cfg: dict) -> None:
        cfg = dict(cfg)
        identity = cfg.pop(IDENTITY_KEY, None)
        self.cfg.update(cfg)
        if identity is not None:
            self.model.loader.expect(ModelIdentity.from_dict(identity))


def check_doc(doc, where: str) -> Doc:
    """Return ``doc`` if it is a spaCy ``Doc``, else raise ``TypeError`` naming ``where``."""
    if not isinstance(doc, Doc):
        raise TypeError(
            f"{where} is {type(doc).__name__} ({str(doc)[:40]!r}); the contextembed component takes "
            "spacy.tokens.Doc objects: call nlp(text) or nlp.pipe(texts) for raw text"
        )
    return doc


def check_listener_upstreams(nlp: Language) -> None:
    """Raise a readable error for a listener whose ``upstream`` names no ``contextembed`` component."""
    names = [name for name, proc in nlp.pipeline if isinstance(proc, ContextEmbedder)]
    for component_name, proc in nlp.pipeline:
        model = getattr(proc, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if isinstance(node, ContextListener) and node.upstream_name not in ("*", *names):
                raise ValueError(
                    f"the contextembed listener in component {component_name!r} has "
                    f"upstream={node.upstream_name!r}, but the pipeline's contextembed components are "
                    f"{names}; set upstream to one of them or '*'"
                )


def _check_tensor_pooling(layers: LayerSpec, combine: str) -> None:
    check_fixed_combine(combine, "tensor_combine")
    check_layer_spec(layers)  # the range is checked against the encoder on first use
