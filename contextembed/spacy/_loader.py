"""Lazy encoder loading for the spaCy component, and optional embedding of the weights on disk.

A pipeline refers to its encoder by the name or path :func:`contextembed.load_encoder` takes, so
that ``nlp.to_disk`` writes a few kilobytes and ``spacy.load`` reloads the same installed model.
With ``embed_weights=True`` the encoder's files are written into the component's directory
instead, and ``spacy.load`` reads them from there. Neither path ever downloads anything.

An embedded copy is a directory holding ``contextembed_encoder.json`` (the meta: ``subdir``,
always ``"model"``, the original spec, the family, and the fingerprint of ``model/``) and
``model/`` (what :meth:`Encoder.save` wrote). It is accepted only if nothing in it is a link or
anything but a regular file or directory, the meta's ``subdir`` is exactly ``"model"`` (never a
path that leads elsewhere) (:func:`embedded_meta`), and ``model/`` has the recorded fingerprint
(:func:`read_embedded`). Checking writes nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .._runtime import json_io as _json
from .._runtime.devices import fitted_precision
from .._runtime.files import atomic_file
from ..encoders._base import Encoder
from ..encoders._identity import ModelIdentity, fingerprint, identify, locate
from ..encoders._loading import load_encoder
from ..errors import ModelFormatError
from .._runtime.provenance import tree_hash

#: file in an embedded encoder directory that records how to load it again
EMBEDDED_META = "contextembed_encoder.json"
#: its subdirectory holding the encoder's own files
EMBEDDED_SUBDIR = "model"
_RESAVE = "save the pipeline again from the pipeline or model it came from"
#: the largest meta file read (a real one is a few hundred bytes)
_MAX_META_BYTES = 1 << 20


@dataclass(frozen=True)
class EmbeddedCopy:
    """An embedded encoder directory that passed :func:`embedded_meta` and :func:`read_embedded`.

    Attributes
    ----------
    folder : Path
        The model's files (``<encoder dir>/model``).
    original : str
        The spec the encoder was loaded from when the copy was written.
    fingerprint : str
        :func:`~contextembed.encoders._identity.fingerprint` of ``folder``, as recorded.
    """

    folder: Path
    original: str
    fingerprint: str


@dataclass
class EncoderLoader:
    """What ``contextembed.Encoder.v1`` returns: the arguments of :func:`load_encoder`, loaded once.

    The first load records the model's identity (:func:`~contextembed.encoders._identity.identify`:
    its resolved location and a fingerprint of its files), which the component saves with the
    pipeline; a pipeline read back with ``from_disk`` only loads that same model
    (:func:`~contextembed.encoders._identity.locate`), and raises
    :class:`~contextembed.errors.ModelMismatchError` for another one at the same path.

    Parameters
    ----------
    name : str
        A bundled model name (``"minilm-l6"``), a model directory or a static-vectors file.
    options : dict
        Keyword arguments of :func:`load_encoder` (device, precision, window, ...).
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    identity: Optional[ModelIdentity] = None
    _encoder: Optional[Encoder] = field(default=None, repr=False)
    _source: Optional[str] = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    @property
    def embedded_source(self) -> Optional[str]:
        """The embedded copy this loader reads (:meth:`use_embedded`), or ``None``."""
        return self._source

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first access (from the embedded copy when one was read)."""
        if self._encoder is None:
            options = dict(self.options)
            if "precision" in options:  # a saved pipeline's: what it ran when it was trained, where that can run
                options["precision"] = fitted_precision(options["precision"], options.get("device", "auto"),
                                                        f"the encoder {self.name!r} of this pipeline")
            self._encoder = load_encoder(self._resolve(), **options)
        return self._encoder

    def identify(self) -> ModelIdentity:
        """The identity of the model this loader loads (recorded on first use)."""
        if self.identity is None:
            self.identity = identify(self._source or self.name)
        return self.identity

    def expect(self, identity: ModelIdentity) -> None:
        """Load only a model with this identity (read back from a saved pipeline)."""
        self.identity = identity
        self._encoder = None
        self._source = None

    def _resolve(self) -> str:
        """Where to load from: the recorded model's files if known, else the configured name."""
        if self.identity is None:
            self.identify()
            return self._source or self.name
        return locate(self.identity)

    def __getstate__(self) -> dict:
        """Pickle without the loaded encoder (the torch modules of some models cannot be pickled, and
        a copy would be as large as the model); a loaded one's identity is recorded first, so that
        the unpickled loader loads this same model on first use, and nothing else."""
        if self._encoder is not None:
            self.identify()
        return {**self.__dict__, "_encoder": None}

    def use_embedded(self, copy: EmbeddedCopy) -> None:
        """Load from an embedded copy checked by :func:`read_embedded` instead of ``name``."""
        self._source = str(copy.folder)
        self._encoder = None
        self.identity = ModelIdentity(copy.original, "path", self._source, copy.fingerprint)


def save_encoder(encoder: Encoder, path: Path) -> None:
    """Write ``encoder`` into the new directory ``path`` so that :func:`read_embedded` accepts it.

    Raises
    ------
    ValueError
        For an int8 ELMo encoder, or a family that cannot be saved (the message names it).
    """
    try:
        encoder.save(path / EMBEDDED_SUBDIR)
    except NotImplementedError:
        raise ValueError(
            f"embed_weights=True cannot write a {encoder.family or type(encoder).__name__!r} encoder; "
            f"set embed_weights=false so that the pipeline refers to {encoder.spec!r} by name instead"
        ) from None
    meta = {"subdir": EMBEDDED_SUBDIR, "original": encoder.spec, "family": encoder.family,
            "fingerprint": fingerprint(str(path / EMBEDDED_SUBDIR))}
    with atomic_file(path / EMBEDDED_META) as temporary:
        Path(temporary).write_text(json.dumps(meta, indent=2), encoding="utf-8")


def embedded_fingerprint(path: Path) -> str:
    """Hash of the names and contents of every file under an embedded encoder directory
    (:func:`~contextembed._runtime.provenance.tree_hash`; check it with :func:`check_no_links` first)."""
    return tree_hash(path)


def check_no_links(path: Path) -> None:
    """Refuse a link, or anything but regular files and directories, at or below ``path``.

    Raises
    ------
    ModelFormatError
        Naming the entry: a link in a saved pipeline can point anywhere on disk.
    """
    if path.is_symlink() or not path.is_dir():
        _refuse_entry(path)
    for root, directories, files in os.walk(path):
        for name in directories + files:
            entry = Path(root, name)
            if entry.is_symlink() or not (entry.is_dir() or entry.is_file()):
                _refuse_entry(entry)


def _refuse_entry(entry: Path) -> None:
    what = "a link" if entry.is_symlink() else "not a regular file or directory"
    raise ModelFormatError(
        f"this entry of an embedded encoder is {what}; an embedded encoder holds only its own regular "
        f"files (a link could point anywhere on disk): {_RESAVE}", path=entry)


def embedded_meta(path: Path) -> dict:
    """Check the embedded encoder directory ``path``'s layout and return its meta (see the module
    docstring); reads no file but the meta and hashes nothing.

    Raises
    ------
    ModelFormatError
        A link or special file in it, or a missing or damaged meta file (``subdir`` other than
        ``"model"``), naming the entry.
    """
    check_no_links(path)
    return _read_meta(path / EMBEDDED_META)


def read_embedded(path: Path, meta: dict) -> EmbeddedCopy:
    """The embedded copy at ``path`` (its ``meta`` from :func:`embedded_meta`), once its files match
    the meta's fingerprint.

    Raises
    ------
    ModelFormatError
        ``model/`` is missing, or its files differ from the fingerprint recorded when it was saved.
    """
    folder = path / EMBEDDED_SUBDIR
    if not folder.is_dir():
        raise ModelFormatError(f"the embedded encoder's files are missing (no directory {EMBEDDED_SUBDIR!r}); "
                               f"{_RESAVE}", path=path)
    found = fingerprint(str(folder))
    if found != meta["fingerprint"]:
        raise ModelFormatError(
            f"the files do not match the fingerprint recorded in {EMBEDDED_META} when they were saved "
            f"({found[:12]} found, {meta['fingerprint'][:12]} recorded): edited, truncated or swapped; {_RESAVE}",
            path=folder)
    return EmbeddedCopy(folder, meta["original"], meta["fingerprint"])


def _read_meta(path: Path) -> dict:
    """The meta file's fields, each checked (a forged ``subdir`` would load any directory)."""
    if not path.is_file():
        raise ModelFormatError(f"missing: the embedded encoder is incomplete; {_RESAVE}", path=path)
    try:
        meta = _json.read(path, max_bytes=_MAX_META_BYTES)
    except ValueError as error:
        raise ModelFormatError(f"{error}; {_RESAVE}", path=path) from None
    if not isinstance(meta, dict):
        raise ModelFormatError(f"holds a JSON {type(meta).__name__}, expected an object; {_RESAVE}", path=path)
    if meta.get("subdir") != EMBEDDED_SUBDIR:
        raise ModelFormatError(
            f"field 'subdir' is {meta.get('subdir')!r}, expected {EMBEDDED_SUBDIR!r} (the embedded encoder's "
            f"files are always in its own {EMBEDDED_SUBDIR!r} folder; another value could load any directory "
            f"on disk); {_RESAVE}", path=path)
    for name in ("fingerprint", "original"):
        if not isinstance(meta.get(name), str):
            raise ModelFormatError(
                f"field {name!r} is {meta.get(name, '<missing>')!r}, expected a string (written by an older "
                f"contextembed, or edited); {_RESAVE}", path=path)
    if meta.get("options", {}) != {}:
        raise ModelFormatError(f"field 'options' is {meta['options']!r}; contextembed writes none and reads "
                               f"none from here (pass them in the pipeline's config); {_RESAVE}", path=path)
    return meta
