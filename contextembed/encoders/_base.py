"""The one interface every encoder family implements.

An encoder turns pre-tokenized sentences into per-layer word vectors. Every encoder exposes all of
its layers; choosing and combining them is the job of :mod:`contextembed.pooling`.

Shapes use fixed dimension names: ``layers`` (the encoder's layers, or the selected subset),
``words`` (input tokens of one sentence), ``pieces`` (subword pieces of one sentence), ``width``.

The interface is :class:`Encoder`; what it yields (:class:`PieceEncoding`, :class:`PairPieces`) is
:mod:`contextembed.encoders._pieces`, and how it reports its progress and long pairs is
:mod:`contextembed.encoders._reporting`, both imported here.
"""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Optional, Union

import numpy as np

from .._runtime.files import atomic_directory
from ..pooling._layers import (
    LayerPooling,
    LayerSpec,
    as_output_dtype,
    check_output_dtype,
    check_rowwise_pooling,
    pool_layers_numpy,
    resolve_layers,
)
from ..pooling._subword import SubwordPooling, check_subword_pooling
from ..pooling._text import TextPooling, check_text_options
from .._inputs.sentences import (  # noqa: F401  (re-exported)
    Pairs,
    Sentences,
    check_encodable,
    check_pairs,
    check_sentence_chunks,
    check_sentences,
    unencodable_position,
)
from ._pieces import PairPieces, PieceEncoding
from ._reporting import (  # noqa: F401  (re-exported)
    LongPairWarning,
    ProgressCounter,
    ShowProgress,
    progress_bar,
    warn_long_pairs,
)


class Encoder(ABC):
    """A frozen pretrained encoder that exposes all of its layers.

    Subclasses set ``spec`` (the string or path :func:`contextembed.load_encoder` was given, so that
    adapters can store a reference instead of weights) and implement :meth:`iter_encode_pieces`.
    """

    #: what :func:`contextembed.load_encoder` was called with; adapters pickle this, not the weights
    spec: str = ""
    #: the family name used by ``contextembed info`` (``"static"``, ``"elmo"``, ``"transformer"``)
    family: str = ""
    #: what runs the forward pass (the ``backend`` of :func:`contextembed.load_encoder`): ``"torch"`` for ELMo and for
    #: transformers on their own forward, ``"openvino"`` on the engine; static vectors run none
    backend: str = "torch"
    #: the layer pooling used when a caller does not choose one (see :mod:`contextembed.pooling`)
    default_layers: LayerSpec = "all"
    default_combine: str = "concat"
    #: why this family takes no document context (the adapters' ``context=N``);
    #: ``None`` for a family that takes it
    no_context: Optional[str] = "this encoder family cannot encode a sentence inside its document"

    @property
    @abstractmethod
    def n_layers(self) -> int:
        """Number of layers ``encode`` returns with ``layers="all"`` (static: 1)."""

    @property
    @abstractmethod
    def width(self) -> int:
        """Width of one layer's vector for one piece or word."""

    @property
    def max_length(self) -> Optional[int]:
        """Longest input (in the encoder's units) one forward pass takes; ``None`` if unbounded."""
        return None

    @property
    def max_context(self) -> int:
        """The most context pieces one side of a sentence can take (the adapters' ``context``).

        Raises
        ------
        ValueError
            For a family that takes none (:attr:`no_context` says why).
        """
        raise self._context_refused()

    def iter_encode_pieces_in_context(
        self, items: Iterable, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        """Encode each sentence inside the words around it (each item a sentence with its document's
        words before and after it, as the adapters' ``context=N`` builds them), yielding one
        :class:`PieceEncoding` of its own pieces per item, in input order.

        Raises
        ------
        ValueError
            For a family that takes no context (see :attr:`max_context`).
        """
        raise self._context_refused()

    def _context_refused(self) -> ValueError:
        return ValueError(f"context applies to transformers only: {self.no_context}; leave context=0 for the "
                          f"{self.family} encoder {self.spec!r}")

    @property
    def vocab_size(self) -> Optional[int]:
        """Size of the encoder's vocabulary (``None`` for character-level encoders)."""
        return None

    @property
    def has_cls(self) -> bool:
        """Whether :class:`PieceEncoding.cls` is filled (needed by ``text_pooling="cls"``)."""
        return False

    @property
    def is_subword(self) -> bool:
        """Whether words can own several pieces (so that ``subword_pooling`` matters)."""
        return False

    def save(self, directory: Union[str, os.PathLike], *, overwrite: bool = False) -> None:
        """Write the encoder into ``directory`` so that ``load_encoder(directory)`` reads it back.

        Transformers write a Hugging Face model directory (safetensors weights, config, tokenizer),
        ELMo AllenNLP's ``options.json`` + ``weights.hdf5``, static vectors their vectors in
        safetensors with the exact word list and lookup options. Weights are written in fp32 as the
        encoder holds them (an encoder loaded in bf16 or fp16 writes its rounded weights, so the
        copy reproduces it exactly at that precision); pass ``device`` and ``precision`` again when
        loading.

        The files are written into a temporary directory beside ``directory`` and moved into place
        only when complete, so a failed or interrupted save leaves nothing half-written.

        Parameters
        ----------
        directory : str or path
            Created; an existing empty directory is filled.
        overwrite : bool
            Replace an existing non-empty ``directory`` (otherwise ``FileExistsError``).

        Raises
        ------
        ValueError
            For an ELMo encoder loaded with ``precision="int8"`` (its character CNN holds quantized
            weights; transformers in int8 save the weights they were quantized from).
        NotImplementedError
            For an encoder family that cannot be saved.
        """
        with atomic_directory(directory, overwrite=overwrite, what="encoder directory") as folder:
            self._write(folder)

    def _write(self, folder: str) -> None:
        """Write the encoder's files into the new, empty ``folder`` (see :meth:`save`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot be saved")

    def info(self) -> dict:
        """A summary for ``contextembed info``: family, layers, width, max length, vocabulary."""
        return {
            "spec": self.spec,
            "family": self.family,
            "n_layers": self.n_layers,
            "width": self.width,
            "max_length": self.max_length,
            "vocab_size": self.vocab_size,
        }

    @abstractmethod
    def iter_encode_pieces(
        self, sentences: Sentences, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        """Encode sentences, yielding one :class:`PieceEncoding` per sentence in input order.

        Parameters
        ----------
        sentences : sequence of sequence of str, or an iterator of them
            Pre-tokenized sentences. An iterator (a generator) is read one chunk at a time
            (:func:`~contextembed._inputs.sentences.check_sentence_chunks`), so memory stays bounded by the
            chunk size however long it is; a bad sentence is then found when its chunk is read.
        layers : int, sequence of int, "all" or "hidden"
            Which layers to return (see :func:`contextembed.pooling.resolve_layers`).
        show_progress : bool or ProgressCounter
            Show a progress bar over sentences; or count them on a bar the caller holds (anything
            with ``update(n)``), as forward passes finish where the encoder can tell.
        """

    def iter_encode_pair_pieces(
        self, pairs: Pairs, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PairPieces]:
        """Encode sentence pairs, yielding one :class:`PairPieces` per pair in input order.

        This default encodes each side on its own (static vectors and ELMo have no pair input);
        transformers override it with one joint pass per pair.

        Parameters
        ----------
        pairs : sequence of (token list, token list)
            Pre-tokenized sentence pairs.
        layers : int, sequence of int, "all" or "hidden"
        show_progress : bool
        """
        pairs = check_pairs(pairs)
        firsts = self.iter_encode_pieces([a for a, _ in pairs], layers, show_progress=show_progress)
        seconds = self.iter_encode_pieces([b for _, b in pairs], layers)
        for first, second in zip(firsts, seconds):
            yield PairPieces(first, second, None)

    def encode_pairs(
        self, pairs: Pairs, layers: LayerSpec = "all", subword_pooling: SubwordPooling = "first"
    ) -> list[tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]]:
        """Encode sentence pairs into per-layer word vectors of each side and the pair's CLS vector.

        Returns
        -------
        list of (np.ndarray, np.ndarray, np.ndarray or None)
            Per pair: ``(layers, words_a, width)``, ``(layers, words_b, width)`` (one row per word
            of each side) and ``(layers, width)`` for the pair's first piece (``None`` without one).
        """
        return [
            (pair.first.words(subword_pooling), pair.second.words(subword_pooling), pair.cls)
            for pair in self.iter_encode_pair_pieces(pairs, layers)
        ]

    def encode_pieces(self, sentences: Sentences, layers: LayerSpec = "all") -> list[PieceEncoding]:
        """List form of :meth:`iter_encode_pieces`."""
        return list(self.iter_encode_pieces(sentences, layers))

    def encode_piece_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                           pooling: Optional[LayerPooling] = None, show_progress: ShowProgress = False) -> np.ndarray:
        """The mean of every piece of each sentence (``text_pooling="piece_mean"``), per layer, or
        its layers combined by ``pooling``.

        Parameters
        ----------
        sentences : sequence of sequence of str
        layers : int, sequence of int, "all" or "hidden"
        pooling : LayerPooling, optional
            Combines the selected layers (:meth:`~contextembed.pooling.LayerPooling.combine_selected`:
            as many layers as ``layers`` selects) of each sentence on its own; a scalar mix with
            ``layer_norm`` is refused (its statistics span many texts). Transformers combine where
            the model ran, batch by batch, so only ``(dim,)`` per sentence leaves it.
        show_progress : bool or ProgressCounter
            A bar of its own, or one the caller holds (anything with ``update(n)``) that counts the
            sentences as they are encoded.

        Returns
        -------
        np.ndarray
            ``(sentences, layers, width)`` float32, or ``(sentences, pooling.output_width(width))``
            with ``pooling`` (exactly ``pooling.combine_selected`` of the layers' means); zeros for a
            sentence without words. Transformers sum on the device, so that only these vectors leave it.

        Raises
        ------
        ValueError
            A ``pooling`` for another number of layers than ``layers`` selects, or one that mixes
            with ``layer_norm``; at the call, before anything is encoded.
        """
        sentences = check_sentences(sentences)
        n_layers = len(self.layer_indexes(layers))
        check_rowwise_pooling(pooling, n_layers, "encode_piece_means")
        out = np.zeros((len(sentences), n_layers, self.width), dtype=np.float32)
        for i, means in enumerate(self.iter_encode_piece_means(sentences, layers, show_progress=show_progress)):
            out[i] = means
        if pooling is None:
            return out
        # (layers, sentences, width) -> (sentences, dim)
        return np.ascontiguousarray(pool_layers_numpy(pooling, out.transpose(1, 0, 2)), dtype=np.float32)

    def iter_encode_piece_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                                show_progress: ShowProgress = False) -> Iterator[np.ndarray]:
        """:meth:`encode_piece_means` one sentence after the other, in input order: ``(layers, width)``
        float32 each, without gathering them into one array."""
        return (encoding.piece_means() for encoding in self.iter_encode_pieces(sentences, layers, show_progress=show_progress))

    def iter_encode_text_layers(
        self,
        sentences: Sentences,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "mean",
        text_pooling: TextPooling = "mean",
        *,
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        """Yield each text's vector of every selected layer, in input order: its words pooled from their
        pieces (``subword_pooling``), then the words pooled (``text_pooling``), each layer on its own.

        Parameters
        ----------
        sentences : sequence of sequence of str, or an iterator of them
            As :meth:`iter_encode_pieces` takes them.
        layers : int, sequence of int, "all" or "hidden"
        subword_pooling : {"first", "last", "mean", "first_last", "max"}
        text_pooling : {"mean", "max", "cls"}
            ``"cls"``: the first piece (encoders with one, :attr:`has_cls`). The mean of every piece
            (``"piece_mean"``) is :meth:`encode_piece_means`.
        show_progress : bool or ProgressCounter

        Yields
        ------
        np.ndarray
            ``(layers, width')`` float32, ``width'`` twice :attr:`width` for ``first_last``; zeros for
            a text without words. Exactly :meth:`PieceEncoding.text_layers` of the text's
            :meth:`iter_encode_pieces` (bit for bit in fp32 on a CPU); transformers pool where the
            model ran, so only these vectors leave its device.

        Raises
        ------
        ValueError
            An unknown pooling, ``"piece_mean"``, or ``"cls"`` where it does not apply
            (:func:`~contextembed.pooling.check_text_options`); at the call, before anything is encoded.
        """
        self._check_text_layers(subword_pooling, text_pooling, "iter_encode_text_layers")
        return self._iter_text_layers(sentences, layers, subword_pooling, text_pooling, show_progress)

    def _iter_text_layers(self, sentences, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """:meth:`iter_encode_text_layers` with checked options; this default pools on the host."""
        for encoding in self.iter_encode_pieces(sentences, layers, show_progress=show_progress):
            yield encoding.text_layers(subword_pooling, text_pooling)

    def iter_encode_pair_layers(
        self,
        pairs: Pairs,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "first",
        text_pooling: TextPooling = "mean",
        *,
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        """Yield each pair's vectors of every selected layer, in input order: each side's words pooled
        from their pieces, then pooled (``text_pooling`` ``"mean"`` or ``"max"``), or the pair's first
        piece (``"cls"``).

        The pairs are encoded as :meth:`iter_encode_pair_pieces` encodes them (transformers: one joint
        pass per pair, long pairs by its window policy).

        Parameters
        ----------
        pairs : sequence of (token list, token list)
            Pre-tokenized sentence pairs.
        layers : int, sequence of int, "all" or "hidden"
        subword_pooling : {"first", "last", "mean", "first_last", "max"}
        text_pooling : {"mean", "max", "cls"}
            How each side's words become one vector; ``"cls"``: the pair's first piece instead
            (encoders with one, :attr:`has_cls`).
        show_progress : bool or ProgressCounter

        Yields
        ------
        np.ndarray
            ``(2, layers, width')`` float32, the first side then the second (zeros for a side without
            words); ``(1, layers, width)`` for ``"cls"``. Exactly :meth:`PieceEncoding.text_layers` of
            each side of :meth:`iter_encode_pair_pieces` (bit for bit in fp32 on a CPU); transformers
            pool where the model ran.

        Raises
        ------
        ValueError
            As :meth:`iter_encode_text_layers`.
        """
        self._check_text_layers(subword_pooling, text_pooling, "iter_encode_pair_layers")
        return self._iter_pair_layers(pairs, layers, subword_pooling, text_pooling, show_progress)

    def _iter_pair_layers(self, pairs: Pairs, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """:meth:`iter_encode_pair_layers` with checked options; this default pools on the host."""
        for pair in self.iter_encode_pair_pieces(pairs, layers, show_progress=show_progress):
            if text_pooling == "cls":
                yield pair.cls[None]
            else:
                yield np.stack([side.text_layers(subword_pooling, text_pooling) for side in (pair.first, pair.second)])

    def _check_text_layers(self, subword_pooling: str, text_pooling: str, method: str) -> None:
        check_subword_pooling(subword_pooling)
        check_text_options(text_pooling, subword_pooling, self.has_cls, f"the {self.family} encoder {self.spec!r}")
        if text_pooling == "piece_mean":
            raise ValueError(f"{method} pools words; the mean of every piece (text_pooling='piece_mean') is "
                             "encode_piece_means")

    def iter_encode(
        self,
        sentences: Sentences,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "first",
        *,
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        """Yield ``(layers, words, width)`` float32 per sentence, in input order; ``sentences`` may be
        an iterator, read one chunk at a time (see :meth:`iter_encode_pieces`)."""
        for encoding in self.iter_encode_pieces(sentences, layers, show_progress=show_progress):
            yield encoding.words(subword_pooling)

    def iter_encode_pooled(
        self,
        sentences: Union[Sentences, Iterable],
        pooling: LayerPooling,
        subword_pooling: SubwordPooling = "first",
        *,
        in_context: bool = False,
        dtype: str = "float32",
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        """Yield the word features of each sentence in input order: its words pooled from their pieces
        (``subword_pooling``), then ``pooling``'s layers selected and combined.

        Parameters
        ----------
        sentences : sequence of sequence of str, or an iterator of them
            As :meth:`iter_encode_pieces` takes them; with ``in_context``, the
            :class:`~contextembed._inputs.documents.InContext` items :meth:`iter_encode_pieces_in_context` takes.
        pooling : LayerPooling
            Which layers, and how they combine (used as it is, without gradient). A scalar mix with
            ``layer_norm`` normalises each sentence's words on their own, never across sentences
            (transformers then combine the layers on the host), so a sentence's features do not
            depend on its neighbours.
        subword_pooling : {"first", "last", "mean", "first_last", "max"}
        in_context : bool
            Encode each sentence in its document's context.
        dtype : {"float32", "float16"}
            The rows' dtype (:data:`~contextembed.pooling._layers.OutputDtype`; float16: rounded where
            they were pooled, so half the bytes move).

        Yields
        ------
        np.ndarray
            ``(words, dim)`` with ``dim = pooling.output_width(subword_output_width(width, subword_pooling))``.
            Transformers pool where the model ran; the values are those of the host's pooling.

        Raises
        ------
        TypeError
            ``pooling`` is not a :class:`LayerPooling`; with ``in_context``, an item that is not an
            :class:`~contextembed._inputs.documents.InContext` (when it is read).
        ValueError
            An unknown ``subword_pooling`` or ``dtype``, or a ``pooling`` built for another number of
            layers than the encoder's (at the call, before anything is encoded); with
            ``dtype="float16"``, a row that holds NaN or an infinity, or a value beyond float16's
            range, naming the sentence and word (:func:`~contextembed.pooling._layers.as_output_dtype`),
            never yielded as one. float32 rows are the model's values as they are, unchecked.
        """
        check_subword_pooling(subword_pooling)
        check_output_dtype(dtype)
        self._check_pooling(pooling)
        rows = self._iter_pooled(sentences, pooling, subword_pooling, in_context, dtype, show_progress)
        if dtype == "float32":  # the model's values as they are: a check would cost a pass over every row
            return rows
        return (as_output_dtype(words, dtype, functools.partial(_word_of, i), "use dtype='float32'")
                for i, words in enumerate(rows))

    def _check_pooling(self, pooling: LayerPooling) -> None:
        """``pooling`` resolves its layers against this encoder's: a pooling of fewer layers would pick
        and mix the wrong ones (its ``-1`` is not the last layer here), one of more index past the end."""
        if not isinstance(pooling, LayerPooling):
            raise TypeError(f"pooling is a {type(pooling).__name__}; expected a LayerPooling, e.g. "
                            "LayerPooling(encoder.n_layers, layers, combine)")
        if pooling.n_layers != self.n_layers:
            raise ValueError(f"pooling is a LayerPooling of {pooling.n_layers} layers, but the {self.family} encoder "
                             f"{self.spec!r} has {self.n_layers}: build it with LayerPooling(encoder.n_layers, ...)")

    def _iter_pooled(self, sentences, pooling: LayerPooling, subword_pooling: str, in_context: bool, dtype: str,
                     show_progress: bool) -> Iterator[np.ndarray]:
        """:meth:`iter_encode_pooled` with checked options; this default pools on the host."""
        layers = pooling.layer_indexes
        if in_context:
            encodings = self.iter_encode_pieces_in_context(sentences, layers, show_progress=show_progress)
            words = (encoding.words(subword_pooling) for encoding in encodings)
        else:
            words = self.iter_encode(sentences, layers, subword_pooling, show_progress=show_progress)
        for hidden in words:  # float32: rounded to dtype by iter_encode_pooled, which checks the range
            yield pool_layers_numpy(pooling, hidden)

    def encode(
        self,
        sentences: Sentences,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "first",
    ) -> list[np.ndarray]:
        """Encode pre-tokenized sentences into per-layer word vectors.

        Parameters
        ----------
        sentences : sequence of sequence of str
            Pre-tokenized sentences (a list of token lists).
        layers : int, sequence of int, "all" or "hidden"
            Which of the encoder's layers to return, in that order. Default: all of them.
        subword_pooling : {"first", "last", "mean", "first_last", "max"}
            How a word's pieces become one vector (``first_last`` doubles the width).

        Returns
        -------
        list of np.ndarray
            One float32 array per sentence, shape ``(layers, words, width)``: exactly one row per
            input word.
        """
        return list(self.iter_encode(sentences, layers, subword_pooling))

    def layer_indexes(self, layers: LayerSpec) -> tuple[int, ...]:
        """Resolve a layer spec against this encoder (see :func:`resolve_layers`)."""
        return resolve_layers(layers, self.n_layers)


def _word_of(sentence: int, word: int) -> str:
    return f"sentence {sentence}, word {word}"


def check_savable(precision: str) -> None:
    """Refuse to save int8-quantized weights (they are no longer the model's)."""
    if precision == "int8":
        raise ValueError(
            "an encoder loaded with precision='int8' holds quantized weights and cannot be saved; load it "
            "with precision='fp32' (or 'bf16') to save it, and pass precision='int8' when loading the copy"
        )


def is_cased(encoder: Encoder) -> bool:
    """Whether the encoder tells "Paris" from "paris" (uncased transformers and lowercase vectors don't)."""
    if encoder.family == "static":
        return not encoder.lowercase
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        return True  # character-level encoders (ELMo) see case
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        normalizer = backend.normalizer
        return normalizer is None or normalizer.normalize_str("Paris NATO") == "Paris NATO"
    return not getattr(tokenizer, "do_lower_case", False)
