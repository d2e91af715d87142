"""What made an artifact, recorded when it is written and checked before it is reused.

Everything contextembed writes and may read back later (an embedding output skipped on resume, a
saved pipeline's embedded encoder, an estimator's embedded weights, a pretraining checkpoint, a
distilled table) carries a *provenance record*: a flat JSON object naming the kind of artifact, the
format version of this module, and every input that shaped it, each as a plain value or a content
hash::

    {"artifact": "embedding output", "format": 1, "contextembed": "0.1.0",
     "input": "blake2b:5f3c...", "model": "9a1e...", "layers": [-4, -3, -2, -1], ...}

A reader builds the record it *expects* from its own inputs and calls :func:`check`: any field that
differs (one the artifact lacks, or has and the reader does not expect) is a
:class:`~contextembed.errors.ProvenanceError` naming the artifact, the field, both values and the fix.
The library version is recorded for the reader's information but never compared: the format
version says whether a record can be read, the fields whether it fits.

Content hashes (:func:`file_hash`, :func:`tree_hash`) read every byte once per process; later
calls for a file with the same size, modification time and inode reuse the hash.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Optional

from . import json_io as _json
from .file_facts import recall, remember
from .files import PathLike, atomic_file
from ..errors import ProvenanceError

#: version of the record layout; a record of another version is refused, never guessed at
FORMAT_VERSION = 1
#: fields every record has; ``contextembed`` (the library version) is never compared
_HEADER = ("artifact", "format", "contextembed")
#: file beside or inside a directory artifact that holds its record
PROVENANCE_FILE = "contextembed_provenance.json"
#: the largest record read (a real one is a few KiB; one listing a model's files, tens)
MAX_RECORD_BYTES = 4 << 20
#: the deepest nesting of a record read (a real one nests at most 4 levels)
MAX_RECORD_DEPTH = 16

_HASHES: dict[tuple, str] = {}
#: files at least this large have their hash remembered across processes (a model's weights)
_REMEMBERED = 16 << 20
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HASHES_LOCK = threading.Lock()
_CHUNK = 1 << 20


def record(artifact: str, **fields) -> dict:
    """A provenance record: the artifact's kind, the format version and ``fields`` as plain JSON.

    Field values must be JSON values (tuples become lists; paths, numbers that are not finite
    and other objects are refused so that what is compared later is what was written).
    """
    from .. import __version__

    clash = set(fields) & set(_HEADER)
    if clash:
        raise ValueError(f"provenance fields {sorted(clash)} are reserved for the record's header")
    return {"artifact": artifact, "format": FORMAT_VERSION, "contextembed": __version__,
            **{name: _plain(value, name) for name, value in fields.items()}}


def _plain(value, name: str):
    """``value`` as JSON would read it back (so a written and an expected record compare equal)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"provenance field {name!r} is {value!r}; only finite numbers are recorded")
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item, name) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item, name) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a NumPy scalar
        return _plain(value.item(), name)
    raise TypeError(f"provenance field {name!r} is a {type(value).__name__} ({value!r}); record a JSON value")


def check(found: Optional[Mapping], expected: Mapping, *, artifact: str, fix: str) -> None:
    """Refuse to reuse an artifact whose record differs from the one expected now.

    Parameters
    ----------
    found : dict or None
        The record read from the artifact (``None``: it has none).
    expected : dict
        The record this reader would write now (:func:`record`).
    artifact : str
        How to name the artifact in the error (``"output out/a.npz"``).
    fix : str
        What the user can do (``"pass --overwrite to redo it"``).

    Raises
    ------
    ProvenanceError
        Naming the first field that differs, both values and ``fix``.
    """
    if found is None:
        raise ProvenanceError(
            f"{artifact} records no provenance (written by an older contextembed, or by something else), so it "
            f"cannot be checked against this run; {fix}", artifact=artifact, field=None)
    if not isinstance(found, Mapping):
        raise ProvenanceError(f"{artifact} has a damaged provenance record (a {type(found).__name__}, not an "
                              f"object); {fix}", artifact=artifact, field=None)
    if found.get("artifact") != expected["artifact"]:
        raise ProvenanceError(
            f"{artifact} is a {found.get('artifact')!r}, not a {expected['artifact']!r}; {fix}",
            artifact=artifact, field="artifact")
    if found.get("format") != expected["format"]:
        raise ProvenanceError(
            f"{artifact} was written in provenance format {found.get('format')!r} (by contextembed "
            f"{found.get('contextembed')}); this contextembed reads format {expected['format']}; {fix}",
            artifact=artifact, field="format")
    for name in differing_fields(found, expected):
        raise ProvenanceError(
            f"{artifact} was made with {name}={_shown(found.get(name, _ABSENT))}, but this run has "
            f"{name}={_shown(expected.get(name, _ABSENT))}; {fix}", artifact=artifact, field=name)


def differing_fields(found: Mapping, expected: Mapping) -> list[str]:
    """Names of the fields (other than the header) whose values differ, in a stable order."""
    names = [name for name in expected if name not in _HEADER]
    names += sorted(name for name in found if name not in _HEADER and name not in expected)
    return [name for name in names if name not in found or name not in expected or found[name] != expected[name]]


_ABSENT = "<not recorded>"


def _shown(value) -> str:
    if value is _ABSENT:
        return value
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


# -- records in files ---------------------------------------------------------------------------


def dumps(rec: Mapping) -> bytes:
    """The record as UTF-8 JSON bytes (sorted keys: the same record always gives the same bytes)."""
    return json.dumps(rec, sort_keys=True, ensure_ascii=False, allow_nan=False).encode("utf-8")


def loads(data: bytes, *, artifact: str) -> dict:
    """Parse a record written by :func:`dumps` (bounded: :mod:`contextembed._runtime.json_io`);
    ``ProvenanceError`` naming ``artifact`` if damaged, too large or nested too deep."""
    try:
        found = _json.loads(bytes(data), max_bytes=MAX_RECORD_BYTES, max_depth=MAX_RECORD_DEPTH)
    except _json.JSONError as error:
        raise ProvenanceError(f"{artifact} has a damaged provenance record ({error}); write it again",
                              artifact=artifact, field=None) from None
    if not isinstance(found, dict):
        raise ProvenanceError(f"{artifact} has a damaged provenance record (JSON {type(found).__name__}, not an "
                              "object); write it again", artifact=artifact, field=None)
    return found


def write(path: PathLike, rec: Mapping) -> None:
    """Write ``rec`` to the file ``path`` atomically (replacing an earlier record there)."""
    with atomic_file(path, what="provenance record") as temporary, open(temporary, "wb") as handle:
        handle.write(dumps(rec) + b"\n")


def read(path: PathLike, *, artifact: Optional[str] = None) -> Optional[dict]:
    """The record in the file ``path``; ``None`` if there is none (a missing file)."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not os.path.isfile(path):
        raise ProvenanceError(f"provenance record {path} is not a regular file", artifact=artifact or path, field=None)
    with open(path, "rb") as handle:
        return loads(handle.read(MAX_RECORD_BYTES + 1), artifact=artifact or path)


# -- content hashes -----------------------------------------------------------------------------


def file_hash(path: PathLike) -> str:
    """``blake2b`` (128-bit, hex) of a file's bytes; remembered per (real path, size, mtime, inode) in
    the process, and for a file of 16 MiB or more across processes (:mod:`contextembed._runtime.file_facts`)."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    key = (real, stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)
    with _HASHES_LOCK:
        known = _HASHES.get(key)
    if known is not None:
        return known
    value = recall(real, "blake2b")  # another process hashed this very file
    if not (isinstance(value, str) and _HEX32.fullmatch(value)):
        digest = hashlib.blake2b(digest_size=16)
        with open(real, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        value = digest.hexdigest()
        if stat.st_size >= _REMEMBERED:
            remember(real, "blake2b", value)
    with _HASHES_LOCK:
        _HASHES[key] = value
    return value


def tree_files(root: PathLike, *, skip=lambda relative: False) -> Iterator[tuple[str, str]]:
    """``(relative POSIX name, real path)`` of every regular file below ``root``, in sorted order.

    Links to files are followed (a Hugging Face cache snapshot is links to blobs); links to
    directories too, each real directory visited once (a link loop ends). ``skip(relative)``
    leaves out a file or directory by its relative name.
    """
    root = os.fspath(root)
    seen: set[str] = set()

    def walk(folder: str, prefix: str) -> Iterator[tuple[str, str]]:
        real = os.path.realpath(folder)
        if real in seen:
            return
        seen.add(real)
        for name in sorted(os.listdir(folder)):
            relative = prefix + name
            if skip(relative):
                continue
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                yield from walk(path, relative + "/")
            elif os.path.isfile(path):
                yield relative, os.path.realpath(path)

    yield from walk(root, "")


def tree_hash(root: PathLike, *, skip=lambda relative: False) -> str:
    """Hash of the names and contents of every file below ``root`` (see :func:`tree_files`)."""
    digest = hashlib.blake2b(digest_size=16)
    for relative, path in tree_files(root, skip=skip):
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0" + file_hash(path).encode() + b"\n")
    return digest.hexdigest()


def clear_hashes() -> None:
    """Forget the remembered file hashes (tests; a file rewritten within one mtime tick)."""
    with _HASHES_LOCK:
        _HASHES.clear()


__all__ = ["FORMAT_VERSION", "PROVENANCE_FILE", "check", "clear_hashes", "differing_fields", "dumps", "file_hash",
           "loads", "read", "record", "tree_files", "tree_hash", "write"]
