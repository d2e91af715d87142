"""Every path of :class:`~contextembed.encoders.transformer.TransformerEncoder` as one loop: a chunk of
texts is tokenized (the next one on a producer while one runs), planned (:class:`~._plan.Plan`), its
batches run with the path's job (:mod:`._jobs`), and its texts' results yielded in input order.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Optional

import numpy as np
import torch

from ..._inputs.alignment import Window
from ..._inputs.documents import InContext, check_in_context
from ..._runtime import pages, streams
from ...pooling._layers import LayerPooling, LayerSpec
from ...pooling._subword import subword_output_width
from ..._inputs.sentences import Pairs, Sentences, check_pairs, check_sentence_chunks
from .._pieces import PairPieces, PieceEncoding
from .._reporting import progress_bar, warn_long_pairs
from ._chunking import _ChunkProgress, _chunks, _counted, _tokenized
from ._host_copies import HostCopies
from ._jobs import Gathered, GroupedWords, PickedWords, PooledTexts
from ._plan import ChunkPieces, Plan, Units, batches, pair_windows
from ._pooled import _DIRECT, _Pooled, _TextPooled

logger = logging.getLogger(__name__)

#: the pieces of each selector's units among a chunk's, from where its words' pieces start
#: (``(words + 1,)``, :attr:`~._plan.ChunkPieces.starts`)
_UNIT_PIECES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "all": lambda starts: np.arange(starts[-1], dtype=np.int64),
    "starts": lambda starts: starts[:-1],
    "ends": lambda starts: starts[1:] - 1,
}

#: a chunk planned: its texts' pieces, its plan, the progress its batches count on
_Planned = tuple[ChunkPieces, Plan, _ChunkProgress]


class _PlannedPaths:
    """The chunk loops of :class:`~contextembed.encoders.transformer.TransformerEncoder`."""

    # -- what each path yields ---------------------------------------------------------------

    def _iter_piece_encodings(self, planned: Iterator[_Planned], layers: LayerSpec) -> Iterator[PieceEncoding]:
        """Each text's pieces and [CLS] vector, gathered to the host."""
        for chunk, job in self._gathered(planned, layers, ("all",), cls=True):
            for text in range(len(chunk)):
                yield PieceEncoding(_text_pieces(job.pieces[0], chunk, text), chunk.offsets(text), job.text_cls(text),
                                    chunk.text_ids(text))

    def _iter_picked_pieces(self, sentences: Sentences, layers: LayerSpec, selectors: Sequence[str],
                            show_progress: bool) -> Iterator[np.ndarray]:
        """Each sentence's words by their first or last pieces (``selectors``), gathered to the host:
        ``(layers, words, width)``, the selectors side by side."""
        for chunk, job in self._gathered(self._planned(sentences, show_progress), layers, selectors):
            for text in range(len(chunk)):
                parts = [np.ascontiguousarray(units[:, _words_of(chunk, text)]) for units in job.pieces]
                yield parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    def _iter_cls(self, sentences: Sentences, layers: LayerSpec, show_progress: bool) -> Iterator[tuple[ChunkPieces, Gathered]]:
        """Each chunk's [CLS] vectors (``job.cls``)."""
        return self._gathered(self._planned(sentences, show_progress), layers, (), cls=True)

    def _iter_text_layers(self, sentences, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each text pooled where the model ran (:class:`~._jobs.PooledTexts`); ``"cls"``: only the
        first piece leaves the device (zeros for an empty text)."""
        if text_pooling == "cls":
            for chunk, job in self._iter_cls(sentences, layers, show_progress):
                for text, cls in enumerate(job.cls):
                    yield cls if chunk.n_words[text] else np.zeros_like(cls)
            return
        for chunk, out in self._pooled_texts(self._planned(sentences, show_progress), layers, subword_pooling, text_pooling):
            yield from out

    def _iter_pair_layers(self, pairs: Pairs, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each side pooled where the model ran; ``"cls"``: only the pair's first piece leaves the device."""
        planned = self._planned_pairs(pairs, show_progress)
        if text_pooling == "cls":
            for chunk, job in self._gathered(planned, layers, (), cls=True):
                yield from job.cls[: len(chunk) // 2, None]
            return
        for chunk, out in self._pooled_texts(planned, layers, subword_pooling, text_pooling):
            n_pairs = len(chunk) // 2
            for pair in range(n_pairs):
                yield np.stack([out[pair], out[n_pairs + pair]])

    def _iter_pair_encodings(self, pairs: Pairs, layers: LayerSpec, show_progress: bool) -> Iterator[PairPieces]:
        """Each pair's sides' pieces and its first-piece vector."""
        for chunk, job in self._gathered(self._planned_pairs(pairs, show_progress), layers, ("all",), cls=True):
            n_pairs = len(chunk) // 2
            for a in range(n_pairs):
                b, cls = n_pairs + a, job.text_cls(a)
                yield PairPieces(PieceEncoding(_text_pieces(job.pieces[0], chunk, a), chunk.offsets(a), cls),
                                 PieceEncoding(_text_pieces(job.pieces[0], chunk, b), chunk.offsets(b), cls), cls)

    def _iter_pooled(self, sentences, pooling: LayerPooling, subword_pooling: str, in_context: bool, dtype: str,
                     show_progress: bool) -> Iterator[np.ndarray]:
        """Words pooled where the model ran (:class:`_Pooled`): only ``(words, dim)`` rows in ``dtype``
        come to the host, views of one array per chunk of sentences.

        A scalar mix with ``layer_norm`` normalises each layer over the rows it is given: the device
        pools a batch of many sentences at once, so it is combined on the host, each sentence's words
        on their own (:meth:`Encoder._iter_pooled`), and a sentence's features never depend on its
        neighbours."""
        if pooling.mix is not None and pooling.mix.layer_norm:
            yield from super()._iter_pooled(sentences, pooling, subword_pooling, in_context, dtype, show_progress)
            return
        on_device = pooling if self.device.type == "cpu" else copy.deepcopy(pooling).to(self.device)
        planned = (self._planned_in_context(sentences, show_progress) if in_context
                   else self._planned(sentences, show_progress))
        yield from self._pooled_words(planned, _Pooled(on_device, pooling, subword_pooling, dtype))

    def _pooled_words(self, planned: Iterator[_Planned], pooled: _Pooled) -> Iterator[np.ndarray]:
        """Each text's ``(words, dim)`` rows pooled where the model ran, views of one array per chunk;
        ``pooled``: the settings every chunk shares (each chunk runs with its own copy)."""
        dim = pooled.host_pooling.output_width(subword_output_width(self.width, pooled.method))
        for chunk, plan, progress in planned:
            # (words of the chunk, dim): every row is written, as its word's batch runs
            out = np.empty((int(chunk.n_words.sum()), dim), dtype=pooled.dtype)
            pages.populate(out)
            # this chunk's own pooling state (its output, its copies to the host), apart from the settings
            chunk_pooled = dataclasses.replace(pooled, out=out, copies=HostCopies(self.device))
            if chunk_pooled.grouped:
                job = GroupedWords(plan, chunk, chunk_pooled, len(pooled.pooling.layer_indexes), self.width)
            else:
                units = [Units.of(plan, _UNIT_PIECES[name](chunk.starts)) for name in _DIRECT[pooled.method]]
                job = PickedWords(units, chunk_pooled, self.width)
            self._run_plan(plan, job, pooled.pooling.layer_indexes, progress)
            for text in range(len(chunk)):
                yield out[_words_of(chunk, text)]

    # -- the chunks ----------------------------------------------------------------------------

    def _planned(self, sentences: Sentences, show_progress: bool) -> Iterator[_Planned]:
        """Each chunk of ``sentences`` in its windows (:meth:`Plan.windows`)."""
        chunks = check_sentence_chunks(sentences, self.chunk_size)
        with progress_bar(sentences, show_progress) as progress:
            for chunk, pieces in _tokenized(chunks, self._chunk_pieces, self._tokenizes_ahead(sentences)):
                plan = Plan.windows(pieces.ids, pieces.n_pieces, self.pieces.around, self.window, self.stride)
                yield pieces, plan, _ChunkProgress(progress, len(chunk))

    def _planned_in_context(self, items: Iterable[InContext], show_progress: bool) -> Iterator[_Planned]:
        """Each chunk of sentences with their context pieces around them (:meth:`Plan.in_context`)."""
        with progress_bar(items, show_progress) as progress:
            for chunk in _chunks(check_in_context(items), self.chunk_size):
                pieces = self._chunk_pieces([item.words for item in chunk])
                before, after = (self.pieces.joined([getattr(item, side) for item in chunk]) for side in ("left", "right"))
                size = np.array([item.size for item in chunk], dtype=np.int64)
                plan = Plan.in_context(pieces.ids, pieces.n_pieces, before, after, size, self.pieces.around,
                                       self.window, self.stride)
                yield pieces, plan, _ChunkProgress(progress, len(chunk))

    def _planned_pairs(self, pairs: Pairs, show_progress: bool) -> Iterator[_Planned]:
        """Each chunk of pairs (:meth:`Plan.pairs`): its first sides, then its second sides; one
        :class:`LongPairWarning` at the end for the pairs longer than one model input takes."""
        pairs = check_pairs(pairs)
        budget = self._pair_budget()
        long_pairs = 0
        chunks = (pairs[begin : begin + self.chunk_size] for begin in range(0, len(pairs), self.chunk_size))
        with progress_bar(pairs, show_progress, unit="pair") as progress:
            # the next chunk tokenized on a producer while this one runs
            for chunk, sides in _tokenized(chunks, self._pair_pieces, len(pairs) > self.chunk_size):
                n_pieces = sides.n_pieces
                long_pairs += int((n_pieces[: len(chunk)] + n_pieces[len(chunk) :] > budget).sum())
                plan = Plan.pairs(sides, self.pair, budget, self._inputs.takes_types)
                yield sides, plan, _ChunkProgress(progress, len(chunk))
        if long_pairs:
            warn_long_pairs(long_pairs, len(pairs), budget)

    def _chunk_pieces(self, sentences: list) -> ChunkPieces:
        return ChunkPieces(*self.pieces.word_pieces(sentences))

    def _pair_pieces(self, chunk: list) -> ChunkPieces:
        """The pieces of a chunk of pairs: each first side, then each second side."""
        return self._chunk_pieces([a for a, _ in chunk]).then(self._chunk_pieces([b for _, b in chunk]))

    def _tokenizes_ahead(self, sentences) -> bool:
        """Whether the next chunk of ``sentences`` is tokenized on a producer while one runs: an iterator
        is read no further than one chunk ahead of the outputs (tokenized as it comes), and a list of
        one chunk has nothing to tokenize ahead."""
        return not isinstance(sentences, Iterator) and isinstance(sentences, Sized) and len(sentences) > self.chunk_size

    def _pair_budget(self) -> int:
        """Pieces of both sides that one model input takes (besides the pair's special tokens)."""
        return min(self.window + len(self.pieces.prefix) + len(self.pieces.suffix), self._max_length) - self.pair.n_special

    def _pair_windows(self, n_first: int, n_second: int) -> tuple[list[Window], list[Window]]:
        """The window policy for pairs (:func:`~._plan.pair_windows`) within this model's budget."""
        return pair_windows(n_first, n_second, self._pair_budget())

    # -- running a chunk -------------------------------------------------------------------------

    def _gathered(self, planned: Iterator[_Planned], layers: LayerSpec, selectors: Sequence[str],
                  cls: bool = False) -> Iterator[tuple[ChunkPieces, Gathered]]:
        """Each chunk run with ``selectors``' units (and, with ``cls``, the [CLS] vectors) gathered to the host."""
        layer_index = self.layer_indexes(layers)
        for chunk, plan, progress in planned:
            units = [Units.of(plan, _UNIT_PIECES[name](chunk.starts)) for name in selectors]
            job = Gathered(plan, units, len(layer_index), self.width, cls)
            self._run_plan(plan, job, layer_index, progress)
            yield chunk, job

    def _pooled_texts(self, planned: Iterator[_Planned], layers: LayerSpec, subword_pooling: str,
                      text_pooling: str) -> Iterator[tuple[ChunkPieces, np.ndarray]]:
        """Each chunk run with its texts pooled where the model ran: ``(texts, layers, width')`` float32."""
        layer_index = self.layer_indexes(layers)
        pooled = _TextPooled(subword_pooling, text_pooling, len(layer_index))
        dim = subword_output_width(self.width, subword_pooling)
        for chunk, plan, progress in planned:
            out = np.empty((len(chunk), len(layer_index), dim), dtype=np.float32)
            job = PooledTexts(plan, chunk, dataclasses.replace(pooled, copies=HostCopies(self.device)), out, self.width)
            self._run_plan(plan, job, layer_index, progress)
            yield chunk, out

    def _run_plan(self, plan: Plan, job, layer_index: tuple[int, ...], progress: Optional[_ChunkProgress] = None) -> None:
        """Run the rows of ``plan`` in length-sorted batches within the token budget, ``job`` taking
        each batch's hidden states (on a CPU several batches at once: :mod:`contextembed._runtime.streams`),
        then :meth:`job.finish`. ``progress`` counts the chunk's texts as the batches finish, in
        proportion to the padded positions each computed, and all of them at the end."""
        # (rows,) each row's model input length, rounded up to pad_multiple (never beyond the model's maximum)
        padded = np.minimum(-(-plan.lengths // self.pad_multiple) * self.pad_multiple, self._max_length)
        runs = [slice(batch[0], batch[-1] + 1) for batch in batches(
            range(len(plan)), padded.tolist().__getitem__, self.batch_tokens, self.max_batch_size)]
        run = functools.partial(self._run_batch, plan=plan, padded=padded, job=job, layer_index=layer_index)
        if progress is not None:
            cost = [(batch.stop - batch.start) * int(padded[batch].max()) for batch in runs]
            progress.expect(sum(cost))
            costs = dict(zip((batch.start for batch in runs), cost))
            run = functools.partial(_counted, run, lambda batch: progress.advance(costs[batch.start]))
        streams.run_all(run, runs, self.device)
        job.finish()
        if progress is not None:
            progress.finish()

    @torch.inference_mode()
    def _run_batch(self, rows: slice, plan: Plan, padded: np.ndarray, job, layer_index: tuple[int, ...]) -> None:
        """Run rows ``rows`` of ``plan`` (one batch) and hand their hidden states to ``job``."""
        length = int(padded[rows].max())
        inputs = {name: torch.from_numpy(array).to(self.device) for name, array in plan.inputs(rows, length, self.pad_id).items()}
        # each (batch * seq, width)
        job(self._forward(inputs, layer_index), rows, length)


def _words_of(chunk: ChunkPieces, text: int) -> slice:
    """Text ``text``'s words among the chunk's."""
    first = int(chunk.first_word[text])
    return slice(first, first + int(chunk.n_words[text]))


def _text_pieces(pieces: np.ndarray, chunk: ChunkPieces, text: int) -> np.ndarray:
    """Text ``text``'s ``(layers, pieces, width)`` of a chunk's gathered pieces, a copy of its own."""
    start = chunk.item_start
    return np.ascontiguousarray(pieces[:, start[text] : start[text + 1]])
