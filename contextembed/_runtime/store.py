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

Modules
    This module keeps the tables, the stores of a process and their session directories; the rest
    is below it, and its public names are imported here. The budget and the rows kept resident:
    :mod:`contextembed._runtime.store_memory`. A segment's rows, resident or read back, and
    :class:`StoredRows`: :mod:`contextembed._runtime.store_rows`. What a table is, the index
    format, and writing, locking and trusting files: :mod:`contextembed._runtime.store_files`.
"""

from __future__ import annotations

import atexit
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
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Optional, Union

import numpy as np

from .files import UntrustedPathError, remove_stale_partials, untrusted_reason
from .store_files import (FORMAT, STORE_DIR_ENV, VERSION, StoreWarning, TableSpec, _check_index, _Damaged, _file_lock,
                          _host, _make_private_dirs, _read_index, _remove_quietly, _Untrusted, _warn, _write_new,
                          untrusted)
from .store_memory import (BUDGET_ENV, _forget_resident, _keep_resident, memory_budget, reserve, resident_bytes,
                           set_memory_budget)
from .store_rows import StoredRows, _Segment
from ..settings import cache_directory, raw

logger = logging.getLogger(__name__)

#: the variable a job's first process sets to its session directory; its children inherit it
SESSION_ENV = "CONTEXTEMBED_STORE_SESSION"
#: the subdirectory of a ``cache=`` directory that holds its tables
PERSISTENT_DIR = "contextembed-cache"

_SESSION_NAME = re.compile(r"session-(?P<host>[A-Za-z0-9-]{1,64})@(?P<pid>[0-9]+)-[0-9a-f]{8}\Z")


# -- keys of items -------------------------------------------------------------------------------


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


# -- tables --------------------------------------------------------------------------------------


_NAMES = itertools.count()


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


_SESSION_PATH, _OWNS_SESSION = _name_session()

__all__ = ["BUDGET_ENV", "FeatureStore", "STORE_DIR_ENV", "SESSION_ENV", "StoreWarning", "StoredRows", "Table",
           "TableSpec", "clear", "memory_budget", "persistent_store", "private_store", "reserve", "resident_bytes",
           "session_store", "set_memory_budget", "untrusted"]
