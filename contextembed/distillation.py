"""Distil a contextual encoder into static word vectors (``contextembed distill``).

A static table answers a word in a dictionary lookup, hundreds of times faster than running the
encoder, at the cost of context. Two ways to build it from a teacher's layers:

- **corpus** (``corpus=...``): every occurrence of a word in the corpus is encoded in its sentence
  and the word's vector is the mean of its contextual vectors over its occurrences (the "reduction
  to static embeddings" of Bommasani et al., 2020). Words are those of the corpus with at least
  ``min_count`` occurrences; lowercased first when the teacher is uncased.
- **vocabulary** (no corpus): every whole word of the teacher's tokenizer vocabulary (a word the
  tokenizer keeps as one piece) is encoded alone, model2vec-style.

Each occurrence is pooled like any contextembed feature (``layers``, ``combine``, subword mean),
the table is optionally reduced to ``dim`` columns by PCA, and the result is saved as a static
encoder directory that :func:`contextembed.load_encoder` reads and every adapter uses.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional, Union

import numpy as np
import torch

from ._files import atomic_directory
from .encoders.base import Encoder, is_cased
from .encoders.static import OovVector, StaticVectors
from .features import FeatureExtractor
from .options import check_choice
from .pooling import LayerSpec
from .sentences import _check_tokens

#: provenance of a distilled directory, beside the static encoder's own files
DISTILLATION_FILE = "distillation.json"
#: sentences encoded at once while the sums are taken
CHUNK_SENTENCES = 1024


def distill(
    encoder: Union[Encoder, str, os.PathLike],
    out: Optional[Union[str, os.PathLike]] = None,
    *,
    corpus: Optional[Iterable[Sequence[str]]] = None,
    layers: Optional[LayerSpec] = None,
    combine: str = "mean",
    dim: Optional[int] = None,
    min_count: int = 1,
    oov: OovVector = "mean",
    overwrite: bool = False,
    show_progress: bool = False,
    corpus_name: str = "",
) -> StaticVectors:
    """Static word vectors from a contextual encoder; saved to ``out`` when given.

    Parameters
    ----------
    encoder : Encoder, str or path
        The teacher: a loaded encoder, or anything :func:`contextembed.load_encoder` takes (a
        transformer or ELMo; static vectors are static already).
    out : str or path, optional
        Directory for the static encoder (written atomically; an existing non-empty one only with
        ``overwrite``), with ``distillation.json`` recording how it was made.
    corpus : iterable of token lists, optional
        Tokenized sentences; each word's vector is its mean contextual vector over them. Without
        it, the tokenizer's whole words are encoded alone (transformers only).
    layers, combine
        Which teacher layers and how they are combined (default: the encoder's default layers,
        averaged); see :class:`contextembed.FeatureExtractor`. Word pieces are averaged.
    dim : int, optional
        Reduce the vectors to this many columns by PCA (at most the teacher's width).
    min_count : int
        Corpus words seen fewer times are left out (they fall back to the OOV vector).
    oov : {"zeros", "mean"}
        The vector of a word outside the table.
    corpus_name : str
        What the corpus was (recorded in ``distillation.json``).

    Raises
    ------
    ValueError
        For an empty corpus, a corpus with no word reaching ``min_count``, a ``dim`` wider than the
        teacher or larger than the vocabulary, bad options, and static or ELMo teachers without a
        corpus.
    """
    from .encoders import load_encoder

    _check_options(dim, min_count, oov)
    teacher = encoder if isinstance(encoder, Encoder) else load_encoder(encoder)
    if teacher.family == "static":
        raise ValueError(f"{teacher.spec or 'this encoder'} is static vectors already: distil a transformer or ELMo")
    extractor = FeatureExtractor(teacher, layers=layers, combine=combine, subword_pooling="mean")
    if dim is not None and dim > extractor.dim:
        raise ValueError(f"dim={dim} is wider than the teacher's features ({extractor.dim} columns with layers="
                         f"{layers!r}, combine={combine!r}); pass dim <= {extractor.dim}")
    if corpus is None:
        words, vectors, counts = _vocabulary_vectors(teacher, extractor, show_progress)
        source = "vocabulary"
    else:
        words, vectors, counts = _corpus_vectors(teacher, extractor, corpus, min_count, show_progress)
        source = "corpus"
    explained = None
    if dim is not None:
        vectors, explained = _reduce(vectors, dim)
    student = StaticVectors(words, vectors, spec=os.fspath(out) if out is not None else f"distilled:{teacher.spec}",
                            lowercase=not is_cased(teacher), oov=oov)
    if out is not None:
        record = {"teacher": teacher.spec, "source": source, "corpus": corpus_name or None,
                  "layers": list(extractor.pooling.layer_indexes), "combine": combine, "subword_pooling": "mean",
                  "dim": student.width, "min_count": min_count if corpus is not None else None, "words": len(words),
                  "occurrences": int(counts.sum()), "pca_explained_variance": explained}
        with atomic_directory(out, overwrite=overwrite, what="distilled encoder directory") as folder:
            student._write(folder)
            with open(os.path.join(folder, DISTILLATION_FILE), "w", encoding="utf-8") as handle:
                json.dump(record, handle, indent=2)
    return student


def _check_options(dim: Optional[int], min_count: int, oov: str) -> None:
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1):
        raise ValueError(f"dim must be a positive int or None, got {dim!r}")
    if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise ValueError(f"min_count must be a positive int, got {min_count!r}")
    check_choice("oov", oov, OovVector)


def _corpus_vectors(teacher: Encoder, extractor: FeatureExtractor, corpus: Iterable[Sequence[str]], min_count: int,
                    show_progress: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Mean contextual vector of every corpus word (lowercased for an uncased teacher)."""
    fold = (lambda word: word) if is_cased(teacher) else str.lower
    index: dict[str, int] = {}
    sums = np.zeros((1024, extractor.dim), dtype=np.float64)
    counts = np.zeros(1024, dtype=np.int64)
    n_sentences = 0
    for chunk in _chunks(corpus, CHUNK_SENTENCES):
        n_sentences += len(chunk)
        rows = np.array([index.setdefault(fold(word), len(index)) for sentence in chunk for word in sentence],
                        dtype=np.int64)
        if len(index) > len(counts):
            size = max(len(index), 2 * len(counts))
            sums = np.concatenate([sums, np.zeros((size - len(sums), sums.shape[1]))])
            counts = np.concatenate([counts, np.zeros(size - len(counts), dtype=np.int64)])
        nonempty = [s for s in chunk if len(s)]
        if not nonempty:
            continue
        vectors = np.concatenate(list(extractor.iter_words(nonempty, show_progress=show_progress)))
        # per-word sums (np.add.at is unbuffered and far slower on wide rows)
        torch.from_numpy(sums).index_add_(0, torch.from_numpy(rows), torch.from_numpy(vectors).double())
        counts += np.bincount(rows, minlength=len(counts))
    if not index:
        raise ValueError(f"the corpus holds no words ({n_sentences} sentences, all empty): nothing to distil")
    words = list(index)
    keep = np.flatnonzero(counts[: len(words)] >= min_count)
    if not len(keep):
        raise ValueError(f"no corpus word occurs min_count={min_count} times (the most frequent occurs "
                         f"{int(counts.max())} times): lower min_count or give a larger corpus")
    return [words[i] for i in keep], (sums[keep] / counts[keep, None]).astype(np.float32), counts[keep]


def _chunks(corpus: Iterable[Sequence[str]], size: int) -> Iterator[list[Sequence[str]]]:
    chunk: list[Sequence[str]] = []
    for i, sentence in enumerate(corpus):
        if isinstance(sentence, str):
            raise TypeError(f"corpus sentence {i} is a str; pass token lists (e.g. text.split())")
        _check_tokens(sentence, f"corpus sentence {i}")  # named by its place in the corpus, not the chunk
        chunk.append(sentence)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _vocabulary_vectors(teacher: Encoder, extractor: FeatureExtractor,
                        show_progress: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every whole word of the teacher's tokenizer, encoded alone."""
    tokenizer = getattr(teacher, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(f"{teacher.spec or 'this encoder'} ({teacher.family}) has no piece vocabulary to distil: "
                         "pass a corpus")
    words = whole_words(teacher)
    vectors = np.concatenate(list(extractor.iter_words([[w] for w in words], show_progress=show_progress)))
    return words, vectors, np.ones(len(words), dtype=np.int64)


def whole_words(teacher) -> list[str]:
    """The words a transformer's tokenizer keeps as one piece, in vocabulary order (no special or
    continuation pieces)."""
    tokenizer = teacher.tokenizer
    special = set(tokenizer.all_special_tokens)
    candidates: dict[str, None] = {}
    for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        if token in special:
            continue
        word = tokenizer.convert_tokens_to_string([token]).strip()
        if word and not any(c.isspace() for c in word):
            candidates.setdefault(word, None)
    words = list(candidates)
    pieces = teacher.pieces([[w] for w in words])
    return [w for w, p in zip(words, pieces) if p.n_pieces == 1 and not _reserved(w)]


def _reserved(word: str) -> bool:
    """BERT's placeholder pieces (``[unused0]``) are not words."""
    return word.startswith("[") and word.endswith("]") and len(word) > 2


def _reduce(vectors: np.ndarray, dim: int) -> tuple[np.ndarray, float]:
    """PCA to ``dim`` columns; the share of the variance kept."""
    from sklearn.decomposition import PCA

    if dim > len(vectors):
        raise ValueError(f"dim={dim} needs at least {dim} words, the vocabulary has {len(vectors)}: lower dim")
    pca = PCA(n_components=dim, random_state=0)
    reduced = pca.fit_transform(vectors).astype(np.float32)
    return reduced, float(pca.explained_variance_ratio_.sum())


__all__ = ["DISTILLATION_FILE", "distill", "whole_words"]
