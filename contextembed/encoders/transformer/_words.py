"""Words and piece means as arrays: one plan per chunk (:class:`_ChunkWindows`), batches run as slices
of it, pooled rows written straight into the chunk's output. Methods of
:class:`~contextembed.encoders.transformer.TransformerEncoder`, kept apart from the row objects
(:mod:`._rows`) whose batches they reproduce.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..._runtime import pages, streams
from ..._inputs.alignment import plan_windows, ragged_arange
from ...pooling._layers import LayerPooling, LayerSpec
from ...pooling._subword import subword_output_width
from ._host_copies import HostCopies
from .._base import ShowProgress, check_sentence_chunks, progress_bar

from ._chunking import _ChunkProgress, _chunks, _counted, _tokenized
from ._rows import _batches
from ._pooled import _DIRECT, _MeansPooled, _Pooled

logger = logging.getLogger(__name__)


@dataclass
class _ChunkWindows:
    """The model inputs of a chunk's piece sums (:meth:`TransformerEncoder.encode_piece_means`) and
    picked words (:meth:`TransformerEncoder._iter_picked`): one per window of each sentence
    (:func:`plan_windows`), held as arrays instead of :class:`_Row` objects, in the order the rows
    run: by length, stably, as :meth:`TransformerEncoder._run_rows` sorts rows, so that the batches
    are those of every other path.

    Attributes
    ----------
    ids : np.ndarray
        ``(pieces,)`` int64: the chunk's pieces, sentence after sentence.
    text : np.ndarray
        ``(windows,)`` int64: each window's sentence.
    first : np.ndarray
        ``(windows,)`` int64: where the window's pieces start in ``ids``.
    length : np.ndarray
        ``(windows,)`` int64: the window's pieces (without special tokens).
    own : np.ndarray
        ``(windows,)`` int64: where the pieces the window owns start in it.
    count : np.ndarray
        ``(windows,)`` int64: how many pieces it owns.
    slot : np.ndarray
        ``(windows,)`` int64: ``-1`` for a window holding a whole sentence; for a window of a sentence
        in several, the place of its sums among those of :attr:`split` (its sentence's windows in order).
    split : np.ndarray
        ``(sentences in several windows,)`` int64: those sentences, in input order.
    split_offsets : np.ndarray
        ``(len(split) + 1,)`` int64: sentence ``split[i]``'s windows are slots
        ``split_offsets[i]:split_offsets[i + 1]``.
    row : np.ndarray
        ``(sentences,)`` int64: the place in run order of each sentence's first window (where a
        sentence's piece means are, among the windows' rows: :meth:`TransformerEncoder._piece_means`).
    leads, ends : np.ndarray
        ``(windows,)`` bool: whether the window starts (ends) its sentence, so that its leading
        (trailing) special tokens are the sentence's own (means over the whole model input).
    """

    ids: np.ndarray
    text: np.ndarray
    first: np.ndarray
    length: np.ndarray
    own: np.ndarray
    count: np.ndarray
    slot: np.ndarray
    split: np.ndarray
    split_offsets: np.ndarray
    row: np.ndarray
    leads: np.ndarray
    ends: np.ndarray

    @classmethod
    def plan(cls, ids: np.ndarray, n_pieces: np.ndarray, window: int, stride: int) -> "_ChunkWindows":
        """Every window of each sentence (one for a sentence that fits, an empty sentence included),
        sorted by length; ``ids`` ``(pieces,)`` holds the sentences' pieces one after the other,
        ``n_pieces`` ``(sentences,)`` how many each has (:meth:`PieceTokenizer.joined`)."""
        # (sentences,) windows of each
        split = np.flatnonzero(n_pieces > window)
        planned = [plan_windows(int(n_pieces[i]), window, stride) for i in split]
        n_windows = np.ones(len(n_pieces), dtype=np.int64)
        n_windows[split] = [len(windows) for windows in planned]
        # (windows,) in input order: a sentence that fits is window (0, n, 0, n)
        text = np.repeat(np.arange(len(n_pieces)), n_windows)
        start, end = np.zeros(len(text), dtype=np.int64), n_pieces[text]
        own_start, own_end = start.copy(), end.copy()
        slot = np.full(len(text), -1, dtype=np.int64)
        first_window = np.cumsum(n_windows) - n_windows
        for i, windows in zip(split, planned):
            place = slice(first_window[i], first_window[i] + len(windows))
            start[place], end[place], own_start[place], own_end[place] = np.array(
                [(w.start, w.end, w.own_start, w.own_end) for w in windows], dtype=np.int64).T
        if len(split):
            slot[n_windows[text] > 1] = np.arange(int(n_windows[split].sum()))
        # (sentences,) where each sentence's pieces start in ``ids``
        sentence_start = np.cumsum(n_pieces) - n_pieces
        order = np.argsort(end - start, kind="stable")
        split_offsets = np.concatenate([[0], np.cumsum(n_windows[split])])
        # (windows,) the place in run order of each window in input order
        place = np.empty_like(order)
        place[order] = np.arange(len(order))
        return cls(ids, text[order], (sentence_start[text] + start)[order], (end - start)[order],
                   (own_start - start)[order], (own_end - own_start)[order], slot[order], split, split_offsets,
                   place[first_window], (start == 0)[order], (end == n_pieces[text])[order])

    def __len__(self) -> int:
        return len(self.text)

    def inputs(self, rows: slice, length: int, around: tuple[np.ndarray, np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, attention mask)`` of windows ``rows``, each ``prefix + pieces + suffix`` padded to
        ``length``: both ``(batch, seq)`` int64, what :meth:`TransformerEncoder._run_batch` builds from
        the same windows' rows."""
        prefix, suffix = around
        n = self.length[rows]
        columns = np.arange(length)
        # (batch, seq)
        ids = np.full((len(n), length), pad_id, dtype=np.int64)
        ids[:, : len(prefix)] = prefix
        content = (columns >= len(prefix)) & (columns < (len(prefix) + n)[:, None])
        ids[content] = self.ids[ragged_arange(self.first[rows], n)]
        ids[np.arange(len(n))[:, None], (len(prefix) + n)[:, None] + np.arange(len(suffix))] = suffix
        mask = (columns < (len(prefix) + n + len(suffix))[:, None]).astype(np.int64)
        return ids, mask


@dataclass
class _WordUnits:
    """One selector's units (each word's first or last piece) of a chunk's windows (:class:`_ChunkWindows`),
    grouped by the window that owns them, in run order, so that a batch of windows ``[a, b)`` has
    units ``window_units[a]:window_units[b]``: arrays instead of :class:`_Pending` and :class:`_Part`
    objects.

    Attributes
    ----------
    window_units : np.ndarray
        ``(windows + 1,)`` int64: where each window's units start.
    window : np.ndarray
        ``(units,)`` int64: the window (its place in run order) that owns each unit.
    position : np.ndarray
        ``(units,)`` int64: the unit's position in its window's model input.
    word : np.ndarray
        ``(units,)`` int64: its word among the chunk's words (the row of the chunk's output).
    """

    window_units: np.ndarray
    window: np.ndarray
    position: np.ndarray
    word: np.ndarray

    @classmethod
    def plan(cls, windows: _ChunkWindows, pieces: np.ndarray, n_prefix: int) -> "_WordUnits":
        """The units at chunk pieces ``pieces`` ``(words,)`` (one per word, increasing) of ``windows``,
        whose model inputs start with ``n_prefix`` special tokens."""
        # (windows,) where each window's owned pieces start among the chunk's; owned ranges tile them
        owned = windows.first + windows.own
        holding = np.flatnonzero(windows.count > 0)
        holding = holding[np.argsort(owned[holding], kind="stable")]
        # (words,) the window owning each word's unit, then the units by window, in piece order
        window = holding[np.searchsorted(owned[holding], pieces, side="right") - 1]
        order = np.argsort(window, kind="stable")
        window = window[order]
        window_units = np.zeros(len(windows) + 1, dtype=np.int64)
        np.cumsum(np.bincount(window, minlength=len(windows)), out=window_units[1:])
        return cls(window_units, window, pieces[order] - windows.first[window] + n_prefix, order)


#: the pieces of each selector's units among a chunk's, from where its words' pieces start
#: (``(words + 1,)``, :meth:`~contextembed._inputs.alignment.PieceTokenizer.word_pieces`)
_UNIT_PIECES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "starts": lambda starts: starts[:-1],
    "ends": lambda starts: starts[1:] - 1,
}


def _segment_sums(layers: list[np.ndarray], starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``layer[starts[j] : starts[j] + counts[j]]`` summed in float64 for each segment ``j`` and layer,
    the values added one after the other from +0.0 in row order (as ``index_add_`` adds them):
    ``layers`` x ``(rows, width)`` float32 -> ``(layers, segments, width)``.

    Consecutive segments of one count whose starts are evenly spaced (a batch's windows of one
    length) are read as one ``(segments, count, width)`` view of the rows, nothing copied, and summed
    over its middle axis, which NumPy reduces one slice after the other
    (``tests/encoders/test_pooled.py`` checks the bits against torch).
    """
    layers = [np.ascontiguousarray(rows) for rows in layers]
    width = layers[0].shape[1] if layers else 0
    # (layers, segments, width), each segment's layers side by side in memory: the layout of the
    # (sentences, layers, width) means they become
    out = np.empty((len(counts), len(layers), width), dtype=np.float64).transpose(1, 0, 2)
    for begin, end, step in _even_runs(starts, counts):
        count = int(counts[begin])
        if not count:
            out[:, begin:end] = 0.0
            continue
        for rows, sums in zip(layers, out):
            # (segments, count, width): segment j is rows[starts[begin] + j * step :][:count], a view
            row_bytes, item_bytes = rows.strides
            block = np.ndarray((end - begin, count, width), rows.dtype, rows, int(starts[begin]) * row_bytes,
                               (step * row_bytes, row_bytes, item_bytes))
            block.sum(axis=1, dtype=np.float64, out=sums[begin:end], initial=0.0)  # from +0.0, as index_add_ starts
    return out


def _even_runs(starts: np.ndarray, counts: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """``(begin, end, step)`` of each run of consecutive segments of one count whose starts are
    ``step`` rows apart (``step`` >= 1; 0 for a run of one segment), covering every segment in order."""
    if not len(starts):
        return
    # (segments - 1,): whether segment j + 1 starts another run: another count, or another step
    steps = np.diff(starts)
    breaks = (np.diff(counts) != 0) | (steps < 1)
    breaks[1:] |= steps[1:] != steps[:-1]
    begin = 0
    for end in [*(np.flatnonzero(breaks) + 1).tolist(), len(starts)]:
        yield begin, end, int(steps[begin]) if end - begin > 1 else 0
        begin = end


def _first_pieces(ids: np.ndarray, n_pieces: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The sentences' pieces (``ids``, ``n_pieces`` of each, one sentence after the other) with each
    sentence's pieces beyond its first ``limit`` dropped."""
    kept = np.minimum(n_pieces, limit)
    starts = np.cumsum(n_pieces) - n_pieces
    return ids[ragged_arange(starts, kept)], kept


def _fill_means(out: np.ndarray, rows: slice, means: np.ndarray) -> None:
    """``out[rows] = means``: a batch's ``(windows, layers, width)`` piece means, once on the host."""
    out[rows] = means


class _WordArrays:
    """The array path of :class:`~contextembed.encoders.transformer.TransformerEncoder`."""

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
        pooled = _Pooled(on_device, pooling, subword_pooling, dtype)
        if not in_context and subword_pooling in _DIRECT:
            yield from self._iter_picked(sentences, pooled, _DIRECT[subword_pooling], show_progress)
            return
        selectors = _DIRECT.get(subword_pooling, ("all",))
        run = self._iter_in_context if in_context else self._iter_pending
        for pending in run(sentences, pooling.layer_indexes, selectors, show_progress, pooled):
            yield pending.rows

    def _iter_picked(self, sentences, pooled: _Pooled, selectors: Sequence[str], show_progress: bool) -> Iterator[np.ndarray]:
        """:meth:`_iter_pooled` of words picked by ``selectors`` (their first or last pieces), each chunk
        planned as arrays (:class:`_ChunkWindows`, :class:`_WordUnits`) instead of an object per sentence,
        window and unit; the same batches, so the same bits, as :meth:`_iter_pending` runs."""
        layer_index = pooled.pooling.layer_indexes
        dim = pooled.pooling.output_width(subword_output_width(self.width, pooled.method))
        chunks = check_sentence_chunks(sentences, self.chunk_size)
        ahead = self._tokenizes_ahead(sentences)

        def tokenize(chunk: list) -> tuple[np.ndarray, tuple]:
            # (words of the chunk, dim): every row is written, as its word's window runs; its pages
            # are faulted in on another thread while the chunk is tokenized
            out = np.empty((sum(map(len, chunk)), dim), dtype=pooled.dtype)
            pages.populate(out)
            return out, self.pieces.word_pieces(chunk)

        with progress_bar(sentences, show_progress) as progress:
            for chunk, (out, (ids, starts, first_word, n_words)) in _tokenized(chunks, tokenize, ahead):
                windows = _ChunkWindows.plan(ids, starts[first_word + n_words] - starts[first_word], self.window, self.stride)
                units = [_WordUnits.plan(windows, _UNIT_PIECES[name](starts), len(self.pieces.prefix)) for name in selectors]
                # this chunk's own pooling state (its output, its copies to the host), apart from the settings
                chunk_pooled = dataclasses.replace(pooled, out=out, copies=HostCopies(self.device))
                padded, batches = self._window_batches(windows)
                run = functools.partial(self._pick_batch, windows=windows, padded=padded, units=units,
                                        layer_index=layer_index, pooled=chunk_pooled)
                self._run_windows(run, batches, padded, _ChunkProgress(progress, len(chunk)))
                chunk_pooled.copies.flush()
                for begin, end in zip(first_word.tolist(), (first_word + n_words).tolist()):
                    yield out[begin:end]

    @torch.inference_mode()
    def _pick_batch(self, rows: slice, windows: _ChunkWindows, padded: np.ndarray, units: list[_WordUnits],
                    layer_index: tuple[int, ...], pooled: _Pooled) -> None:
        """Run windows ``rows`` (one batch) and pool each selector's units into their words' rows."""
        length = int(padded[rows].max())
        ids, mask = windows.inputs(rows, length, self.pieces.around, self.pad_id)
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(mask).to(self.device)}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        for k, unit in enumerate(units):
            begin, end = unit.window_units[rows.start], unit.window_units[rows.stop]
            if begin < end:
                # (units,) their rows of flat
                index = (unit.window[begin:end] - rows.start) * length + unit.position[begin:end]
                self._pool_words(flat, index, unit.word[begin:end], k, len(units), pooled)

    def _window_batches(self, windows: _ChunkWindows) -> tuple[np.ndarray, list[slice]]:
        """Each window's model input length (``(windows,)``, as :meth:`_padded_length` gives it) and the
        batches :meth:`_run_rows` cuts from them, as slices of the windows in run order."""
        n_special = len(self.pieces.prefix) + len(self.pieces.suffix)
        padded = np.minimum(-(-(windows.length + n_special) // self.pad_multiple) * self.pad_multiple, self._max_length)
        batches = [slice(batch[0], batch[-1] + 1) for batch in _batches(
            range(len(windows)), padded.tolist().__getitem__, self.batch_tokens, self.max_batch_size)]
        return padded, batches

    def _run_windows(self, run: Callable[[slice], None], batches: list[slice], padded: np.ndarray,
                     progress: Optional["_ChunkProgress"] = None) -> None:
        """:meth:`_run_rows` of batches of planned windows (``padded``: each one's input length)."""
        if progress is not None:
            cost = [(batch.stop - batch.start) * int(padded[batch].max()) for batch in batches]
            progress.expect(sum(cost))
            costs = dict(zip((batch.start for batch in batches), cost))
            run = functools.partial(_counted, run, lambda batch: progress.advance(costs[batch.start]))
        streams.run_all(run, batches, self.device)
        if progress is not None:
            progress.finish()

    def _chunk_piece_means(self, sentences: list, layers: LayerSpec, show_progress: ShowProgress,
                           pooled: Optional[_MeansPooled] = None, special: bool = False,
                           max_pieces: Optional[int] = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:meth:`_piece_means` of each chunk of the checked ``sentences``, in order (the next chunk
        tokenized while one runs); ``special``: the special tokens around each sentence counted too,
        ``max_pieces``: its pieces beyond that many dropped first."""
        layer_index = self.layer_indexes(layers)
        tokenize = self.pieces.joined if max_pieces is None else (
            lambda chunk: _first_pieces(*self.pieces.joined(chunk), max_pieces))
        with progress_bar(sentences, show_progress) as progress:
            for chunk, (ids, n_pieces) in _tokenized(_chunks(sentences, self.chunk_size), tokenize,
                                                     self._tokenizes_ahead(sentences)):
                yield self._piece_means(ids, n_pieces, layer_index, _ChunkProgress(progress, len(chunk)), pooled,
                                        special)

    def _mean_shape(self, n_layers: int, pooled: Optional[_MeansPooled]) -> tuple[int, ...]:
        """The shape of one sentence's piece means: ``(layers, width)``, or ``(dim,)`` pooled."""
        return (n_layers, self.width) if pooled is None else (pooled.host_pooling.output_width(self.width),)

    def _piece_means(self, ids: np.ndarray, n_pieces: np.ndarray, layer_index: tuple[int, ...],
                     progress: Optional["_ChunkProgress"] = None, pooled: Optional[_MeansPooled] = None,
                     special: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The piece means of one chunk's sentences (their pieces ``ids`` one after the other, ``n_pieces``
        of each): a sentence in one window is divided into its window's row as its batch finishes, one in
        several once all of its windows' sums are in (into the row of its first window). With ``pooled``,
        each row is the means' layers combined (:class:`_MeansPooled`).

        Returns
        -------
        tuple of np.ndarray
            ``(windows, layers, width)`` (``(windows, dim)`` pooled) float32 in run order, and
            ``(sentences,)`` the row of each sentence's means (the other rows of a sentence's windows
            are not used).
        """
        windows = _ChunkWindows.plan(ids, n_pieces, self.window, self.stride)
        padded, batches = self._window_batches(windows)
        rows = np.empty((len(windows), *self._mean_shape(len(layer_index), pooled)), dtype=np.float32)
        # (layers, windows of the sentences in several, width) float64
        split_sums = np.empty((len(layer_index), int(windows.split_offsets[-1]), self.width), dtype=np.float64)
        copies = HostCopies(self.device)
        run = functools.partial(self._sum_batch, windows=windows, padded=padded, layer_index=layer_index, out=rows,
                                split_sums=split_sums, copies=copies, pooled=pooled, special=special)
        self._run_windows(run, batches, padded, progress)
        copies.flush()  # before the split sentences' means: their first window's row is theirs
        if len(windows.split):
            # (layers, split sentences, width): each one's windows' sums, in window order, added up
            sums = np.stack([split_sums[:, begin:end].sum(axis=1)
                             for begin, end in zip(windows.split_offsets[:-1], windows.split_offsets[1:])], axis=1)
            # (split sentences, layers, width) float32
            n_special = len(self.pieces.prefix) + len(self.pieces.suffix) if special else 0
            counted = n_pieces[windows.split] + n_special
            means = np.divide(sums.transpose(1, 0, 2), counted[:, None, None], dtype=np.float64).astype(np.float32)
            rows[windows.row[windows.split]] = means if pooled is None else pooled.on_host(means.transpose(1, 0, 2))
        return rows, windows.row

    @torch.inference_mode()
    def _sum_batch(self, rows: slice, windows: _ChunkWindows, padded: np.ndarray, layer_index: tuple[int, ...],
                   out: np.ndarray, split_sums: np.ndarray, copies: HostCopies,
                   pooled: Optional[_MeansPooled] = None, special: bool = False) -> None:
        """Run windows ``rows`` (one batch) and sum the pieces each owns: each window's sums divided by
        its pieces into its rows of ``out`` ``(windows, layers, width)`` (a sentence's mean where the
        window holds all of it; with ``pooled``, its layers combined into ``(windows, dim)``), those of
        windows of sentences in several windows also into their slots of ``split_sums``
        ``(layers, slots, width)``.

        A whole sentence's mean is divided in float64 and rounded to float32 once (an empty one's is
        0 / 1): on a CPU in NumPy; elsewhere on the device, so that only the float32 means (or their
        pooled rows) come back, through ``copies`` (on CUDA a pinned buffer, consumed while the next
        batch computes), and the float64 sums only of the windows of sentences in several windows.
        """
        length = int(padded[rows].max())
        ids, mask = windows.inputs(rows, length, self.pieces.around, self.pad_id)
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(mask).to(self.device)}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        starts = np.arange(len(ids)) * length + len(self.pieces.prefix) + windows.own[rows]
        counts = windows.count[rows]
        n_pieces = np.maximum(windows.length[rows], 1).astype(np.float64)
        if special:  # the sentence's own special tokens too: those starting its first window, ending its last
            prefix, suffix = len(self.pieces.prefix), len(self.pieces.suffix)
            leads, ends = windows.leads[rows], windows.ends[rows]
            starts = starts - prefix * leads
            counts = counts + prefix * leads + suffix * ends
            n_pieces = np.maximum(windows.length[rows] + prefix + suffix, 1).astype(np.float64)
        slot = windows.slot[rows]
        split = np.flatnonzero(slot >= 0)
        if self._sums_on_host(flat):
            # (layers, batch, width) float64, laid out as (batch, layers, width)
            sums = _segment_sums([layer.numpy() for layer in flat], starts, counts)
            if pooled is None:
                np.divide(sums.transpose(1, 0, 2), n_pieces[:, None, None], out=out[rows], casting="same_kind")
            else:
                # (layers, batch, width) float32: the means, rounded as above, then their layers combined
                means = np.empty((len(flat), len(n_pieces), self.width), dtype=np.float32)
                np.divide(sums, n_pieces[None, :, None], out=means, casting="same_kind")
                out[rows] = pooled.on_host(means)
            if len(split):
                split_sums[:, slot[split]] = sums[:, split]
            return
        # (layers, batch, width) float64 on the device
        sums = self._device_window_sums(flat, starts, counts)
        means = (sums / torch.from_numpy(n_pieces).to(sums.device)[:, None]).to(torch.float32).transpose(0, 1)
        copies.put(means if pooled is None else pooled.on_device(means), functools.partial(_fill_means, out, rows))
        if len(split):
            split_sums[:, slot[split]] = sums[:, torch.from_numpy(split).to(sums.device)].cpu().numpy()

    def _sums_on_host(self, flat: list[torch.Tensor]) -> bool:
        """Whether a batch's window sums are taken on the host (:func:`_segment_sums`: NumPy, on a CPU,
        from float32 hidden states) rather than on the model's device (:meth:`_device_window_sums`)."""
        return self.device.type == "cpu" and all(layer.dtype == torch.float32 for layer in flat)

    def _device_window_sums(self, flat: list[torch.Tensor], starts: np.ndarray, counts: np.ndarray) -> torch.Tensor:
        """The sum of each window's ``counts[j]`` rows from ``starts[j]`` of every layer of ``flat``:
        ``(layers, windows, width)`` float64 on the model's device, the values added one after the
        other in row order from +0.0 (torch's ``index_add_``), one layer at a time, so only one layer's
        pieces are gathered and widened at once. Like every other piece mean: a sum of float32 values
        in float64 is exact in practice, so the result does not depend on the order, the windows, or
        whether it was taken from cached pieces; :func:`_segment_sums` gives the same bits on the host.
        """
        index_t = torch.from_numpy(ragged_arange(starts, counts)).to(self.device)
        owner = torch.repeat_interleave(torch.arange(len(counts), device=self.device), torch.from_numpy(counts).to(self.device))
        return torch.stack([
            flat[0].new_zeros(len(counts), self.width, dtype=torch.float64).index_add_(0, owner, layer.index_select(0, index_t).double())
            for layer in flat])
