"""Frequency weights of distilled vectors (SIF, Arora et al., 2017), and the counts they come from.

A word's vector is multiplied by ``a / (a + p(w))``: frequent words (``p(w)`` near ``a`` or above)
shrink, rare words keep their length, so a mean of word vectors leans on the informative words, as
IDF does for bags of words. ``p(w)`` is estimated, in order of preference:

- from **counts**: a corpus's (the distillation corpus's own occurrences) or a word-count list's,
  ``p(w) = count(w) / total``; a word the list lacks counts 0 (weight 1, a rare word);
- from the **Zipf rank** of the word's first piece in the teacher's tokenizer, whose vocabulary is
  roughly sorted by frequency: ``p(id) = (1 / (id + 2)) / sum over the vocabulary`` (model2vec's
  estimate).

A word-count list is a text file of ``word count`` lines (the word, whitespace, a non-negative
integer), as unigram lists are distributed; :func:`read_word_counts` reads it strictly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Union

import numpy as np

from ..errors import FileFormatError

#: model2vec's and Arora et al.'s smoothing constant
SIF_A = 1e-4


def sif_weights(probabilities: np.ndarray, a: float) -> np.ndarray:
    """``(rows,)`` float32 ``a / (a + p)`` of ``(rows,)`` probabilities."""
    return (a / (a + probabilities)).astype(np.float32)


def zipf_probabilities(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """``(rows,)`` probabilities of tokens by their id as a Zipf rank in a ``vocab_size`` vocabulary."""
    # (vocab,) 1 / rank, rank = id + 2 (model2vec's, so the first entry is not certain)
    inverse_rank = 1.0 / np.arange(2, vocab_size + 2, dtype=np.float64)
    return inverse_rank[np.asarray(ids, dtype=np.int64)] / inverse_rank.sum()


def count_probabilities(words: Sequence[str], counts: Mapping[str, int], total: int) -> np.ndarray:
    """``(rows,)`` ``count / total`` of each word: its exact form, else its lowercased one, else 0."""
    found = (counts.get(word, counts.get(word.lower(), 0)) for word in words)
    return np.fromiter(found, dtype=np.float64, count=len(words)) / max(total, 1)


def read_word_counts(path: Union[str, os.PathLike]) -> dict[str, int]:
    """``{word: count}`` of a ``word count`` file (UTF-8, one pair a line, blank lines skipped).

    Raises
    ------
    FileFormatError
        Naming the file and line, for a line that is not a word and a non-negative integer, a word
        given twice, or a file with no count above 0.
    """
    path = os.fspath(path)
    counts: dict[str, int] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):
                raise FileFormatError(f"expected 'word count' (a word, whitespace, a non-negative integer), got "
                                      f"{line.rstrip()!r:.80}", path=path, line=number)
            if fields[0] in counts:
                raise FileFormatError(f"{fields[0]!r} is counted twice", path=path, line=number)
            counts[fields[0]] = int(fields[1])
    if not any(counts.values()):
        raise FileFormatError("holds no word counted more than 0 times", path=path)
    return counts


__all__ = ["SIF_A", "count_probabilities", "read_word_counts", "sif_weights", "zipf_probabilities"]
