"""Piece means: each window's pieces summed where the model ran, only ``(layers, width)`` (or, pooled,
``(dim,)``) per window leaving the device. Methods of
:class:`~contextembed.encoders.transformer.TransformerEncoder` and the job they run on each batch
(:class:`WindowSums`), on the plan of every path (:meth:`~._plan.Plan.windows`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Optional

import numpy as np
import torch

from ..._inputs.alignment import _offsets, ragged_arange
from ...pooling._layers import LayerSpec
from ._chunking import _ChunkProgress, _chunks, _tokenized
from ._host_copies import HostCopies
from ._plan import Plan
from ._pooled import _MeansPooled
from .._reporting import ShowProgress, progress_bar


class WindowSums:
    """Each window's owned pieces summed (a plan of windows: one part per row, part ``r`` of row
    ``r``): each window's sums divided by its pieces into its rows of ``out`` ``(windows, layers,
    width)`` (a sentence's mean where the window holds all of it; with ``pooled``, its layers
    combined into ``(windows, dim)``), those of windows of sentences in several windows also into
    their ``slot`` of ``split_sums`` ``(layers, slots, width)``.

    A whole sentence's mean is divided in float64 and rounded to float32 once (an empty one's is
    0 / 1): on a CPU in NumPy; elsewhere on the device, so that only the float32 means (or their
    pooled rows) come back, through ``copies`` (on CUDA a pinned buffer, consumed while the next
    batch computes), and the float64 sums only of the windows of sentences in several windows.
    ``special``: the sentence's own special tokens are counted too, those starting its first window
    and ending its last.
    """

    def __init__(self, plan: Plan, around: tuple[int, int], out: np.ndarray, split_sums: np.ndarray, slot: np.ndarray,
                 pooled: Optional[_MeansPooled], special: bool, width: int, device: torch.device,
                 sums_on_host: Callable[[list[torch.Tensor]], bool]) -> None:
        self.plan, self.out, self.split_sums, self.slot = plan, out, split_sums, slot
        self.sums_on_host = sums_on_host
        self.pooled, self.special, self.width, self.device = pooled, special, width, device
        self.prefix, self.suffix = around
        self.copies = HostCopies(device)
        n_pieces = np.diff(plan.item_start)[plan.part_item]
        #: ``(windows,)`` whether each window starts (ends) its sentence
        self.leads = plan.part_piece == 0
        self.ends = plan.part_piece + plan.part_count == n_pieces

    @torch.inference_mode()
    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        starts = np.arange(rows.stop - rows.start) * length + self.plan.part_position[rows]
        counts = self.plan.part_count[rows]
        # (batch,) each window's pieces, without special tokens
        window_pieces = self.plan.lengths[rows] - self.prefix - self.suffix
        n_pieces = np.maximum(window_pieces, 1).astype(np.float64)
        if self.special:
            leads, ends = self.leads[rows], self.ends[rows]
            starts = starts - self.prefix * leads
            counts = counts + self.prefix * leads + self.suffix * ends
            n_pieces = np.maximum(window_pieces + self.prefix + self.suffix, 1).astype(np.float64)
        slot = self.slot[rows]
        split = np.flatnonzero(slot >= 0)
        out = self.out
        if self.sums_on_host(flat):
            # (layers, batch, width) float64, laid out as (batch, layers, width)
            sums = _segment_sums([layer.numpy() for layer in flat], starts, counts)
            if self.pooled is None:
                np.divide(sums.transpose(1, 0, 2), n_pieces[:, None, None], out=out[rows], casting="same_kind")
            else:
                # (layers, batch, width) float32: the means, rounded as above, then their layers combined
                means = np.empty((len(flat), len(n_pieces), self.width), dtype=np.float32)
                np.divide(sums, n_pieces[None, :, None], out=means, casting="same_kind")
                out[rows] = self.pooled.on_host(means)
            if len(split):
                self.split_sums[:, slot[split]] = sums[:, split]
            return
        # (layers, batch, width) float64 on the device
        sums = _device_window_sums(flat, starts, counts, self.width)
        means = (sums / torch.from_numpy(n_pieces).to(sums.device)[:, None]).to(torch.float32).transpose(0, 1)
        self.copies.put(means if self.pooled is None else self.pooled.on_device(means), functools.partial(_fill_means, out, rows))
        if len(split):
            self.split_sums[:, slot[split]] = sums[:, torch.from_numpy(split).to(sums.device)].cpu().numpy()

    def finish(self) -> None:
        self.copies.flush()


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


def _device_window_sums(flat: list[torch.Tensor], starts: np.ndarray, counts: np.ndarray, width: int) -> torch.Tensor:
    """The sum of each window's ``counts[j]`` rows from ``starts[j]`` of every layer of ``flat``:
    ``(layers, windows, width)`` float64 on the model's device, the values added one after the
    other in row order from +0.0 (torch's ``index_add_``), one layer at a time, so only one layer's
    pieces are gathered and widened at once. Like every other piece mean: a sum of float32 values
    in float64 is exact in practice, so the result does not depend on the order, the windows, or
    whether it was taken from cached pieces; :func:`_segment_sums` gives the same bits on the host.
    """
    device = flat[0].device
    index_t = torch.from_numpy(ragged_arange(starts, counts)).to(device)
    owner = torch.repeat_interleave(torch.arange(len(counts), device=device), torch.from_numpy(counts).to(device))
    return torch.stack([
        flat[0].new_zeros(len(counts), width, dtype=torch.float64).index_add_(0, owner, layer.index_select(0, index_t).double())
        for layer in flat])


def _first_pieces(ids: np.ndarray, n_pieces: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The sentences' pieces (``ids``, ``n_pieces`` of each, one sentence after the other) with each
    sentence's pieces beyond its first ``limit`` dropped."""
    kept = np.minimum(n_pieces, limit)
    starts = np.cumsum(n_pieces) - n_pieces
    return ids[ragged_arange(starts, kept)], kept


def _fill_means(out: np.ndarray, rows: slice, means: np.ndarray) -> None:
    """``out[rows] = means``: a batch's ``(windows, layers, width)`` piece means, once on the host."""
    out[rows] = means


class _PieceMeans:
    """The piece means of :class:`~contextembed.encoders.transformer.TransformerEncoder`."""

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
                     progress: Optional[_ChunkProgress] = None, pooled: Optional[_MeansPooled] = None,
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
        plan = Plan.windows(ids, n_pieces, self.pieces.around, self.window, self.stride)
        split, slot, first_row = _split_windows(plan)
        rows = np.empty((len(plan), *self._mean_shape(len(layer_index), pooled)), dtype=np.float32)
        # (layers, windows of the sentences in several, width) float64
        split_sums = np.empty((len(layer_index), int((slot >= 0).sum()), self.width), dtype=np.float64)
        around = (len(self.pieces.prefix), len(self.pieces.suffix))
        sums = WindowSums(plan, around, rows, split_sums, slot, pooled, special, self.width, self.device,
                          self._sums_on_host)
        self._run_plan(plan, sums, layer_index, progress)
        if len(split):  # after the copies: the first window's row is the split sentence's
            split_offsets = _offsets(plan.n_parts[split])
            # (layers, split sentences, width): each one's windows' sums, in window order, added up
            sums = np.stack([split_sums[:, begin:end].sum(axis=1)
                             for begin, end in zip(split_offsets[:-1], split_offsets[1:])], axis=1)
            # (split sentences, layers, width) float32
            counted = n_pieces[split] + (sum(around) if special else 0)
            means = np.divide(sums.transpose(1, 0, 2), counted[:, None, None], dtype=np.float64).astype(np.float32)
            rows[first_row[split]] = means if pooled is None else pooled.on_host(means.transpose(1, 0, 2))
        return rows, first_row


    def _sums_on_host(self, flat: list[torch.Tensor]) -> bool:
        """Whether a batch's window sums are taken on the host (:func:`_segment_sums`: NumPy, on a CPU,
        from float32 hidden states) rather than on the model's device (:func:`_device_window_sums`)."""
        return self.device.type == "cpu" and all(layer.dtype == torch.float32 for layer in flat)


def _split_windows(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of a plan of windows: ``(split sentences,)`` the sentences in several windows, in input order;
    ``(windows,)`` each window's slot among theirs (``-1`` for a sentence's only window), sentence
    by sentence in window order; ``(sentences,)`` the row of each sentence's first window."""
    n_parts = plan.n_parts
    split = np.flatnonzero(n_parts > 1)
    in_split = np.flatnonzero(n_parts[plan.part_item] > 1)
    by_window = in_split[np.lexsort((plan.part_piece[in_split], plan.part_item[in_split]))]
    slot = np.full(len(plan), -1, dtype=np.int64)
    slot[plan.part_row[by_window]] = np.arange(len(by_window))
    first_row = np.empty(len(n_parts), dtype=np.int64)
    leads = plan.part_piece == 0
    first_row[plan.part_item[leads]] = plan.part_row[leads]
    return split, slot, first_row
