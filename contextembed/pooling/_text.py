"""Text pooling: the word vectors of one text become one vector.

``mean`` (default)  mean over the text's words, padding masked
``piece_mean``      mean over the text's pieces: a word of three pieces counts three times (the mean
                    of a transformer's piece vectors, as sentence-transformers pools; equal to
                    ``mean`` for static vectors and ELMo, one piece per word). Words must be pooled
                    from their pieces by ``subword_pooling="mean"``.
``max``             element-wise maximum over the text's words, padding masked
``cls``             the sequence's first piece (``[CLS]``/``<s>``); transformers only

An empty text pools to a zero vector with every method, ``cls`` included (never NaN or -inf; the
[CLS] vector of an empty input describes no text).

:data:`TEXT_DEFAULTS` is the one default text vector: what ``TextEmbedder()``, ``contextembed embed
--level text``, ``FeatureExtractor(encoder, level="text")`` and spaCy's ``doc.vector`` give when
no option is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, get_args

import numpy as np
import torch

from .._inputs.options import check_choice
from ._layers import Combine, LayerSpec
from ._subword import SubwordPooling, pool_subwords_numpy

TextPooling = Literal["mean", "piece_mean", "max", "cls"]
TEXT_POOLINGS: tuple[str, ...] = get_args(TextPooling)


@dataclass(frozen=True)
class TextDefaults:
    """How a text becomes one vector when no option says otherwise (the same at every entry point).

    Every piece of every layer counts once: the mean of each layer's piece vectors
    (``subword_pooling="mean"`` + ``text_pooling="piece_mean"``, as sentence-transformers pools),
    the layers mixed with equal weights (``combine="scalar_mix"`` before it learns anything: the
    mean of the layers), scaled to unit length (``normalize``; an empty text stays all zeros). Raw
    strings are split by the ``"auto"`` tokenizer (words and punctuation marks).

    A :class:`~contextembed.sklearn.TextEmbedder` fitted with class labels ``y`` learns its mix
    weights instead; everywhere else (no ``y``, the command line, spaCy's ``doc.vector``) the
    weights stay equal.
    """

    layers: LayerSpec = "all"
    combine: Combine = "scalar_mix"
    subword_pooling: SubwordPooling = "mean"
    text_pooling: TextPooling = "piece_mean"
    normalize: bool = True
    tokenizer: str = "auto"


#: the one default text vector (see :class:`TextDefaults`)
TEXT_DEFAULTS = TextDefaults()


def check_text_pooling(method: str) -> str:
    """Return ``method`` if valid, else raise ``ValueError`` listing the valid values."""
    return check_choice("text_pooling", method, TextPooling)


def check_text_options(text_pooling: str, subword_pooling: str, has_cls: bool, encoder_name: str = "this encoder") -> None:
    """Validate a text pooling against the subword pooling and the encoder (one place for all callers).

    Raises
    ------
    ValueError
        An unknown ``text_pooling``; ``"cls"`` for an encoder without a leading special piece; or
        ``"cls"`` with ``subword_pooling="first_last"``, which would announce a doubled width that
        the [CLS] vector (one piece, not pooled from words) does not have; ``"piece_mean"`` with a
        ``subword_pooling`` other than ``"mean"`` (the mean of every piece is not a mean of first
        or last pieces).
    """
    check_text_pooling(text_pooling)
    if text_pooling == "piece_mean" and subword_pooling != "mean":
        raise ValueError(
            f"text_pooling='piece_mean' averages every piece of the text, which is a mean of the words' "
            f"piece means weighted by their piece counts: it needs subword_pooling='mean', got "
            f"{subword_pooling!r} (use text_pooling='mean' to average {subword_pooling!r} word vectors)"
        )
    if text_pooling != "cls":
        return
    if not has_cls:
        raise ValueError(
            f"text_pooling='cls' needs an encoder with a leading special piece ([CLS] or <s>); "
            f"{encoder_name} has none (use 'mean' or 'max')"
        )
    if subword_pooling == "first_last":
        raise ValueError(
            "text_pooling='cls' takes the [CLS] piece itself, to which subword_pooling does not apply; "
            "subword_pooling='first_last' would double the announced width. Use subword_pooling='first' "
            "with text_pooling='cls'"
        )


def pool_text(
    words: torch.Tensor,
    mask: torch.Tensor,
    method: TextPooling = "mean",
    cls: Optional[torch.Tensor] = None,
    pieces: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Pool padded word vectors to one vector per text.

    Parameters
    ----------
    words : torch.Tensor
        ``(batch, seq, width)`` word vectors, padded.
    mask : torch.Tensor
        ``(batch, seq)`` bool, true at real words.
    method : {"mean", "piece_mean", "max", "cls"}
    cls : torch.Tensor, optional
        ``(batch, width)``: the first-piece vectors, required for ``"cls"``.
    pieces : torch.Tensor, optional
        ``(batch, seq)``: each word's number of pieces, required for ``"piece_mean"`` (with word
        vectors pooled by ``subword_pooling="mean"``).

    Returns
    -------
    torch.Tensor
        ``(batch, width)``.
    """
    check_text_pooling(method)
    if method == "cls":
        if cls is None:
            raise ValueError("text_pooling='cls' needs the [CLS] vectors; this encoder has none")
        return torch.where(mask.any(dim=1).unsqueeze(-1), cls, torch.zeros_like(cls))
    if words.shape[1] == 0:  # no text has a word
        return words.new_zeros(words.shape[0], words.shape[2])
    m = mask.unsqueeze(-1)
    if method == "piece_mean":
        if pieces is None:
            raise ValueError("text_pooling='piece_mean' needs each word's number of pieces")
        weights = (pieces * mask).unsqueeze(-1).to(words.dtype)
        return (words * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1)
    if method == "mean":
        counts = m.sum(dim=1).clamp_min(1).to(words.dtype)
        return (words * m).sum(dim=1) / counts
    pooled = words.masked_fill(~m, float("-inf")).amax(dim=1)
    return torch.where(m.any(dim=1), pooled, torch.zeros_like(pooled))


def pool_text_numpy(words: np.ndarray, method: TextPooling = "mean", cls: Optional[np.ndarray] = None,
                    pieces: Optional[np.ndarray] = None) -> np.ndarray:
    """NumPy front of :func:`pool_text` for one text: ``(words, width)`` -> ``(width,)``; ``cls`` is
    ``(width,)``, ``pieces`` ``(words,)``. ``words`` may also be ``(rows, words, width)`` (e.g. one
    row per layer, pooled in one call) -> ``(rows, width)``, with ``cls`` ``(rows, width)``. A text
    without words pools to zeros, whatever the method."""
    check_text_pooling(method)
    if method == "cls" and cls is None:
        raise ValueError("text_pooling='cls' needs the [CLS] vectors; this encoder has none")
    single = np.ndim(words) == 2
    # (rows, words, width), all words real
    batch = torch.from_numpy(np.ascontiguousarray(words))
    batch = batch[None] if single else batch
    mask = torch.ones(batch.shape[:2], dtype=torch.bool)
    first = None if cls is None else torch.from_numpy(np.ascontiguousarray(cls)).reshape(len(batch), -1)
    counts = None if pieces is None else torch.from_numpy(np.asarray(pieces))[None].expand(len(batch), -1)
    pooled = pool_text(batch, mask, method, first, counts).numpy()
    return pooled[0] if single else pooled


def pool_pieces_to_text(pieces: np.ndarray, offsets: np.ndarray, subword_pooling: SubwordPooling,
                        text_pooling: TextPooling) -> np.ndarray:
    """One text's pieces to one vector per layer: its words pooled from their pieces
    (:func:`~contextembed.pooling.pool_subwords_numpy`), then the words pooled
    (:func:`pool_text_numpy`), each layer on its own.

    Parameters
    ----------
    pieces : np.ndarray
        ``(layers, pieces, width)`` float32.
    offsets : np.ndarray
        ``(words + 1,)``: word ``i`` owns pieces ``offsets[i]:offsets[i + 1]``.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
    text_pooling : {"mean", "max"}
        ``"piece_mean"`` and ``"cls"`` do not pool words (see :meth:`PieceEncoding.piece_means` and
        ``PieceEncoding.cls``).

    Returns
    -------
    np.ndarray
        ``(layers, width')``, ``width'`` twice ``width`` for ``first_last``; zeros for a text without
        words.
    """
    if text_pooling not in ("mean", "max"):
        raise ValueError(f"pool_pieces_to_text pools words with text_pooling 'mean' or 'max', got {text_pooling!r}")
    words = pool_subwords_numpy(np.ascontiguousarray(pieces), offsets, subword_pooling)
    return pool_text_numpy(words, text_pooling)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Scale each row to unit length, as ``sklearn.preprocessing.normalize`` does (bit for bit).

    A row shorter than ``10 * eps`` of its dtype (an empty text's zeros) is left as it is.

    Parameters
    ----------
    vectors : np.ndarray
        ``(rows, width)`` float.

    Returns
    -------
    np.ndarray
        ``(rows, width)``, a new array of the same dtype.
    """
    # (rows,): the same sum of products as sklearn's row_norms
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
    norms[norms < 10 * np.finfo(norms.dtype).eps] = 1.0
    return vectors / norms[:, None]
