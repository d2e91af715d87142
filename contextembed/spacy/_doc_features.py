"""Per-doc layer features passed from the ``contextembed`` component to its listeners.

The component encodes each batch once and hands the result to every listener; a listener keeps
only the last two batches it received (a pipeline may cut batches differently from one component
to the next), so memory stays bounded by the batch size, not by the corpus.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
from spacy.tokens import Doc


@dataclass
class DocFeatures:
    """The encoder's layers for one doc, at token level.

    Attributes
    ----------
    data : np.ndarray
        ``(layers, tokens, width)`` float32, one row per spaCy token.
    layer_index : tuple of int
        The encoder layer (absolute index) of each entry along the first axis.
    text : np.ndarray or None
        ``(text_width,)`` float32: the doc's default text vector
        (:data:`contextembed.pooling.TEXT_DEFAULTS`, what ``doc.vector`` returns), where the batch
        was encoded for annotation; ``None`` where only the layers were needed (training).
    """

    data: np.ndarray
    layer_index: tuple[int, ...]
    text: Optional[np.ndarray] = None

    def select(self, layers: Sequence[int]) -> Optional[np.ndarray]:
        """The requested encoder layers ``(len(layers), tokens, width)``, or ``None`` if one is missing."""
        position = {layer: i for i, layer in enumerate(self.layer_index)}
        if any(layer not in position for layer in layers):
            return None
        rows = [position[layer] for layer in layers]
        if rows == list(range(len(self.layer_index))):
            return self.data
        return self.data[rows]


class FeatureCache:
    """The features of the last ``n_batches`` batches, looked up by doc identity.

    Docs are held alongside their features, so an id cannot be reused by another doc while its
    entry lives.
    """

    def __init__(self, n_batches: int = 2) -> None:
        self.n_batches = n_batches
        self._batches: OrderedDict[int, dict[int, tuple[Doc, DocFeatures]]] = OrderedDict()
        self._counter = 0

    def put(self, docs: Sequence[Doc], features: Sequence[DocFeatures]) -> None:
        """Remember one batch; the oldest batch is dropped beyond ``n_batches``."""
        self._counter += 1
        self._batches[self._counter] = {id(doc): (doc, feats) for doc, feats in zip(docs, features)}
        while len(self._batches) > self.n_batches:
            self._batches.popitem(last=False)

    def get(self, doc: Doc) -> Optional[DocFeatures]:
        """The features received for this very doc object, or ``None``."""
        for batch in reversed(self._batches.values()):
            entry = batch.get(id(doc))
            if entry is not None and entry[0] is doc:
                return entry[1]
        return None

    def clear(self) -> None:
        self._batches.clear()


class TextFeatureCache:
    """Features of docs seen before, looked up by their token texts, within a memory budget.

    The encoder is frozen, so a doc with the same tokens always gets the same features; when
    ``spacy train`` walks the same corpus every epoch, the encoder runs once per doc instead of once
    per epoch. Least recently used entries are dropped beyond ``max_mb`` megabytes.

    The entries belong to one encoder (:meth:`bind`): when the component loads another model
    (``from_disk``, ``from_bytes``), none of the old model's features is served. A pickled cache
    keeps its budget and none of its entries.
    """

    def __init__(self, max_mb: float = 0.0) -> None:
        self.max_bytes = int(max_mb * 2**20)
        self.n_bytes = 0
        self._entries: OrderedDict[tuple[str, ...], DocFeatures] = OrderedDict()
        self._encoder: Optional[object] = None

    def bind(self, encoder: object) -> None:
        """Serve only features of ``encoder`` from now on: empty the cache if its entries came
        from another one."""
        if encoder is not self._encoder:
            self.clear()
            self._encoder = encoder

    def clear(self) -> None:
        self._entries.clear()
        self.n_bytes = 0

    def __getstate__(self) -> dict:
        return {**self.__dict__, "n_bytes": 0, "_entries": OrderedDict(), "_encoder": None}

    def get(self, words: tuple[str, ...], layers: Sequence[int], *, text: bool = False) -> Optional[DocFeatures]:
        """Cached features of these tokens holding all of ``layers`` (and with ``text``, the text
        vector), or ``None``."""
        found = self._entries.get(words)
        if found is None or found.select(layers) is None or (text and found.text is None):
            return None
        self._entries.move_to_end(words)
        return found

    def put(self, words: tuple[str, ...], features: DocFeatures) -> None:
        if features.data.nbytes > self.max_bytes:
            return
        old = self._entries.pop(words, None)
        if old is not None:
            self.n_bytes -= old.data.nbytes
        self._entries[words] = features
        self.n_bytes += features.data.nbytes
        while self.n_bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.n_bytes -= dropped.data.nbytes

    def __len__(self) -> int:
        return len(self._entries)
