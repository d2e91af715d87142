"""Encode once, pool many times: a process-wide encoder registry and an encoding cache.

Every estimator in :mod:`contextembed.sklearn` asks this module for encodings with all layers
(:data:`KINDS`): word-level estimators for *piece-level encodings* (:class:`~contextembed.PieceEncoding`),
text and pair estimators for each text's per-layer vector pooled where the encoder ran (keyed by its
pooling options too). Layer choices (``layers``, ``combine``) are applied afterwards, so a grid
search over them runs the encoder once per distinct sentence.

- :func:`get_encoder` keeps one loaded encoder per ``(spec, device, precision, options)`` in the
  process, so clones made by ``GridSearchCV`` never reload the model.
- :data:`MEMORY_CACHE` is an LRU cache bounded by bytes (``CONTEXTEMBED_CACHE_BYTES``, default
  1 GiB, read and checked at the cache's first use by :func:`contextembed.settings.byte_size`:
  ``0``, ``536870912``, ``512MB``, ``1GiB``; change it with :func:`set_cache_size`), keyed by a
  hash of the encoder's identity and the token list (with document context, also the context
  size and the neighbours' words: :func:`context_key`).
- ``cache=`` a directory or a :class:`joblib.Memory` adds an on-disk cache shared across processes
  and sessions. In a directory it is the subdirectory :data:`DISK_CACHE_DIR`, and nothing else of
  the directory is written (joblib 1.5+ writes a ``.gitignore`` of ``*`` beside its store, which
  would hide every untracked file of a directory it was given from git).
- ``n_jobs`` splits the sentences that still need encoding into fixed blocks run by joblib workers
  (any joblib backend, dask and ray included); the blocks do not depend on ``n_jobs``, so the
  results are identical to ``n_jobs=1``.

Logged to ``contextembed.sklearn._encoding``: at INFO what each loaded encoder runs on (device,
precision, batch size: what ``"auto"`` chose), at DEBUG the cache hits and misses of every call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import numbers
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Union

import numpy as np

from .._documents import InContext
from ..encoders._base import Encoder, PieceEncoding, ShowProgress
from ..encoders._identity import ModelIdentity, fingerprint, identify, locate
from ..encoders._loading import load_encoder
from ..pooling._layers import LayerPooling
from ..settings import MAX_BYTES, byte_size, parse_byte_size
from ._progress import SILENT, EncodingProgress

logger = logging.getLogger(__name__)

#: sentences per encoding block (the unit of work of one joblib task)
BLOCK_SIZE = 512
#: texts or pairs per block of the kinds pooled where the encoder ran (``(layers, width)`` each, not
#: every piece), whose blocks hold little: the encoder's own chunks then tokenize ahead and keep every
#: core busy to the end of the block. One block size whatever ``n_jobs``, so the batches, and so the
#: bits, are the same in a worker and in the caller.
POOLED_BLOCK_SIZE = 4096
#: environment variable that bounds :data:`MEMORY_CACHE` (a byte size, :mod:`contextembed.settings`)
CACHE_BYTES_ENV = "CONTEXTEMBED_CACHE_BYTES"
#: the bound of :data:`MEMORY_CACHE` when neither the variable nor :func:`set_cache_size` sets it
DEFAULT_CACHE_BYTES = 1 << 30


@dataclass(frozen=True)
class EncoderRef:
    """Everything needed to load an encoder again and to name its outputs in a cache.

    Attributes
    ----------
    spec : str
        What :func:`contextembed.load_encoder` receives (a name, an absolute path, a hub id).
    device, precision : str
        Passed to :func:`contextembed.load_encoder`.
    backend : str
        Passed to :func:`contextembed.load_encoder`; a fitted estimator's is never ``"auto"``
        (:func:`resolved`).
    batch_tokens : int or None
        Padded pieces per forward pass (``None``: the encoder's default).
    identity : ModelIdentity or None
        The model the estimator was fitted with (recorded by ``fit``); loading checks that the
        files found are still that model (:func:`~contextembed.encoders._identity.locate`).
    """

    spec: str
    device: str = "auto"
    precision: str = "auto"
    batch_tokens: Optional[int] = None
    identity: Optional[ModelIdentity] = None
    backend: str = "torch"

    @classmethod
    def fitted(cls, spec, device: str, precision: str, batch_tokens: Optional[int], backend: str = "torch") -> "EncoderRef":
        """Resolve ``spec`` now (absolute path, package, cached snapshot) and record its identity."""
        identity = identify(spec)
        load_spec = identity.location if identity.kind == "path" else identity.spec
        return cls(load_spec, device, precision, batch_tokens, identity, backend)

    def options(self) -> dict:
        return {} if self.batch_tokens is None else {"batch_tokens": self.batch_tokens}

    def cache_key(self) -> str:
        """A hash naming this encoder's outputs: resolved device type and precision, and the model's
        files (their content, not their path: the same model anywhere shares its cache entries)."""
        from .._devices import resolve_device, resolve_precision

        device = resolve_device(self.device)
        # what the encoder runs ("auto" differs across machines, and int8 falls back where it would
        # change the features): its outputs are never mixed with another precision's
        running = getattr(get_encoder(self), "precision", None) if self.precision == "auto" else None
        precision = running or resolve_precision(self.precision, device)  # static vectors have none
        if self.identity is not None:
            model = self.identity.fingerprint
        else:
            model = self.spec + ":" + (fingerprint(self.spec) if os.path.exists(self.spec) else "")
        parts = [model, device.type, precision, get_encoder(self).backend if self.backend == "auto" else self.backend]
        return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


# -- the encoder registry ---------------------------------------------------------------------

_ENCODERS: dict[EncoderRef, Encoder] = {}
_ENCODERS_LOCK = threading.Lock()


def get_encoder(ref: EncoderRef) -> Encoder:
    """Load the encoder ``ref`` names, or return the one already loaded in this process."""
    with _ENCODERS_LOCK:
        encoder = _ENCODERS.get(ref)
        if encoder is None:
            spec = ref.spec if ref.identity is None else locate(ref.identity)
            encoder = load_encoder(spec, device=ref.device, precision=ref.precision, backend=ref.backend, **ref.options())
            _ENCODERS[ref] = encoder
            logger.info("loaded the encoder %r: %s", ref.spec, describe_choices(encoder, ref))
        return encoder


def describe_choices(encoder: Encoder, ref: EncoderRef) -> str:
    """What ``encoder`` runs with, and which of it ``"auto"`` (or the encoder's default) chose:
    ``"device=cpu (auto), precision=fp32 (auto), batch_tokens=4096 (the encoder's default)"``."""
    asked = {"device": ref.device, "precision": ref.precision, "backend": ref.backend, "batch_tokens": ref.batch_tokens}
    running = {
        "device": getattr(encoder, "device", "cpu"),  # static vectors are looked up on the CPU
        "precision": getattr(encoder, "precision", "fp32"),  # and are a float32 table
        "backend": getattr(encoder, "backend", None),
        "batch_tokens": getattr(encoder, "batch_tokens", None),
    }
    parts = []
    for name, value in running.items():
        if value is None:
            continue
        chosen = {"auto": " (auto)", None: " (the encoder's default)"}.get(asked.get(name), "")
        parts.append(f"{name}={value}{chosen}")
    return ", ".join(parts)


def resolved(ref: EncoderRef) -> EncoderRef:
    """``ref`` pinned to what its loaded encoder runs: ``backend="auto"`` replaced by the backend it
    chose (:func:`contextembed._backends.concrete_backend`) and, on the engine, ``precision="auto"``
    by the precision it measured (the engine's choice is not one :func:`_encode_block`'s
    ``speedups`` carry). Every process loading the pinned reference (joblib, Ray and Dask workers)
    runs the same numeric path; the loaded encoder is registered under it too, so nothing reloads."""
    from .._backends import concrete_backend

    encoder = get_encoder(ref)
    backend = concrete_backend(encoder)
    precision = encoder.precision if backend == "openvino" else ref.precision
    pinned = dataclasses.replace(ref, backend=backend, precision=precision)
    if pinned != ref:
        register_encoder(pinned, encoder)
    return pinned


def register_encoder(ref: EncoderRef, encoder: Encoder) -> None:
    """Make ``encoder`` the one :func:`get_encoder` returns for ``ref`` (used by embedded weights)."""
    with _ENCODERS_LOCK:
        _ENCODERS[ref] = encoder


def clear_encoders() -> None:
    """Forget every loaded encoder (frees their memory once nothing else holds them)."""
    with _ENCODERS_LOCK:
        _ENCODERS.clear()


# -- the in-memory cache ----------------------------------------------------------------------


class EncodingCache:
    """A thread-safe LRU mapping of sentence keys to :class:`PieceEncoding`, bounded by bytes.

    Parameters
    ----------
    max_bytes : int or str, optional
        Upper bound on the summed ``nbytes`` of the stored arrays (a byte size such as ``"512MB"``
        too), which is the memory they keep: :func:`encode_all` stores arrays that own their memory
        (:func:`own_memory`), not views of an encoder's chunk; ``0`` disables the cache. ``None``:
        ``CONTEXTEMBED_CACHE_BYTES``, read when the bound is first needed (an invalid value fails
        there, naming the variable), else 1 GiB.
    """

    def __init__(self, max_bytes: Union[int, str, None] = None) -> None:
        self._max_bytes = None if max_bytes is None else check_cache_size(max_bytes)
        self._items: OrderedDict[str, PieceEncoding] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.nbytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def max_bytes(self) -> int:
        """The bound in bytes (``CONTEXTEMBED_CACHE_BYTES`` is read here, the first time)."""
        if self._max_bytes is None:
            self._max_bytes = byte_size(CACHE_BYTES_ENV, DEFAULT_CACHE_BYTES)
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: Union[int, str]) -> None:
        self._max_bytes = check_cache_size(value)

    def get(self, key: str) -> Optional[PieceEncoding]:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def put(self, key: str, encoding: PieceEncoding) -> None:
        size = _nbytes(encoding)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return
            self._items[key] = encoding
            self._sizes[key] = size
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                old, _ = self._items.popitem(last=False)
                self.nbytes -= self._sizes.pop(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._sizes.clear()
            self.nbytes = 0


def _nbytes(encoding) -> int:
    return sum(array.nbytes for array in _arrays(encoding))


def _arrays(encoding) -> list[np.ndarray]:
    """The arrays of an encoding: itself (a text's or pair's pooled layers) or a
    :class:`PieceEncoding`'s."""
    if isinstance(encoding, np.ndarray):
        return [encoding]
    return [array for array in (encoding.hidden, encoding.word_offsets, encoding.cls, encoding.ids) if array is not None]


def own_memory(encoding):
    """``encoding`` with each array that is a view of a larger one (a chunk's rows, a batch's
    pieces) copied, so that it keeps alive only the bytes it holds: what the memory cache counts
    against its bound is then what it keeps. Arrays that own their memory are not copied."""
    if isinstance(encoding, np.ndarray):
        return _owned(encoding)
    return dataclasses.replace(encoding, **{
        field: _owned(array) for field in ("hidden", "word_offsets", "cls", "ids")
        if (array := getattr(encoding, field)) is not None})


def _owned(array: np.ndarray) -> np.ndarray:
    return array.copy() if _held_bytes(array) > array.nbytes else array


def _held_bytes(array: np.ndarray) -> int:
    """The bytes ``array`` keeps alive: those of the array, torch tensor storage or buffer it is a
    view of (its own when it owns its memory)."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, np.ndarray):
        return base.nbytes
    storage = getattr(base, "untyped_storage", None)  # a torch tensor's .numpy()
    if storage is not None:
        return storage().nbytes()
    try:
        return memoryview(base).nbytes
    except (TypeError, ValueError):  # a buffer of unknown size: assume it holds more
        return array.nbytes + 1


MEMORY_CACHE = EncodingCache()


def set_cache_size(max_bytes: Union[int, str]) -> None:
    """Bound the process-wide in-memory encoding cache to ``max_bytes`` (``0`` turns it off); this
    replaces ``CONTEXTEMBED_CACHE_BYTES``.

    Parameters
    ----------
    max_bytes : int or str
        Bytes, from 0 to 1 PiB: a whole number, or a byte size such as ``"512MB"`` or ``"1GiB"``
        (the spellings of :mod:`contextembed.settings`).

    Raises
    ------
    TypeError, ValueError
        For anything else (a fraction, NaN, a negative number), naming the value.
    """
    MEMORY_CACHE.max_bytes = max_bytes
    if MEMORY_CACHE.nbytes > MEMORY_CACHE.max_bytes:
        MEMORY_CACHE.clear()


def check_cache_size(max_bytes: Union[int, str]) -> int:
    """``max_bytes`` as a number of bytes from 0 to 1 PiB (see :func:`set_cache_size`)."""
    if isinstance(max_bytes, str):
        return parse_byte_size("max_bytes", max_bytes)
    if not isinstance(max_bytes, numbers.Integral) or isinstance(max_bytes, bool):
        raise TypeError(
            f"max_bytes={max_bytes!r} ({type(max_bytes).__name__}): expected a whole number of bytes or a "
            "byte size such as '512MB'"
        )
    if not 0 <= max_bytes <= MAX_BYTES:
        raise ValueError(f"max_bytes={max_bytes}: expected 0 (no cache) to {MAX_BYTES:,} bytes (1 PiB)")
    return int(max_bytes)


def clear_cache() -> None:
    """Empty the in-memory encoding cache."""
    MEMORY_CACHE.clear()


# -- the on-disk cache ------------------------------------------------------------------------


def _stored(key: str, encoding: Optional[PieceEncoding] = None) -> Optional[PieceEncoding]:
    """Identity function that joblib.Memory memoises on ``key`` alone (``encoding`` is ignored)."""
    return encoding


class DiskCache:
    """Per-sentence encodings in a :class:`joblib.Memory` store."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self._func = memory.cache(_stored, ignore=["encoding"])

    def get(self, key: str) -> Optional[PieceEncoding]:
        if not self._func.check_call_in_cache(key):
            return None
        return self._func(key)

    def put(self, key: str, encoding: PieceEncoding) -> None:
        self._func(key, encoding)


CacheOption = Union[str, os.PathLike, bool, None, object]
#: the subdirectory of a ``cache=`` directory that holds the on-disk cache (joblib's store and the
#: ``.gitignore`` joblib writes, which so hides this subdirectory alone from git)
DISK_CACHE_DIR = "contextembed-cache"


def disk_cache(cache: CacheOption) -> Optional[DiskCache]:
    """Turn an estimator's ``cache=`` value into a :class:`DiskCache` (or ``None``).

    ``"memory"``/``True``: in-memory only; ``None``/``False``: no caching at all; a directory: a
    :class:`joblib.Memory` in its subdirectory :data:`DISK_CACHE_DIR` (created); a
    :class:`joblib.Memory`: that store (one with no location caches nothing on disk). ``""`` names
    no directory: a ``ValueError`` (joblib would make ``./joblib``).
    """
    from joblib import Memory

    if cache is None or isinstance(cache, bool) or (isinstance(cache, str) and cache == "memory"):
        return None
    if isinstance(cache, str) and not cache:
        raise ValueError("cache='' names no directory; pass a directory for an on-disk cache (e.g. cache='.cache'), "
                         "'memory' for the in-memory one, or None for none")
    if isinstance(cache, (str, os.PathLike)):
        # a Path is joblib's location as it is (a str would gain a "joblib" subdirectory, and joblib
        # writes its .gitignore one level up from that: into the user's directory)
        return DiskCache(Memory(Path(cache) / DISK_CACHE_DIR, verbose=0))
    if isinstance(cache, Memory):
        return DiskCache(cache) if cache.location is not None else None
    raise ValueError(
        f"cache={cache!r} is not understood; expected 'memory', None/False (no cache), a directory "
        "path or a joblib.Memory"
    )


def uses_memory(cache: CacheOption) -> bool:
    return not (cache is None or cache is False)


# -- encoding with the caches -----------------------------------------------------------------


def sentence_key(encoder_key: str, tokens: Sequence[str]) -> str:
    """Hash of the encoder identity and the exact token list (lengths included, so no collisions by
    joining)."""
    digest = hashlib.blake2b(encoder_key.encode(), digest_size=20)
    _hash_tokens(digest, tokens)
    return digest.hexdigest()


def pair_key(encoder_key: str, pair: tuple[Sequence[str], Sequence[str]]) -> str:
    """Hash of the encoder identity and a sentence pair (never equal to a sentence's key)."""
    return _token_lists_key(encoder_key, b"pair", pair)


def context_key(encoder_key: str, item: InContext) -> str:
    """Hash of the encoder identity, the context size and a sentence with its neighbours' words
    (:class:`~contextembed._documents.InContext`): the same sentence among other neighbours, or with
    another ``context``, is another encoding (never equal to a sentence's or a pair's key)."""
    return _token_lists_key(encoder_key, b"context" + item.size.to_bytes(4, "little"),
                            (item.left, item.words, item.right))


def _token_lists_key(encoder_key: str, kind: bytes, token_lists: Sequence[Sequence[str]]) -> str:
    digest = hashlib.blake2b(encoder_key.encode() + b"\x1e" + kind, digest_size=20)
    for side in token_lists:
        digest.update(len(side).to_bytes(4, "little"))
        _hash_tokens(digest, side)
    return digest.hexdigest()


def _hash_tokens(digest, tokens: Sequence[str]) -> None:
    for token in tokens:
        data = token.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(4, "little"))
        digest.update(data)


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


def _pooling_suffix(subword_pooling: str, text_pooling: str) -> str:
    return f"\x1epooled\x1e{'-' if text_pooling == 'cls' else subword_pooling}\x1e{text_pooling}"


def _encode_sentences(encoder: Encoder, sentences: list, progress: ShowProgress = False) -> Iterator[PieceEncoding]:
    return encoder.iter_encode_pieces(sentences, layers="all", show_progress=progress)


def _encode_in_context(encoder: Encoder, items: list, progress: ShowProgress = False) -> Iterator[PieceEncoding]:
    return encoder.iter_encode_pieces_in_context(items, layers="all", show_progress=progress)


def _encode_text_layers(encoder: Encoder, sentences: list, progress: ShowProgress = False, subword_pooling: str = "mean",
                        text_pooling: str = "mean") -> Iterator[np.ndarray]:
    return encoder.iter_encode_text_layers(sentences, "all", subword_pooling, text_pooling, show_progress=progress)


def _encode_pair_layers(encoder: Encoder, pairs: list, progress: ShowProgress = False, subword_pooling: str = "first",
                        text_pooling: str = "mean") -> Iterator[np.ndarray]:
    return encoder.iter_encode_pair_layers(pairs, "all", subword_pooling, text_pooling, show_progress=progress)


def _encode_piece_means(encoder: Encoder, sentences: list, progress: ShowProgress = False) -> Iterator[np.ndarray]:
    return encoder.iter_encode_piece_means(sentences, layers="all", show_progress=progress)


#: what can be encoded and cached: how to key one item, and how to encode a block of them (one
#: result per item, in order); ``text_layers`` and ``pair_layers`` take the pooling options
#: ``(subword_pooling, text_pooling)`` after the item (key) and after the progress (encoding)
KINDS = {"sentence": (sentence_key, _encode_sentences), "piece_mean": (piece_mean_key, _encode_piece_means),
         "in_context": (context_key, _encode_in_context), "text_layers": (text_layers_key, _encode_text_layers),
         "pair_layers": (pair_layers_key, _encode_pair_layers)}
Kind = Literal["sentence", "piece_mean", "in_context", "text_layers", "pair_layers"]
#: the kinds pooled where the encoder ran: a small ``(layers, width)`` result per item
POOLED_KINDS = ("piece_mean", "text_layers", "pair_layers")
#: what a progress bar counts for each kind
UNITS = {"sentence": "sent", "piece_mean": "text", "in_context": "sent", "text_layers": "text", "pair_layers": "pair"}


def _encode_block(ref: EncoderRef, items: list, kind: Kind = "sentence", threads: Optional[int] = None,
                  speedups: Optional[dict] = None, progress: EncodingProgress = SILENT, options: tuple = ()) -> list:
    """One joblib task: encode a block of sentences (or pairs) with every layer.

    ``threads`` pins torch's intra-op threads to the caller's count: CPU kernels may split their
    reductions differently with another count, and results must not depend on the worker.
    ``speedups``: the caller's measurements behind ``precision="auto"``, so a worker picks what the
    caller picked (:func:`contextembed._devices.adopt_speedups`). ``progress`` counts the items as
    the encoder's forward passes finish (in the caller's process only: a worker gets none), so that
    its bar moves and measures a rate long before the block is done. ``options``: the pooling options
    of ``kind`` (:data:`KINDS`).
    """
    from .._devices import adopt_speedups
    from .._streams import intra_op_threads

    adopt_speedups(speedups or {})
    with intra_op_threads(threads):
        return list(KINDS[kind][1](get_encoder(ref), items, progress if progress.show else False, *options))


def encode_all(
    ref: EncoderRef,
    sentences: Sequence,
    *,
    cache: CacheOption = "memory",
    n_jobs: Optional[int] = None,
    kind: Kind = "sentence",
    progress: EncodingProgress = SILENT,
    options: tuple = (),
) -> list:
    """Piece-level encodings with all layers for every sentence (or pair), in input order.

    Items found in the caches are not encoded again; the rest (deduplicated) are encoded in blocks
    of :data:`BLOCK_SIZE` (:data:`POOLED_BLOCK_SIZE` for :data:`POOLED_KINDS`), in parallel when
    ``n_jobs`` asks for it, and counted on ``progress``.

    ``options``: ``(subword_pooling, text_pooling)`` for ``kind="text_layers"`` and ``"pair_layers"``.

    Returns
    -------
    list of PieceEncoding; of ``(layers, width)`` piece means for ``kind="piece_mean"`` and
    ``(layers, width')`` pooled text vectors for ``kind="text_layers"`` (from the sentence's cached
    pieces where those are cached); of ``(2, layers, width')`` side vectors (``(1, layers, width)``
    first pieces for ``"cls"``) for ``kind="pair_layers"``
    """
    disk = disk_cache(cache)
    memory = MEMORY_CACHE if uses_memory(cache) else None
    if memory is None and disk is None and kind in ("sentence", "piece_mean", "text_layers"):
        keys = list(map(tuple, sentences))  # no cache: equal token lists are encoded once
    else:
        encoder_key = ref.cache_key()
        keys = [KINDS[kind][0](encoder_key, item, *options) for item in sentences]
    found: dict[str, object] = {}
    missing: dict[str, object] = {}
    hits = {"memory": 0, "disk": 0}
    for key, item in zip(keys, sentences):
        if key in found or key in missing:
            continue
        hit, where = _lookup(key, memory, disk)
        if hit is None and kind in _FROM_PIECES and (memory is not None or disk is not None):  # the text's pieces may be cached already
            pieces, where = _lookup(sentence_key(encoder_key, item), memory, disk)
            hit = None if pieces is None else _FROM_PIECES[kind](pieces, *options)
        if hit is None:
            missing[key] = item
        else:
            found[key] = hit
            hits[where] += 1
    logger.debug("encoding %d items (%s) with %r: %d distinct, %d cache hits (%d in memory, %d on disk), %d to encode",
                 len(keys), kind, ref.spec, len(found) + len(missing), len(found), hits["memory"], hits["disk"],
                 len(missing))
    if missing:
        progress.add(len(missing))
        new = _encode_missing(ref, list(missing.values()), n_jobs, kind, progress, options)
        for key, encoding in zip(missing, new):
            if memory is not None:  # a view of a chunk's rows would keep all of them alive in the cache
                encoding = own_memory(encoding)
                memory.put(key, encoding)
            found[key] = encoding
            if disk is not None:
                disk.put(key, encoding)
    return [found[key] for key in keys]


#: the kinds that a sentence's cached pieces (:class:`PieceEncoding`) give without encoding it again
_FROM_PIECES = {"piece_mean": PieceEncoding.piece_means, "text_layers": PieceEncoding.text_layers}


def _lookup(key: str, memory: Optional[EncodingCache], disk: Optional[DiskCache]) -> tuple[object, str]:
    """``(encoding, "memory" or "disk")`` of a cached key; ``(None, "")`` when neither holds it."""
    hit = memory.get(key) if memory is not None else None
    if hit is not None:
        return hit, "memory"
    hit = disk.get(key) if disk is not None else None
    if hit is None:
        return None, ""
    if memory is not None:
        memory.put(key, hit)
    return hit, "disk"


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


def _encode_missing(ref: EncoderRef, items: list, n_jobs: Optional[int], kind: Kind,
                    progress: EncodingProgress = SILENT, options: tuple = ()) -> list:
    size = POOLED_BLOCK_SIZE if kind in POOLED_KINDS else BLOCK_SIZE
    blocks = [items[i : i + size] for i in range(0, len(items), size)]
    from joblib import Parallel, delayed, effective_n_jobs

    if effective_n_jobs(n_jobs) == 1 or len(blocks) == 1:
        results = [_encode_block(ref, block, kind, progress=progress, options=options) for block in blocks]
    else:
        import torch

        from .. import _forking as forking

        forking.install()  # the multiprocessing backend forks: see contextembed._forking
        from .._devices import measured_speedups

        threads, speedups = torch.get_num_threads(), measured_speedups()
        tasks = (delayed(_encode_block)(ref, block, kind, threads, speedups, options=options) for block in blocks)
        results = []
        for block in Parallel(n_jobs=n_jobs, return_as=_return_as(progress))(tasks):  # in order
            results.append(block)
            progress.update(len(block))
    return [encoding for block in results for encoding in block]


def _return_as(progress: EncodingProgress) -> str:
    """``"generator"`` (each block counted as it arrives) when a bar is drawn and the active joblib
    backend can; ``"list"`` otherwise (the ``multiprocessing`` backend cannot)."""
    from joblib.parallel import get_active_backend

    backend, _ = get_active_backend()
    return "generator" if progress.show and backend.supports_return_generator else "list"


def stack_words(encodings: Sequence[PieceEncoding], subword_pooling: str, layer_indexes: tuple[int, ...]) -> np.ndarray:
    """Word vectors of the chosen layers for many sentences, concatenated along the word axis.

    Returns
    -------
    np.ndarray
        ``(layers, words, width)`` float32 with ``words`` the total over ``encodings``.
    """
    n_words = sum(e.n_words for e in encodings)
    if not encodings:
        raise ValueError("no sentences to stack")
    first = encodings[0].words(subword_pooling)
    out = np.empty((len(layer_indexes), n_words, first.shape[-1]), dtype=np.float32)
    start = 0
    index = list(layer_indexes)
    for i, encoding in enumerate(encodings):
        words = first if i == 0 else encoding.words(subword_pooling)
        out[:, start : start + words.shape[1]] = words[index]
        start += words.shape[1]
    return out
