"""Pieces, pairs, document context and texts as row objects: each window a :class:`_Row` whose
parts are gathered back into their sentences (:class:`_Pending`). Methods of
:class:`~contextembed.encoders.transformer.TransformerEncoder`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import torch

from ..._runtime import streams
from ..._inputs.alignment import SentencePieces, Window, plan_windows, split_context
from ..._inputs.documents import InContext, check_in_context
from ...pooling._layers import LayerSpec
from ...pooling._subword import SubwordPooling, pool_subwords, subword_output_width
from ...pooling._text import pool_pieces_to_text, pool_text
from ._host_copies import HostCopies
from .._base import Pairs, Sentences, check_pairs, check_sentence_chunks, progress_bar, warn_long_pairs

from ._chunking import _ChunkProgress, _chunks, _counted, _tokenized
from ._pooled import _OUTPUT_DTYPES, _Pooled, _TextPooled, _fill_rows, _selector_columns

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    """Per-sentence state while its windows run: the gathered blocks of each selector, by window."""

    pieces: SentencePieces
    positions: list[np.ndarray]
    #: per selector, ``(own_start, (layers, units, width))`` blocks in the order they were computed
    blocks: list[list[tuple[int, np.ndarray]]] = field(default_factory=list)
    cls: Optional[np.ndarray] = None
    #: pooled on the device (:class:`_Pooled`): this sentence's ``(words, dim)`` rows of the chunk's
    #: output, filled as its windows run; ``None`` where its pieces come back to be pooled on the host
    rows: Optional[np.ndarray] = None
    #: where ``rows`` start in the chunk's output
    first_row: int = 0

    def joined(self, k: int) -> np.ndarray:
        """Selector ``k``'s blocks in piece order: ``(layers, units, width)``."""
        blocks = [array for _, array in sorted(self.blocks[k], key=lambda block: block[0])]
        return np.ascontiguousarray(blocks[0]) if len(blocks) == 1 else np.concatenate(blocks, axis=1)


@dataclass
class _Part:
    """A window of one sentence inside a model input row, its first piece at row position ``offset``;
    ``owned``: the row delivers the vectors of the pieces the window owns."""

    item: _Pending
    window: Window
    offset: int
    owned: bool = True


@dataclass
class _Row:
    """One model input: piece ids, segment ids (``None``: the model's default), the sentence windows
    it holds, and the sentences that take its first-piece ([CLS]) vector."""

    ids: np.ndarray
    types: Optional[np.ndarray]
    parts: list[_Part]
    cls_owners: list[_Pending]


#: the positions of each selector's units among a sentence's pieces (:meth:`TransformerEncoder._pending`)
_POSITIONS: dict[str, Callable[[SentencePieces], np.ndarray]] = {
    "all": lambda pieces: np.arange(pieces.n_pieces),
    "starts": lambda pieces: pieces.offsets[:-1],
    "ends": lambda pieces: pieces.offsets[1:] - 1,
}


def _pool_texts(pieces: torch.Tensor, offsets: list[np.ndarray], method: SubwordPooling, text_pooling: str) -> torch.Tensor:
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


def _fill_texts(items: list[_Pending], texts: np.ndarray) -> None:
    """Pooled ``(texts, layers, width')`` to each text's rows of the chunk's output."""
    for item, vectors in zip(items, texts):
        item.rows[...] = vectors


class _RowObjects:
    """The row-object path of :class:`~contextembed.encoders.transformer.TransformerEncoder`."""

    def _iter_text_layers(self, sentences, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each text pooled where the model ran (:class:`_TextPooled`); ``"cls"``: only the first piece
        leaves the device."""
        if text_pooling == "cls":
            for item in self._iter_pending(sentences, layers, (), show_progress):
                yield item.cls if len(item.pieces.offsets) > 1 else np.zeros_like(item.cls)  # an empty text: zeros
            return
        pooled = _TextPooled(subword_pooling, text_pooling, len(self.layer_indexes(layers)))
        for item in self._iter_pending(sentences, layers, ("all",), show_progress, pooled):
            yield item.rows

    def _iter_pair_layers(self, pairs: Pairs, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each side pooled where the model ran (:class:`_TextPooled`); ``"cls"``: only the pair's first
        piece leaves the device."""
        if text_pooling == "cls":
            for a, _ in self._iter_pairs(pairs, layers, (), show_progress):
                yield a.cls[None]
            return
        pooled = _TextPooled(subword_pooling, text_pooling, len(self.layer_indexes(layers)))
        for a, b in self._iter_pairs(pairs, layers, ("all",), show_progress, pooled):
            yield np.stack([a.rows, b.rows])

    def _iter_pairs(self, pairs: Pairs, layers: LayerSpec, selectors: Sequence[str], show_progress: bool,
                    pooled: Optional[_TextPooled] = None) -> Iterator[tuple[_Pending, _Pending]]:
        """Run the model over pairs in chunks; yield each pair's finished sides in input order."""
        pairs = check_pairs(pairs)
        layer_index = self.layer_indexes(layers)
        long_pairs = 0
        chunks = (pairs[begin : begin + self.chunk_size] for begin in range(0, len(pairs), self.chunk_size))
        with progress_bar(pairs, show_progress, unit="pair") as progress:
            # the next chunk tokenized on a producer while this one runs
            for chunk, (firsts, seconds) in _tokenized(chunks, self._pair_pieces, len(pairs) > self.chunk_size):
                sides = [(self._pending(a, selectors), self._pending(b, selectors)) for a, b in zip(firsts, seconds)]
                rows = []
                for a, b in sides:
                    rows.extend(self._pair_rows(a, b))
                    long_pairs += a.pieces.n_pieces + b.pieces.n_pieces > self._pair_budget()
                self._run([side for pair in sides for side in pair], rows, layer_index, pooled,
                          _ChunkProgress(progress, len(chunk)))
                yield from sides
        if long_pairs:
            warn_long_pairs(long_pairs, len(pairs), self._pair_budget())

    def _pair_pieces(self, chunk: list) -> tuple[list[SentencePieces], list[SentencePieces]]:
        """The pieces of each first side and of each second side of a chunk of pairs."""
        return self.pieces([a for a, _ in chunk]), self.pieces([b for _, b in chunk])

    def _iter_pending(
        self, sentences: Sentences, layers: LayerSpec, selectors: Sequence[str], show_progress: bool,
        pooled: Union[_Pooled, _TextPooled, None] = None,
    ) -> Iterator[_Pending]:
        """Run the model over sentences in chunks; yield finished sentences in input order (an iterator
        is read one chunk at a time)."""
        layer_index = self.layer_indexes(layers)
        chunks = check_sentence_chunks(sentences, self.chunk_size)
        ahead = self._tokenizes_ahead(sentences)
        with progress_bar(sentences, show_progress) as progress:
            for chunk, pieces in _tokenized(chunks, self.pieces, ahead):
                pending = [self._pending(p, selectors) for p in pieces]
                self._run(pending, [row for item in pending for row in self._single_rows(item)], layer_index, pooled,
                          _ChunkProgress(progress, len(chunk)))
                yield from pending

    def _tokenizes_ahead(self, sentences) -> bool:
        """Whether the next chunk of ``sentences`` is tokenized on a producer while one runs: an iterator
        is read no further than one chunk ahead of the outputs (tokenized as it comes), and a list of
        one chunk has nothing to tokenize ahead."""
        return not isinstance(sentences, Iterator) and isinstance(sentences, Sized) and len(sentences) > self.chunk_size

    def _run(self, pending: list[_Pending], rows: list[_Row], layer_index: tuple[int, ...],
             pooled: Union[_Pooled, _TextPooled, None], progress: Optional["_ChunkProgress"] = None) -> None:
        """Run ``rows`` for the sentences ``pending`` (``progress`` counts them as batches finish);
        with ``pooled``, their word rows are laid out in one array first and filled as the batches
        finish."""
        if pooled is None:
            self._run_rows(rows, layer_index, progress=progress)
            return
        # this chunk's own pooling state (its output, its copies to the host), apart from the settings
        if isinstance(pooled, _TextPooled):
            chunk, on_host = dataclasses.replace(pooled, copies=HostCopies(self.device)), self._lay_out_texts(
                pending, rows, pooled)
        else:
            out, on_host = self._lay_out_rows(pending, pooled)
            chunk = dataclasses.replace(pooled, out=out, copies=HostCopies(self.device))
        self._run_rows(rows, layer_index, chunk, progress)
        chunk.copies.flush()
        for item, item_rows in on_host:  # their pieces came back: see _Pooled, _TextPooled
            item_rows[...] = chunk.pool_on_host(item)
            item.rows, item.blocks = item_rows, []

    def _lay_out_rows(self, pending: list[_Pending],
                      pooled: _Pooled) -> tuple[np.ndarray, list[tuple[_Pending, np.ndarray]]]:
        """One ``(words, dim)`` output for the chunk, each sentence's ``rows`` a view of it; the
        sentences pooled on the host instead, with their rows (their ``rows`` stay ``None``)."""
        dim = pooled.pooling.output_width(subword_output_width(self.width, pooled.method))
        counts = [len(item.pieces.offsets) - 1 for item in pending]
        # (words of the chunk, dim)
        out = np.empty((sum(counts), dim), dtype=pooled.dtype)
        on_host = []
        for item, end, count in zip(pending, itertools.accumulate(counts), counts):
            item.first_row = end - count
            if pooled.on_device(item.pieces.n_pieces, self.window):
                item.rows = out[end - count : end]
            else:
                on_host.append((item, out[end - count : end]))
        return out, on_host

    def _lay_out_texts(self, pending: list[_Pending], rows: list[_Row], pooled: _TextPooled) -> list[tuple[_Pending, np.ndarray]]:
        """One ``(texts, layers, width')`` float32 output for the chunk, each text's ``rows`` a view of
        it where one model input owns all of its pieces; the other texts, with their rows (their
        ``rows`` stay ``None``: their pieces come back)."""
        dim = subword_output_width(self.width, pooled.method)
        out = np.empty((len(pending), pooled.n_layers, dim), dtype=np.float32)
        # how many model inputs own some of each text's pieces
        owners = collections.Counter(id(part.item) for row in rows for part in row.parts if part.owned)
        on_host = []
        for item, item_rows in zip(pending, out):
            if owners[id(item)] == 1:
                item.rows = item_rows
            else:
                on_host.append((item, item_rows))
        return on_host

    def _iter_in_context(self, items: Iterable[InContext], layers: LayerSpec, selectors: Sequence[str],
                         show_progress: bool, pooled: Optional[_Pooled] = None) -> Iterator[_Pending]:
        """:meth:`_iter_pending` of sentences with their context pieces around them."""
        layer_index = self.layer_indexes(layers)
        with progress_bar(items, show_progress) as progress:
            for chunk in _chunks(check_in_context(items), self.chunk_size):
                own, lefts, rights = (self.pieces([getattr(item, side) for item in chunk])
                                      for side in ("words", "left", "right"))
                pending = [self._pending(pieces, selectors) for pieces in own]
                rows = [row for item, before, after, wanted in zip(pending, lefts, rights, chunk)
                        for row in self._context_rows(item, before.ids, after.ids, wanted.size)]
                self._run(pending, rows, layer_index, pooled, _ChunkProgress(progress, len(chunk)))
                yield from pending

    def _context_rows(self, item: _Pending, before: np.ndarray, after: np.ndarray, size: int) -> Iterator[_Row]:
        """``prefix + context before + sentence + context after + suffix`` when the sentence leaves room
        in a window; its plain windows otherwise."""
        n_pieces = item.pieces.n_pieces
        room = self.window - n_pieces
        if not n_pieces or room <= 0:
            yield from self._single_rows(item)
            return
        n_left, n_right = split_context(room, min(size, len(before)), min(size, len(after)))
        prefix, suffix = np.asarray(self.pieces.prefix, dtype=np.int64), np.asarray(self.pieces.suffix, dtype=np.int64)
        ids = np.concatenate([prefix, before[len(before) - n_left :], item.pieces.ids, after[:n_right], suffix])
        part = _Part(item, Window(0, n_pieces, 0, n_pieces), len(prefix) + n_left)
        yield _Row(ids, None, [part], [item] if len(prefix) else [])

    def _pending(self, pieces: SentencePieces, selectors: Sequence[str]) -> _Pending:
        """``selectors``: ``"all"`` pieces, word ``"starts"`` or ``"ends"``."""
        positions = [_POSITIONS[name](pieces) for name in selectors]
        return _Pending(pieces, positions, [[] for _ in selectors])

    def _single_rows(self, item: _Pending) -> Iterator[_Row]:
        """One row per window of a sentence: ``prefix + window + suffix``."""
        prefix = self.pieces.prefix
        around = self.pieces.around
        for window in plan_windows(item.pieces.n_pieces, self.window, self.stride):
            ids = np.concatenate([around[0], item.pieces.ids[window.start : window.end], around[1]])
            owners = [item] if window.start == 0 and prefix else []
            yield _Row(ids, None, [_Part(item, window, len(prefix))], owners)

    def _pair_budget(self) -> int:
        """Pieces of both sides that one model input takes (besides the pair's special tokens)."""
        return min(self.window + len(self.pieces.prefix) + len(self.pieces.suffix), self._max_length) - self.pair.n_special

    def _pair_windows(self, n_first: int, n_second: int) -> tuple[list[Window], list[Window]]:
        """The window policy for pairs (docs/pairs.md).

        A pair that fits is one window per side. Otherwise each side gets a share of the budget:
        a side that fits in half of it keeps all of its pieces and the other side takes the rest;
        else both get half. A side longer than its share is cut into overlapping windows (stride:
        half a window) as a single sentence is, and every piece takes its vectors from the window
        where it has most context; each window of one side is paired with the other side's first
        window, so every word is encoded jointly with (the start of) the other side.
        """
        budget = self._pair_budget()
        if n_first + n_second <= budget:
            return [Window(0, n_first, 0, n_first)], [Window(0, n_second, 0, n_second)]
        half = budget // 2
        if n_first <= half:
            sizes = (n_first, budget - n_first)
        elif n_second <= budget - half:
            sizes = (budget - n_second, n_second)
        else:
            sizes = (half, budget - half)
        return tuple(plan_windows(n, max(1, size), max(1, size // 2)) for n, size in zip((n_first, n_second), sizes))

    def _pair_rows(self, a: _Pending, b: _Pending) -> list[_Row]:
        """The rows of one pair: its first windows together, then each further window of one side
        with the other side's first window."""
        windows_a, windows_b = self._pair_windows(a.pieces.n_pieces, b.pieces.n_pieces)
        rows = [self._pair_row(a, windows_a[0], b, windows_b[0], owned=(True, True))]
        rows += [self._pair_row(a, w, b, windows_b[0], owned=(True, False)) for w in windows_a[1:]]
        rows += [self._pair_row(a, windows_a[0], b, w, owned=(False, True)) for w in windows_b[1:]]
        return rows

    def _pair_row(self, a: _Pending, wa: Window, b: _Pending, wb: Window, owned: tuple[bool, bool]) -> _Row:
        template = self.pair
        first, second = a.pieces.ids[wa.start : wa.end], b.pieces.ids[wb.start : wb.end]
        types = template.type_ids(len(first), len(second)) if self._inputs.takes_types else None
        offset_b = len(template.prefix) + len(first) + len(template.middle)
        parts = [_Part(a, wa, len(template.prefix), owned[0]), _Part(b, wb, offset_b, owned[1])]
        owners = [a, b] if owned == (True, True) and template.prefix else []
        return _Row(template.ids(first, second), types, parts, owners)

    def _run_rows(self, rows: list[_Row], layer_index: tuple[int, ...], pooled: Union[_Pooled, _TextPooled, None] = None,
                  progress: Optional["_ChunkProgress"] = None) -> None:
        """Run length-sorted batches of ``rows``; on a CPU several at once (:mod:`contextembed._runtime.streams`:
        each batch's results are filed under its windows, whatever order the batches finish in).
        ``progress`` counts the chunk's items as the batches finish, and all of them at the end."""
        rows = sorted(rows, key=lambda row: len(row.ids))
        batches = list(_batches(rows, self._padded_length, self.batch_tokens, self.max_batch_size))
        run = functools.partial(self._run_batch, layer_index=layer_index, pooled=pooled)
        if progress is not None:
            progress.expect(sum(self._batch_positions(batch) for batch in batches))
            run = functools.partial(_counted, run, lambda batch: progress.advance(self._batch_positions(batch)))
        streams.run_all(run, batches, self.device)
        if progress is not None:
            progress.finish()

    def _batch_positions(self, batch: list[_Row]) -> int:
        """The padded positions a batch computes: what the forward pass costs, roughly."""
        return len(batch) * max(self._padded_length(row) for row in batch)

    def _padded_length(self, row: _Row) -> int:
        """Model input length of a row, rounded up to ``pad_multiple`` positions (never beyond the
        model's maximum)."""
        return min(-(-len(row.ids) // self.pad_multiple) * self.pad_multiple, self._max_length)

    @torch.inference_mode()
    def _run_batch(self, batch: list[_Row], layer_index: tuple[int, ...], pooled: Union[_Pooled, _TextPooled, None] = None) -> None:
        length = max(self._padded_length(row) for row in batch)
        # (batch, seq)
        ids = np.full((len(batch), length), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int64)
        types = np.zeros((len(batch), length), dtype=np.int64) if batch[0].types is not None else None
        for r, row in enumerate(batch):
            ids[r, : len(row.ids)] = row.ids
            mask[r, : len(row.ids)] = 1
            if types is not None:
                types[r, : len(row.ids)] = row.types
        inputs = {"input_ids": ids, "attention_mask": mask} if types is None else {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in inputs.items()}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        if pooled is None:  # pooled words take no [CLS] vector
            self._gather_cls(batch, flat, length)
        for k in range(len(batch[0].parts[0].item.positions)):
            self._gather_selector(batch, flat, length, k, pooled)

    def _gather_selector(self, batch: list[_Row], flat: list[torch.Tensor], length: int, k: int,
                         pooled: Union[_Pooled, _TextPooled, None] = None) -> None:
        """Selector ``k``'s owned pieces of every row: pooled into their sentences' rows on the device
        (``pooled``) or gathered to the host."""
        index, targets = [], []
        for r, row in enumerate(batch):
            for part in row.parts:
                if not part.owned:
                    continue
                positions = part.item.positions[k]
                if len(positions) == part.item.pieces.n_pieces:  # every piece: positions[i] == i
                    lo, hi = part.window.own_start, part.window.own_end
                else:
                    lo, hi = np.searchsorted(positions, [part.window.own_start, part.window.own_end])
                index.append(positions[lo:hi] - part.window.start + part.offset + r * length)
                targets.append((part, lo, hi - lo))
        if pooled is not None:
            index, targets = self._pool_selector(flat, index, targets, k, pooled)
            if not targets:
                return
        index_t = torch.from_numpy(np.concatenate(index)).to(self.device)
        # (layers, units, width)
        gathered = torch.stack([layer.index_select(0, index_t) for layer in flat]).float().cpu().numpy()
        start = 0
        for part, _, count in targets:
            part.item.blocks[k].append((part.window.own_start, gathered[:, start : start + count]))
            start += count

    def _pool_selector(self, flat: list[torch.Tensor], index: list[np.ndarray], targets: list[tuple[_Part, int, int]],
                       k: int, pooled: _Pooled) -> tuple[list[np.ndarray], list[tuple[_Part, int, int]]]:
        """Pool selector ``k``'s units of the sentences pooled on the device and hand them to their
        rows (:meth:`_fill_rows`); the index and targets of the others, whose pieces come back."""
        mine = [j for j, (part, _, _) in enumerate(targets) if part.item.rows is not None]
        if mine:
            self._pool_units(flat, np.concatenate([index[j] for j in mine]), [targets[j] for j in mine], k, pooled)
        rest = [j for j, (part, _, _) in enumerate(targets) if part.item.rows is None]
        return [index[j] for j in rest], [targets[j] for j in rest]

    def _pool_units(self, flat: list[torch.Tensor], index: np.ndarray, chosen: list[tuple[_Part, int, int]], k: int,
                    pooled: _Pooled) -> None:
        """Pool selector ``k``'s units ``index`` (rows of ``flat``) of the windows ``chosen`` into their
        rows of the chunk's output."""
        if isinstance(pooled, _TextPooled):
            self._pool_texts(flat, index, chosen, pooled)
            return
        if pooled.grouped:  # whole sentences (one window each): their rows in order
            starts, lengths = [part.item.first_row for part, _, _ in chosen], [len(part.item.rows) for part, _, _ in chosen]
        else:
            starts, lengths = [part.item.first_row + lo for part, lo, _ in chosen], [count for _, _, count in chosen]
        # the rows of the chunk's output the units go to, in order
        dest = np.repeat(np.asarray(starts) - np.cumsum([0] + lengths[:-1]), lengths) + np.arange(sum(lengths))
        # (words,) pieces of each word pooled over all of them
        counts = np.concatenate([np.diff(part.item.pieces.offsets) for part, _, _ in chosen]) if pooled.grouped else None
        self._pool_words(flat, index, dest, k, len(chosen[0][0].item.positions), pooled, counts)

    def _pool_words(self, flat: list[torch.Tensor], index: np.ndarray, dest: np.ndarray, k: int, n_selectors: int,
                    pooled: _Pooled, counts: Optional[np.ndarray] = None) -> None:
        """Rows ``index`` of ``flat`` (selector ``k``'s units of ``n_selectors``) pooled into rows ``dest``
        of the chunk's output; ``counts``: grouped words, each pooled over that many consecutive units."""
        # (words, dim_k): selector k's columns
        columns = _selector_columns(pooled.out, k, n_selectors, self.width)
        if pooled.copies_in_place(flat):
            # (words, layers, width): the concatenation's blocks, each layer's units copied straight there
            blocks = columns.reshape(len(columns), len(flat), self.width)
            with np.errstate(over="ignore"):  # float16 beyond its range: found by iter_encode_pooled's check
                for j, layer in enumerate(flat):
                    blocks[dest, j] = layer.numpy()[index]
            return
        index_t = torch.from_numpy(index).to(self.device)
        gathered = [layer.index_select(0, index_t).float() for layer in flat]
        if counts is not None:  # (layers, words, width)
            offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)])).to(self.device)
            words = pooled.pooling.combine_selected(pool_subwords(torch.stack(gathered), offsets, pooled.method))
        elif pooled.pooling.combine == "concat":  # (units, layers, width) -> (units, layers * width)
            words = torch.stack(gathered, dim=1).flatten(1)
        else:  # (layers, units, width) -> (units, dim)
            words = pooled.pooling.combine_selected(torch.stack(gathered))
        pooled.copies.put(words.to(_OUTPUT_DTYPES[pooled.dtype]), functools.partial(_fill_rows, columns, dest))

    def _pool_texts(self, flat: list[torch.Tensor], index: np.ndarray, chosen: list[tuple[_Part, int, int]],
                    pooled: _TextPooled) -> None:
        """Pool the texts of the windows ``chosen`` (each owning all of its text's pieces, rows ``index``
        of ``flat``) into their ``(layers, width')`` rows of the chunk's output."""
        index_t = torch.from_numpy(index).to(self.device)
        # (layers, units, width)
        gathered = torch.stack([layer.index_select(0, index_t) for layer in flat]).float()
        items = [part.item for part, _, _ in chosen]
        if gathered.device.type == "cpu":  # the host's own pooling, text by text: the same bits
            pieces = gathered.numpy()
            start = 0
            for item, (_, _, count) in zip(items, chosen):
                item.rows[...] = pool_pieces_to_text(pieces[:, start : start + count], item.pieces.offsets,
                                                     pooled.method, pooled.text_pooling)
                start += count
            return
        texts = _pool_texts(gathered, [item.pieces.offsets for item in items], pooled.method, pooled.text_pooling)
        pooled.copies.put(texts, functools.partial(_fill_texts, items))

    def _gather_cls(self, batch: list[_Row], flat: list[torch.Tensor], length: int) -> None:
        rows = [r for r, row in enumerate(batch) if row.cls_owners]
        if not rows:
            return
        index = torch.tensor([r * length for r in rows], device=self.device)
        # (rows, layers, width)
        cls = torch.stack([layer.index_select(0, index) for layer in flat], dim=1).float().cpu().numpy()
        for r, vector in zip(rows, cls):
            for owner in batch[r].cls_owners:
                owner.cls = vector


def _batches(rows: list[_Row], padded_length: Callable[[_Row], int], batch_tokens: int, max_batch_size: int) -> Iterator[list[_Row]]:
    """Cut length-sorted rows into batches whose padded size stays within the token budget."""
    batch: list = []
    longest = 0
    for row in rows:
        size = padded_length(row)
        grown = max(longest, size) * (len(batch) + 1)
        if batch and (grown > batch_tokens or len(batch) >= max_batch_size):
            yield batch
            batch, longest = [], 0
        batch.append(row)
        longest = max(longest, size)
    if batch:
        yield batch
