"""The feature store's files: what a table is, the format of a segment's index, and how its files
are written, locked and trusted.

A table's :class:`TableSpec` names its directory (a hash of every field) and is repeated in each
index of its segments. An index (``<name>.json``: the table, each item's key and row count) is read
through the bounded JSON reader and checked against the table of its directory before use
(:func:`_read_index`, :func:`_check_index`); the store skips a damaged or untrusted one with one
:class:`StoreWarning` naming it (:func:`_warn`). Files are written under a
temporary name beside the target and renamed when complete (:func:`_write_new`); only files this
user (or root) could have written are read (:func:`untrusted`). When each of these happens is the
store's business (:mod:`contextembed._runtime.store`).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Optional, Union

import numpy as np

from . import json_io as _json
from .files import UntrustedPathError, make_trusted_directory, open_lock, read_trusted, this_host, untrusted_reason

#: the variable that names where session directories are made
STORE_DIR_ENV = "CONTEXTEMBED_STORE_DIR"
#: the format of a segment's index, checked on every read
FORMAT, VERSION = "contextembed-feature-store", 1
#: the largest index file read (a block of 4,096 items' keys is about 200 KB)
MAX_INDEX_BYTES = 64 << 20

_KEY = re.compile(r"[0-9a-f]{40}\Z")


class StoreWarning(UserWarning):
    """A file or directory of the feature store was not trusted (and is not used)."""


# -- tables --------------------------------------------------------------------------------------


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


# -- messages ------------------------------------------------------------------------------------

_WARNED: set[str] = set()


def _warn(message: str, category: type = StoreWarning) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, category, stacklevel=3)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def _host() -> str:
    return this_host()
