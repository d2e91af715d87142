"""The thinc layer around a frozen contextembed encoder: docs -> per-doc layer features.

Each spaCy token is one word of the encoder input (``[t.text for t in doc]``), so the output has
exactly one row per token whatever the tokenization; whitespace tokens and tokens that the
subword tokenizer turns into nothing get a row too (see :mod:`contextembed._inputs.alignment`).

Encoded for annotation (``text=True``), a doc also gets its default text vector, from the same
pass over the encoder: ``FeatureExtractor(encoder, level="text")``'s vector of its tokens, which
is what ``TextEmbedder()`` gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np
from spacy.tokens import Doc
from thinc.api import Model

from .._runtime import forking
from .._inputs.bounds import check_setting
from ..encoders._base import Encoder, PieceEncoding
from ..pooling._subword import SubwordPooling, check_subword_pooling, pool_subwords_numpy, subword_output_width
from .._runtime import store as _store
from ._doc_features import DocFeatures, StoredDocFeatures
from ._loader import EncoderLoader
from ._settings import CACHE_MB


class EncoderLayer(Model):
    """``Model[List[Doc], List[DocFeatures]]`` that runs the frozen encoder (no parameters).

    Parameters
    ----------
    loader : EncoderLoader
        Loads the encoder on first use.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
        How a token's subword pieces become one vector.
    cache_mb : float
        Above 0, the features of docs seen before are kept in the feature store (within the
        library's one memory budget, :func:`contextembed.set_memory_budget`, and beyond it on disk;
        :class:`~contextembed.spacy._doc_features.StoredDocFeatures`); 0: none are kept.
    """

    name = "contextembed_encoder"

    def __init__(self, loader: EncoderLoader, subword_pooling: SubwordPooling = "first", cache_mb: float = 0.0) -> None:
        check_subword_pooling(subword_pooling)
        check_setting("cache_mb", cache_mb, CACHE_MB)
        Model.__init__(self, self.name, forward, attrs={"subword_pooling": subword_pooling})
        # before the encoder loads: a parent that ran other torch code must not pass its thread
        # pool to nlp.pipe(n_process=...) workers either (see contextembed._runtime.forking)
        forking.install()
        self.loader = loader
        self.cache = StoredDocFeatures(cache_mb > 0)
        #: absolute encoder layers to compute; ``None`` means all of them
        self.layer_index: tuple[int, ...] | None = None
        self._text_features = None

    @property
    def encoder(self) -> Encoder:
        return self.loader.encoder

    def __getstate__(self) -> tuple[dict, dict]:
        """Pickle without the encoder (see :meth:`EncoderLoader.__getstate__`) or anything built on
        it; the copy loads the same model on first use. The state is pickle's ``(__dict__, slots)``
        pair: thinc's ``Model`` keeps its own fields in slots."""
        slots = {name: getattr(self, name) for name in Model.__slots__ if hasattr(self, name)}
        return {**self.__dict__, "_text_features": None, "_key_of": (None,)}, slots

    @property
    def text_features(self):
        """The :class:`~contextembed.extraction.FeatureExtractor` of the default text vector (built
        when first used: the encoder loads on first use)."""
        if self._text_features is None or self._text_features.encoder is not self.encoder:
            from ..extraction import FeatureExtractor

            self._text_features = FeatureExtractor(self.encoder, level="text")
        return self._text_features

    @property
    def feature_width(self) -> int:
        """Width of one layer's token vector (twice the encoder width for ``first_last``)."""
        return subword_output_width(self.encoder.width, self.attrs["subword_pooling"])

    def encode(self, docs: Sequence[Doc], layer_index: tuple[int, ...] | None = None, *,
               text: bool = False) -> list[DocFeatures]:
        """Encode docs, one :class:`DocFeatures` each (``layer_index=None``: :attr:`layer_index`);
        with ``text``, each with its default text vector too."""
        encoder = self.encoder
        index = layer_index or self.layer_index or tuple(range(encoder.n_layers))
        words = [tuple(token.text for token in doc) for doc in docs]
        stored = self._stored_options(text)
        found = self.cache.get(*stored[:1], words, index, *stored[1:]) if self.cache.enabled else [None] * len(docs)
        missing = [i for i, features in enumerate(found) if features is None]
        batch = [words[i] for i in missing]
        computed = self._encode_with_text(batch, index) if text else self._encode_layers(batch, index)
        for i, features in zip(missing, computed):
            if features.data.shape[1] != len(docs[i]):
                raise RuntimeError(
                    f"the encoder returned {features.data.shape[1]} rows for a doc of {len(docs[i])} tokens; "
                    "this is a bug in contextembed, please report it"
                )
            found[i] = features
        if self.cache.enabled and missing:
            self.cache.put(stored[0], batch, [found[i] for i in missing], *stored[1:])
        return found  # type: ignore[return-value]

    def _stored_options(self, text: bool) -> tuple:
        """``(encoder key, width, subword pooling, text width or None)``: what names the features of
        this encoder in the feature store (:class:`StoredDocFeatures`)."""
        encoder = self.encoder
        if getattr(self, "_key_of", (None,))[0] is not encoder:
            device = getattr(encoder, "device", "cpu")  # static vectors are looked up on the CPU
            key = _store.encoder_key(self.loader.identify().fingerprint, getattr(device, "type", str(device)),
                                     getattr(encoder, "precision", "fp32"), encoder.backend)
            self._key_of = (encoder, key)
        return (self._key_of[1], self.feature_width, self.attrs["subword_pooling"],
                self.text_features.dim if text else None)

    def _encode_layers(self, batch: list[tuple[str, ...]], index: tuple[int, ...]) -> Iterator[DocFeatures]:
        arrays = self.encoder.encode(batch, layers=list(index), subword_pooling=self.attrs["subword_pooling"])
        return (DocFeatures(array, index) for array in arrays)

    def _encode_with_text(self, batch: list[tuple[str, ...]], index: tuple[int, ...]) -> Iterator[DocFeatures]:
        """One pass over the pieces of the union of ``index`` and the text vector's layers."""
        extractor = self.text_features
        text_index = extractor.pooling.layer_indexes
        layers = sorted(set(index) | set(text_index))
        for encoding in self.encoder.iter_encode_pieces(batch, layers):
            # (layers, pieces, width) -> (len(index), tokens, feature_width)
            data = pool_subwords_numpy(_rows(encoding.hidden, layers, index), encoding.word_offsets,
                                       self.attrs["subword_pooling"])
            mine = PieceEncoding(_rows(encoding.hidden, layers, text_index), encoding.word_offsets,
                                 _rows(encoding.cls, layers, text_index), encoding.ids)
            yield DocFeatures(data, index, extractor.text_vector(mine))


def _rows(array: Optional[np.ndarray], layers: Sequence[int], wanted: Sequence[int]) -> Optional[np.ndarray]:
    """The entries of ``array`` (one per encoder layer of ``layers``, along the first axis) for the
    layers ``wanted``, in that order; ``array`` itself when that is all of it."""
    if array is None or list(wanted) == list(layers):
        return array
    position = {layer: i for i, layer in enumerate(layers)}
    return array[[position[layer] for layer in wanted]]


def forward(model: EncoderLayer, docs: list[Doc], is_train: bool) -> tuple[list[DocFeatures], Callable]:
    """Encode the docs; the encoder is frozen, so the backward pass returns nothing."""
    return model.encode(docs), _no_backprop


def _no_backprop(d_features) -> list:
    return []
