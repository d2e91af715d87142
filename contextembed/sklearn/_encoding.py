"""Encode once, pool many times: a process-wide encoder registry, and encoding into the feature store.

Every estimator in :mod:`contextembed.sklearn` asks this module for the rows it needs with the
leading layers its features use (:data:`KINDS`): word-level estimators for each word's layers once
its subword pooling is fixed, text and pair estimators for each text's (pair side's) per-layer
vector pooled where the encoder ran. They are kept in the feature store (:mod:`contextembed._runtime.store`),
at that unit, within the memory budget and beyond it on disk; layer choices (``layers``,
``combine``) are applied afterwards, so a grid search over them runs the encoder once per distinct
sentence, and a fit reads its rows a batch at a time.

- :func:`~contextembed.encoders._registry.get_encoder` keeps one loaded encoder per ``(spec,
  device, precision, options)`` in the process, so clones made by ``GridSearchCV`` never reload
  the model.
- ``cache=`` names the store (:func:`store_for`): the process-wide one (``"memory"``, whose
  session directory the job's processes share), a directory's (kept across sessions, in its
  subdirectory :data:`DISK_CACHE_DIR` and nothing else of the directory), or none (``None``: a
  call's rows are its own). An item is keyed by a hash of the encoder's identity and its token
  list (with document context, also the context size and the neighbours' words: :func:`context_key`).
- ``n_jobs`` splits the items that still need encoding into fixed blocks run by joblib workers
  (any joblib backend, dask and ray included); the blocks do not depend on ``n_jobs``, so the
  results are identical to ``n_jobs=1``.

Logged to ``contextembed.sklearn._encoding`` at DEBUG: how many items of every call were stored
(what each loaded encoder runs on is logged by the registry, ``contextembed.encoders._registry``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Literal, Optional, Union

import numpy as np
import torch

from .._runtime import store as _store
from .._inputs.documents import InContext
from .._runtime.store import _hash_tokens, sentence_key
from ..encoders._base import Encoder, ShowProgress
from ..pooling._layers import LayerPooling
from ..pooling._subword import subword_output_width
from ._progress import SILENT, EncodingProgress
# EncoderRef stays importable here: pickles and skops files of fitted estimators name it by this path
from ..encoders._registry import EncoderRef, get_encoder

logger = logging.getLogger(__name__)

#: sentences per encoding block (the unit of work of one joblib task)
BLOCK_SIZE = 512
#: texts or pairs per block of the kinds pooled where the encoder ran (``(layers, width)`` each, not
#: every piece), whose blocks hold little: the encoder's own chunks then tokenize ahead and keep every
#: core busy to the end of the block. One block size whatever ``n_jobs``, so the batches, and so the
#: bits, are the same in a worker and in the caller.
POOLED_BLOCK_SIZE = 4096


# -- where features are kept ------------------------------------------------------------------


def set_cache_size(max_bytes: Union[int, str]) -> None:
    """Deprecated: the feature store is bounded by the memory budget,
    :func:`contextembed.set_memory_budget` (``CONTEXTEMBED_MEMORY_BUDGET``), which this calls."""
    import warnings

    warnings.warn("set_cache_size is deprecated: the feature store and every feature array contextembed builds are "
                  "bounded by one memory budget; call contextembed.set_memory_budget instead", FutureWarning,
                  stacklevel=2)
    _store.set_memory_budget(max_bytes)


def clear_cache() -> None:
    """Forget every feature the process-wide stores hold (the one reset of contextembed's caches:
    the estimators', the spaCy component's; a ``cache=`` directory's files stay)."""
    _store.clear()


CacheOption = Union[str, os.PathLike, bool, None, object]
#: the subdirectory of a ``cache=`` directory that holds its tables
DISK_CACHE_DIR = _store.PERSISTENT_DIR


def store_for(cache: CacheOption) -> Optional[_store.FeatureStore]:
    """The feature store an estimator's ``cache=`` value names.

    ``"memory"``/``True``: the process-wide store (its session directory shared by the job's
    processes); ``None``/``False``: ``None``, each call keeps its rows to itself
    (:func:`contextembed._runtime.store.private_store`); a directory: its ``contextembed-cache``
    subdirectory, kept across sessions; a :class:`joblib.Memory`: its location, as a directory (one
    with no location: the process-wide store). ``""`` names no directory: a ``ValueError``.
    """
    from joblib import Memory

    if cache is None or cache is False:
        return None
    if cache is True or (isinstance(cache, str) and cache == "memory"):
        return _store.session_store()
    if isinstance(cache, str) and not cache:
        raise ValueError("cache='' names no directory; pass a directory for an on-disk cache (e.g. cache='.cache'), "
                         "'memory' for the in-memory one, or None for none")
    if isinstance(cache, (str, os.PathLike)):
        return _store.persistent_store(cache)
    if isinstance(cache, Memory):
        return _store.persistent_store(cache.location) if cache.location is not None else _store.session_store()
    raise ValueError(
        f"cache={cache!r} is not understood; expected 'memory', None/False (no cache), a directory "
        "path or a joblib.Memory"
    )


def check_cache(cache: CacheOption) -> None:
    """Validate an estimator's ``cache=`` without making anything (see :func:`store_for`)."""
    from joblib import Memory

    if cache is None or isinstance(cache, bool) or isinstance(cache, Memory):
        return
    if isinstance(cache, str) and not cache:
        store_for(cache)
    if not isinstance(cache, (str, os.PathLike)):
        store_for(cache)
    elif not (isinstance(cache, str) and cache == "memory") and os.path.exists(cache) and not os.path.isdir(cache):
        raise NotADirectoryError(f"cache={os.fspath(cache)!r} is a file, not a directory: pass a directory for the "
                                 "features kept across sessions, 'memory' or None")


def uses_memory(cache: CacheOption) -> bool:
    return not (cache is None or cache is False)


# -- encoding into the store ------------------------------------------------------------------


def pair_key(encoder_key: str, pair: tuple[Sequence[str], Sequence[str]]) -> str:
    """Hash of the encoder identity and a sentence pair (never equal to a sentence's key)."""
    return _token_lists_key(encoder_key, b"pair", pair)


def context_key(encoder_key: str, item: InContext) -> str:
    """Hash of the encoder identity, the context size and a sentence with its neighbours' words
    (:class:`~contextembed._inputs.documents.InContext`): the same sentence among other neighbours, or with
    another ``context``, is another encoding (never equal to a sentence's or a pair's key)."""
    return _token_lists_key(encoder_key, b"context" + item.size.to_bytes(4, "little"),
                            (item.left, item.words, item.right))


def _token_lists_key(encoder_key: str, kind: bytes, token_lists: Sequence[Sequence[str]]) -> str:
    digest = hashlib.blake2b(encoder_key.encode() + b"\x1e" + kind, digest_size=20)
    for side in token_lists:
        digest.update(len(side).to_bytes(4, "little"))
        _hash_tokens(digest, side)
    return digest.hexdigest()


def piece_mean_key(encoder_key: str, tokens: Sequence[str]) -> str:
    """Hash naming a text's piece means (never equal to its sentence key)."""
    return sentence_key(encoder_key + "\x1epiece_mean", tokens)


def text_layers_key(encoder_key: str, tokens: Sequence[str], subword_pooling: str, text_pooling: str) -> str:
    """Hash naming a text's per-layer vector pooled by ``subword_pooling`` then ``text_pooling`` (never
    equal to its sentence key, nor to another pooling's; ``"cls"`` takes no subword pooling)."""
    return sentence_key(encoder_key + _pooling_suffix(subword_pooling, text_pooling), tokens)


def pair_layers_key(encoder_key: str, pair: tuple[Sequence[str], Sequence[str]], subword_pooling: str,
                    text_pooling: str) -> str:
    """Hash naming a pair's per-layer side vectors (or first piece, ``"cls"``): see :func:`text_layers_key`."""
    return pair_key(encoder_key + _pooling_suffix(subword_pooling, text_pooling), pair)


def input_mean_key(encoder_key: str, tokens: Sequence[str], limit: str) -> str:
    """Hash naming a text's means over its whole model input (``limit``: its pieces kept, ``""``
    for every piece in windows; never equal to another kind's key)."""
    return sentence_key(encoder_key + "\x1einput_mean\x1e" + limit, tokens)


def _pooling_suffix(subword_pooling: str, text_pooling: str) -> str:
    return f"\x1epooled\x1e{'-' if text_pooling == 'cls' else subword_pooling}\x1e{text_pooling}"


def _encode_words(encoder: Encoder, sentences: list, layers: int, dtype: str, progress: ShowProgress = False,
                  subword_pooling: str = "first", in_context: bool = False) -> Iterator[np.ndarray]:
    """Each sentence's words, its ``layers`` leading layers side by side: ``(words, layers, width)``."""
    pooling = LayerPooling(encoder.n_layers, list(range(layers)), "concat")
    width = subword_output_width(encoder.width, subword_pooling)
    rows = encoder.iter_encode_pooled(sentences, pooling, subword_pooling, in_context=in_context, dtype=dtype,
                                      show_progress=progress)
    return (words.reshape(len(words), layers, width) for words in rows)


def _encode_in_context(encoder: Encoder, items: list, layers: int, dtype: str, progress: ShowProgress = False,
                       subword_pooling: str = "first") -> Iterator[np.ndarray]:
    return _encode_words(encoder, items, layers, dtype, progress, subword_pooling, in_context=True)


def _encode_text_layers(encoder: Encoder, sentences: list, layers: int, dtype: str, progress: ShowProgress = False,
                        subword_pooling: str = "mean", text_pooling: str = "mean") -> Iterator[np.ndarray]:
    texts = encoder.iter_encode_text_layers(sentences, list(range(layers)), subword_pooling, text_pooling,
                                            show_progress=progress)
    return (text[None] for text in texts)


def _encode_pair_layers(encoder: Encoder, pairs: list, layers: int, dtype: str, progress: ShowProgress = False,
                        subword_pooling: str = "first", text_pooling: str = "mean") -> Iterator[np.ndarray]:
    return encoder.iter_encode_pair_layers(pairs, list(range(layers)), subword_pooling, text_pooling,
                                           show_progress=progress)


def _encode_piece_means(encoder: Encoder, sentences: list, layers: int, dtype: str,
                        progress: ShowProgress = False) -> Iterator[np.ndarray]:
    means = encoder.iter_encode_piece_means(sentences, layers=list(range(layers)), show_progress=progress)
    return (mean[None] for mean in means)


def _encode_input_means(encoder: Encoder, sentences: list, layers: int, dtype: str, progress: ShowProgress = False,
                        limit: str = "") -> Iterator[np.ndarray]:
    means = encoder.iter_encode_input_means(sentences, layers=list(range(layers)),
                                            max_pieces=int(limit) if limit else None, show_progress=progress)
    return (mean[None] for mean in means)


#: what can be encoded and kept: how to key one item, and how to encode a block of them (one
#: ``(rows, layers, width)`` array per item, in order); ``text_layers`` and ``pair_layers`` take the
#: pooling options ``(subword_pooling, text_pooling)`` after the item (key) and after the progress
#: (encoding), ``sentence`` and ``in_context`` their subword pooling after the progress
KINDS = {"sentence": (sentence_key, _encode_words), "piece_mean": (piece_mean_key, _encode_piece_means),
         "in_context": (context_key, _encode_in_context), "text_layers": (text_layers_key, _encode_text_layers),
         "pair_layers": (pair_layers_key, _encode_pair_layers), "input_mean": (input_mean_key, _encode_input_means)}
Kind = Literal["sentence", "piece_mean", "in_context", "text_layers", "pair_layers", "input_mean"]
#: the kinds pooled to a text or pair: a small ``(layers, width)`` result per item
POOLED_KINDS = ("piece_mean", "text_layers", "pair_layers", "input_mean")
#: what a progress bar counts for each kind
UNITS = {"sentence": "sent", "piece_mean": "text", "in_context": "sent", "text_layers": "text", "pair_layers": "pair",
         "input_mean": "text"}


def row_width(encoder: Encoder, kind: Kind, options: tuple) -> int:
    """Width of one layer's vector in a row of ``kind``: the subword pooling's (``"first_last"``
    doubles it), the encoder's for piece means and a pair's first piece (``"cls"``)."""
    if kind in ("piece_mean", "input_mean") or (kind == "pair_layers" and options[1] == "cls"):
        return encoder.width
    return subword_output_width(encoder.width, options[0])


def _encode_block(ref: EncoderRef, items: list, kind: Kind = "sentence", layers: int = 1, dtype: str = "float32",
                  threads: Optional[int] = None, speedups: Optional[dict] = None, progress: EncodingProgress = SILENT,
                  options: tuple = ()) -> tuple[np.ndarray, np.ndarray]:
    """One joblib task: encode a block of items with their ``layers`` leading layers.

    ``threads`` pins torch's intra-op threads to the caller's count: CPU kernels may split their
    reductions differently with another count, and results must not depend on the worker.
    ``speedups``: the caller's measurements behind ``precision="auto"``, so a worker picks what the
    caller picked (:func:`contextembed._runtime.devices.adopt_speedups`). ``progress`` counts the items as
    the encoder's forward passes finish (in the caller's process only: a worker gets none), so that
    its bar moves and measures a rate long before the block is done. ``options``: the pooling options
    of ``kind`` (:data:`KINDS`).

    Returns
    -------
    rows : np.ndarray
        ``(rows, layers, width)`` in ``dtype``, the items' rows one after the other.
    counts : np.ndarray
        ``(items,)`` int64 rows of each item.
    """
    from .._runtime.devices import adopt_speedups
    from .._runtime.streams import intra_op_threads

    adopt_speedups(speedups or {})
    with intra_op_threads(threads):
        encoder = get_encoder(ref)
        arrays = list(KINDS[kind][1](encoder, items, layers, dtype, progress if progress.show else False, *options))
    counts = np.array([len(array) for array in arrays], dtype=np.int64)
    width = row_width(encoder, kind, options)
    rows = np.concatenate(arrays) if arrays else np.zeros((0, layers, width), dtype=dtype)
    return rows.astype(dtype, copy=False), counts


def encode_stored(
    ref: EncoderRef,
    items: Sequence,
    *,
    layers: int,
    cache: CacheOption = "memory",
    n_jobs: Optional[int] = None,
    kind: Kind = "sentence",
    dtype: str = "float32",
    progress: EncodingProgress = SILENT,
    options: tuple = (),
) -> _store.StoredRows:
    """The rows of every item (a sentence, a sentence in context, a text, a pair) with its ``layers``
    leading layers, kept in the feature store ``cache`` names (:func:`store_for`), in input order.

    Items the store holds already are not encoded again; the rest (deduplicated) are encoded in
    blocks of :data:`BLOCK_SIZE` (:data:`POOLED_BLOCK_SIZE` for :data:`POOLED_KINDS`), in parallel
    when ``n_jobs`` asks for it, counted on ``progress``, and each block is stored as it comes.

    Parameters
    ----------
    options : tuple
        ``(subword_pooling,)`` for ``kind="sentence"`` and ``"in_context"``; ``(subword_pooling,
        text_pooling)`` for ``"text_layers"`` and ``"pair_layers"``; ``()`` for ``"piece_mean"``.
    dtype : {"float32", "float16"}
        What the rows are kept in (float16: half the memory and disk; a value beyond its range is a
        ``ValueError`` naming the sentence and word).

    Returns
    -------
    StoredRows
        Per item: a sentence's ``(words, layers, width)`` rows, a text's one ``(1, layers, width)``
        row, a pair's two sides (one row, its first piece, for ``"cls"``).
    """
    store = store_for(cache)
    private = store is None
    if private:
        store = _store.private_store()
    encoder = get_encoder(ref)
    encoder_key = ref.cache_key()
    spec = _store.TableSpec(encoder_key, kind, tuple(options), dtype, int(layers), row_width(encoder, kind, options))
    table = store.table(spec)
    keys = [KINDS[kind][0](encoder_key, item, *_key_options(kind, options)) for item in items]
    places = _find(store, table, keys, encoder.n_layers)
    _log_call(ref, kind, keys, places)
    if any(place is None for place in places):
        with table.encoding():  # another process encoding this table: wait, then take what it stored
            places = _find(store, table, keys, encoder.n_layers)
            missing: dict[str, object] = {}
            for key, item, place in zip(keys, items, places):
                if place is None:
                    missing.setdefault(key, item)
            if missing:
                progress.add(len(missing))
                _encode_missing(ref, table, list(missing), list(missing.values()), n_jobs, kind, int(layers), dtype,
                                progress, options)
                places = _find(store, table, keys, encoder.n_layers)
    return _store.StoredRows(spec, places, keep=store if private else None)


def _find(store: _store.FeatureStore, table: _store.Table, keys: list, n_layers: int) -> list:
    """Where each key's rows are: in ``table``, else in a table of the same rows with more layers
    (a deeper fit's rows serve one that uses fewer: they hold the same bits for those layers)."""
    places = table.find(keys)
    for deeper in range(table.spec.layers + 1, n_layers + 1):
        missing = [i for i, place in enumerate(places) if place is None]
        if not missing:
            break
        other = store.table(dataclasses.replace(table.spec, layers=deeper))
        for i, place in zip(missing, other.find([keys[i] for i in missing])):
            places[i] = place
    return places


def _log_call(ref: EncoderRef, kind: Kind, keys: list, places: list) -> None:
    """At DEBUG: how many of a call's items the store holds (in memory, on disk) and how many it encodes."""
    if not logger.isEnabledFor(logging.DEBUG):
        return
    distinct = dict(zip(keys, places))
    stored = [place for place in distinct.values() if place is not None]
    resident = sum(place[0].data is not None for place in stored)
    logger.debug("encoding %d items (%s) with %r: %d distinct, %d stored (%d in memory, %d on disk), %d to encode",
                 len(keys), kind, ref.spec, len(distinct), len(stored), resident, len(stored) - resident,
                 len(distinct) - len(stored))


def _key_options(kind: Kind, options: tuple) -> tuple:
    """The options an item's key takes (words: none beyond the table's own)."""
    return options if kind in ("text_layers", "pair_layers", "input_mean") else ()


def pooled_piece_means(ref: EncoderRef, texts: Sequence, layers: Sequence[int], pooling: LayerPooling,
                       progress: EncodingProgress = SILENT) -> np.ndarray:
    """Each text's piece means with its layers combined by the encoder itself, where it ran
    (:meth:`~contextembed.encoders.Encoder.encode_piece_means` with ``pooling``): uncached, in this
    process, so only ``(dim,)`` per text comes back. Equal token lists are encoded once and the
    distinct texts go in blocks of :data:`POOLED_BLOCK_SIZE`, as :func:`encode_all` encodes them, so
    the batches, and the bits, are those of ``kind="piece_mean"`` pooled afterwards: all in one call
    where the encoder's ``chunk_size`` divides the block (its chunks are then the blocks' own, and
    it tokenizes the next while one runs), else one call per block.

    Returns
    -------
    np.ndarray
        ``(texts, pooling.output_width(width))`` float32, in input order.
    """
    distinct: dict[tuple, int] = {}
    # (texts,) the place of each text among the distinct ones
    place = np.fromiter((distinct.setdefault(tuple(text), len(distinct)) for text in texts), dtype=np.intp, count=len(texts))
    items = list(map(list, distinct))
    progress.add(len(items))
    encoder = get_encoder(ref)
    chunk = getattr(encoder, "chunk_size", None)
    # one call where the encoder's chunks fall within the blocks (then it tokenizes the next chunk
    # while one runs, across blocks too); else a call per block
    size = len(items) if chunk is not None and POOLED_BLOCK_SIZE % chunk == 0 else POOLED_BLOCK_SIZE
    blocks = [encoder.encode_piece_means(items[begin : begin + size], list(layers), pooling=pooling,
                                         show_progress=progress if progress.show else False)
              for begin in range(0, len(items), size)]
    features = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    return features if len(items) == len(texts) else features[place]


def _encode_missing(ref: EncoderRef, table, keys: list, items: list, n_jobs: Optional[int], kind: Kind, layers: int,
                    dtype: str, progress: EncodingProgress = SILENT, options: tuple = ()) -> None:
    """Encode ``items`` block by block (in joblib workers where ``n_jobs`` asks) into ``table``."""
    size = POOLED_BLOCK_SIZE if kind in POOLED_KINDS else BLOCK_SIZE
    starts = range(0, len(items), size)
    from joblib import Parallel, delayed, effective_n_jobs

    if effective_n_jobs(n_jobs) == 1 or len(starts) == 1:
        for begin in starts:
            rows, counts = _encode_block(ref, items[begin : begin + size], kind, layers, dtype, progress=progress,
                                         options=options)
            table.add(keys[begin : begin + size], rows, counts)
        return
    import torch

    from .._runtime import forking

    forking.install()  # the multiprocessing backend forks: see contextembed._runtime.forking
    from .._runtime.devices import measured_speedups

    threads, speedups = torch.get_num_threads(), measured_speedups()
    tasks = (delayed(_encode_block)(ref, items[begin : begin + size], kind, layers, dtype, threads, speedups,
                                    options=options) for begin in starts)
    for begin, (rows, counts) in zip(starts, Parallel(n_jobs=n_jobs, return_as=_return_as(progress))(tasks)):
        table.add(keys[begin : begin + size], rows, counts)
        progress.update(len(counts))


def _return_as(progress: EncodingProgress) -> str:
    """``"generator"`` (each block counted as it arrives) when a bar is drawn and the active joblib
    backend can; ``"list"`` otherwise (the ``multiprocessing`` backend cannot)."""
    from joblib.parallel import get_active_backend

    backend, _ = get_active_backend()
    return "generator" if progress.show and backend.supports_return_generator else "list"


class LayerRows:
    """Rows of some layers, read a batch at a time: what the scalar mix and the taggers train on.

    Parameters
    ----------
    rows : StoredRows or np.ndarray
        The stored rows, or an array ``(layers, rows, width)`` of the selected layers already.
    layers : tuple of int
        With stored rows: the encoder layers to take (absolute indexes).
    """

    def __init__(self, rows, layers: tuple[int, ...] = ()) -> None:
        self._rows, self._layers = rows, tuple(layers)

    @property
    def n_rows(self) -> int:
        return self._rows.shape[1] if isinstance(self._rows, np.ndarray) else self._rows.n_rows

    @property
    def n_layers(self) -> int:
        return self._rows.shape[0] if isinstance(self._rows, np.ndarray) else len(self._layers)

    @property
    def width(self) -> int:
        return self._rows.shape[2] if isinstance(self._rows, np.ndarray) else self._rows.spec.width

    @property
    def row_bytes(self) -> int:
        """Bytes of one row's selected layers in float32 (what :meth:`take` builds per row)."""
        return self.n_layers * self.width * 4

    def take(self, index: np.ndarray) -> torch.Tensor:
        """Rows ``index``: ``(layers, len(index), width)`` float32."""
        if isinstance(self._rows, np.ndarray):
            return torch.from_numpy(self._rows).index_select(1, torch.from_numpy(np.asarray(index, dtype=np.int64)))
        return torch.from_numpy(self._rows.take(np.asarray(index, dtype=np.int64), self._layers, layer_major=True))
