"""The feature store: what the estimators encode once and reuse, kept within one memory budget.

What is kept
    Rows at the unit an estimator needs, never every piece: a word's layers once its subword
    pooling is fixed (``(layers, width)`` per word), a text's or a pair side's per-layer vector.
    A *table* holds one kind of rows of one encoder (:class:`TableSpec`: the encoder's cache key,
    the kind, its pooling options, the dtype and how many leading layers each row holds); each
    item (a sentence, a text, a pair) is named by a hash of the encoder and its tokens, so a table
    serves any later call that asks for the same items, whatever else the call holds.

Segments
    A table grows by *segments*, one per encoded block: a raw ``(rows, layers, width)`` array
    (``<name>.rows``) and its index (``<name>.json``: the table it belongs to, each item's key and
    row count), written under temporary names and renamed into place, the index last. A segment is
    never changed once written; two processes that encode the same item write two segments and
    readers take the first they find, so no lock is needed for correctness. A lock per table
    (:meth:`Table.encoding`) keeps two processes from encoding the same missing items at once.

Memory
    One budget bounds the bytes of features contextembed keeps in memory at once
    (:func:`memory_budget`: ``CONTEXTEMBED_MEMORY_BUDGET`` or :func:`set_memory_budget`; default a
    quarter of the memory this process may use, at least 1 GiB): the rows the store keeps resident
    plus any feature array a call builds (:func:`reserve`, which drops resident rows to make room).
    An array larger than the budget is a :class:`~contextembed.errors.MemoryBudgetError` that says
    how many bytes it needs, before anything is allocated. Rows that are not resident are read back
    from their segment files (``pread``, through the page cache, never memory-mapped: mapped pages
    would count as this process's memory) a batch at a time.

Disk
    The process-wide store (``cache="memory"``, the estimators' default) writes every segment
    through to a *session directory* under ``CONTEXTEMBED_STORE_DIR`` (default
    ``~/.cache/contextembed/store``), created by the first process of a job and named in
    ``CONTEXTEMBED_STORE_SESSION``, which the processes it starts inherit: joblib, loky,
    multiprocessing workers read what any process of the job encoded. The process that named it
    removes it at exit; a later process removes those of processes that are gone. A session keeps at
    most half the disk space that was free when it started, dropping its oldest segments beyond
    that (readers keep their files open, so a segment in use stays readable). ``cache=<directory>``
    keeps the tables in ``<directory>/contextembed-cache`` across sessions, unbounded, as
    joblib.Memory does. ``cache=None`` keeps a call's rows to itself: resident within the budget,
    beyond it in a private temporary directory removed when the rows are no longer used.

Trust
    Only files this user (or root) could have written are read: a directory, index or rows file
    that is a link, not a regular file, owned by another user or writable by group or others is
    never trusted (one :class:`StoreWarning` naming it). An index is validated before use (size,
    shape, types, its table's fields, the rows file's exact size); a damaged one is skipped with a
    warning and its items are encoded again.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Optional, Union

import numpy as np

from . import json_io as _json
from .files import (UntrustedPathError, make_trusted_directory, open_lock, read_trusted, remove_stale_partials,
                     stat_reason, this_host, untrusted_reason)
from ..errors import MemoryBudgetError, SettingError
from ..settings import MAX_BYTES, byte_size, cache_directory, parse_byte_size, raw

logger = logging.getLogger(__name__)

#: the variable that names the memory budget (a byte size, :mod:`contextembed.settings`)
BUDGET_ENV = "CONTEXTEMBED_MEMORY_BUDGET"
#: the variable that names where session directories are made
STORE_DIR_ENV = "CONTEXTEMBED_STORE_DIR"
#: the variable a job's first process sets to its session directory; its children inherit it
SESSION_ENV = "CONTEXTEMBED_STORE_SESSION"
#: the smallest budget (a budget that cannot hold one batch of rows is a typo)
MIN_BUDGET = 16 << 20
#: the default budget's floor
DEFAULT_MIN_BUDGET = 1 << 30
#: the format of a segment's index, checked on every read
FORMAT, VERSION = "contextembed-feature-store", 1
#: the largest index file read (a block of 4,096 items' keys is about 200 KB)
MAX_INDEX_BYTES = 64 << 20
#: the subdirectory of a ``cache=`` directory that holds its tables
PERSISTENT_DIR = "contextembed-cache"

_KEY = re.compile(r"[0-9a-f]{40}\Z")
_SESSION_NAME = re.compile(r"session-(?P<host>[A-Za-z0-9-]{1,64})@(?P<pid>[0-9]+)-[0-9a-f]{8}\Z")


class StoreWarning(UserWarning):
    """A file or directory of the feature store was not trusted (and is not used)."""


# -- the budget ----------------------------------------------------------------------------------

_budget: Optional[int] = None


def memory_budget() -> int:
    """The bytes of features contextembed may keep in memory at once (read from
    ``CONTEXTEMBED_MEMORY_BUDGET`` the first time; see :func:`set_memory_budget`)."""
    global _budget
    if _budget is None:
        if raw("CONTEXTEMBED_CACHE_BYTES") is not None:
            _warn("CONTEXTEMBED_CACHE_BYTES is no longer read: the feature store and every feature array contextembed "
                  f"builds are bounded by one memory budget, {BUDGET_ENV}", FutureWarning)
        value = byte_size(BUDGET_ENV, -1)
        _budget = default_budget() if value == -1 else _in_range(BUDGET_ENV, value)
    return _budget


def set_memory_budget(value: Union[int, str, None]) -> None:
    """Set the memory budget of the feature store and of the feature arrays calls build.

    Parameters
    ----------
    value : int, str or None
        Bytes (at least 16 MiB, at most 1 PiB), a byte size such as ``"3GB"`` or ``"2GiB"`` (the
        spellings of :mod:`contextembed.settings`), or ``None``: ``CONTEXTEMBED_MEMORY_BUDGET``
        again, else the default (a quarter of the memory this process may use, at least 1 GiB).

    Raises
    ------
    TypeError, ValueError
        For anything else (a fraction, NaN, a bool, a negative or too small number), naming it.
    """
    global _budget
    if value is None:
        _budget = None
    elif isinstance(value, str):
        _budget = _in_range("budget", parse_byte_size("budget", value))
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"budget={value!r} ({type(value).__name__}): expected a whole number of bytes or a byte "
                        "size such as '3GB'")
    else:
        _budget = _in_range("budget", int(value))
    _make_room(0)


def _in_range(name: str, value: int) -> int:
    if not MIN_BUDGET <= value <= MAX_BYTES:
        raise (SettingError if name == BUDGET_ENV else ValueError)(f"{name}={value:,} bytes: expected a memory budget from {MIN_BUDGET:,} (16 MiB) to "
                         f"{MAX_BYTES:,} bytes, e.g. '3GB'")
    return value


def default_budget() -> int:
    """A quarter of the memory this process may use (its cgroup's limit, else the machine's), at
    least 1 GiB."""
    return max(DEFAULT_MIN_BUDGET, _process_memory() // 4)


def _process_memory() -> int:
    limits = []
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    return min(limits) if limits else 8 << 30


def reserve(nbytes: int, what: str, fix: str = "") -> None:
    """Make room for a feature array of ``nbytes`` that a call is about to build.

    Resident rows are dropped from memory (they stay on disk) until they and the array fit the
    budget together.

    Raises
    ------
    MemoryBudgetError
        ``nbytes`` alone exceeds the budget: naming ``what``, the bytes it needs, the budget and
        ``fix`` (what to do instead), before anything is allocated.
    """
    budget = memory_budget()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{what} needs {_size(nbytes)} ({nbytes:,} bytes) of memory, over the memory budget of {_size(budget)} "
            f"({BUDGET_ENV} or contextembed.set_memory_budget); raise the budget"
            + (f", or {fix}" if fix else ""), needed=nbytes, budget=budget)
    _make_room(nbytes)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def encoder_key(model: str, device_type: str, precision: str, backend: str) -> str:
    """A hash naming what an encoder computes: its model's files (a fingerprint, not a path: the same
    model anywhere shares its rows), the device type, precision and backend it runs (their rows are
    never mixed with another's)."""
    return hashlib.blake2b("\x1f".join([model, device_type, precision, backend]).encode(), digest_size=16).hexdigest()


def sentence_key(encoder_key: str, tokens: Sequence[str]) -> str:
    """Hash of the encoder identity and the exact token list (lengths included, so no collisions by
    joining)."""
    digest = hashlib.blake2b(encoder_key.encode(), digest_size=20)
    _hash_tokens(digest, tokens)
    return digest.hexdigest()


def _hash_tokens(digest, tokens: Sequence[str]) -> None:
    for token in tokens:
        data = token.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(4, "little"))
        digest.update(data)


# -- resident rows -------------------------------------------------------------------------------

#: resident segments, least recently used first, with their bytes
_RESIDENT: "OrderedDict[_Segment, int]" = OrderedDict()
_RESIDENT_LOCK = threading.RLock()
_resident_bytes = 0


def resident_bytes() -> int:
    """Bytes of rows the stores keep in memory now."""
    return _resident_bytes


def _keep_resident(segment: "_Segment") -> bool:
    """Count ``segment``'s rows as resident, dropping older ones beyond the budget; ``False`` when
    they alone exceed it."""
    global _resident_bytes
    with _RESIDENT_LOCK:
        if segment in _RESIDENT:
            _RESIDENT.move_to_end(segment)
            return True
        size = segment.data.nbytes
        if size > memory_budget():
            return False
        _make_room(size)
        _RESIDENT[segment] = size
        _resident_bytes += size
        return True


def _touch(segment: "_Segment") -> None:
    with _RESIDENT_LOCK:
        if segment in _RESIDENT:
            _RESIDENT.move_to_end(segment)


def _make_room(nbytes: int) -> None:
    """Drop least recently used resident rows until they and ``nbytes`` more fit the budget."""
    global _resident_bytes
    with _RESIDENT_LOCK:
        budget = memory_budget()
        while _RESIDENT and _resident_bytes + nbytes > budget:
            segment, size = _RESIDENT.popitem(last=False)
            _resident_bytes -= size
            segment.release()


def _forget_resident(segment: "_Segment") -> None:
    global _resident_bytes
    with _RESIDENT_LOCK:
        size = _RESIDENT.pop(segment, None)
        if size is not None:
            _resident_bytes -= size


# -- tables and segments -------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """What a table's rows are.

    Attributes
    ----------
    encoder : str
        The encoder's cache key (model content, device type, precision, backend).
    kind : str
        What a row is: a word (``"sentence"``, ``"in_context"``, the spaCy component's
        ``"spacy_words"``), a text (``"piece_mean"``, ``"text_layers"``, ``"input_mean"``,
        ``"spacy_text"``) or a pair side (``"pair_layers"``).
    options : tuple of str
        The kind's pooling options (a subword pooling; subword and text pooling; ...).
    dtype : {"float32", "float16"}
    layers : int
        Leading encoder layers each row holds (0 .. layers - 1).
    width : int
        Width of one layer's vector in a row.
    """

    encoder: str
    kind: str
    options: tuple
    dtype: str
    layers: int
    width: int

    @property
    def key(self) -> str:
        """The table's directory name: a hash of every field."""
        text = "\x1f".join([self.encoder, self.kind, *self.options, self.dtype, str(self.layers), str(self.width)])
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()

    @property
    def row_bytes(self) -> int:
        return self.layers * self.width * np.dtype(self.dtype).itemsize

    def record(self) -> dict:
        return {**asdict(self), "options": list(self.options)}


_NAMES = itertools.count()


class _Segment:
    """One encoded block of a table: its items' keys and row counts, its rows resident
    (``data``) and/or in a file (``path``)."""

    __slots__ = ("name", "table", "spec", "keys", "counts", "starts", "n_rows", "data", "path", "_fd", "_lock",
                 "__weakref__")

    def __init__(self, name: str, table: "Table", keys: Sequence[str], counts: np.ndarray,
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


class Table:
    """The segments of one :class:`TableSpec` in one store, and an index of their items."""

    def __init__(self, store: "FeatureStore", spec: TableSpec) -> None:
        self.store, self.spec = store, spec
        self.directory = None if store.root is None else os.path.join(store.root, spec.key)
        self._index: dict[str, tuple[_Segment, int]] = {}
        self._segments: "OrderedDict[str, _Segment]" = OrderedDict()
        self._skipped: set[str] = set()
        self._swept = False
        self._lock = threading.RLock()

    # -- reading ----------------------------------------------------------------------------------

    def find(self, keys: Sequence[str]) -> list[Optional[tuple[_Segment, int]]]:
        """Where each key's rows are (``(segment, item position)``), ``None`` where no segment holds
        them; segments written by other processes since the last call are read first."""
        with self._lock:
            self.refresh()
            found = [self._index.get(key) for key in keys]
            for place in found:  # keep the files of what a caller will read open
                if place is not None and place[0].data is None and not place[0].open():
                    self._drop(place[0])
                    return self.find(keys)
            return found

    def refresh(self) -> None:
        """Add the complete segments in the table's directory that this process has not read."""
        if self.directory is None or not self.store.shared:
            return
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        if not self._swept:  # temporaries of writers killed before they could remove them
            self._swept = True
            remove_stale_partials(self.directory)
        for name in sorted(names):
            if not name.endswith(".json") or name.startswith("."):
                continue
            stem = name[: -len(".json")]
            if stem in self._segments or stem in self._skipped:
                continue
            segment = self._load(stem)
            if segment is None:
                self._skipped.add(stem)
            else:
                self._register(segment)

    def _load(self, stem: str) -> Optional[_Segment]:
        index_path = os.path.join(self.directory, stem + ".json")
        rows_path = os.path.join(self.directory, stem + ".rows")
        try:
            record = _read_index(index_path)
            keys, counts = _check_index(record, self.spec, index_path)
            problem = untrusted(rows_path, directory=False)
            if problem:
                raise _Untrusted(f"{rows_path} {problem}")
            size = os.lstat(rows_path).st_size
        except FileNotFoundError:
            return None  # removed meanwhile (a full session dropping its oldest)
        except _Untrusted as error:
            _warn(f"the feature store does not trust {error}; its rows are encoded again")
            return None
        except _Damaged as error:
            _warn(f"the feature store skips a damaged segment: {error}; its rows are encoded again")
            return None
        if size != int(counts.sum()) * self.spec.row_bytes:
            _warn(f"the feature store skips a damaged segment: {rows_path} holds {size:,} bytes where its index "
                  f"{index_path} says {int(counts.sum()) * self.spec.row_bytes:,}; its rows are encoded again")
            return None
        return _Segment(stem, self, keys, counts, path=rows_path)

    def _register(self, segment: _Segment) -> None:
        self._segments[segment.name] = segment
        for i, key in enumerate(segment.keys):
            self._index.setdefault(key, (segment, i))

    def _drop(self, segment: _Segment) -> None:
        self._segments.pop(segment.name, None)
        self._skipped.add(segment.name)
        for i, key in enumerate(segment.keys):
            if self._index.get(key, (None, 0))[0] is segment:
                del self._index[key]
                for other in reversed(self._segments.values()):  # another segment may hold it too
                    if key in other.keys:
                        self._index[key] = (other, other.keys.index(key))
                        break
        _forget_resident(segment)

    # -- writing ----------------------------------------------------------------------------------

    @contextmanager
    def encoding(self) -> Iterator[None]:
        """Held while this process encodes items missing from the table: another thread or process
        asking for the same table waits, then finds what was encoded (:meth:`find`)."""
        with self._lock:
            if self.directory is None or not self.store.shared:
                yield
                return
            _make_private_dirs(self.directory)
            with _file_lock(os.path.join(self.directory, ".lock")):
                yield

    def add(self, keys: Sequence[str], rows: np.ndarray, counts: np.ndarray) -> None:
        """Store one block: ``rows`` ``(sum(counts), layers, width)`` in the table's dtype, the rows of
        ``keys[i]`` being ``counts[i]`` consecutive ones."""
        spec = self.spec
        if rows.shape[1:] != (spec.layers, spec.width) or rows.dtype != np.dtype(spec.dtype):
            raise ValueError(f"rows of shape {rows.shape} {rows.dtype} for a table of {(spec.layers, spec.width)} "
                             f"{spec.dtype}; this is a bug in contextembed, please report it")
        name = f"{_host()}-{os.getpid()}-{next(_NAMES)}-{secrets.token_hex(4)}"
        segment = _Segment(name, self, keys, counts, data=np.ascontiguousarray(rows))
        with self._lock:
            if self.store.shared:
                self.write(segment)
            self._register(segment)
        if not _keep_resident(segment):  # larger than the whole budget
            segment.release()

    def write(self, segment: _Segment) -> None:
        """Write ``segment``'s rows and then its index into the table's directory."""
        with self._lock:
            if segment.path is None:
                self._write(segment)

    def _write(self, segment: _Segment) -> None:
        directory = self.store.directory_for(self)
        rows_path = os.path.join(directory, segment.name + ".rows")
        _write_new(rows_path, segment.data, directory)
        record = {"format": FORMAT, "version": VERSION, "table": self.spec.record(), "keys": list(segment.keys),
                  "counts": segment.counts.tolist(), "rows": segment.n_rows}
        _write_new(os.path.join(directory, segment.name + ".json"), json.dumps(record).encode(), directory)
        segment.path = rows_path
        self.store.written(self, segment)

    def segments(self) -> list[_Segment]:
        with self._lock:
            return list(self._segments.values())

    def forget(self, segment: _Segment) -> None:
        with self._lock:
            self._drop(segment)


class FeatureStore:
    """Tables of rows of one kind of store: the process-wide session store, a persistent
    directory's, or one call's private store (:func:`store_for`)."""

    def __init__(self, root: Optional[str], *, shared: bool, disk_limit: Optional[int] = None) -> None:
        self.root, self.shared = root, shared
        self.disk_limit = disk_limit
        self._tables: dict[TableSpec, Table] = {}
        self._written: "OrderedDict[tuple[Table, _Segment], int]" = OrderedDict()
        self._disk_bytes = 0
        self._lock = threading.RLock()
        self._private: Optional[tempfile.TemporaryDirectory] = None

    def table(self, spec: TableSpec) -> Table:
        with self._lock:
            table = self._tables.get(spec)
            if table is None:
                table = self._tables[spec] = Table(self, spec)
            return table

    def directory_for(self, table: Table) -> str:
        """The table's directory, made (private) when first written."""
        if table.directory is None:  # a private store's: its temporary directory, made on first spill
            if self._private is None:
                self._private = tempfile.TemporaryDirectory(prefix="contextembed-rows-")
            table.directory = os.path.join(self._private.name, table.spec.key)
        _make_private_dirs(table.directory)
        return table.directory

    def written(self, table: Table, segment: _Segment) -> None:
        """Count a segment written; beyond the disk limit, drop the oldest ones (their readers keep them
        open)."""
        if self.disk_limit is None:
            return
        with self._lock:
            self._written[(table, segment)] = segment.n_rows * table.spec.row_bytes
            self._disk_bytes += self._written[(table, segment)]
            while self._disk_bytes > self.disk_limit and len(self._written) > 1:
                (old_table, old), size = self._written.popitem(last=False)
                self._disk_bytes -= size
                old_table.forget(old)
                old.release()
                for suffix in (".json", ".rows"):
                    _remove_quietly(os.path.join(old_table.directory, old.name + suffix))

    def clear(self) -> None:
        """Forget every table; a session's or private store's files are removed too (a persistent
        directory's stay)."""
        with self._lock:
            for table in self._tables.values():
                for segment in table.segments():
                    _forget_resident(segment)
            self._tables.clear()
            self._written.clear()
            self._disk_bytes = 0
            if self._private is not None:
                self._private.cleanup()
                self._private = None
            elif self.root is not None and self.disk_limit is not None and os.path.isdir(self.root):
                for name in os.listdir(self.root):
                    path = os.path.join(self.root, name)
                    if re.fullmatch(r"[0-9a-f]{32}", name) and os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)


# -- the stores of a process ---------------------------------------------------------------------

_SESSION: Optional[FeatureStore] = None
_PERSISTENT: dict[str, FeatureStore] = {}
_STORES_LOCK = threading.Lock()


def session_store() -> FeatureStore:
    """The process-wide store (``cache="memory"``), its segments written through to the job's session
    directory."""
    global _SESSION
    with _STORES_LOCK:
        if _SESSION is None:
            root = _session_directory()
            free = shutil.disk_usage(os.path.dirname(root)).free if root else 0
            _SESSION = FeatureStore(root, shared=root is not None, disk_limit=max(free // 2, 1 << 30))
        return _SESSION


def persistent_store(directory: Union[str, os.PathLike]) -> FeatureStore:
    """The store of a ``cache=`` directory: ``<directory>/contextembed-cache``, kept across sessions.
    A directory that cannot be trusted gives the session store, with a warning."""
    root = os.path.join(os.path.abspath(os.fspath(directory)), PERSISTENT_DIR)
    with _STORES_LOCK:
        store = _PERSISTENT.get(root)
        if store is not None:
            return store
    try:
        _make_private_dirs(root)
        problem = None
    except UntrustedPathError as error:
        problem = error.reason
    if problem:
        _warn(f"the feature store does not trust the cache directory {root}: it {problem}; features are kept in "
              "this job's session store instead (make the directory yours and not writable by others: chmod go-w)")
        return session_store()
    with _STORES_LOCK:
        return _PERSISTENT.setdefault(root, FeatureStore(root, shared=True))


def private_store() -> FeatureStore:
    """A store of one call's own (``cache=None``): nothing shared, nothing kept after its rows."""
    return FeatureStore(None, shared=False)


def clear() -> None:
    """Forget what the process-wide stores hold (the one reset of every contextembed cache)."""
    with _STORES_LOCK:
        stores = [store for store in (_SESSION, *_PERSISTENT.values()) if store is not None]
        _PERSISTENT.clear()
    for store in stores:
        store.clear()


def _name_session() -> tuple[str, bool]:
    """The job's session directory and whether this process owns it: the one
    ``CONTEXTEMBED_STORE_SESSION`` names (a parent process of the job named it), else a new one
    this process names now, in its environment, so that every process it starts from now on
    (joblib and loky workers, ``multiprocessing``, a Ray or Dask cluster on this machine) shares it.
    Nothing is made on disk here (at import): :func:`_session_directory` makes it when first used."""
    inherited = raw(SESSION_ENV)
    if inherited and os.path.isabs(inherited) and _SESSION_NAME.fullmatch(os.path.basename(inherited)):
        return inherited, False
    root = cache_directory(STORE_DIR_ENV, "store")
    session = os.path.join(root, f"session-{_host()}@{os.getpid()}-{secrets.token_hex(4)}")
    os.environ[SESSION_ENV] = session
    owner = os.getpid()
    # forked children inherit this handler: only the owner removes the directory
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(session, ignore_errors=True))
    return session, True


def _session_directory() -> Optional[str]:
    """The job's session directory, made (mode 0700) and checked; ``None`` (features stay in
    memory, with a warning) where it cannot be made or trusted."""
    session = _SESSION_PATH
    root = os.path.dirname(session)
    try:
        _make_private_dirs(root)
        problem = untrusted(root, directory=True)
        if problem is None:
            if _OWNS_SESSION:
                _remove_stale_sessions(root)
            _make_private_dirs(session)
            problem = untrusted(session, directory=True)
    except OSError as error:
        problem = f"cannot be made ({error})"
    if problem:
        _warn(f"the feature store does not trust its session directory {session}: it or its parent {problem}; "
              f"features stay in memory (set {STORE_DIR_ENV} to a directory of your own)")
        return None
    return session


def _remove_stale_sessions(root: str) -> None:
    """Remove this host's session directories whose process is gone."""
    from .files import _running_since

    for name in os.listdir(root):
        match = _SESSION_NAME.fullmatch(name)
        path = os.path.join(root, name)
        if match is None or match["host"] != _host():
            continue
        try:
            info = os.lstat(path)
            if untrusted_reason(path, directory=True) is not None:
                continue
        except OSError:
            continue
        if not _running_since(int(match["pid"]), info.st_mtime):
            shutil.rmtree(path, ignore_errors=True)


def _host() -> str:
    return this_host()


# -- files ---------------------------------------------------------------------------------------


class _Untrusted(Exception):
    pass


class _Damaged(Exception):
    pass


def untrusted(path: str, *, directory: bool) -> Optional[str]:
    """What is wrong with trusting ``path`` (``None``: nothing): :func:`contextembed._runtime.files.untrusted_reason`."""
    return untrusted_reason(path, directory=directory)


def _make_private_dirs(path: str) -> None:
    """Make ``path`` (and missing parents) readable and writable by this user alone; an existing
    directory that may not be trusted is an :class:`~contextembed._runtime.files.UntrustedPathError`."""
    make_trusted_directory(path)


def _write_new(path: str, data: Union[np.ndarray, bytes], directory: str) -> None:
    """Write ``data`` to a new file ``path`` (mode 0600) under a temporary name, renamed when complete."""
    nbytes = data.nbytes if isinstance(data, np.ndarray) else len(data)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{_host()}@{os.getpid()}-{secrets.token_hex(4)}.partial")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(temporary, flags, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(np.ascontiguousarray(data).reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) else data)
        os.rename(temporary, path)
    except BaseException as error:  # interrupted too: the temporary goes
        _remove_quietly(temporary)
        if not isinstance(error, OSError) or error.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(directory).free
        raise OSError(errno.ENOSPC, f"the feature store needs {_size(nbytes)} more on disk in {directory}, which "
                      f"has {_size(free)} free; free some space or set {STORE_DIR_ENV} to a directory on "
                      "another disk") from None


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


@contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (never through a link, never another user's:
    :func:`contextembed._runtime.files.open_lock`)."""
    with open_lock(path) as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _read_index(path: str) -> dict:
    try:
        data = read_trusted(path, max_bytes=MAX_INDEX_BYTES)
    except UntrustedPathError as error:
        raise _Untrusted(f"{path} {error.reason}") from None
    except ValueError:
        raise _Damaged(f"{path} is larger than an index can be ({MAX_INDEX_BYTES:,} bytes)") from None
    try:
        record = _json.loads(data, max_bytes=MAX_INDEX_BYTES)
    except _json.JSONError as error:
        raise _Damaged(f"{path} is not an index ({error.reason})") from None
    if not isinstance(record, dict):
        raise _Damaged(f"{path} holds a JSON {type(record).__name__}, not an index")
    return record


def _check_index(record: dict, spec: TableSpec, path: str) -> tuple[list[str], np.ndarray]:
    """The keys and row counts of a segment's index, checked against the table it sits in."""
    expected = {"format", "version", "table", "keys", "counts", "rows"}
    if set(record) != expected:
        raise _Damaged(f"{path} has the fields {sorted(record)}, expected {sorted(expected)}")
    if record["format"] != FORMAT or record["version"] != VERSION:
        raise _Damaged(f"{path} is format {record['format']!r} version {record['version']!r}; this contextembed "
                       f"reads {FORMAT!r} version {VERSION}")
    if record["table"] != spec.record():
        raise _Damaged(f"{path} belongs to another table ({record['table']!r}) than its directory's")
    keys, counts = record["keys"], record["counts"]
    if (not isinstance(keys, list) or not isinstance(counts, list) or len(keys) != len(counts)
            or not all(isinstance(key, str) and _KEY.match(key) for key in keys)
            or not all(type(count) is int and 0 <= count <= 1 << 40 for count in counts)
            or type(record["rows"]) is not int or record["rows"] != sum(counts)):
        raise _Damaged(f"{path} does not list one 40-digit key and one row count for each item, summing to 'rows'")
    return keys, np.array(counts, dtype=np.int64)


_WARNED: set[str] = set()


def _warn(message: str, category: type = StoreWarning) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, category, stacklevel=3)


# -- rows of a list of items ---------------------------------------------------------------------


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


_SESSION_PATH, _OWNS_SESSION = _name_session()

__all__ = ["BUDGET_ENV", "FeatureStore", "STORE_DIR_ENV", "SESSION_ENV", "StoreWarning", "StoredRows", "Table",
           "TableSpec", "clear", "memory_budget", "persistent_store", "private_store", "reserve", "resident_bytes",
           "session_store", "set_memory_budget", "untrusted"]
