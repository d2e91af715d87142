"""User hooks: ``token.vector``, ``span.vector``, ``doc.vector`` and ``similarity``.

``token.vector`` and ``span.vector`` read ``doc.tensor`` (a span: the mean of its rows);
``doc.vector`` is the doc's default text vector (:data:`contextembed.pooling.TEXT_DEFAULTS`: the
mean of every piece of every layer, scaled to unit length, as ``TextEmbedder()`` gives), which the
component stores in ``doc.user_data`` (so it survives ``Doc.to_bytes`` and pickling).

Module-level functions (not closures), so docs with hooks installed still pickle.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
from spacy.tokens import Doc, Span, Token

Item = Union[Doc, Span, Token]
#: the ``doc.user_data`` key of the doc's default text vector
DOC_VECTOR = "contextembed.doc_vector"


def install_hooks(doc: Doc) -> None:
    """Make the vector and similarity of ``doc``, its spans and tokens come from contextembed.

    The ``contextembed`` component installs these hooks on every doc it processes. spaCy does not
    send user hooks back from ``nlp.pipe(..., n_process=n)`` workers (its warning W109): the rows
    arrive in ``doc.tensor`` and the text vector in ``doc.user_data``, and this puts the hooks back.

    Parameters
    ----------
    doc : spacy.tokens.Doc
        A doc the component processed (in this process or in a worker).

    Examples
    --------
    >>> docs = [install_hooks(doc) or doc for doc in nlp.pipe(texts, n_process=2)]  # doctest: +SKIP
    """
    doc.user_hooks["vector"] = doc_vector
    doc.user_hooks["has_vector"] = has_vector
    doc.user_hooks["vector_norm"] = vector_norm
    doc.user_hooks["similarity"] = similarity
    doc.user_span_hooks["vector"] = span_vector
    doc.user_span_hooks["has_vector"] = has_vector
    doc.user_span_hooks["vector_norm"] = vector_norm
    doc.user_span_hooks["similarity"] = similarity
    doc.user_token_hooks["vector"] = token_vector
    doc.user_token_hooks["has_vector"] = has_vector
    doc.user_token_hooks["vector_norm"] = vector_norm
    doc.user_token_hooks["similarity"] = similarity


def set_doc_vector(doc: Doc, vector: Optional[np.ndarray]) -> None:
    """Store ``(width,)`` as what ``doc.vector`` returns (``None``: remove a stored one)."""
    if vector is None:
        doc.user_data.pop(DOC_VECTOR, None)
    else:
        doc.user_data[DOC_VECTOR] = vector


def _rows_mean(tensor: np.ndarray) -> np.ndarray:
    """Mean of ``(tokens, width)`` rows; zeros ``(width,)`` for no row."""
    if tensor.shape[0] == 0:
        return np.zeros(tensor.shape[1], dtype=np.float32)
    return tensor.mean(axis=0)


def doc_vector(doc: Doc) -> np.ndarray:
    """The doc's default text vector: ``(width,)``.

    A doc that has the hooks but no stored vector (one made by ``Span.as_doc``, which copies the
    hooks and the span's rows) gets the mean of its rows, as its span had.
    """
    stored = doc.user_data.get(DOC_VECTOR)
    return _rows_mean(doc.tensor) if stored is None else stored


def span_vector(span: Span) -> np.ndarray:
    """Mean of the span's token rows: ``(width,)``."""
    return _rows_mean(span.doc.tensor[span.start : span.end])


def token_vector(token: Token) -> np.ndarray:
    """The token's row of ``doc.tensor``: ``(width,)``."""
    return token.doc.tensor[token.i]


def has_vector(item: Item) -> bool:
    return bool(item.doc.tensor.size) if not isinstance(item, Doc) else bool(item.tensor.size)


def vector_norm(item: Item) -> float:
    return float(np.linalg.norm(item.vector))


def similarity(first: Item, second: Item) -> float:
    """Cosine similarity of the two vectors; 0.0 when either is all zeros."""
    a, b = np.asarray(first.vector, dtype=np.float64), np.asarray(second.vector, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(
            f"cannot compare vectors of width {a.shape[-1]} and {b.shape[-1]}: both sides need the "
            "same contextembed features (process both texts with the same pipeline)"
        )
    denominator = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denominator) if denominator else 0.0
