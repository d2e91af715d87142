"""The feature store's rows as readers get them: a segment's rows, resident or read back from its
file, and :class:`StoredRows`, the rows of a list of items wherever the store keeps them.

Rows that are not resident are read from their segment's rows file with ``preadv`` a batch at a
time, one read per run of consecutive rows (through the page cache, never memory-mapped: mapped
pages would count as this process's memory). A segment's file is opened once, checked again on the
open descriptor, and kept open, so a reader keeps its rows readable after the store drops the
segment (a full session removing its oldest files). Which segments exist, and where, is the
store's business (:mod:`contextembed._runtime.store`).
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Optional

import numpy as np

from .files import stat_reason
from .store_files import TableSpec
from .store_memory import _touch


class _Segment:
    """One encoded block of a table (a :class:`contextembed._runtime.store.Table`, which writes its
    file): its items' keys and row counts, its rows resident (``data``) and/or in a file (``path``)."""

    __slots__ = ("name", "table", "spec", "keys", "counts", "starts", "n_rows", "data", "path", "_fd", "_lock",
                 "__weakref__")

    def __init__(self, name: str, table, keys: Sequence[str], counts: np.ndarray,
                 data: Optional[np.ndarray] = None, path: Optional[str] = None) -> None:
        self.name, self.table, self.spec, self.keys = name, table, table.spec, tuple(keys)
        self.counts = np.asarray(counts, dtype=np.int64)
        # (items + 1,) each item's first row
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.n_rows = int(self.starts[-1])
        self.data, self.path, self._fd = data, path, None
        self._lock = threading.Lock()

    def open(self) -> bool:
        """Open the rows file for reading (kept open: a reader keeps a dropped segment readable);
        ``False`` when it is gone."""
        with self._lock:
            if self._fd is not None or self.path is None:
                return True
            flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
            try:
                fd = os.open(self.path, flags)
            except OSError:
                return False
            if stat_reason(os.fstat(fd), directory=False) is not None:  # swapped since it was checked
                os.close(fd)
                return False
            self._fd = fd
            weakref.finalize(self, os.close, fd)
            return True

    def release(self) -> None:
        """Drop the resident rows: they stay in the file (written now where there is none yet)."""
        if self.data is None:
            return
        if self.path is None:
            self.table.write(self)
        self.open()
        self.data = None

    def rows(self, positions: np.ndarray, layers: Optional[Sequence[int]] = None) -> np.ndarray:
        """``(len(positions), len(layers), width)`` rows (every layer by default) in the table's
        dtype, in the order given."""
        data = self.data
        if data is not None:
            _touch(self)
            return data[positions] if layers is None else data[np.ix_(positions, list(layers))]
        out = self._read(positions)
        return out if layers is None else out[:, list(layers)]

    def _read(self, positions: np.ndarray) -> np.ndarray:
        if not self.open():
            raise FileNotFoundError(f"the feature store's rows file {self.path} was removed while in use")
        spec = self.spec
        out = np.empty((len(positions), spec.layers, spec.width), dtype=spec.dtype)
        buffer = out.reshape(len(positions), -1).view(np.uint8)
        order = np.argsort(positions, kind="stable")
        sorted_positions = positions[order]
        # runs of consecutive rows: one read each
        breaks = np.flatnonzero(np.diff(sorted_positions) != 1) + 1
        staging = np.empty_like(buffer) if not np.array_equal(order, np.arange(len(order))) else buffer
        for begin, end in zip(np.concatenate([[0], breaks]).tolist(), np.concatenate([breaks, [len(order)]]).tolist()):
            self._read_into(staging[begin:end], int(sorted_positions[begin]))
        if staging is not buffer:
            buffer[order] = staging
        return out

    def _read_into(self, target: np.ndarray, first_row: int) -> None:
        view = memoryview(target).cast("B")
        offset = first_row * self.spec.row_bytes
        done = 0
        while done < len(view):
            n = os.preadv(self._fd, [view[done:]], offset + done)
            if n <= 0:
                raise OSError(errno.EIO, f"the feature store's rows file {self.path} is shorter than its index says")
            done += n


class StoredRows:
    """The rows of a list of items, in item order, wherever the store keeps them.

    Parameters
    ----------
    spec : TableSpec
        What the rows are (every segment's table has these ``layers`` or more).
    places : list of (segment, item position)
        Where each item's rows are.
    """

    def __init__(self, spec: TableSpec, places: Sequence[tuple[_Segment, int]], keep: object = None) -> None:
        self.spec = spec
        self._segments: list[_Segment] = []
        number: dict[int, int] = {}
        segment_of, first, count = [], [], []
        for segment, position in places:
            k = number.setdefault(id(segment), len(self._segments))
            if k == len(self._segments):
                self._segments.append(segment)
            segment_of.append(k)
            first.append(segment.starts[position])
            count.append(segment.counts[position])
        # (items,) each item's segment, first row there and number of rows
        self._segment_of = np.array(segment_of, dtype=np.int64)
        self._first = np.array(first, dtype=np.int64)
        self.counts = np.array(count, dtype=np.int64)
        # (items + 1,) each item's first row among all
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self._keep = keep  # a private store: its files live as long as these rows

    @property
    def n_items(self) -> int:
        return len(self.counts)

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    def take(self, rows: np.ndarray, layers: Sequence[int], *, layer_major: bool = False) -> np.ndarray:
        """Rows by their index among all items' rows: ``(len(rows), len(layers), width)`` float32, or
        with ``layer_major`` ``(len(layers), len(rows), width)`` (contiguous either way)."""
        rows = np.asarray(rows, dtype=np.int64)
        shape = (len(layers), len(rows), self.spec.width) if layer_major else (len(rows), len(layers), self.spec.width)
        out = np.empty(shape, dtype=np.float32)
        if not len(rows):
            return out
        item = np.searchsorted(self.offsets, rows, side="right") - 1
        # (rows,) each row's segment and place there
        segment = self._segment_of[item]
        position = self._first[item] + rows - self.offsets[item]
        index = list(layers)
        for k in np.unique(segment).tolist():
            mine = np.flatnonzero(segment == k)
            picked = self._segments[k].rows(position[mine], index)
            if layer_major:
                out[:, mine] = picked.transpose(1, 0, 2)
            else:
                out[mine] = picked
        return out

    def items(self, begin: int, end: int, layers: Sequence[int]) -> np.ndarray:
        """The rows of items ``begin`` to ``end``, in order: ``(rows, len(layers), width)`` float32."""
        return self.take(np.arange(self.offsets[begin], self.offsets[end]), layers)
