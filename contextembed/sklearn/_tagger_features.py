"""Orthographic features and context windows for feature-based sequence tagging.

Uncased encoders (the MiniLM shipped here, GloVe 6B) cannot see capitalisation, which carries much
of English NER; :func:`shape_features` gives the tagger a few word-shape flags back. A
:func:`context_window` concatenates each word's features with its neighbours' (zeros beyond the
sentence edges), the classic feature-based tagger input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

_PUNCT = re.compile(r"^[^\w\s]+$")

#: name -> predicate on one token; the order fixes the feature columns
SHAPE_FLAGS = {
    "init_cap": lambda w: w[:1].isupper(),
    "all_caps": lambda w: w.isupper() and any(c.isalpha() for c in w),
    "all_lower": lambda w: w.islower(),
    "mixed_case": lambda w: any(c.isupper() for c in w[1:]) and any(c.islower() for c in w),
    "has_digit": lambda w: any(c.isdigit() for c in w),
    "all_digits": lambda w: w.isdigit(),
    "is_punct": lambda w: bool(_PUNCT.match(w)),
    "has_hyphen": lambda w: "-" in w,
    "has_period": lambda w: "." in w and len(w) > 1,
}
SHAPE_NAMES: tuple[str, ...] = tuple(SHAPE_FLAGS) + ("first_word",)


def shape_features(sentences: Sequence[Sequence[str]]) -> np.ndarray:
    """Binary word-shape flags for every token.

    Parameters
    ----------
    sentences : sequence of sequence of str

    Returns
    -------
    np.ndarray
        ``(words, len(SHAPE_NAMES))`` float32, rows in input order (sentence by sentence); the
        columns are :data:`SHAPE_NAMES`, the last being "first word of its sentence".
    """
    rows = []
    for sentence in sentences:
        for position, word in enumerate(sentence):
            flags = [float(test(word)) for test in SHAPE_FLAGS.values()]
            rows.append(flags + [float(position == 0)])
    if not rows:
        return np.zeros((0, len(SHAPE_NAMES)), dtype=np.float32)
    return np.asarray(rows, dtype=np.float32)


def window_index(lengths: Sequence[int], window: int) -> np.ndarray:
    """For every word, the flat row of each neighbour in ``[-window, +window]`` (``-1`` beyond the edge).

    Parameters
    ----------
    lengths : sequence of int
        Words per sentence.
    window : int
        Neighbours on each side.

    Returns
    -------
    np.ndarray
        ``(words, 2 * window + 1)`` int64; column ``window`` is the word itself.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    ends = starts + np.repeat(lengths, lengths)
    rows = np.arange(total, dtype=np.int64)
    shifts = np.arange(-window, window + 1, dtype=np.int64)
    # (words, 2 * window + 1)
    neighbour = rows[:, None] + shifts[None, :]
    inside = (neighbour >= starts[:, None]) & (neighbour < ends[:, None])
    return np.where(inside, neighbour, -1)


def context_window(features: np.ndarray, lengths: Sequence[int], window: int) -> np.ndarray:
    """Concatenate each word's features with those of its ``window`` neighbours on each side.

    Parameters
    ----------
    features : np.ndarray
        ``(words, width)``: rows of consecutive sentences.
    lengths : sequence of int
        Words per sentence (sums to ``words``).
    window : int
        Neighbours on each side; ``0`` returns ``features`` unchanged.

    Returns
    -------
    np.ndarray
        ``(words, (2 * window + 1) * width)``: blocks ordered from the leftmost neighbour to the
        rightmost; a neighbour beyond the sentence edge is a block of zeros.
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    if sum(lengths) != features.shape[0]:
        raise ValueError(f"lengths sum to {sum(lengths)} words but features have {features.shape[0]} rows")
    if window == 0:
        return features
    index = window_index(lengths, window)
    padded = np.vstack([features, np.zeros((1, features.shape[1]), dtype=features.dtype)])
    # (words, 2 * window + 1, width); index -1 picks the zero row
    return padded[index].reshape(features.shape[0], -1)


def window_names(names: Sequence[str], window: int) -> list[str]:
    """Feature names for :func:`context_window`'s output (``"w-1:name"``, ``"w0:name"``, ...)."""
    if window == 0:
        return list(names)
    return [f"w{shift:+d}:{name}" if shift else f"w0:{name}" for shift in range(-window, window + 1) for name in names]


def word_shape(word: str) -> str:
    """A word's compact shape: letters as ``X``/``x``, digits as ``d``, other characters kept, runs
    collapsed (``"Peter"`` -> ``"Xx"``, ``"EU"`` -> ``"X"``, ``"1996-08-22"`` -> ``"d-d-d"``,
    ``"U.S."`` -> ``"X.X."``); at most 8 characters."""
    shape = []
    for char in word:
        code = "X" if char.isupper() else "x" if char.islower() else "d" if char.isdigit() else char
        if not shape or shape[-1] != code:
            shape.append(code)
    return "".join(shape)[:8]
