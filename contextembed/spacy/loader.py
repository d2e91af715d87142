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

from ..encoders.base import Encoder
from ..encoders.loading import load_encoder

#: file in an embedded encoder directory that records how to load it again
EMBEDDED_META = "contextembed_encoder.json"
#: its subdirectory holding the encoder's own files
EMBEDDED_SUBDIR = "model"


@dataclass
class EncoderLoader:
    """What ``contextembed.Encoder.v1`` returns: the arguments of :func:`load_encoder`, loaded once.

    Parameters
    ----------
    name : str
        A bundled model name (``"minilm-l6"``), a model directory or a static-vectors file.
    options : dict
        Keyword arguments of :func:`contextembed.load_encoder` (device, precision, window, ...).
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    _encoder: Optional[Encoder] = field(default=None, repr=False)
    _source: Optional[str] = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        return self._encoder is not None

    @property
    def encoder(self) -> Encoder:
        """The encoder, loaded on first access (from the embedded copy when one was read)."""
        if self._encoder is None:
            self._encoder = load_encoder(self._source or self.name, **self.options)
        return self._encoder

    def use_embedded(self, path: Path) -> None:
        """Load from an embedded copy written by :func:`save_encoder` instead of ``name``."""
        meta = json.loads((path / EMBEDDED_META).read_text(encoding="utf-8"))
        self._source = str(path / meta["subdir"])
        self.options = {**self.options, **meta.get("options", {})}
        self._encoder = None


def save_encoder(encoder: Encoder, path: Path) -> None:
    """Write ``encoder`` under ``path`` (with :meth:`Encoder.save`) so that :meth:`use_embedded` reads it.

    Raises
    ------
    ValueError
        For an int8-quantized encoder, or a family that cannot be saved (the message names it).
    """
    try:
        encoder.save(path / EMBEDDED_SUBDIR)
    except NotImplementedError:
        raise ValueError(
            f"embed_weights=True cannot write a {encoder.family or type(encoder).__name__!r} encoder; "
            f"set embed_weights=false so that the pipeline refers to {encoder.spec!r} by name instead"
        ) from None
    meta = {"subdir": EMBEDDED_SUBDIR, "options": {}, "original": encoder.spec, "family": encoder.family}
    (path / EMBEDDED_META).write_text(json.dumps(meta, indent=2), encoding="utf-8")
