"""The thinc layer around a frozen contextembed encoder: docs -> per-doc layer features.

Each spaCy token is one word of the encoder input (``[t.text for t in doc]``), so the output has
exactly one row per token whatever the tokenization; whitespace tokens and tokens that the
subword tokenizer turns into nothing get a row too (see :mod:`contextembed.alignment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spacy.tokens import Doc
from thinc.api import Model

from ..encoders.base import Encoder
from ..pooling.subword import SubwordPooling, check_subword_pooling, subword_output_width
from .features import DocFeatures
from .loader import EncoderLoader


class ContextEncoder(Model):
    """``Model[List[Doc], List[DocFeatures]]`` that runs the frozen encoder (no parameters).

    Parameters
    ----------
    loader : EncoderLoader
        Loads the encoder on first use.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
        How a token's subword pieces become one vector.
    """

    name = "contextembed_encoder"

    def __init__(self, loader: EncoderLoader, subword_pooling: SubwordPooling = "first") -> None:
        check_subword_pooling(subword_pooling)
        Model.__init__(self, self.name, forward, attrs={"subword_pooling": subword_pooling})
        self.loader = loader
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
        words = [[token.text for token in doc] for doc in docs]
        arrays = encoder.encode(words, layers=list(index), subword_pooling=self.attrs["subword_pooling"])
        for doc, array in zip(docs, arrays):
            if array.shape[1] != len(doc):
                raise RuntimeError(
                    f"the encoder returned {array.shape[1]} rows for a doc of {len(doc)} tokens; "
                    "this is a bug in contextembed, please report it"
                )
        return [DocFeatures(array, index) for array in arrays]


def forward(model: ContextEncoder, docs: list[Doc], is_train: bool) -> tuple[list[DocFeatures], Callable]:
    """Encode the docs; the encoder is frozen, so the backward pass returns nothing."""
    return model.encode(docs), _no_backprop


def _no_backprop(d_features) -> list:
    return []
