"""Distil a contextual encoder into static word vectors (``contextembed distill``).

A static table answers a word in a dictionary lookup, hundreds of times faster than running the
encoder, at the cost of context. Two ways to build it from a teacher's layers:

- **corpus** (``corpus=...``): every occurrence of a word in the corpus is encoded in its sentence
  and the word's vector is the mean of its contextual vectors over its occurrences (the "reduction
  to static embeddings" of Bommasani et al., 2020). Words are those of the corpus with at least
  ``min_count`` occurrences.
- **vocabulary** (no corpus): every whole word of the teacher's tokenizer vocabulary (a word the
  tokenizer keeps as one piece) is encoded alone, model2vec-style.

Each occurrence is pooled like any contextembed feature (``layers``, ``combine``, subword mean).
By default the two middle layers are averaged: static reductions of the middle layers keep more
than those of the last ones, which specialise to the pretraining task (Bommasani et al., 2020;
Ethayarajh, 2019; measured in docs/speed.md). Three more choices decide what a lookup finds:

- **case** ``"keep"`` (default): words keep their written form, even for an uncased teacher, whose
  contexts still differ: ``"Apple"`` averages the contexts of the capitalised form. A lowercased
  row (all forms pooled) serves the forms the corpus never wrote; lookups try the exact form, then
  the lowercased one. ``"fold"``: one lowercased row per word.
- **subwords** (default: when the teacher has a piece tokenizer): the same pass averages every
  piece's contextual vectors too, and a word outside the table takes the mean of its pieces'
  vectors (:class:`contextembed.encoders._static.subwords.SubwordVectors`) instead of one shared OOV vector.
- **dim**: the table (and the piece vectors, by the same projection) reduced by PCA, which also
  centres it (the common direction every mean of vectors shares is removed).
- **weighting** ``"sif"``: after PCA, every row (word or piece) is multiplied by its SIF weight
  ``a / (a + p(w))`` (:mod:`contextembed.pretraining._sif`), ``p(w)`` from the corpus's counts, a word-count
  list (``frequencies``) or, without either, the Zipf rank of the word's first piece in the
  teacher's vocabulary: model2vec's post-processing, in place of the IDF a corpus would give.
- **storage**: float32, float16, int8 or a clustered vocabulary on disk
  (:mod:`contextembed.encoders._static.tables`).

``dim="auto"`` and ``weighting="auto"`` take the defaults measured best for each source on SST-2
and the NER probe (:data:`DEFAULTS`; benchmarks/distill.py, docs/speed.md).

The result is saved as a static encoder directory that :func:`contextembed.load_encoder` reads
and every adapter uses, with ``distillation.json``: its provenance record
(:mod:`contextembed._runtime.provenance`: the teacher's spec and fingerprint, a hash of the corpus's tokens,
every option) and what came out (words, occurrences, pieces, explained variance). The output may
not be the teacher's file or directory, lie inside it or contain it: that is refused before any work.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Optional, Union

import numpy as np
import torch

from .._runtime import provenance
from ._sif import SIF_A, count_probabilities, read_word_counts, sif_weights, zipf_probabilities
from .._runtime.files import atomic_directory, check_apart, check_writable
from ..encoders._base import Encoder
from ..encoders._identity import ModelIdentity, identify
from ..encoders._static.vectors import OovVector, StaticVectors
from ..encoders._static.subwords import SubwordVectors
from ..encoders._static.tables import TableStorage
from ..extraction import FeatureExtractor
from .._inputs.options import check_choice
from ..pooling import LayerSpec
from .._inputs.sentences import _check_tokens

Case = Literal["keep", "fold"]
Weighting = Literal["auto", "sif", "none"]
Source = Literal["corpus", "vocabulary"]

#: what ``dim="auto"`` and ``weighting="auto"`` mean for each source (measured on SST-2 and the NER
#: probe: docs/speed.md): without a corpus, PCA to the teacher's full width (centred, nothing cut)
#: and SIF; with one, neither (both cost accuracy there)
DEFAULTS: dict[str, dict] = {
    "vocabulary": {"dim": "width", "weighting": "sif"},
    "corpus": {"dim": None, "weighting": "none"},
}

#: provenance of a distilled directory, beside the static encoder's own files
DISTILLATION_FILE = "distillation.json"
#: the kind of artifact its record names
DISTILLED_ARTIFACT = "distilled static vectors"
#: sentences encoded at once while the sums are taken
CHUNK_SENTENCES = 1024


def distill(
    encoder: Union[Encoder, str, os.PathLike],
    out: Optional[Union[str, os.PathLike]] = None,
    *,
    corpus: Optional[Iterable[Sequence[str]]] = None,
    layers: Optional[LayerSpec] = None,
    combine: str = "mean",
    dim: Union[int, None, Literal["auto"]] = "auto",
    weighting: Weighting = "auto",
    sif_a: float = SIF_A,
    frequencies: Union[Mapping[str, int], str, os.PathLike, None] = None,
    storage: Optional[TableStorage] = None,
    min_count: int = 1,
    case: Case = "keep",
    subwords: Optional[bool] = None,
    oov: OovVector = "mean",
    overwrite: bool = False,
    show_progress: bool = False,
    corpus_name: str = "",
    backend: Optional[str] = None,
) -> StaticVectors:
    """Static word vectors from a contextual encoder; saved to ``out`` when given.

    Parameters
    ----------
    encoder : Encoder, str or path
        The teacher: a loaded encoder, or anything :func:`contextembed.load_encoder` takes (a
        transformer or ELMo; static vectors are static already).
    out : str or path, optional
        Directory for the static encoder (written atomically; an existing non-empty one only with
        ``overwrite``), with ``distillation.json`` recording how it was made. Never the teacher's
        file or directory, inside it or containing it.
    corpus : iterable of token lists, optional
        Tokenized sentences; each word's vector is its mean contextual vector over them. Without
        it, the tokenizer's whole words are encoded alone (transformers only).
    layers, combine
        Which teacher layers and how they are combined (default: the two middle layers,
        :func:`middle_layers`, averaged); see :class:`contextembed.FeatureExtractor`. Word pieces
        are averaged.
    dim : int, "auto" or None
        Reduce (and centre) the vectors to this many columns by PCA (at most the teacher's width);
        ``None``: no PCA; ``"auto"``: the default of the source (:data:`DEFAULTS`).
    weighting : {"auto", "sif", "none"}
        ``"sif"``: multiply every row (and piece vector), after PCA, by ``sif_a / (sif_a + p(w))``;
        ``"auto"``: the default of the source (:data:`DEFAULTS`).
    sif_a : float
        SIF's constant, in (0, 1].
    frequencies : mapping or path, optional
        Word counts for ``p(w)`` (``{word: count}``, or a file of ``word count`` lines). Default:
        the corpus's own counts, or without a corpus the Zipf rank of each word's first piece in
        the teacher's vocabulary. Piece vectors are weighted by the corpus's piece counts, or by
        their Zipf rank.
    storage : TableStorage, optional
        How the saved table is stored (float32 rows by default; float16, int8, clustered:
        :class:`contextembed.encoders.TableStorage`); recorded in the table's files.
    min_count : int
        Corpus words (and pieces) seen fewer times are left out. Only with a corpus.
    case : {"keep", "fold"}
        Keep each written form as its own word, with a lowercased row for the forms never seen
        lowercased (lookups try the exact form first), or fold every word to lowercase.
    subwords : bool, optional
        Keep the pieces' mean vectors for words outside the table. ``None``: when the teacher has a
        piece tokenizer (transformers); ``True`` insists on it.
    oov : {"zeros", "mean"}
        The vector of a word outside the table none of whose pieces is known.
    corpus_name : str
        What the corpus was (recorded in ``distillation.json``).
    backend : {"torch", "openvino", "auto"}, optional
        What runs a teacher given as a spec (:func:`contextembed.load_encoder`; ``None``: torch). A
        loaded teacher runs on its own backend: passing one with it is an error.
        ``distillation.json`` records the backend and precision the teacher ran.
        Which to choose for a task and a machine: ``docs/choosing.md``.

    Raises
    ------
    ValueError
        For an empty corpus, a corpus with no word reaching ``min_count``, a ``dim`` wider than the
        teacher or larger than the vocabulary, bad options (``storage.exact_columns`` not below the
        table's width), static teachers, ELMo teachers without
        a corpus, ``subwords=True`` for a teacher without a piece tokenizer, an ``out`` that is,
        lies inside or contains the teacher's files, ``sif_a`` outside (0, 1], ``frequencies`` with
        ``weighting="none"`` or with a count that is not an int >= 0, and ``storage.clusters``
        above the number of words.
    TypeError
        For ``frequencies`` that is neither a mapping nor a path, and ``storage`` that is not a
        :class:`~contextembed.encoders._static.tables.TableStorage`.
    FileFormatError
        For a word-count file with a line that is not ``word count`` (naming the file and line).
    FileExistsError
        If ``out`` holds files and ``overwrite`` is false.
    """
    from ..encoders import load_encoder

    _check_options(dim, min_count, oov, case, subwords, corpus)
    weighting, sif_a, storage = _check_weighting(weighting, sif_a, storage, frequencies)
    source = "vocabulary" if corpus is None else "corpus"
    auto_dim = isinstance(dim, str)
    weighting = DEFAULTS[source]["weighting"] if weighting == "auto" else weighting
    counts_list = read_word_counts(frequencies) if isinstance(frequencies, (str, os.PathLike)) else frequencies
    identity = check_output(encoder, out, overwrite=overwrite)
    if isinstance(encoder, Encoder) and backend is not None:
        raise ValueError(f"backend={backend!r} applies to a teacher given as a spec; the loaded teacher already runs "
                         f"on backend {encoder.backend!r}: pass its spec, or load it with the backend you want")
    teacher = encoder if isinstance(encoder, Encoder) else load_encoder(encoder, backend=backend or "torch")
    if teacher.family == "static":
        raise ValueError(f"{teacher.spec or 'this encoder'} is static vectors already: distil a transformer or ELMo")
    layers = middle_layers(teacher.n_layers) if layers is None else layers
    extractor = FeatureExtractor(teacher, layers=layers, combine=combine, subword_pooling="mean")
    if auto_dim:  # the source's default: None, the teacher's width, or a width (at most the teacher's)
        default = DEFAULTS[source]["dim"]
        dim = extractor.dim if default == "width" else default and min(default, extractor.dim)
    if dim is not None and dim > extractor.dim:
        raise ValueError(f"dim={dim} is wider than the teacher's features ({extractor.dim} columns with layers="
                         f"{layers!r}, combine={combine!r}); pass dim <= {extractor.dim}")
    width = extractor.dim if dim is None else dim
    if storage.exact_columns is not None and storage.exact_columns >= width:
        raise ValueError(f"storage's exact_columns={storage.exact_columns} leaves none of the table's {width} columns to "
                         f"cluster: pass at most {width - 1}")
    tokenizer = _piece_tokenizer(teacher, subwords)
    reduction = reduce_teacher(teacher, extractor, corpus, case=case, min_count=min_count, pieces=tokenizer is not None,
                               show_progress=show_progress)
    words, counts = reduction.words, reduction.counts
    vectors, pieces, explained, estimate = refine(reduction, dim=dim, auto_dim=auto_dim, weighting=weighting,
                                                  sif_a=sif_a, frequencies=counts_list)
    student = StaticVectors(words, vectors, spec=os.fspath(out) if out is not None else f"distilled:{teacher.spec}",
                            lowercase=case == "fold", oov=oov, subwords=pieces, storage=storage)
    if out is not None:
        record = provenance.record(
            DISTILLED_ARTIFACT, teacher=teacher.spec, teacher_fingerprint=identity and identity.fingerprint,
            teacher_backend=teacher.backend, teacher_precision=getattr(teacher, "precision", None),
            source=source, corpus=corpus_name or None, corpus_hash=reduction.corpus_hash,
            layers=list(extractor.pooling.layer_indexes), combine=combine, subword_pooling="mean", case=case,
            dim=student.width, min_count=min_count if corpus is not None else None, subwords=pieces is not None,
            oov=oov, words=len(words), occurrences=int(counts.sum()),
            subword_pieces=None if pieces is None else len(pieces.ids), pca_explained_variance=explained,
            weighting=weighting, sif_a=sif_a if weighting == "sif" else None, frequencies=estimate,
            frequencies_hash=_counts_hash(counts_list) if estimate == "word counts" else None,
            storage=student.storage.as_record())
        with atomic_directory(out, overwrite=overwrite, what="distilled encoder directory") as folder:
            student._write(folder)
            provenance.write(os.path.join(folder, DISTILLATION_FILE), record)
    return student


def check_output(teacher: Union[Encoder, str, os.PathLike], out: Optional[Union[str, os.PathLike]], *,
                 overwrite: bool, flag: str = "overwrite=True") -> Optional[ModelIdentity]:
    """Check ``out`` before any work; return the teacher's identity (its files' location and fingerprint).

    Raises
    ------
    ValueError
        If ``out`` is the teacher's file or directory, lies inside it or contains it (links resolved),
        naming both paths.
    FileExistsError
        If ``out`` holds files and ``overwrite`` is false.
    ModelNotFoundError
        If the teacher is a spec that names nothing local.
    """
    identity = _teacher_identity(teacher)
    if out is not None:
        if identity is not None:
            check_apart(out, identity.location, output_what="distilled encoder directory", source_what="the teacher")
        check_writable(out, overwrite, what="distilled encoder directory", flag=flag)
    return identity


def _teacher_identity(teacher: Union[Encoder, str, os.PathLike]) -> Optional[ModelIdentity]:
    """Where the teacher's files are and their fingerprint; ``None`` for a loaded encoder whose spec
    names no files (built in memory)."""
    if not isinstance(teacher, Encoder):
        return identify(teacher)
    if not teacher.spec:
        return None
    try:
        return identify(teacher.spec)
    except (OSError, ValueError):
        return None


@dataclass
class Reduction:
    """One pass of the teacher over the corpus (or its vocabulary), before PCA and weighting.

    ``refine`` turns it into the table's rows; keeping it lets several PCA widths and weightings be
    compared without encoding again (benchmarks/distill.py).
    """

    #: the table's words; ``(words, width)`` float32 mean vectors; ``(words,)`` occurrences
    words: list[str]
    vectors: np.ndarray
    counts: np.ndarray
    #: the piece vectors (``None`` without a piece tokenizer or with ``subwords=False``) and their
    #: ``(pieces,)`` occurrences
    pieces: Optional[SubwordVectors]
    piece_counts: Optional[np.ndarray]
    #: the teacher's tokenizer (``None`` for ELMo): the Zipf ranks of words without a corpus
    tokenizer: object
    #: hash of the corpus's tokens; ``None`` for the vocabulary
    corpus_hash: Optional[str]


def reduce_teacher(teacher: Encoder, extractor: FeatureExtractor, corpus: Optional[Iterable[Sequence[str]]], *,
                   case: str, min_count: int, pieces: bool, show_progress: bool = False) -> Reduction:
    """Every word's (and piece's) mean contextual vector over ``corpus``, or over the teacher's
    whole words encoded alone when ``corpus`` is ``None`` (see :func:`distill`, which checks the
    arguments)."""
    sentences = [[word] for word in _vocabulary_words(teacher)] if corpus is None else corpus
    tokens = hashlib.blake2b(digest_size=16)
    word_sums, piece_sums = _accumulate(teacher, extractor, sentences, case, pieces, show_progress, tokens)
    # the vocabulary's own written forms need no pooled lowercase rows: its tokenizer splits the others
    words, vectors, counts = _word_rows(word_sums, min_count, pool_lowercase=case == "keep" and corpus is not None)
    piece_vectors, piece_counts = None, None
    tokenizer = getattr(teacher, "tokenizer", None)
    if pieces:
        piece_ids, means, piece_counts = piece_sums.means(min_count)
        piece_vectors = SubwordVectors(tokenizer, np.asarray(piece_ids), means)
    return Reduction(words, vectors, counts, piece_vectors, piece_counts, tokenizer,
                     tokens.hexdigest() if corpus is not None else None)


def refine(reduction: Reduction, *, dim: Optional[int], weighting: str, sif_a: float = SIF_A,
           frequencies: Optional[Mapping[str, int]] = None, auto_dim: bool = False):
    """The table's rows from a :class:`Reduction`: PCA to ``dim`` columns (fitted on the words,
    applied to the pieces too), then with ``weighting="sif"`` every row times its SIF weight.

    Returns
    -------
    vectors : np.ndarray
        ``(words, dim)`` float32.
    pieces : SubwordVectors or None
        The piece vectors, projected and weighted alike.
    explained : float or None
        The share of the variance PCA kept.
    estimate : str or None
        Where ``p(w)`` came from: ``"word counts"``, ``"corpus counts"`` or ``"zipf rank"``.
    """
    vectors, pieces, explained, estimate = reduction.vectors, reduction.pieces, None, None
    if dim is not None:
        pca, explained = _fit_pca(vectors, min(dim, len(vectors)) if auto_dim else dim)
        vectors = pca.transform(vectors).astype(np.float32)
        if pieces is not None:
            pieces = pieces.transformed(pca.transform(pieces.vectors).astype(np.float32))
    if weighting == "sif":
        from_corpus = reduction.corpus_hash is not None
        estimate = "word counts" if frequencies is not None else "corpus counts" if from_corpus else "zipf rank"
        # (words,) and (pieces,): p(w) of every row, then every row times its weight
        probabilities = _word_probabilities(reduction, frequencies)
        vectors = vectors * sif_weights(probabilities, sif_a)[:, None]
        if pieces is not None:
            counts = reduction.piece_counts
            piece_probabilities = (counts / max(int(counts.sum()), 1) if from_corpus
                                   else zipf_probabilities(pieces.ids, len(reduction.tokenizer)))
            pieces = pieces.transformed(pieces.vectors * sif_weights(piece_probabilities, sif_a)[:, None])
    return vectors.astype(np.float32), pieces, explained, estimate


def middle_layers(n_layers: int) -> list[int]:
    """The two middle layers of ``n_layers`` hidden states (embeddings = layer 0): ``[3, 4]`` of a
    6-layer transformer's 7, ``[6, 7]`` of BERT-base's 13, ``[1, 2]`` of ELMo's 3; ``[0]`` alone."""
    if n_layers < 2:
        return [0]
    middle = (n_layers - 1) // 2
    return [middle, middle + 1]


def _check_options(dim: Union[int, None, str], min_count: int, oov: str, case: str, subwords: Optional[bool],
                   corpus: Optional[Iterable]) -> None:
    if dim is not None and dim != "auto" and (isinstance(dim, bool) or not isinstance(dim, (int, np.integer))
                                               or dim < 1):
        raise ValueError(f"dim must be a positive int, 'auto' or None, got {dim!r}")
    if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise ValueError(f"min_count must be a positive int, got {min_count!r}")
    if corpus is None and min_count != 1:
        raise ValueError(f"min_count={min_count} counts corpus occurrences; without a corpus every vocabulary word "
                         "occurs once: leave min_count at 1 or pass a corpus")
    if subwords not in (None, True, False):
        raise ValueError(f"subwords must be True, False or None, got {subwords!r}")
    check_choice("oov", oov, OovVector)
    check_choice("case", case, Case)


def _check_weighting(weighting: str, sif_a: float, storage: Optional[TableStorage],
                     frequencies: object) -> tuple[str, float, TableStorage]:
    check_choice("weighting", weighting, Weighting)
    if isinstance(sif_a, bool) or not isinstance(sif_a, (int, float, np.floating)) or not 0 < sif_a <= 1:
        raise ValueError(f"sif_a must be a number in (0, 1], got {sif_a!r}")
    if storage is not None and not isinstance(storage, TableStorage):
        raise TypeError(f"storage must be a TableStorage or None, got {type(storage).__name__}")
    if frequencies is not None:
        if weighting == "none":
            raise ValueError("frequencies weight the vectors: they need weighting='sif' (or 'auto'), not 'none'")
        if not isinstance(frequencies, (str, os.PathLike, Mapping)):
            raise TypeError(f"frequencies must be a mapping of word counts or a file path, got "
                            f"{type(frequencies).__name__}")
        if isinstance(frequencies, Mapping):
            bad = next(((w, c) for w, c in frequencies.items() if not isinstance(w, str) or isinstance(c, bool)
                        or not isinstance(c, (int, np.integer)) or c < 0), None)
            if bad is not None:
                raise ValueError(f"frequencies maps words (str) to counts (int >= 0); got {bad[0]!r}: {bad[1]!r}")
            if not any(frequencies.values()):
                raise ValueError("frequencies holds no word counted more than 0 times")
    return weighting, float(sif_a), storage or TableStorage()


def _word_probabilities(reduction: Reduction, frequencies: Optional[Mapping[str, int]]) -> np.ndarray:
    """``(words,)`` p(w): from the word-count list, else the corpus's counts, else the Zipf rank of
    each word's first piece in the teacher's vocabulary."""
    if frequencies is not None:
        return count_probabilities(reduction.words, frequencies, sum(frequencies.values()))
    if reduction.corpus_hash is not None:
        return reduction.counts / reduction.counts.sum()
    from .._inputs.alignment import PieceTokenizer

    ids, counts = PieceTokenizer(reduction.tokenizer).words_alone(reduction.words)
    # (words,) the id of each word's first piece
    first_ids = ids[np.concatenate([[0], np.cumsum(counts)[:-1]])]
    return zipf_probabilities(first_ids, len(reduction.tokenizer))


def _counts_hash(counts: Mapping[str, int]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for word, count in sorted(counts.items()):
        digest.update(word.encode("utf-8", "surrogatepass") + b"\x1f" + str(int(count)).encode() + b"\x1e")
    return digest.hexdigest()


def _piece_tokenizer(teacher: Encoder, subwords: Optional[bool]):
    """The teacher's (fast) tokenizer when subword vectors are kept, else ``None``."""
    tokenizer = getattr(teacher, "tokenizer", None)
    if subwords is False:
        return None
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        if subwords:
            raise ValueError(f"{teacher.spec or 'this encoder'} ({teacher.family}) has no fast piece tokenizer, so "
                             "its words cannot be split into pieces: pass subwords=False (or leave it None)")
        return None
    return tokenizer


class _Sums:
    """Running float64 sums and counts of vectors per key (a word or a piece id)."""

    def __init__(self, width: int) -> None:
        self.index: dict[Hashable, int] = {}
        # (capacity, width)
        self.sums = torch.zeros((1024, width), dtype=torch.float64)
        self.counts = np.zeros(1024, dtype=np.int64)

    def add(self, keys: Iterable[Hashable], vectors: np.ndarray) -> None:
        """Add ``(n, width)`` ``vectors``, one per key."""
        rows = np.fromiter((self.index.setdefault(k, len(self.index)) for k in keys), dtype=np.int64,
                           count=len(vectors))
        if len(self.index) > len(self.counts):
            size = max(len(self.index), 2 * len(self.counts))
            self.sums = torch.cat([self.sums, self.sums.new_zeros((size - len(self.sums), self.sums.shape[1]))])
            self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts), dtype=np.int64)])
        # per-key sums (np.add.at is unbuffered and far slower on wide rows)
        self.sums.index_add_(0, torch.from_numpy(rows), torch.from_numpy(vectors).double())
        self.counts += np.bincount(rows, minlength=len(self.counts))

    def totals(self) -> tuple[list, np.ndarray, np.ndarray]:
        """Keys in first-seen order, ``(keys, width)`` float64 sums and ``(keys,)`` counts."""
        n = len(self.index)
        return list(self.index), self.sums[:n].numpy(), self.counts[:n]

    def means(self, min_count: int) -> tuple[list, np.ndarray, np.ndarray]:
        """Keys seen at least ``min_count`` times, their ``(keys, width)`` float32 means and ``(keys,)`` counts."""
        keys, sums, counts = self.totals()
        keep = np.flatnonzero(counts >= min_count)
        return [keys[i] for i in keep], (sums[keep] / counts[keep, None]).astype(np.float32), counts[keep]


def _accumulate(teacher: Encoder, extractor: FeatureExtractor, corpus: Iterable[Sequence[str]], case: str,
                pieces: bool, show_progress: bool, tokens) -> tuple[_Sums, Optional[_Sums]]:
    """Sums of every word's (and with ``pieces``, every piece id's) pooled contextual vectors; every
    sentence read is added to the hash ``tokens``."""
    fold = str.lower if case == "fold" else (lambda word: word)
    words, piece_sums = _Sums(extractor.dim), (_Sums(extractor.dim) if pieces else None)
    layers = extractor.pooling.layer_indexes
    n_sentences = 0
    for chunk in _chunks(corpus, CHUNK_SENTENCES, tokens):
        n_sentences += len(chunk)
        nonempty = [s for s in chunk if len(s)]
        if not nonempty:
            continue
        encodings = list(teacher.iter_encode_pieces(nonempty, layers, show_progress=show_progress))
        # (pieces, dim) per sentence: layer pooling is linear, so pooling pieces first and averaging
        # them per word equals pooling the words' piece means
        pooled = [extractor.pool_layers(encoding.hidden) for encoding in encodings]
        word_vectors = np.concatenate([_word_means(rows, e.word_offsets) for rows, e in zip(pooled, encodings)])
        words.add((fold(word) for sentence in nonempty for word in sentence), word_vectors)
        if piece_sums is not None:  # the piece ids the teacher encoded (transformers yield them)
            piece_sums.add(np.concatenate([e.ids for e in encodings]).tolist(), np.concatenate(pooled))
    if not words.index:
        raise ValueError(f"the corpus holds no words ({n_sentences} sentences, all empty): nothing to distil")
    return words, piece_sums


def _word_means(pieces: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``(words, dim)``: the mean of each word's rows of ``(pieces, dim)`` (every word owns one or more)."""
    counts = np.diff(offsets)
    return np.add.reduceat(pieces, offsets[:-1], axis=0, dtype=np.float64) / counts[:, None]


def _word_rows(sums: _Sums, min_count: int, pool_lowercase: bool) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The table's words, ``(words, dim)`` float32 means and counts; with ``pool_lowercase``, a pooled
    lowercased row for every lowercased form that is not a kept word itself."""
    keys, totals, counts = sums.totals()
    rows = [[i] for i in np.flatnonzero(counts >= min_count)]
    if not rows:
        raise ValueError(f"no corpus word occurs min_count={min_count} times (the most frequent occurs "
                         f"{int(counts.max())} times): lower min_count or give a larger corpus")
    words = [keys[i] for (i,) in rows]
    if pool_lowercase:
        kept = set(words)
        forms: dict[str, list[int]] = {}
        for i, word in enumerate(keys):
            if word.lower() not in kept:
                forms.setdefault(word.lower(), []).append(i)
        pooled = {low: group for low, group in forms.items() if counts[group].sum() >= min_count}
        words += list(pooled)
        rows += list(pooled.values())
    # (words, dim) sums and (words,) counts, every written form of a pooled row added up
    word_totals = np.stack([totals[group].sum(axis=0) for group in rows])
    word_counts = np.array([counts[group].sum() for group in rows], dtype=np.int64)
    return words, (word_totals / word_counts[:, None]).astype(np.float32), word_counts


def _chunks(corpus: Iterable[Sequence[str]], size: int, tokens) -> Iterator[list[Sequence[str]]]:
    """Checked sentences of ``corpus`` in lists of ``size``; each added to the hash ``tokens``."""
    chunk: list[Sequence[str]] = []
    for i, sentence in enumerate(corpus):
        if isinstance(sentence, str):
            raise TypeError(f"corpus sentence {i} is a str; pass token lists (e.g. text.split())")
        _check_tokens(sentence, f"corpus sentence {i}")  # named by its place in the corpus, not the chunk
        tokens.update("\x1f".join(sentence).encode("utf-8") + b"\x1e")
        chunk.append(sentence)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _vocabulary_words(teacher: Encoder) -> list[str]:
    """Every whole word of the teacher's tokenizer, for the vocabulary mode."""
    if getattr(teacher, "tokenizer", None) is None:
        raise ValueError(f"{teacher.spec or 'this encoder'} ({teacher.family}) has no piece vocabulary to distil: "
                         "pass a corpus")
    return whole_words(teacher)


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


def _fit_pca(vectors: np.ndarray, dim: int):
    """A PCA to ``dim`` columns fitted on the table, and the share of the variance it keeps."""
    from sklearn.decomposition import PCA

    if dim > len(vectors):
        raise ValueError(f"dim={dim} needs at least {dim} words, the vocabulary has {len(vectors)}: lower dim")
    pca = PCA(n_components=dim, random_state=0).fit(vectors)
    return pca, float(pca.explained_variance_ratio_.sum())


__all__ = ["DEFAULTS", "DISTILLATION_FILE", "distill", "middle_layers", "whole_words"]
