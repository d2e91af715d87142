"""What an encoder yields: one sentence, or one sentence pair, encoded at the level of its pieces.

:class:`PieceEncoding` holds a sentence's selected layers at every piece with the pieces each word
owns, and pools them to words or to the text (:mod:`contextembed.pooling`); :class:`PairPieces`
holds the two sides of a pair. Every encoder family yields them
(:class:`~contextembed.encoders._base.Encoder`); shapes use the dimension names of
:mod:`contextembed.encoders._base`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..pooling._subword import SubwordPooling, pool_subwords_numpy
from ..pooling._text import pool_pieces_to_text


@dataclass
class PieceEncoding:
    """One sentence encoded at the level of the encoder's own units (subword pieces).

    Attributes
    ----------
    hidden : np.ndarray
        ``(layers, pieces, width)`` float32: the selected layers at every piece.
    word_offsets : np.ndarray
        ``(words + 1,)`` int64: word ``i`` owns pieces ``word_offsets[i]:word_offsets[i + 1]``; every
        word owns at least one piece.
    cls : np.ndarray or None
        ``(layers, width)``: the sequence's first piece (``[CLS]``/``<s>``) of the first window, for
        encoders that have one; ``None`` otherwise.
    ids : np.ndarray or None
        ``(pieces,)`` int64 vocabulary ids of the pieces, for encoders with a piece vocabulary
        (transformers); ``None`` otherwise.
    """

    hidden: np.ndarray
    word_offsets: np.ndarray
    cls: Optional[np.ndarray] = None
    ids: Optional[np.ndarray] = None

    @property
    def n_words(self) -> int:
        return len(self.word_offsets) - 1

    def words(self, subword_pooling: SubwordPooling = "first") -> np.ndarray:
        """Pool pieces to words: ``(layers, words, width)`` (``2 * width`` for ``first_last``)."""
        return pool_subwords_numpy(self.hidden, self.word_offsets, subword_pooling)

    def piece_means(self) -> np.ndarray:
        """``(layers, width)`` float32: the mean of every piece, summed in float64; zeros without
        pieces (``text_pooling="piece_mean"``)."""
        if not self.hidden.shape[1]:
            return np.zeros((self.hidden.shape[0], self.hidden.shape[2]), dtype=np.float32)
        return self.hidden.mean(axis=1, dtype=np.float64).astype(np.float32)

    def text_layers(self, subword_pooling: SubwordPooling, text_pooling: str) -> np.ndarray:
        """The text's vector of every layer: its words pooled from their pieces, then the words pooled
        (``text_pooling`` ``"mean"`` or ``"max"``, :func:`~contextembed.pooling.pool_pieces_to_text`);
        ``"cls"``: the first piece. ``(layers, width')``; zeros for a text without words."""
        if text_pooling == "cls":
            return self.cls if self.n_words else np.zeros_like(self.cls)  # an empty text: zeros
        return pool_pieces_to_text(self.hidden, self.word_offsets, subword_pooling, text_pooling)


@dataclass
class PairPieces:
    """One sentence pair encoded, at the level of the encoder's pieces.

    Transformers encode a pair in one pass with the model's pair template and segment ids; static
    vectors and ELMo, which have no pair input, encode each side on its own.

    Attributes
    ----------
    first, second : PieceEncoding
        Each side's pieces ``(layers, pieces, width)`` and word offsets.
    cls : np.ndarray or None
        ``(layers, width)``: the pair's first piece ([CLS]/<s>), for encoders that have one.
    """

    first: PieceEncoding
    second: PieceEncoding
    cls: Optional[np.ndarray] = None
