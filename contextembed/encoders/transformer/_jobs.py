"""What each path takes from a batch's hidden states: the jobs run on every batch of a plan.

A job is called with each batch's hidden states as it finishes (``job(flat, rows, length)``: each
selected layer ``(batch * seq, width)``, the batch's rows of the :class:`~._plan.Plan`, its padded
length), on several threads at once on a CPU (:mod:`contextembed._runtime.streams`: batches write
disjoint rows of the chunk's arrays), and :meth:`finish` once the chunk's batches are done. Each job
is made for one chunk and holds that chunk's state (its output, its copies to the host); the pooling
settings every chunk shares (:class:`~._pooled._Pooled`) are never written.

- :class:`Gathered`: pieces (every piece, or each word's first or last) and [CLS] vectors to the host;
- :class:`PickedWords`, :class:`GroupedWords`: word rows pooled where the model ran;
- :class:`PooledTexts`: texts pooled where the model ran;
- :class:`WindowSums`: each window's piece sums, for piece means (:mod:`._means`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Optional

import numpy as np
import torch

from ..._inputs.alignment import ragged_arange
from ...pooling._subword import pool_subwords
from ...pooling._text import pool_pieces_to_text, pool_text
from ._plan import ChunkPieces, Plan, Units
from ._pooled import _OUTPUT_DTYPES, _Pooled, _TextPooled, _fill_rows, _selector_columns


def _gather(flat: list[torch.Tensor], index: np.ndarray) -> torch.Tensor:
    """``(layers, units, width)`` float32: rows ``index`` of every layer, where they are."""
    index_t = torch.from_numpy(index).to(flat[0].device)
    return torch.stack([layer.index_select(0, index_t) for layer in flat]).float()


class Gathered:
    """Units of a chunk (one :class:`~._plan.Units` per selector) and, with ``cls``, each text's
    first-piece vector, gathered to the host: ``pieces[k]`` ``(layers, units, width)`` float32 and
    ``cls`` ``(texts, layers, width)`` float32 (``None`` where the model adds no leading token)."""

    def __init__(self, plan: Plan, units: Sequence[Units], n_layers: int, width: int, cls: bool) -> None:
        self.plan, self.units = plan, list(units)
        self.pieces = [np.empty((n_layers, len(u.dest), width), dtype=np.float32) for u in self.units]
        with_cls = cls and bool((plan.cls_row >= 0).any())
        self.cls = np.empty((len(plan.cls_row), n_layers, width), dtype=np.float32) if with_cls else None
        if with_cls:
            # the texts by the row that holds their [CLS], and where each row's start
            self._cls_items = np.argsort(plan.cls_row, kind="stable")[int((plan.cls_row < 0).sum()):]
            self._cls_rows = np.searchsorted(plan.cls_row[self._cls_items], np.arange(len(plan) + 1))

    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        for units, pieces in zip(self.units, self.pieces):
            index, dest = units.batch_index(rows, length)
            if len(index):
                pieces[:, dest] = _gather(flat, index).cpu().numpy()
        if self.cls is not None:
            items = self._cls_items[self._cls_rows[rows.start] : self._cls_rows[rows.stop]]
            if len(items):
                index = torch.from_numpy((self.plan.cls_row[items] - rows.start) * length).to(flat[0].device)
                # (texts, layers, width)
                self.cls[items] = torch.stack([layer.index_select(0, index) for layer in flat], dim=1).float().cpu().numpy()

    def finish(self) -> None:
        pass

    def text_cls(self, text: int) -> Optional[np.ndarray]:
        return None if self.cls is None else self.cls[text]


class _SplitTexts:
    """The texts of a chunk that several rows own pieces of: their pieces are gathered to the host
    batch by batch and handed back text by text when the chunk is done (:meth:`pieces`). The parts
    of every other text, which one row owns whole, are :attr:`whole` (sorted by row)."""

    def __init__(self, plan: Plan, chunk: ChunkPieces, n_layers: int, width: int) -> None:
        n_parts = plan.n_parts
        self.chunk = chunk
        self.whole = np.flatnonzero(n_parts[plan.part_item] == 1)
        self.texts = np.flatnonzero(n_parts > 1)
        pieces = ragged_arange(plan.item_start[self.texts], chunk.n_pieces[self.texts])
        self.gathered = Gathered(plan, [Units.of(plan, pieces)], n_layers, width, cls=False)

    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        self.gathered(flat, rows, length)

    def pieces(self) -> Iterator[tuple[int, np.ndarray]]:
        """Each split text and its ``(layers, pieces, width)`` float32, in input order."""
        pieces, begin = self.gathered.pieces[0], 0
        for text in self.texts.tolist():
            count = int(self.chunk.n_pieces[text])
            yield text, np.ascontiguousarray(pieces[:, begin : begin + count])
            begin += count


class PickedWords:
    """Words picked by their first or last pieces (one :class:`~._plan.Units` per selector, their
    places the words' rows), pooled where the model ran into ``pooled.out``."""

    def __init__(self, units: Sequence[Units], pooled: _Pooled, width: int) -> None:
        self.units, self.pooled, self.width = list(units), pooled, width

    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        for k, units in enumerate(self.units):
            index, dest = units.batch_index(rows, length)
            if len(index):
                pool_words(flat, index, dest, k, len(self.units), self.pooled, self.width)

    def finish(self) -> None:
        self.pooled.copies.flush()


class GroupedWords:
    """Words pooled over all of their pieces (``"mean"``, ``"max"``) where the model ran, for the
    texts one row holds whole; the pieces of a text in several rows (a word may be split between
    batches) come to the host and are pooled there when the chunk is done (:meth:`finish`)."""

    def __init__(self, plan: Plan, chunk: ChunkPieces, pooled: _Pooled, n_layers: int, width: int) -> None:
        self.plan, self.chunk, self.pooled, self.width = plan, chunk, pooled, width
        self.split = _SplitTexts(plan, chunk, n_layers, width)

    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        parts = self.plan.parts_of(rows, self.split.whole)
        items = self.plan.part_item[parts]
        if len(items):
            # (words,) each word's row of the chunk's output and its pieces
            first_word, n_words = self.chunk.first_word[items], self.chunk.n_words[items]
            dest = ragged_arange(first_word, n_words)
            counts = self.chunk.starts[dest + 1] - self.chunk.starts[dest]
            index = self.plan.part_units(parts, rows, length)
            pool_words(flat, index, dest, 0, 1, self.pooled, self.width, counts)
        self.split(flat, rows, length)

    def finish(self) -> None:
        self.pooled.copies.flush()
        for item, pieces in self.split.pieces():
            first = int(self.chunk.first_word[item])
            self.pooled.out[first : first + int(self.chunk.n_words[item])] = self.pooled.pool_on_host(
                pieces, self.chunk.offsets(item))


class PooledTexts:
    """Texts pooled where the model ran into ``out`` ``(texts, layers, width')`` float32, for the texts
    one row owns all of the pieces of: on a CPU by the host's own function, text by text
    (:func:`~contextembed.pooling.pool_pieces_to_text`: the bits of pooling its pieces on the host);
    elsewhere every such text of a batch at once (:func:`pool_texts`). The pieces of the others (a
    text in several windows, one side of a long pair) come to the host and are pooled there when
    the chunk is done."""

    def __init__(self, plan: Plan, chunk: ChunkPieces, pooled: _TextPooled, out: np.ndarray, width: int) -> None:
        self.plan, self.chunk, self.pooled, self.out = plan, chunk, pooled, out
        self.split = _SplitTexts(plan, chunk, pooled.n_layers, width)

    def __call__(self, flat: list[torch.Tensor], rows: slice, length: int) -> None:
        parts = self.plan.parts_of(rows, self.split.whole)
        if len(parts):
            self._pool(flat, self.plan.part_units(parts, rows, length), self.plan.part_item[parts],
                       self.plan.part_count[parts])
        self.split(flat, rows, length)

    def _pool(self, flat: list[torch.Tensor], index: np.ndarray, items: np.ndarray, counts: np.ndarray) -> None:
        # (layers, units, width)
        gathered = _gather(flat, index)
        if gathered.device.type == "cpu":  # the host's own pooling, text by text: the same bits
            pieces, begin = gathered.numpy(), 0
            for item, count in zip(items.tolist(), counts.tolist()):
                self.out[item] = pool_pieces_to_text(pieces[:, begin : begin + count], self.chunk.offsets(item),
                                                     self.pooled.method, self.pooled.text_pooling)
                begin += count
            return
        texts = pool_texts(gathered, [self.chunk.offsets(item) for item in items.tolist()], self.pooled.method,
                           self.pooled.text_pooling)
        self.pooled.copies.put(texts, functools.partial(_fill_texts, self.out, items))

    def finish(self) -> None:
        self.pooled.copies.flush()
        for item, pieces in self.split.pieces():
            self.out[item] = self.pooled.pool_on_host(pieces, self.chunk.offsets(item))


def _fill_texts(out: np.ndarray, items: np.ndarray, texts: np.ndarray) -> None:
    """Pooled ``(texts, layers, width')`` to their rows of the chunk's output."""
    out[items] = texts


def pool_words(flat: list[torch.Tensor], index: np.ndarray, dest: np.ndarray, k: int, n_selectors: int,
               pooled: _Pooled, width: int, counts: Optional[np.ndarray] = None) -> None:
    """Rows ``index`` of ``flat`` (selector ``k``'s units of ``n_selectors``) pooled into rows ``dest``
    of the chunk's output (``pooled.out``); ``counts``: grouped words, each pooled over that many
    consecutive units."""
    # (words, dim_k): selector k's columns
    columns = _selector_columns(pooled.out, k, n_selectors, width)
    if pooled.copies_in_place(flat):
        # (words, layers, width): the concatenation's blocks, each layer's units copied straight there
        blocks = columns.reshape(len(columns), len(flat), width)
        with np.errstate(over="ignore"):  # float16 beyond its range: found by iter_encode_pooled's check
            for j, layer in enumerate(flat):
                blocks[dest, j] = layer.numpy()[index]
        return
    index_t = torch.from_numpy(index).to(flat[0].device)
    gathered = [layer.index_select(0, index_t).float() for layer in flat]
    if counts is not None:  # (layers, words, width)
        offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)])).to(flat[0].device)
        words = pooled.pooling.combine_selected(pool_subwords(torch.stack(gathered), offsets, pooled.method))
    elif pooled.pooling.combine == "concat":  # (units, layers, width) -> (units, layers * width)
        words = torch.stack(gathered, dim=1).flatten(1)
    else:  # (layers, units, width) -> (units, dim)
        words = pooled.pooling.combine_selected(torch.stack(gathered))
    pooled.copies.put(words.to(_OUTPUT_DTYPES[pooled.dtype]), functools.partial(_fill_rows, columns, dest))


def pool_texts(pieces: torch.Tensor, offsets: list[np.ndarray], method: str, text_pooling: str) -> torch.Tensor:
    """Many texts pooled at once, each layer on its own: their words from their pieces (``method``),
    then each text's words (``text_pooling``, ``"mean"`` or ``"max"``).

    Parameters
    ----------
    pieces : torch.Tensor
        ``(layers, units, width)``: the texts' pieces one after the other.
    offsets : list of np.ndarray
        Per text, ``(words + 1,)`` word offsets into its own pieces (from 0).

    Returns
    -------
    torch.Tensor
        ``(texts, layers, width')`` float32; zeros for a text without words. The values of
        :func:`~contextembed.pooling.pool_pieces_to_text`, text by text, up to the order of the
        device's sums.
    """
    device = pieces.device
    n_words = np.array([len(o) - 1 for o in offsets], dtype=np.int64)
    per_word = np.concatenate([np.diff(o) for o in offsets]) if offsets else np.zeros(0, dtype=np.int64)
    word_offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(per_word)]).astype(np.int64)).to(device)
    # (layers, words, width')
    words = pool_subwords(pieces, word_offsets, method)
    n_layers, total, dim = words.shape
    # each word's text and place in it
    text = np.repeat(np.arange(len(offsets)), n_words)
    place = np.arange(total) - np.repeat(np.cumsum(n_words) - n_words, n_words)
    text_t, place_t = torch.from_numpy(text).to(device), torch.from_numpy(place).to(device)
    # (texts, longest, layers * width'), zeros past each text's words
    padded = words.new_zeros(len(offsets), int(n_words.max(initial=0)), n_layers * dim)
    padded[text_t, place_t] = words.transpose(0, 1).reshape(total, n_layers * dim)
    mask = torch.zeros(padded.shape[:2], dtype=torch.bool, device=device)
    mask[text_t, place_t] = True
    return pool_text(padded, mask, text_pooling).view(len(offsets), n_layers, dim)
