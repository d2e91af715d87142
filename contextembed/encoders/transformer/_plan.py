"""A chunk's model inputs as arrays: the one planner of every transformer path.

Words, pieces, texts, pairs, sentences in their document's context and piece means all run the same
way: a chunk of texts is tokenized into one array of pieces (:class:`ChunkPieces`), a plan
(:class:`Plan`) lays out its model inputs (rows) and, for each row, the parts of each text whose
vectors it delivers (every piece of a text is owned by exactly one row, the one where it has most
context), and the rows run in length-sorted batches cut to a token budget (:func:`batches`). What a
path wants from each batch's hidden states (pieces to the host, words or texts pooled where the
model ran, sums) is a job of :mod:`._jobs`; the rows, their order and their batches are the same for
all of them, so a text's vectors do not depend on the path that asked for them.

A row is a concatenation of segments of one array of ids (the chunk's pieces, context pieces and the
special tokens), each with a segment (token type) id where the model takes them; a plan holds the
segments, and a row's ids are built when its batch runs:

- a window of a sentence: ``prefix + pieces[start:end] + suffix`` (:meth:`Plan.windows`);
- a sentence with the pieces of its document around it:
  ``prefix + before + sentence + after + suffix`` (:meth:`Plan.in_context`);
- a pair: ``prefix + first + middle + second + suffix`` with the tokenizer's segment ids
  (:meth:`Plan.pairs`, the window policy of docs/pairs.md).

Rows run sorted by length, stably (ties in the order they were planned: text by text, window by
window), and :func:`padded_inputs` is the one builder of padded model inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..._inputs.alignment import PairTemplate, Window, _offsets, plan_windows, ragged_arange, split_context

_INT = np.int64


@dataclass(frozen=True)
class ChunkPieces:
    """The pieces of a chunk's texts, one text after the other, word by word
    (:meth:`~contextembed._inputs.alignment.PieceTokenizer.word_pieces`).

    Attributes
    ----------
    ids : np.ndarray
        ``(pieces,)`` int64 piece ids.
    starts : np.ndarray
        ``(words + 1,)`` int64: where each word's pieces start in ``ids`` (the last: ``len(ids)``).
    first_word, n_words : np.ndarray
        ``(texts,)`` int64: where each text's words start among all, and how many it has.
    """

    ids: np.ndarray
    starts: np.ndarray
    first_word: np.ndarray
    n_words: np.ndarray

    def __len__(self) -> int:
        return len(self.first_word)

    @functools.cached_property
    def item_start(self) -> np.ndarray:
        """``(texts + 1,)`` int64: where each text's pieces start in ``ids``."""
        return np.append(self.starts[self.first_word], len(self.ids))

    @functools.cached_property
    def n_pieces(self) -> np.ndarray:
        """``(texts,)`` int64: each text's pieces."""
        return np.diff(self.item_start)

    def offsets(self, text: int) -> np.ndarray:
        """``(words + 1,)`` int64: text ``text``'s word offsets into its own pieces (from 0)."""
        first = int(self.first_word[text])
        words = self.starts[first : first + int(self.n_words[text]) + 1]
        return words - words[0] if len(words) else np.zeros(1, dtype=_INT)

    def text_ids(self, text: int) -> np.ndarray:
        start = self.item_start
        return self.ids[start[text] : start[text + 1]]

    def then(self, other: "ChunkPieces") -> "ChunkPieces":
        """These texts, then ``other``'s (a pair's second sides after the first ones)."""
        return ChunkPieces(np.concatenate([self.ids, other.ids]),
                           np.concatenate([self.starts[:-1], other.starts + len(self.ids)]),
                           np.concatenate([self.first_word, other.first_word + len(self.starts) - 1]),
                           np.concatenate([self.n_words, other.n_words]))


@dataclass(frozen=True)
class Plan:
    """A chunk's model inputs (rows, in the order they run) and the pieces of each text each one owns.

    Attributes
    ----------
    item_start : np.ndarray
        ``(texts + 1,)`` int64: where each text's pieces start among the chunk's.
    source : np.ndarray
        ``(ids,)`` int64: the ids the rows are made of (the chunk's pieces, context pieces, special
        tokens).
    segments : np.ndarray
        ``(segments, 3)`` int64, row after row in run order: where each segment starts in ``source``,
        how many ids it takes, and its segment (token type) id. A row's ids are built when its batch
        runs (:meth:`row_ids`), so a plan holds a few numbers per row, not its ids (a sentence in
        many overlapping windows costs no more than its windows).
    row_segments : np.ndarray
        ``(rows + 1,)`` int64: row ``r``'s segments are ``segments[row_segments[r]:row_segments[r + 1]]``.
    row_start : np.ndarray
        ``(rows + 1,)`` int64: where each row would start in the rows' ids laid end to end (the
        difference: each row's model input length).
    typed : bool
        Whether the rows carry segment ids (pairs of a model that takes them); else the model's
        default.
    part_row, part_item, part_position, part_piece, part_count : np.ndarray
        ``(parts,)`` int64, sorted by row: the row, the text, where in the row's input the owned
        pieces start, the first of them among the text's pieces, and how many there are. Every piece
        of every text is owned by exactly one part; a text without pieces has one part of none.
    cls_row : np.ndarray
        ``(texts,)`` int64: the row whose first position is the text's first-piece ([CLS]) vector,
        ``-1`` where the model adds no leading special token.
    """

    item_start: np.ndarray
    source: np.ndarray
    segments: np.ndarray
    row_segments: np.ndarray
    row_start: np.ndarray
    typed: bool
    part_row: np.ndarray
    part_item: np.ndarray
    part_position: np.ndarray
    part_piece: np.ndarray
    part_count: np.ndarray
    cls_row: np.ndarray

    # -- the plans ------------------------------------------------------------------------------

    @classmethod
    def windows(cls, ids: np.ndarray, n_pieces: np.ndarray, around: tuple[np.ndarray, np.ndarray], window: int,
                stride: int) -> "Plan":
        """``prefix + window + suffix`` for every window of each text (:func:`plan_windows`: one for a
        text that fits, an empty text included); ``ids`` ``(pieces,)``: the texts' pieces one after the
        other, ``n_pieces`` ``(texts,)``: how many each has."""
        windows = _Windows.of(n_pieces, window, stride)
        builder = _Builder(ids, _offsets(n_pieces), around)
        builder.add_windows(windows, np.arange(len(windows.item)))
        return builder.plan(len(windows.item))

    @classmethod
    def in_context(cls, ids: np.ndarray, n_pieces: np.ndarray, before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray],
                   size: np.ndarray, around: tuple[np.ndarray, np.ndarray], window: int, stride: int) -> "Plan":
        """``prefix + context before + sentence + context after + suffix`` for each sentence that leaves
        room in a window (:func:`split_context` shares the room), its plain windows otherwise.

        Parameters
        ----------
        ids, n_pieces : np.ndarray
            The sentences' pieces, as :meth:`windows` takes them.
        before, after : tuple of np.ndarray
            ``(pieces,)`` ids and ``(texts,)`` counts: each sentence's context pieces on that side,
            one sentence after the other (the pieces nearest the sentence are taken).
        size : np.ndarray
            ``(texts,)`` int64: context pieces wanted on each side.
        """
        room = window - n_pieces
        fits = (n_pieces > 0) & (room > 0)
        alone = np.flatnonzero(~fits)
        windows = _Windows.of(n_pieces[alone], window, stride)
        windows = _Windows(alone[windows.item], windows.start, windows.end, windows.own_start, windows.own_end)
        framed = np.flatnonzero(fits)
        # the rows in the order they are planned: sentence by sentence, window by window
        order = np.argsort(np.concatenate([windows.item, framed]), kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(len(order))
        builder = _Builder(ids, _offsets(n_pieces), around, before[0], after[0])
        builder.add_windows(windows, place[: len(windows.item)])
        builder.add_framed(framed, place[len(windows.item):], before, after, np.minimum(size, before[1]),
                           np.minimum(size, after[1]), room)
        return builder.plan(len(order))

    @classmethod
    def pairs(cls, sides: ChunkPieces, template: PairTemplate, budget: int, takes_types: bool) -> "Plan":
        """The rows of each pair (:func:`pair_windows`): its first windows together, then each further
        window of one side with the other side's first window. ``sides``: the first sides, then the
        second sides (pair ``i``'s are texts ``i`` and ``len(sides) // 2 + i``, :meth:`ChunkPieces.then`)."""
        builder = _Builder(sides.ids, sides.item_start, (np.asarray(template.prefix, dtype=_INT), np.asarray(template.suffix, dtype=_INT)),
                           middle=np.asarray(template.middle, dtype=_INT), types=template.types if takes_types else None)
        n_pairs, n_pieces = len(sides) // 2, sides.n_pieces.tolist()
        # per row, in the order planned: pair, its first side's window, its second side's, which it owns
        rows: list[tuple] = []
        for a in range(n_pairs):
            windows_a, windows_b = pair_windows(n_pieces[a], n_pieces[n_pairs + a], budget)
            first_a, first_b = _bounds(windows_a[0]), _bounds(windows_b[0])
            rows.append((a, *first_a, *first_b, True, True))
            rows += [(a, *_bounds(w), *first_b, True, False) for w in windows_a[1:]]
            rows += [(a, *first_a, *_bounds(w), False, True) for w in windows_b[1:]]
        builder.add_pairs(np.array(rows, dtype=_INT).reshape(-1, 11), n_pairs)
        return builder.plan(len(rows))

    # -- reading it ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.row_start) - 1

    @property
    def lengths(self) -> np.ndarray:
        """``(rows,)`` int64: each row's model input length (special tokens included)."""
        return np.diff(self.row_start)

    @property
    def n_parts(self) -> np.ndarray:
        """``(texts,)`` int64: how many rows own some of each text's pieces."""
        return np.bincount(self.part_item, minlength=len(self.item_start) - 1)

    def inputs(self, rows: slice, length: int, pad_id: int) -> dict[str, np.ndarray]:
        """The padded model inputs of rows ``rows`` (:func:`padded_inputs`)."""
        ids, types = self.row_ids(rows)
        return padded_inputs(ids, self.lengths[rows], length, pad_id, types)

    def row_ids(self, rows: slice) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """The model inputs of rows ``rows``, special tokens included, row after row: ``(positions,)``
        int64 ids and their segment ids (``None``: the model's default)."""
        segments = self.segments[self.row_segments[rows.start] : self.row_segments[rows.stop]]
        ids = self.source[ragged_arange(segments[:, 0], segments[:, 1])]
        return ids, np.repeat(segments[:, 2], segments[:, 1]) if self.typed else None

    def parts_of(self, rows: slice, parts: np.ndarray) -> np.ndarray:
        """Those of ``parts`` (sorted by row) in rows ``rows``."""
        begin, end = np.searchsorted(self.part_row[parts], [rows.start, rows.stop])
        return parts[begin:end]

    def part_units(self, parts: np.ndarray, rows: slice, length: int) -> np.ndarray:
        """``(units,)``: every piece that ``parts`` (rows of ``rows``) own, as rows of the batch's
        hidden states ``(batch * seq, width)`` padded to ``length``, part after part."""
        starts = (self.part_row[parts] - rows.start) * length + self.part_position[parts]
        return ragged_arange(starts, self.part_count[parts])


@dataclass(frozen=True)
class Units:
    """Some pieces of a chunk (a selector's: every piece, or each word's first or last) grouped by the
    row that owns them, in run order, so that a batch of rows ``[a, b)`` has units
    ``row_units[a]:row_units[b]``.

    Attributes
    ----------
    row_units : np.ndarray
        ``(rows + 1,)`` int64: where each row's units start.
    row : np.ndarray
        ``(units,)`` int64: the row that owns each unit.
    position : np.ndarray
        ``(units,)`` int64: its position in that row's model input.
    dest : np.ndarray
        ``(units,)`` int64: its place among the pieces asked for (the row of the output it goes to).
    """

    row_units: np.ndarray
    row: np.ndarray
    position: np.ndarray
    dest: np.ndarray

    @classmethod
    def of(cls, plan: Plan, pieces: np.ndarray) -> "Units":
        """The units at chunk pieces ``pieces`` ``(units,)`` (increasing) of ``plan``."""
        # (parts,) where each part's owned pieces start among the chunk's; the owned ranges tile them
        owned = plan.item_start[plan.part_item] + plan.part_piece
        holding = np.flatnonzero(plan.part_count > 0)
        holding = holding[np.argsort(owned[holding], kind="stable")]
        # (units,) the part owning each unit, then the units by row, in piece order within a row
        part = holding[np.searchsorted(owned[holding], pieces, side="right") - 1]
        order = np.argsort(plan.part_row[part], kind="stable")
        part = part[order]
        row = plan.part_row[part]
        row_units = _offsets(np.bincount(row, minlength=len(plan)))
        return cls(row_units, row, pieces[order] - owned[part] + plan.part_position[part], order)

    def batch_index(self, rows: slice, length: int) -> tuple[np.ndarray, np.ndarray]:
        """The units of rows ``rows``: ``(units,)`` rows of the batch's hidden states
        ``(batch * seq, width)`` padded to ``length``, and ``(units,)`` their places (:attr:`dest`)."""
        begin, end = self.row_units[rows.start], self.row_units[rows.stop]
        return (self.row[begin:end] - rows.start) * length + self.position[begin:end], self.dest[begin:end]


def padded_inputs(ids: np.ndarray, lengths: np.ndarray, length: int, pad_id: int,
                  types: Optional[np.ndarray] = None) -> dict[str, np.ndarray]:
    """Rows of piece ids, one after the other in ``ids`` (``lengths`` of each, special tokens
    included), padded to ``length``: ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` from
    ``types``, ``(positions,)`` matching ``ids``), each ``(batch, seq)`` int64."""
    # (batch, seq)
    mask = np.arange(length) < np.asarray(lengths)[:, None]
    padded = np.full(mask.shape, pad_id, dtype=_INT)
    padded[mask] = ids  # row after row
    inputs = {"input_ids": padded, "attention_mask": mask.astype(_INT)}
    if types is not None:
        inputs["token_type_ids"] = np.zeros(mask.shape, dtype=_INT)
        inputs["token_type_ids"][mask] = types
    return inputs


def batches(rows: Iterable, padded_length: Callable[[object], int], batch_tokens: int, max_batch_size: int) -> Iterator[list]:
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


def pair_windows(n_first: int, n_second: int, budget: int) -> tuple[list[Window], list[Window]]:
    """The window policy for pairs (docs/pairs.md), ``budget``: the pieces of both sides one model
    input takes.

    A pair that fits is one window per side. Otherwise each side gets a share of the budget:
    a side that fits in half of it keeps all of its pieces and the other side takes the rest;
    else both get half. A side longer than its share is cut into overlapping windows (stride:
    half a window) as a single sentence is, and every piece takes its vectors from the window
    where it has most context; each window of one side is paired with the other side's first
    window, so every word is encoded jointly with (the start of) the other side.
    """
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


def _bounds(window: Window) -> tuple[int, int, int, int]:
    return window.start, window.end, window.own_start, window.own_end


@dataclass(frozen=True)
class _Windows:
    """Windows of texts, in order (text by text, window by window): ``(windows,)`` int64 each."""

    item: np.ndarray
    start: np.ndarray
    end: np.ndarray
    own_start: np.ndarray
    own_end: np.ndarray

    @classmethod
    def of(cls, n_pieces: np.ndarray, window: int, stride: int) -> "_Windows":
        """Every window of texts of ``n_pieces`` ``(texts,)`` pieces: :func:`plan_windows` for those
        longer than ``window``, one window of all of its pieces for each other."""
        split = np.flatnonzero(n_pieces > window)
        planned = [plan_windows(int(n_pieces[i]), window, stride) for i in split]
        n_windows = np.ones(len(n_pieces), dtype=_INT)
        n_windows[split] = [len(windows) for windows in planned]
        item = np.repeat(np.arange(len(n_pieces)), n_windows)
        start, end = np.zeros(len(item), dtype=_INT), np.asarray(n_pieces, dtype=_INT)[item]
        own_start, own_end = start.copy(), end.copy()
        first_window = np.cumsum(n_windows) - n_windows
        for i, windows in zip(split, planned):
            place = slice(first_window[i], first_window[i] + len(windows))
            start[place], end[place], own_start[place], own_end[place] = np.array(
                [(w.start, w.end, w.own_start, w.own_end) for w in windows], dtype=_INT).T
        return cls(item, start, end, own_start, own_end)


class _Builder:
    """Collects a plan's rows as segments of one array of ids (the chunk's pieces, the context
    pieces, the special tokens), its parts and its [CLS] rows, each under the number of its row in
    the order planned; :meth:`plan` sorts the rows by length and lays them out."""

    def __init__(self, ids: np.ndarray, item_start: np.ndarray, around: tuple[np.ndarray, np.ndarray], before: Optional[np.ndarray] = None,
                 after: Optional[np.ndarray] = None, middle: Optional[np.ndarray] = None,
                 types: Optional[Sequence[int]] = None) -> None:
        empty = np.zeros(0, dtype=_INT)
        prefix, suffix = around
        sources = [ids, empty if before is None else before, empty if after is None else after, prefix,
                   empty if middle is None else middle, suffix]
        starts = _offsets(np.array([len(s) for s in sources]))
        self.source = np.concatenate(sources).astype(_INT, copy=False)
        self.item_start = item_start
        self.before_at, self.after_at = int(starts[1]), int(starts[2])
        # (start, count) of each special segment in source
        self.prefix, self.middle, self.suffix = ((int(starts[k]), len(sources[k])) for k in (3, 4, 5))
        self.region_types = types
        self.segments: list[np.ndarray] = []  # (segments, 4): row, start, count, segment id
        self.parts: list[np.ndarray] = []  # (parts, 5): row, item, position, piece, count
        self.cls = np.full(len(item_start) - 1, -1, dtype=_INT)

    def add_windows(self, windows: _Windows, rows: np.ndarray) -> None:
        """``prefix + pieces[start:end] + suffix`` of each window, as rows ``rows``."""
        count = windows.end - windows.start
        content = self.item_start[windows.item] + windows.start
        self._segments(rows, [self.prefix, (content, count), self.suffix])
        self._parts(rows, windows.item, self.prefix[1] + windows.own_start - windows.start, windows.own_start,
                    windows.own_end - windows.own_start)
        if self.prefix[1]:
            leads = windows.start == 0
            self.cls[windows.item[leads]] = rows[leads]

    def add_framed(self, items: np.ndarray, rows: np.ndarray, before: tuple[np.ndarray, np.ndarray],
                   after: tuple[np.ndarray, np.ndarray], left: np.ndarray, right: np.ndarray, room: np.ndarray) -> None:
        """``prefix + context before + sentence + context after + suffix`` of sentences ``items``, as
        rows ``rows``; ``left``, ``right``, ``room`` ``(texts,)``: context pieces available on each side
        and the room the sentence leaves."""
        n_left, n_right = split_context(room[items], left[items], right[items])
        before_end, after_start = _offsets(before[1])[1:][items], _offsets(after[1])[:-1][items]
        n_pieces = np.diff(self.item_start)[items]
        self._segments(rows, [self.prefix, (self.before_at + before_end - n_left, n_left),
                              (self.item_start[items], n_pieces), (self.after_at + after_start, n_right), self.suffix])
        zero = np.zeros(len(items), dtype=_INT)
        self._parts(rows, items, self.prefix[1] + n_left, zero, n_pieces)
        if self.prefix[1]:
            self.cls[items] = rows

    def add_pairs(self, rows: np.ndarray, n_pairs: int) -> None:
        """``prefix + first + middle + second + suffix`` of each row ``rows`` ``(rows, 11)`` describes:
        its pair ``p`` (texts ``p`` and ``n_pairs + p``), the first side's window and the second side's
        (``start, end, own_start, own_end`` each), and whether it delivers each window's owned pieces."""
        number = np.arange(len(rows))
        a = rows[:, 0]
        b = a + n_pairs
        (start_a, end_a, own_start_a, own_end_a), (start_b, end_b, own_start_b, own_end_b) = rows[:, 1:5].T, rows[:, 5:9].T
        owned_a, owned_b = rows[:, 9].astype(bool), rows[:, 10].astype(bool)
        first, second = end_a - start_a, end_b - start_b
        self._segments(number, [self.prefix, (self.item_start[a] + start_a, first), self.middle,
                                (self.item_start[b] + start_b, second), self.suffix])
        offset_b = self.prefix[1] + first + self.middle[1]
        # the parts of each row in order: its first side's, then its second side's
        side_parts = [(number, a, self.prefix[1] + own_start_a - start_a, own_start_a, own_end_a - own_start_a),
                      (number, b, offset_b + own_start_b - start_b, own_start_b, own_end_b - own_start_b)]
        parts = np.stack([np.stack(side, axis=1) for side in side_parts], axis=1)[np.stack([owned_a, owned_b], axis=1)]
        self.parts.append(parts.astype(_INT, copy=False))
        if self.prefix[1]:
            both = owned_a & owned_b
            self.cls[a[both]], self.cls[b[both]] = number[both], number[both]

    def _segments(self, rows: np.ndarray, segments: list[tuple]) -> None:
        """Segment ``k`` of ``segments`` (``(start, count)``, scalars or ``(rows,)`` arrays) of each row."""
        columns = []
        for k, (start, count) in enumerate(segments):
            kind = 0 if self.region_types is None else self.region_types[k]
            columns.append(np.stack(np.broadcast_arrays(rows, start, count, kind), axis=1))
        # (rows * segments, 4): each row's segments in order
        self.segments.append(np.stack(columns, axis=1).reshape(-1, 4).astype(_INT, copy=False))

    def _parts(self, rows, items, position, piece, count) -> None:
        self.parts.append(np.stack(np.broadcast_arrays(rows, items, position, piece, count), axis=1).astype(_INT))

    def plan(self, n_rows: int) -> Plan:
        """The rows sorted by length, stably, and laid out in that order."""
        segments = np.concatenate(self.segments)
        segments = segments[np.argsort(segments[:, 0], kind="stable")]  # by planned row, in order within it
        lengths = np.bincount(segments[:, 0], weights=segments[:, 2], minlength=n_rows).astype(_INT)
        order = np.argsort(lengths, kind="stable")
        place = np.empty_like(order)
        place[order] = np.arange(n_rows)
        segments = segments[np.argsort(place[segments[:, 0]], kind="stable")]
        row_segments = _offsets(np.bincount(place[segments[:, 0]], minlength=n_rows))
        parts = np.concatenate(self.parts)
        parts[:, 0] = place[parts[:, 0]]
        parts = parts[np.argsort(parts[:, 0], kind="stable")]
        cls_row = np.where(self.cls >= 0, place[np.maximum(self.cls, 0)], -1)
        return Plan(self.item_start, self.source, np.ascontiguousarray(segments[:, 1:]), row_segments,
                    _offsets(lengths[order]), self.region_types is not None, *parts.T.copy(), cls_row)
