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


class StoredDocFeatures:
    """Features of docs seen before, kept in the feature store (:mod:`contextembed._runtime.store`, the one
    cache of the library: its memory budget, its reset), looked up by their token texts.

    The encoder is frozen, so a doc with the same tokens always gets the same features; when
    ``spacy train`` walks the same corpus every epoch, the encoder runs once per doc instead of once
    per epoch. Entries are keyed by the encoder's identity (its model's files, device, precision and
    backend): after the component loads another model (``from_disk``, ``from_bytes``), none of the
    old model's features is served. Only a pickled copy's switch goes with it, not the features.

    Parameters
    ----------
    enabled : bool
        Whether features are kept at all (the component's ``cache_mb`` above 0).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)

    def get(self, encoder_key: str, words: Sequence[tuple[str, ...]], layers: tuple[int, ...], width: int,
            subword_pooling: str, text_width: Optional[int] = None) -> list[Optional[DocFeatures]]:
        """The stored features of each doc holding ``layers`` (and with ``text_width``, its text vector),
        ``None`` for a doc the store lacks."""
        from .._runtime import store as _store

        rows_table, text_table = self._tables(encoder_key, layers, width, subword_pooling, text_width)
        keys = [_doc_key(encoder_key, w) for w in words]
        places = rows_table.find(keys)
        texts = text_table.find(keys) if text_table is not None else [None] * len(keys)
        found: list[Optional[DocFeatures]] = [None] * len(keys)
        whole = [i for i, (rows, text) in enumerate(zip(places, texts)) if rows is not None
                 and (text_table is None or text is not None)]
        if not whole:
            return found
        stored = _store.StoredRows(rows_table.spec, [places[i] for i in whole])
        vectors = None
        if text_table is not None:
            vectors = _store.StoredRows(text_table.spec, [texts[i] for i in whole]).items(0, len(whole), [0])[:, 0]
        every = list(range(len(layers)))
        for k, i in enumerate(whole):
            # (tokens, layers, width) -> (layers, tokens, width)
            data = stored.items(k, k + 1, every).transpose(1, 0, 2)
            found[i] = DocFeatures(np.ascontiguousarray(data), layers, None if vectors is None else vectors[k])
        return found

    def put(self, encoder_key: str, words: Sequence[tuple[str, ...]], features: Sequence[DocFeatures], width: int,
            subword_pooling: str, text_width: Optional[int] = None) -> None:
        """Keep the features of these docs (their text vectors too, with ``text_width``)."""
        if not features:
            return
        layers = features[0].layer_index
        rows_table, text_table = self._tables(encoder_key, layers, width, subword_pooling, text_width)
        keys = [_doc_key(encoder_key, w) for w in words]
        rows = np.concatenate([f.data.transpose(1, 0, 2) for f in features]).astype(np.float32, copy=False)
        rows_table.add(keys, rows, np.array([f.data.shape[1] for f in features], dtype=np.int64))
        if text_table is not None:
            vectors = np.stack([f.text for f in features]).astype(np.float32, copy=False)[:, None, :]
            text_table.add(keys, vectors, np.ones(len(features), dtype=np.int64))

    @staticmethod
    def _tables(encoder_key: str, layers: tuple[int, ...], width: int, subword_pooling: str, text_width: Optional[int]):
        from .._runtime import store as _store

        store = _store.session_store()
        index = ",".join(map(str, layers))
        rows = store.table(_store.TableSpec(encoder_key, "spacy_words", (subword_pooling, index), "float32",
                                            len(layers), width))
        text = None if text_width is None else store.table(
            _store.TableSpec(encoder_key, "spacy_text", (), "float32", 1, text_width))
        return rows, text


def _doc_key(encoder_key: str, words: tuple[str, ...]) -> str:
    from .._runtime.store import sentence_key

    return sentence_key(encoder_key, words)
