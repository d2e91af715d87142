"""The encoders loaded in this process, one per reference: what the estimators, the spaCy component
and the engines' workers load a model by (issue 54: one registry, below the adapters).

An :class:`EncoderRef` names a model and how it runs (device, precision, backend, batch size) and
records the model's identity at ``fit``; :func:`get_encoder` loads it once per process (into an
:class:`EncoderCache`, :data:`ENCODERS` unless another is passed), so clones made by
``GridSearchCV`` never reload the model, and :func:`resolved` pins what ``"auto"`` chose.

Logged to ``contextembed.encoders._registry`` at INFO: what each loaded encoder runs on (device,
precision, batch size: what ``"auto"`` chose).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from .._runtime import store as _store
from .._runtime.devices import fitted_precision
from ._base import Encoder
from ._identity import ModelIdentity, fingerprint, identify, locate
from ._loading import load_encoder

logger = logging.getLogger(__name__)


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
    def fitted(cls, spec, device: str, precision: str, batch_tokens: Optional[int],
               backend: str = "torch") -> "EncoderRef":
        """Resolve ``spec`` now (absolute path, package, cached snapshot) and record its identity."""
        identity = identify(spec)
        load_spec = identity.location if identity.kind == "path" else identity.spec
        return cls(load_spec, device, precision, batch_tokens, identity, backend)

    def options(self) -> dict:
        return {} if self.batch_tokens is None else {"batch_tokens": self.batch_tokens}

    def cache_key(self) -> str:
        """A hash naming this encoder's outputs: resolved device type and precision, and the model's
        files (their content, not their path: the same model anywhere shares its cache entries)."""
        from .._runtime.devices import resolve_device, resolve_precision

        device = resolve_device(self.device)
        # what the encoder runs ("auto" differs across machines, and int8 falls back where it would
        # change the features): its outputs are never mixed with another precision's
        running = getattr(get_encoder(self), "precision", None) if self.precision == "auto" else None
        precision = running or resolve_precision(self.precision, device)  # static vectors have none
        if self.identity is not None:
            model = self.identity.fingerprint
        else:
            model = self.spec + ":" + (fingerprint(self.spec) if os.path.exists(self.spec) else "")
        backend = get_encoder(self).backend if self.backend == "auto" else self.backend
        return _store.encoder_key(model, device.type, precision, backend)


class EncoderCache:
    """Loaded encoders by their :class:`EncoderRef`, shared by the threads of a process.

    :data:`ENCODERS` is the process-wide one that every function below uses by default; a test or
    an embedding application can pass its own (``get_encoder(ref, cache=EncoderCache())``) to load
    apart from it. Unbounded: an encoder stays loaded until :meth:`clear` (what
    ``contextembed.sklearn.clear_encoders`` calls).
    """

    def __init__(self) -> None:
        self._encoders: dict[EncoderRef, Encoder] = {}
        self._lock = threading.Lock()

    def get(self, ref: EncoderRef) -> Optional[Encoder]:
        """The encoder loaded for ``ref``, or ``None``."""
        with self._lock:
            return self._encoders.get(ref)

    def put(self, ref: EncoderRef, encoder: Encoder) -> None:
        """Make ``encoder`` the one loaded for ``ref``."""
        with self._lock:
            self._encoders[ref] = encoder

    def get_or_load(self, ref: EncoderRef, load: Callable[[EncoderRef], Encoder]) -> Encoder:
        """The encoder loaded for ``ref``, or ``load(ref)`` kept for the next call. Loads run one at a
        time, so two threads asking for one reference load it once."""
        with self._lock:
            encoder = self._encoders.get(ref)
            if encoder is None:
                encoder = self._encoders[ref] = load(ref)
            return encoder

    def clear(self) -> None:
        """Forget every loaded encoder (frees their memory once nothing else holds them)."""
        with self._lock:
            self._encoders.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._encoders)


#: the encoders loaded in this process (the default of every function here)
ENCODERS = EncoderCache()


def get_encoder(ref: EncoderRef, cache: Optional[EncoderCache] = None) -> Encoder:
    """Load the encoder ``ref`` names, or return the one already loaded (in ``cache``, by default
    :data:`ENCODERS`, this process's).

    A precision ``fit`` pinned (:func:`resolved`) that cannot run on this machine's device runs as
    ``"auto"`` chooses here, with one :class:`~contextembed._runtime.devices.PrecisionChangedWarning`
    naming both."""
    return _cache(cache).get_or_load(ref, _load)


def _cache(cache: Optional[EncoderCache]) -> EncoderCache:
    """``cache``, or the process-wide one (an empty cache is falsy: never ``cache or ENCODERS``)."""
    return ENCODERS if cache is None else cache


def _load(ref: EncoderRef) -> Encoder:
    spec = ref.spec if ref.identity is None else locate(ref.identity)
    precision = fitted_precision(ref.precision, ref.device, f"the encoder {ref.spec!r}")
    encoder = load_encoder(spec, device=ref.device, precision=precision, backend=ref.backend, **ref.options())
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


def resolved(ref: EncoderRef, cache: Optional[EncoderCache] = None) -> EncoderRef:
    """``ref`` pinned to what its loaded encoder runs: ``backend="auto"`` replaced by the backend it
    chose (:func:`contextembed._runtime.backends.concrete_backend`) and ``precision="auto"`` by the precision
    it chose (int8, bf16, fp32 on a CPU; bf16 or fp16 on a GPU; what the engine measured). Every
    process loading the pinned reference (joblib, Ray and Dask workers, the estimator unpickled on
    another machine or after ``CONTEXTEMBED_TUNING=refresh``) runs the same numeric path; the loaded
    encoder is registered under it too (in ``cache``, by default :data:`ENCODERS`), so nothing reloads."""
    from .._runtime.backends import concrete_backend

    encoder = get_encoder(ref, cache)
    backend = concrete_backend(encoder)
    # static vectors have no precision: a float32 table
    precision = getattr(encoder, "precision", ref.precision) if ref.precision == "auto" else ref.precision
    pinned = dataclasses.replace(ref, backend=backend, precision=precision)
    if pinned != ref:
        register_encoder(pinned, encoder, cache)
    return pinned


def register_encoder(ref: EncoderRef, encoder: Encoder, cache: Optional[EncoderCache] = None) -> None:
    """Make ``encoder`` the one :func:`get_encoder` returns for ``ref`` (used by embedded weights)."""
    _cache(cache).put(ref, encoder)


def clear_encoders(cache: Optional[EncoderCache] = None) -> None:
    """Forget every loaded encoder (of ``cache``, by default :data:`ENCODERS`: this process's);
    frees their memory once nothing else holds them."""
    _cache(cache).clear()
