"""Subword fallback for static tables: a word outside the table becomes the mean of its pieces.

A distilled table (:func:`contextembed.distill`) knows the words of its corpus; a word it never saw
would otherwise get one shared OOV vector. The teacher's tokenizer still splits that word into
pieces it knows, and the distillation pass has a mean contextual vector for every piece it met
(the piece-level reduction, model2vec-style), so the word takes the mean of its pieces' vectors:
``vector(word) = mean(piece_vector[p] for p in pieces(word) if p was seen)``. A word none of whose
pieces was seen keeps the table's OOV vector.

Words are split exactly as the teacher splits a word (:class:`contextembed._inputs.alignment.PieceTokenizer`,
the same alignment rule), so a word's pieces are the ones the teacher gives it in a sentence.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

import numpy as np

from ..._inputs.alignment import PieceTokenizer
from ...errors import ModelFormatError
from .tables import TableStorage, decode

#: the tokenizer's files and the piece vectors, in a ``subwords`` folder of the static directory
SUBWORD_FOLDER = "subwords"
SUBWORD_VECTORS = "piece_vectors.safetensors"
#: words whose vectors are kept after their first lookup (the cache is emptied when full)
CACHE_WORDS = 1 << 16


class _WordCache:
    """Resolved words: ``index`` maps a word to its row of ``vectors`` and ``found``. Rows only grow:
    a row is written before its word enters ``index``, and the arrays are replaced (not resized in
    place) when they grow, so a reader that takes ``index`` first and the arrays after sees every
    row it was given."""

    def __init__(self, width: int) -> None:
        self.index: dict[str, int] = {}
        self.size = 0
        self.vectors = np.zeros((0, width), dtype=np.float32)
        self.found = np.zeros(0, dtype=bool)

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vectors, found = self.vectors, self.found  # after the caller read ``index``
        return vectors[rows], found[rows]

    def add(self, words: list[str], vectors: np.ndarray, found: np.ndarray) -> None:
        start, end = self.size, self.size + len(words)
        if end > len(self.found):
            capacity = min(max(end, 2 * len(self.found), 1024), CACHE_WORDS)
            grown_vectors = np.zeros((capacity, self.vectors.shape[1]), dtype=np.float32)
            grown_found = np.zeros(capacity, dtype=bool)
            grown_vectors[:start], grown_found[:start] = self.vectors[:start], self.found[:start]
            self.vectors, self.found = grown_vectors, grown_found
        self.vectors[start:end], self.found[start:end] = vectors, found
        self.size = end
        self.index.update(zip(words, range(start, end)))


class SubwordVectors:
    """Vectors of a tokenizer's pieces, for the words a static table lacks.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerFast
        The teacher's tokenizer (a fast one: words are mapped to pieces by ``word_ids``).
    ids : np.ndarray
        ``(pieces,)`` distinct int vocabulary ids of the pieces that have a vector.
    vectors : np.ndarray
        ``(pieces, width)`` finite; row ``i`` belongs to ``ids[i]``.

    Raises
    ------
    ValueError
        For ids that repeat, are negative or outside the tokenizer's vocabulary, for vectors that
        are not ``(len(ids), width)`` or not finite, and for a tokenizer without a fast backend.
    """

    def __init__(self, tokenizer, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.pieces = PieceTokenizer(tokenizer)
        ids, vectors = np.asarray(ids), np.asarray(vectors, dtype=np.float32)
        _check_pieces(ids, vectors, len(tokenizer))
        self.ids = ids.astype(np.int64)
        self.vectors = vectors
        # (tokenizer vocabulary,): row of each piece id in ``vectors``, -1 without one
        self.row_of = np.full(len(tokenizer), -1, dtype=np.int64)
        self.row_of[self.ids] = np.arange(len(self.ids))
        self._lock = threading.Lock()
        self._cache = _WordCache(self.width)

    @property
    def width(self) -> int:
        return int(self.vectors.shape[1])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"], state["_cache"]  # a lock does not pickle; a cache is rebuilt on use
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._cache = _WordCache(self.width)

    @property
    def tokenizer(self):
        return self.pieces.tokenizer

    def lookup(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The mean vector of each word's known pieces.

        Returns
        -------
        vectors : np.ndarray
            ``(words, width)`` float32; zeros where ``found`` is false.
        found : np.ndarray
            ``(words,)`` bool: whether at least one of the word's pieces has a vector.
        """
        cache = self._cache  # one snapshot: its rows are written before their words are indexed, never after
        get = cache.index.get
        # (words,) the cache row of each word, -1 for a word not cached
        rows = np.fromiter((get(word, -1) for word in words), dtype=np.int64, count=len(words))
        hit = rows >= 0
        vectors, found = cache.rows(rows[hit])
        if hit.all():
            return vectors, found
        out_vectors = np.zeros((len(words), self.width), dtype=np.float32)
        out_found = np.zeros(len(words), dtype=bool)
        out_vectors[hit], out_found[hit] = vectors, found
        missing = np.flatnonzero(~hit)
        new = list(dict.fromkeys(words[i] for i in missing))
        # (new words, width), (new words,)
        means, has_piece = self._compute(new)
        position = {word: i for i, word in enumerate(new)}
        where = np.fromiter((position[words[i]] for i in missing), dtype=np.int64, count=len(missing))
        out_vectors[missing], out_found[missing] = means[where], has_piece[where]
        self._remember(new, means, has_piece)
        return out_vectors, out_found

    def _remember(self, words: list[str], vectors: np.ndarray, found: np.ndarray) -> None:
        """Cache the first :data:`CACHE_WORDS` of ``words``; a full cache is replaced by an empty one
        (readers holding the old one still read it whole)."""
        with self._lock:
            if self._cache.size + len(words) > CACHE_WORDS:
                self._cache = _WordCache(self.width)
            n = min(len(words), CACHE_WORDS)
            self._cache.add(words[:n], vectors[:n], found[:n])

    def _compute(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(words, width)`` known-piece means (zeros without one) and ``(words,)`` whether one is known."""
        from scipy.sparse import csr_matrix

        ids, counts = self.pieces.words_alone(words)
        # (pieces of all words,): the row of each piece's vector, and the word it belongs to
        rows = self.row_of[ids]
        owner = np.repeat(np.arange(len(words)), counts)
        keep = rows >= 0
        known = np.bincount(owner[keep], minlength=len(words))
        # (words, pieces with vectors) @ (pieces with vectors, width): each word's mean
        weights = csr_matrix(((1.0 / known[owner[keep]]).astype(np.float32), (owner[keep], rows[keep])),
                             shape=(len(words), len(self.ids)))
        return np.asarray(weights @ self.vectors, dtype=np.float32), known > 0

    def transformed(self, vectors: np.ndarray) -> "SubwordVectors":
        """The same pieces with new ``(pieces, width')`` vectors (e.g. a PCA projection)."""
        return SubwordVectors(self.tokenizer, self.ids, vectors)

    def save_tokenizer(self, folder: str) -> None:
        """The tokenizer's files (``tokenizer.json`` and its configuration), in ``folder/subwords``;
        the piece vectors are stored with the table (:func:`~contextembed.encoders._static.directory.write_saved_table`)."""
        path = os.path.join(folder, SUBWORD_FOLDER)
        os.makedirs(path)
        # the fast tokenizer's file alone: vocab.txt would repeat tokenizer.json's vocabulary
        self.tokenizer.save_pretrained(path, legacy_format=False)

    @classmethod
    def from_saved(cls, folder: str, ids: np.ndarray, vectors: np.ndarray, source: str) -> "SubwordVectors":
        """The pieces ``ids`` with ``(pieces, width)`` ``vectors`` read from ``source`` (format 5) and
        the tokenizer in ``folder/subwords``; never touches the network.

        Raises
        ------
        ModelFormatError
            For a missing or unreadable tokenizer, or ids that repeat or lie outside its vocabulary
            (naming ``source``).
        """
        from .._hf_files import load_tokenizer

        tokenizer = load_tokenizer(os.path.join(folder, SUBWORD_FOLDER), {})
        try:
            return cls(tokenizer, ids, vectors)
        except ValueError as error:
            raise ModelFormatError(str(error), path=source) from None

    @classmethod
    def load(cls, folder: str, storage: Optional[TableStorage] = None) -> "SubwordVectors":
        """Read the piece vectors of a format 3 or 4 table from ``folder/subwords`` (with the table's
        ``storage``); never touches the network.

        Raises
        ------
        ModelFormatError
            For a missing or unreadable tokenizer or vectors file, or inconsistent contents.
        """
        from .._hf_files import load_tokenizer
        from .directory import read_tensors

        path = os.path.join(folder, SUBWORD_FOLDER)
        vectors_path = os.path.join(path, SUBWORD_VECTORS)
        if not os.path.isfile(vectors_path):
            raise ModelFormatError(f"the saved options name subwords, but {SUBWORD_FOLDER}/{SUBWORD_VECTORS} is "
                                   "missing: save the encoder again", path=folder)
        tensors = read_tensors(vectors_path, "the piece vectors")
        if "ids" not in tensors:
            raise ModelFormatError(f"expected tensors 'ids' and 'vectors', found {sorted(tensors)}", path=vectors_path)
        ids = tensors.pop("ids")
        vectors = decode(tensors, storage or TableStorage(), vectors_path)
        tokenizer = load_tokenizer(path, {})
        try:
            return cls(tokenizer, ids, vectors)
        except ValueError as error:
            raise ModelFormatError(str(error), path=vectors_path) from None


def _check_pieces(ids: np.ndarray, vectors: np.ndarray, vocab_size: int) -> None:
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"piece ids must be a 1-d integer array, got {ids.dtype} of shape {ids.shape}")
    if vectors.ndim != 2 or vectors.shape[0] != len(ids) or vectors.shape[1] < 1:
        raise ValueError(f"piece vectors must be ({len(ids)}, width), got shape {vectors.shape}")
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = int(ids[(ids < 0) | (ids >= vocab_size)][0])
        raise ValueError(f"piece id {bad} is outside the tokenizer's vocabulary of {vocab_size}")
    if len(np.unique(ids)) != len(ids):
        raise ValueError("piece ids repeat: each piece has one vector")
    if not np.isfinite(vectors).all():
        row = int(np.argmin(np.isfinite(vectors).all(axis=1)))
        raise ValueError(f"the vector of piece id {int(ids[row])} (row {row}) is not finite")


__all__ = ["SubwordVectors"]
