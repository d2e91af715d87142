"""Embedded encoder weights (``embed_weights=True``): packed into an estimator's state, unpacked safely.

A packed encoder is plain data, stored alike by pickle, joblib and ``skops.io``::

    {"files": {"config.json": b"...", "subwords/ngrams.json": b"..."},  # relative POSIX name -> bytes
     "fingerprint": "9a1e...",   # identity fingerprint of those files (encoders.identity.fingerprint)
     "provenance": b'{"artifact": "embedded encoder", "family": "transformer", "model": "5f3c...", ...}'}

The provenance record (:mod:`contextembed._runtime.provenance`) says what the files are: the fingerprint of
the model the estimator was fitted with (``model``), the encoder family and the files' fingerprint.

Loading an estimator may mean loading an untrusted file (``skops.io.load`` is documented as safe
for those), so :func:`unpack_encoder` writes nothing before the structure is valid, and makes
nothing visible before the content is checked:

1. :func:`check_packed` validates the whole dict first: a dict of ``str -> bytes``, every name
   relative, of non-empty segments (no ``.`` or ``..``), with no backslash, drive, NUL or other
   control character, of bounded length, depth and count; no two names that one file system could
   take for the same file (case, Unicode normalisation), no name that is both a file and a folder.
2. The files are written into a fresh temporary directory inside this process's private folder
   (:func:`embedded_root`).
3. There, their fingerprint must equal the recorded one, and the provenance record the one expected
   for this estimator (the model it was fitted with; the family the files are).
4. Only then is the directory renamed to its content address (:func:`~contextembed._runtime.provenance.tree_hash`),
   atomically; a folder already there with the same content (an earlier or concurrent unpacking)
   is reused.

On any error the temporary directory is removed: nothing outside it was written.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shutil
import tempfile
import threading
import unicodedata
from typing import Optional

from .._runtime import provenance
from ..encoders._base import Encoder
from ..encoders._identity import ModelIdentity, fingerprint
from ..errors import ModelFormatError
from ..encoders._registry import EncoderRef

#: the provenance record's kind of artifact
ARTIFACT = "embedded encoder"
#: bounds on what a packed encoder may hold (far above any encoder's saved files)
MAX_FILES = 10_000
MAX_NAME_CHARS = 1024
MAX_SEGMENT_BYTES = 255
MAX_DEPTH = 32
MAX_RECORD_BYTES = 1 << 16
#: keys of a packed encoder; ``kind: "static"`` marks the earliest layout (a bare ``vectors.bin``)
_KEYS = {"files", "fingerprint", "provenance", "kind"}
_FINGERPRINT = re.compile(r"[0-9a-f]{32}")
_WHAT = "the embedded encoder (embed_weights=True) of this estimator"
_FIX = "the file was damaged or altered after it was saved; save the estimator again from its source"


# -- packing ------------------------------------------------------------------------------------


def pack_encoder(encoder: Encoder, ref: EncoderRef) -> dict:
    """An encoder's saved files (:meth:`Encoder.save`) as ``{"files", "fingerprint", "provenance"}``."""
    with tempfile.TemporaryDirectory() as parent:
        folder = os.path.join(parent, "encoder")
        try:
            encoder.save(folder)
        except NotImplementedError:
            raise ValueError(
                f"embed_weights=True is not supported for {encoder.family!r} encoders; save with "
                "embed_weights=False and install the model where you load it"
            ) from None
        files = {}
        for relative, path in provenance.tree_files(folder):
            with open(path, "rb") as handle:
                files[relative] = handle.read()
        found = fingerprint(folder)
        rec = _record(found, ref, encoder.family)
    packed = {"files": files, "fingerprint": found, "provenance": provenance.dumps(rec)}
    check_packed(packed)  # what could not be loaded back fails now, not when loading
    return packed


def _record(files_fingerprint: str, ref: EncoderRef, family: Optional[str]) -> dict:
    model = None if ref.identity is None else ref.identity.fingerprint
    return provenance.record(ARTIFACT, fingerprint=files_fingerprint, model=model, family=family)


# -- checking the structure -----------------------------------------------------------------------


def check_packed(packed) -> None:
    """Validate a packed encoder completely, before anything is written.

    Raises
    ------
    ModelFormatError
        Naming the key, file name or value that is wrong (a damaged or hostile file).
    """
    if not isinstance(packed, dict):
        _refuse(f"is a {type(packed).__name__}, not a dict")
    unknown = sorted(map(repr, set(packed) - _KEYS))
    if unknown:
        _refuse(f"holds unknown keys {', '.join(unknown)}; expected {sorted(_KEYS)}")
    files = packed.get("files")
    if not isinstance(files, dict) or not files:
        _refuse(f"'files' is {_shown(files)}; expected a non-empty dict of file name -> bytes")
    if len(files) > MAX_FILES:
        _refuse(f"holds {len(files)} files; at most {MAX_FILES} are accepted")
    for name, data in files.items():
        check_name(name)
        if not isinstance(data, bytes):
            _refuse(f"file {_shown(name)} holds a {type(data).__name__}, not bytes")
    _check_collisions(files)
    _check_fields(packed)


def check_name(name) -> None:
    """One embedded file name: relative POSIX, non-empty segments, nothing a path could escape by."""
    if not isinstance(name, str):
        _refuse(f"has a file name of type {type(name).__name__} ({_shown(name)}); names are str")
    if not name or len(name) > MAX_NAME_CHARS:
        _refuse(f"has a file name of {len(name)} characters ({_shown(name)}); expected 1 to {MAX_NAME_CHARS}")
    bad = next((c for c in name if c in "\\:" or unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        _refuse(f"has the file name {_shown(name)}, which holds {bad!r}; names hold no backslash, drive, "
                "control character or lone surrogate")
    if name.startswith("/"):
        _refuse(f"has the absolute file name {_shown(name)}; names are relative to the encoder's folder")
    segments = name.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            _refuse(f"has the file name {_shown(name)}, with a segment {segment!r}; names are plain relative "
                    "paths (no empty, '.' or '..' segment)")
        if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            _refuse(f"has the file name {_shown(name)}, with a segment over {MAX_SEGMENT_BYTES} bytes")
    if len(segments) > MAX_DEPTH:
        _refuse(f"has the file name {_shown(name)}, {len(segments)} folders deep; at most {MAX_DEPTH}")


def _check_collisions(files: dict) -> None:
    """No two names one file system could take for the same file; no name both a file and a folder."""
    seen: dict[str, str] = {}
    folders: dict[str, str] = {}
    for name in files:
        key = unicodedata.normalize("NFC", name).casefold()
        if key in seen:
            _refuse(f"has the file names {_shown(seen[key])} and {_shown(name)}, which name the same file on "
                    "case-insensitive or Unicode-normalising file systems")
        seen[key] = name
        parts = key.split("/")
        for depth in range(1, len(parts)):
            folders.setdefault("/".join(parts[:depth]), name)
    clash = next((key for key in seen if key in folders), None)
    if clash is not None:
        _refuse(f"has {_shown(seen[clash])} both as a file and as the folder of {_shown(folders[clash])}")


def _check_fields(packed: dict) -> None:
    if packed.get("kind", "static") != "static":
        _refuse(f"has kind={_shown(packed['kind'])}; the only earlier layout is kind='static'")
    if "kind" in packed and (set(packed["files"]) != {"vectors.bin"} or len(packed) != 2):
        _refuse("has kind='static' (the earliest layout), which holds the single file 'vectors.bin' and nothing else")
    found = packed.get("fingerprint")
    if found is not None and not (isinstance(found, str) and _FINGERPRINT.fullmatch(found)):
        _refuse(f"records the fingerprint {_shown(found)}; expected 32 hexadecimal digits")
    record = packed.get("provenance")
    if record is not None and not (isinstance(record, bytes) and len(record) <= MAX_RECORD_BYTES):
        _refuse(f"has a provenance record of type {type(record).__name__}; expected at most {MAX_RECORD_BYTES} bytes")
    if record is not None and found is None:
        _refuse("has a provenance record but no fingerprint")


def _refuse(what: str):
    raise ModelFormatError(f"{_WHAT} {what}; {_FIX}")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- unpacking ----------------------------------------------------------------------------------


_EMBEDDED_ROOT: list[str] = []
_ROOT_LOCK = threading.Lock()


def embedded_root() -> str:
    """This process's folder for unpacked embedded encoders, removed when the process exits.

    One folder per process (never shared, so no process can delete files another one loads);
    within it, each encoder's files go to a content-addressed subfolder, reused by every estimator
    that embeds the same files.
    """
    with _ROOT_LOCK:
        if not _EMBEDDED_ROOT:
            root = tempfile.mkdtemp(prefix="contextembed-embedded-")
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _EMBEDDED_ROOT.append(root)
        return _EMBEDDED_ROOT[0]


def unpack_encoder(packed, ref: EncoderRef) -> EncoderRef:
    """Check, write and verify embedded files (see the module docstring); a reference to them.

    Parameters
    ----------
    packed : dict
        What :func:`pack_encoder` returned, as read back from a pickle, joblib or skops file.
    ref : EncoderRef
        The estimator's reference to the model it was fitted with (device, precision and identity).

    Raises
    ------
    ModelFormatError
        The structure is invalid, or the files do not match their recorded fingerprint.
    ProvenanceError
        The files are not the ones this estimator was fitted with (another model or family).
    """
    check_packed(packed)
    root = embedded_root()
    temporary = tempfile.mkdtemp(prefix=".unpacking-", dir=root)
    try:
        _write_files(temporary, packed["files"])
        _verify(temporary, packed, ref)
        folder = _publish(temporary, root)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)  # gone already when renamed
    if packed.get("kind") == "static":  # pickled before Encoder.save existed: a bare vectors.bin
        return dataclasses.replace(ref, spec=os.path.join(folder, "vectors.bin"), identity=None)
    identity = None
    if packed.get("fingerprint") is not None:
        identity = ModelIdentity(ref.spec, "path", folder, packed["fingerprint"])
    return dataclasses.replace(ref, spec=folder, identity=identity)


def _write_files(folder: str, files: dict) -> None:
    """Create every file new inside ``folder`` (names already checked; the join is checked again)."""
    inside = os.path.realpath(folder) + os.sep
    for name, data in files.items():
        path = os.path.join(folder, *name.split("/"))
        if not os.path.realpath(path).startswith(inside):
            _refuse(f"has the file name {_shown(name)}, which leads outside its folder")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as handle:
            handle.write(data)


def _verify(folder: str, packed: dict, ref: EncoderRef) -> None:
    """The unpacked files must be the recorded ones, and the record this estimator's."""
    recorded = packed.get("fingerprint")
    if recorded is None:  # packed before fingerprints were recorded: nothing to compare
        return
    found = fingerprint(folder)
    if found != recorded:
        _refuse(f"does not match the fingerprint recorded when it was saved ({recorded[:12]}; its files "
                f"give {found[:12]})")
    if "provenance" in packed:  # recorded since provenance records exist
        rec = provenance.loads(packed["provenance"], artifact=_WHAT)
        provenance.check(rec, _record(found, ref, _saved_family(folder)), artifact=_WHAT, fix=_FIX)


def _saved_family(folder: str) -> Optional[str]:
    """The encoder family whose :meth:`Encoder.save` layout ``folder`` has (as ``load_encoder`` tells)."""
    from ..encoders._elmo.encoder import is_elmo_directory
    from ..encoders._static.vectors import is_saved_directory

    if is_elmo_directory(folder):
        return "elmo"
    if is_saved_directory(folder):
        return "static"
    return "transformer" if os.path.isfile(os.path.join(folder, "config.json")) else None


def _publish(temporary: str, root: str) -> str:
    """Rename the checked ``temporary`` folder to its content address; reuse an identical one there."""
    address = provenance.tree_hash(temporary)
    folder = os.path.join(root, address)
    try:
        os.rename(temporary, folder)
    except OSError:
        if not (os.path.isdir(folder) and provenance.tree_hash(folder) == address):
            raise ModelFormatError(f"the copy of {_WHAT} already unpacked here does not match the fingerprint "
                                   "recorded when it was saved (its files changed after unpacking); delete that "
                                   "folder and load again", path=folder) from None
    return folder


__all__ = ["ARTIFACT", "check_name", "check_packed", "embedded_root", "pack_encoder", "unpack_encoder"]
