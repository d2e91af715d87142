"""Encoder + layer pooling + subword/text pooling: the feature stage as one object.

This is what the CLI and benchmarks run; the scikit-learn and spaCy adapters build on the same
pieces (with trainable mixes and caches of their own).

Every option left ``None`` takes the default of the level the features are for
(:data:`LEVEL_DEFAULTS`): word features use the encoder's own layers and combine and each word's
first piece; text features are the one default text vector,
:data:`~contextembed.pooling.TEXT_DEFAULTS`, which ``TextEmbedder()``, ``contextembed embed
--level text`` and spaCy's ``doc.vector`` give too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Literal, Optional, get_args

import numpy as np
import torch

from ._inputs.documents import check_context, in_context, with_doc_ids
from .encoders._base import Encoder, PieceEncoding, Sentences, progress_bar
from ._inputs.options import check_choice
from .pooling import (
    TEXT_DEFAULTS,
    LayerPooling,
    LayerSpec,
    SubwordPooling,
    TextPooling,
    check_subword_pooling,
    check_text_options,
    normalize_rows,
    pool_layers_numpy,
)
from .pooling._layers import OutputDtype, as_output_dtype, check_output_dtype
from .pooling._subword import subword_output_width
from .pooling._text import pool_text_numpy
from ._inputs.sentences import check_sentence_chunks

Level = Literal["word", "text"]
#: the levels features are for: ``"word"``, one row per word; ``"text"``, one row per text
LEVELS: tuple[str, ...] = get_args(Level)

#: what an option left ``None`` stands for, per level. At word level ``layers`` and ``combine``
#: stay ``None``: the encoder's own (transformers: the last four, concatenated; static vectors and
#: ELMo: all); ``text_pooling`` and ``normalize`` there shape :meth:`FeatureExtractor.texts` only.
LEVEL_DEFAULTS: dict[str, dict[str, object]] = {
    "word": {"tokenizer": "whitespace", "layers": None, "combine": None, "subword_pooling": "first",
             "text_pooling": "mean", "normalize": False},
    "text": asdict(TEXT_DEFAULTS),
}
#: texts pooled per call of the encoder for ``text_pooling="piece_mean"`` (bounds the memory of an
#: iterator's texts held at once)
TEXT_CHUNK = 4096


def level_options(level: str, **options) -> dict:
    """``options`` with every ``None`` replaced by ``level``'s default (:data:`LEVEL_DEFAULTS`).

    Raises
    ------
    ValueError
        For a ``level`` that is not ``"word"`` or ``"text"``.
    TypeError
        For an option name that has no level default (a bug of the caller).
    """
    check_choice("level", level, Level)
    defaults = LEVEL_DEFAULTS[level]
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"level_options got {unknown}, which are not among {sorted(defaults)}")
    return {name: defaults[name] if value is None else value for name, value in options.items()}


class FeatureExtractor:
    """Fixed (untrained) features from an encoder.

    Parameters
    ----------
    encoder : Encoder
        Any loaded encoder.
    layers : int, sequence of int, "all", "hidden" or None
        Layers to use (see :func:`contextembed.pooling.resolve_layers`).
    combine : {"concat", "sum", "mean", "scalar_mix"} or None
        How to combine layers; ``scalar_mix`` here has its initial (equal) weights and gamma 1.
    subword_pooling : {"first", "last", "mean", "first_last", "max"} or None
    text_pooling : {"mean", "piece_mean", "max", "cls"} or None
        Used by :meth:`iter_texts`.
    normalize : bool or None
        Scale each text vector (:meth:`iter_texts`) to unit length; an empty text stays zeros.
    level : {"word", "text"}
        What the options left ``None`` default to (:data:`LEVEL_DEFAULTS`). ``"word"``: the
        encoder's ``default_layers`` and ``default_combine``, ``subword_pooling="first"``; texts
        pooled by ``"mean"``, not normalised. ``"text"``: the default text vector
        (:data:`~contextembed.pooling.TEXT_DEFAULTS`), so ``FeatureExtractor(encoder,
        level="text").texts(sentences)`` equals ``TextEmbedder(encoder).fit_transform(sentences)``.
    context : int
        Word features only: encode each sentence with up to this many pieces of its document's text
        on each side (documents given to :meth:`iter_words`); 0 (the
        default): each sentence alone. Transformers only (a ``ValueError`` for other encoders).
    dtype : {"float32", "float16"}
        Of the word rows (:meth:`iter_words`): transformers round them to float16 where they were
        pooled (on a GPU, half the bytes come back). Text vectors are computed in float32 and
        rounded at the end. A value beyond float16's range is an error naming its sentence and word
        (or text), never an infinity.
    """

    def __init__(
        self,
        encoder: Encoder,
        layers: Optional[LayerSpec] = None,
        combine: Optional[str] = None,
        subword_pooling: Optional[SubwordPooling] = None,
        text_pooling: Optional[TextPooling] = None,
        normalize: Optional[bool] = None,
        *,
        level: Level = "word",
        context: int = 0,
        dtype: OutputDtype = "float32",
    ) -> None:
        options = level_options(level, layers=layers, combine=combine, subword_pooling=subword_pooling,
                                text_pooling=text_pooling, normalize=normalize)
        self.encoder, self.level = encoder, level
        layers = encoder.default_layers if options["layers"] is None else options["layers"]
        combine = encoder.default_combine if options["combine"] is None else options["combine"]
        self.pooling = LayerPooling(encoder.n_layers, layers, combine).eval()
        self.subword_pooling = check_subword_pooling(options["subword_pooling"])
        self.text_pooling = options["text_pooling"]
        check_text_options(self.text_pooling, self.subword_pooling, encoder.has_cls,
                           f"the {encoder.family} encoder {encoder.spec!r}")
        if not isinstance(options["normalize"], (bool, np.bool_)):
            raise TypeError(f"normalize must be True or False, got {options['normalize']!r}")
        self.normalize = bool(options["normalize"])
        self.context = check_context(context, encoder)
        self.dtype = check_output_dtype(dtype)
        if self.context and level != "word":
            raise ValueError(f"context={context} gives word features their document's text; text vectors take none: "
                             "pass level='word' (--level word), or context=0")

    @property
    def dim(self) -> int:
        """Width of one output row."""
        return self.pooling.output_width(subword_output_width(self.encoder.width, self.subword_pooling))

    def pool_layers(self, hidden: np.ndarray) -> np.ndarray:
        """Combine the selected layers: ``(layers, rows, width)`` float32 -> ``(rows, dim)``, rows
        being words or pieces (arrays shared with the core module, not copied)."""
        return pool_layers_numpy(self.pooling, hidden)

    def iter_words(self, sentences: Sentences, *, doc_ids: Optional[Iterable] = None,
                   show_progress: bool = False) -> Iterator[np.ndarray]:
        """Yield ``(words, dim)`` in ``dtype`` per sentence, in input order (a transformer's rows are
        views of one array per chunk of sentences).

        ``sentences`` may be an iterator (a generator): the encoder reads it one chunk at a time and
        nothing here keeps a sentence once its rows are yielded, so memory stays bounded by the
        chunk size (``tests/robustness/test_resource_bounds.py`` measures it).

        ``doc_ids``: with ``context``, one document id per sentence (an iterator too), each
        document's sentences consecutive; ``None``: all of ``sentences`` is one document. Without
        context documents change nothing, but the ids are checked all the same.

        Raises
        ------
        TypeError, ValueError
            For ``doc_ids`` that break the rules of document ids (an id missing, a bool or
            unhashable, a document that comes back after another), or that end before the sentences
            or go on after them, naming the position. The ids are read along with the sentences, so the error comes
            where the bad id is read: an id too many once the last sentence is read.
        """
        yield from self._iter_words(sentences, doc_ids, self.dtype, show_progress)

    def _iter_words(self, sentences: Sentences, doc_ids: Optional[Iterable], dtype: str,
                    show_progress: bool) -> Iterator[np.ndarray]:
        if self.context:
            sentences = in_context(sentences, doc_ids, self.context)
        elif doc_ids is not None:  # documents change nothing without context, but the ids are checked
            sentences = (words for words, _ in with_doc_ids(sentences, doc_ids))
        yield from self.encoder.iter_encode_pooled(sentences, self.pooling, self.subword_pooling,
                                                   in_context=bool(self.context), dtype=dtype, show_progress=show_progress)

    def iter_texts(self, sentences: Sentences, *, show_progress: bool = False) -> Iterator[np.ndarray]:
        """Yield one ``(dim,)`` vector per text in ``dtype``, in input order (an iterator is streamed as by
        :meth:`iter_words`).

        With ``dtype="float16"``, a vector that holds NaN or an infinity, or a value beyond
        float16's range, is a ``ValueError`` naming the text
        (:func:`~contextembed.pooling._layers.as_output_dtype`, the check of ``contextembed embed``),
        never yielded as one; so is such a word row of :meth:`iter_words`, naming the sentence and
        word. float32 features are as computed, unchecked.
        """
        if self.text_pooling == "piece_mean":
            vectors = self._iter_piece_means(sentences, show_progress)
        elif self.text_pooling in ("mean", "max"):
            vectors = (self._finish(pool_text_numpy(words, self.text_pooling)[None])[0]
                       for words in self._iter_words(sentences, None, "float32", show_progress))
        else:
            layers = self.pooling.layer_indexes
            vectors = map(self.text_vector, self.encoder.iter_encode_pieces(sentences, layers, show_progress=show_progress))
        if self.dtype == "float32":  # as computed, unchecked (as iter_words' rows)
            yield from (vector.astype(np.float32, copy=False) for vector in vectors)
            return
        for i, vector in enumerate(vectors):
            yield as_output_dtype(vector[None], self.dtype, lambda _: f"text {i}", "use dtype='float32'")[0]

    def text_vector(self, encoding: PieceEncoding) -> np.ndarray:
        """One text's vector from its encoding: ``(dim,)`` float32.

        ``encoding.hidden`` holds the selected layers (``self.pooling.layer_indexes``, in order).
        """
        if self.text_pooling in ("mean", "max"):
            # (layers, words, width) -> (words, dim) -> (dim,)
            words = self.pool_layers(encoding.words(self.subword_pooling))
            return self._finish(pool_text_numpy(words, self.text_pooling)[None])[0]
        if self.text_pooling == "piece_mean":
            hidden = encoding.piece_means()
        else:
            hidden = encoding.cls if encoding.n_words else np.zeros_like(encoding.cls)  # an empty text: zeros
        # (layers, width) -> (layers, 1, width) -> (1, dim): layer pooling is linear, so pooling each
        # layer's text first is pooling the layers first
        return self._finish(self.pool_layers(hidden[:, None, :]))[0]

    def _iter_piece_means(self, sentences: Sentences, show_progress: bool) -> Iterator[np.ndarray]:
        """``text_pooling="piece_mean"``: the encoder averages each text's pieces (on its device)."""
        layers = list(self.pooling.layer_indexes)
        with progress_bar(sentences, show_progress) as progress:
            # the encoder's own chunk where it has one: what it holds at once anyway
            for chunk in check_sentence_chunks(sentences, min(TEXT_CHUNK, getattr(self.encoder, "chunk_size", TEXT_CHUNK))):
                # (texts, dim): each text's layers combined where the encoder ran
                yield from self._finish(self.encoder.encode_piece_means(chunk, layers, pooling=self.pooling))
                progress.update(len(chunk))

    def _finish(self, vectors: np.ndarray) -> np.ndarray:
        """``(texts, dim)`` float32 text vectors, scaled to unit length with ``normalize``."""
        return normalize_rows(vectors) if self.normalize else vectors

    def words(self, sentences: Sentences) -> list[np.ndarray]:
        """One ``(words, dim)`` array per sentence."""
        return list(self.iter_words(sentences))

    def texts(self, sentences: Sentences) -> np.ndarray:
        """``(texts, dim)`` in ``dtype``."""
        rows = list(self.iter_texts(sentences))
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=self.dtype)


__all__ = ["LEVELS", "LEVEL_DEFAULTS", "FeatureExtractor", "Level"]
