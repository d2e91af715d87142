"""Lazy encoder loading for the spaCy component, and optional embedding of the weights on disk.

A pipeline refers to its encoder by the name or path :func:`contextembed.load_encoder` takes, so
that ``nlp.to_disk`` writes a few kilobytes and ``spacy.load`` reloads the same installed model.
With ``embed_weights=True`` the encoder's files are written into the component's directory
instead, and ``spacy.load`` reads them from there. Neither path ever downloads anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .._files import atomic_file
from ..encoders.base import Encoder
from ..encoders.identity import ModelIdentity, fingerprint, identify, locate
from ..encoders.loading import load_encoder

#: file in an embedded encoder directory that records how to load it again
EMBEDDED_META = "contextembed_encoder.json"
#: its subdirectory holding the encoder's own files
EMBEDDED_SUBDIR = "model"


@dataclass
class EncoderLoader:
    """What ``contextembed.Encoder.v1`` returns: the arguments of :func:`load_encoder`, loaded once.

    The first load records the model's identity (:func:`~contextembed.encoders.identity.identify`:
    its resolved location and a fingerprint of its files), which the component saves with the
    pipeline; a pipeline read back with ``from_disk`` only loads that same model
    (:func:`~contextembed.encoders.identity.locate`), and raises
    :class:`~contextembed.errors.ModelMismatchError` for another one at the same path.

    Parameters
    ----------
    name : str
        A bundled model name (``"minilm-l6"``), a model directory or a static-vectors file.
    options : dict
        Keyword arguments of :func:`contextembed.load_encoder` (device, precision, window, ...).
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
    def encoder(self) -> Encoder:
        """The encoder, loaded on first access (from the embedded copy when one was read)."""
        if self._encoder is None:
            self._encoder = load_encoder(self._resolve(), **self.options)
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

    def _resolve(self) -> str:
        """Where to load from: the recorded model's files if known, else the configured name."""
        if self.identity is None:
            self.identify()
            return self._source or self.name
        return locate(self.identity)

    def use_embedded(self, path: Path) -> None:
        """Load from an embedded copy written by :func:`save_encoder` instead of ``name``."""
        meta = json.loads((path / EMBEDDED_META).read_text(encoding="utf-8"))
        self._source = str(path / meta["subdir"])
        self.options = {**self.options, **meta.get("options", {})}
        self._encoder = None
        self.identity = None
        if "fingerprint" in meta:
            self.identity = ModelIdentity(meta.get("original", self._source), "path", self._source, meta["fingerprint"])


def save_encoder(encoder: Encoder, path: Path) -> None:
    """Write ``encoder`` under ``path`` (with :meth:`Encoder.save`) so that :meth:`use_embedded` reads it.

    Raises
    ------
    ValueError
        For an int8 ELMo encoder, or a family that cannot be saved (the message names it).
    """
    try:
        encoder.save(path / EMBEDDED_SUBDIR, overwrite=True)
    except NotImplementedError:
        raise ValueError(
            f"embed_weights=True cannot write a {encoder.family or type(encoder).__name__!r} encoder; "
            f"set embed_weights=false so that the pipeline refers to {encoder.spec!r} by name instead"
        ) from None
    meta = {"subdir": EMBEDDED_SUBDIR, "options": {}, "original": encoder.spec, "family": encoder.family,
            "fingerprint": fingerprint(str(path / EMBEDDED_SUBDIR))}
    with atomic_file(path / EMBEDDED_META) as temporary:
        Path(temporary).write_text(json.dumps(meta, indent=2), encoding="utf-8")
