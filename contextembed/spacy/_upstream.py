"""What a listener needs from the component it listens to (kept apart so that neither module
imports the other)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional, Protocol

from spacy.tokens import Doc

from ..encoders._base import Encoder
from ._doc_features import DocFeatures


class Upstream(Protocol):
    """The ``contextembed`` component as its listeners see it."""

    name: str

    @property
    def encoder(self) -> Encoder:
        """The frozen encoder (loaded on first access)."""

    @property
    def feature_width(self) -> int:
        """Width of one layer's token vector."""

    def stored_features(self, doc: Doc) -> Optional[DocFeatures]:
        """All layers stored on ``doc`` by the component (``store_layers=True``), or ``None``."""

    def encode_docs(self, docs: Sequence[Doc], layer_index: tuple[int, ...]) -> list[DocFeatures]:
        """Encode ``docs`` now, with the encoder layers ``layer_index``."""


__all__ = ["Upstream"]
