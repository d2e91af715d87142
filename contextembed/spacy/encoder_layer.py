"""The thinc layer around a frozen contextembed encoder: docs -> per-doc layer features.

Each spaCy token is one word of the encoder input (``[t.text for t in doc]``), so the output has
exactly one row per token whatever the tokenization; whitespace tokens and tokens that the
subword tokenizer turns into nothing get a row too (see :mod:`contextembed.alignment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spacy.tokens import Doc
from thinc.api import Model

from .. import forking
from ..encoders.base import Encoder
from ..pooling.subword import SubwordPooling, check_subword_pooling, subword_output_width
from .features import DocFeatures, TextFeatureCache
from .loader import EncoderLoader


class ContextEncoder(Model):
    """``Model[List[Doc], List[DocFeatures]]`` that runs the frozen encoder (no parameters).

    Parameters
    ----------
    loader : EncoderLoader
        Loads the encoder on first use.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
        How a token's subword pieces become one vector.
    cache_mb : float
        Memory budget for features of docs seen before (0: no cache); see
        :class:`~contextembed.spacy.features.TextFeatureCache`.
    """

    name = "contextembed_encoder"

    def __init__(self, loader: EncoderLoader, subword_pooling: SubwordPooling = "first", cache_mb: float = 0.0) -> None:
        check_subword_pooling(subword_pooling)
        if cache_mb < 0:
            raise ValueError(f"cache_mb must be >= 0 megabytes (0 turns the cache off), got {cache_mb}")
        Model.__init__(self, self.name, forward, attrs={"subword_pooling": subword_pooling})
        # before the encoder loads: a parent that ran other torch code must not pass its thread
        # pool to nlp.pipe(n_process=...) workers either (see contextembed.forking)
        forking.install()
        self.loader = loader
        self.cache = TextFeatureCache(cache_mb)
        #: absolute encoder layers to compute; ``None`` means all of them
        self.layer_index: tuple[int, ...] | None = None

    @property
    def encoder(self) -> Encoder:
        return self.loader.encoder

    @property
    def feature_width(self) -> int:
        """Width of one layer's token vector (twice the encoder width for ``first_last``)."""
        return subword_output_width(self.encoder.width, self.attrs["subword_pooling"])

    def encode(self, docs: Sequence[Doc], layer_index: tuple[int, ...] | None = None) -> list[DocFeatures]:
        """Encode docs, one :class:`DocFeatures` each (``layer_index=None``: :attr:`layer_index`)."""
        encoder = self.encoder
        index = layer_index or self.layer_index or tuple(range(encoder.n_layers))
        words = [tuple(token.text for token in doc) for doc in docs]
        found = [self.cache.get(w, index) if self.cache.max_bytes else None for w in words]
        missing = [i for i, features in enumerate(found) if features is None]
        arrays = encoder.encode([words[i] for i in missing], layers=list(index), subword_pooling=self.attrs["subword_pooling"])
        for i, array in zip(missing, arrays):
            if array.shape[1] != len(docs[i]):
                raise RuntimeError(
                    f"the encoder returned {array.shape[1]} rows for a doc of {len(docs[i])} tokens; "
                    "this is a bug in contextembed, please report it"
                )
            found[i] = DocFeatures(array, index)
            if self.cache.max_bytes:
                self.cache.put(words[i], found[i])
        return found  # type: ignore[return-value]


def forward(model: ContextEncoder, docs: list[Doc], is_train: bool) -> tuple[list[DocFeatures], Callable]:
    """Encode the docs; the encoder is frozen, so the backward pass returns nothing."""
    return model.encode(docs), _no_backprop


def _no_backprop(d_features) -> list:
    return []
