"""What was learned by reading a whole file, remembered with the file's identity.

Some checks read every byte of a model's weights: the content hash that names a model
(:func:`contextembed._runtime.provenance.file_hash`) and the check that its weights hold no NaN or
infinity (:func:`contextembed.encoders._hf_files.check_loading_report`). At base size that is
seconds of a fresh process's start-up, paid again by every process for the same file. Here they
are paid once per file: a *fact record* beside the tuning records (``CONTEXTEMBED_TUNING_DIR``,
default ``~/.cache/contextembed/tuning``, in ``files/``) holds what was found, under the file's
identity: its real path, device, inode, size, modification and change times (the change time moves
whenever the file's content or metadata is touched, and cannot be set back). A record whose
identity differs in any field is not used, and is replaced by the next check.

Records are trusted only where this user (or root) wrote them: a record or directory that is a
link, owned by another user, or writable by group or others is not read (the check runs again),
as :mod:`contextembed._runtime.store` refuses its files. A damaged record is ignored the same way.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading

from . import json_io as _json
from .files import make_trusted_directory, read_trusted, untrusted_reason
from ..settings import cache_directory

#: the largest record read
_MAX_BYTES = 1 << 16
_IDENTITY = ("path", "dev", "ino", "size", "mtime_ns", "ctime_ns")
_LOCK = threading.Lock()


def _identity(path: str) -> dict:
    real = os.path.realpath(path)
    info = os.stat(real)
    return {"path": real, "dev": info.st_dev, "ino": info.st_ino, "size": info.st_size,
            "mtime_ns": info.st_mtime_ns, "ctime_ns": info.st_ctime_ns}


def _record_path(identity: dict) -> str:
    name = hashlib.blake2b(identity["path"].encode("utf-8", "surrogateescape"), digest_size=16).hexdigest()
    return os.path.join(cache_directory("CONTEXTEMBED_TUNING_DIR", "tuning"), "files", name + ".json")


def recall(path: str, fact: str):
    """What was recorded as ``fact`` of the file ``path`` as it is now; ``None`` if nothing was (or
    the record is not for this very file, or cannot be trusted)."""
    try:
        identity = _identity(path)
        record_path = _record_path(identity)
        if untrusted_reason(os.path.dirname(record_path), directory=True):
            return None
        record = _json.loads(read_trusted(record_path, max_bytes=_MAX_BYTES), max_bytes=_MAX_BYTES)
    except (OSError, ValueError):  # none, untrusted, damaged, too large
        return None
    if not isinstance(record, dict) or not isinstance(record.get("facts"), dict):
        return None
    if any(record.get(field) != identity[field] for field in _IDENTITY):
        return None
    return record["facts"].get(fact)


def remember(path: str, fact: str, value) -> None:
    """Record ``fact`` (a JSON value) of the file ``path`` as it is now; nothing happens where the
    record cannot be written (a read-only cache: the check just runs again next time)."""
    try:
        identity = _identity(path)
        record_path = _record_path(identity)
        directory = os.path.dirname(record_path)
        with _LOCK:
            make_trusted_directory(directory)
            facts = _facts_of(record_path, identity)
            facts[fact] = value
            temporary = f"{record_path}.{os.getpid()}-{secrets.token_hex(4)}.partial"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({**identity, "facts": facts}, handle)
            os.replace(temporary, record_path)
    except OSError:
        return


def _facts_of(record_path: str, identity: dict) -> dict:
    """The facts of the trusted record at ``record_path`` if it is about this very file, else none."""
    try:
        record = _json.loads(read_trusted(record_path, max_bytes=_MAX_BYTES), max_bytes=_MAX_BYTES)
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or any(record.get(field) != identity[field] for field in _IDENTITY):
        return {}
    facts = record.get("facts")
    return dict(facts) if isinstance(facts, dict) else {}


def recalled_or(path: str, fact: str, compute):
    """``fact`` of the file ``path``: recalled, else ``compute()`` (then remembered)."""
    value = recall(path, fact)
    if value is None:
        value = compute()
        remember(path, fact, value)
    return value


__all__ = ["recall", "recalled_or", "remember"]
