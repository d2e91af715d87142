"""One engine-independent piece: a picklable callable that maps a batch of rows to features.

:class:`BatchEmbedder` is what Ray actors and Dask tasks run. It is built on the driver from an
encoder spec and the same options as :class:`~contextembed.extraction.FeatureExtractor` (and
``contextembed embed``), or from a fitted :class:`~contextembed.sklearn.TokenEmbedder` /
:class:`~contextembed.sklearn.TextEmbedder` (with its learned scalar mix). Pickling it sends only
the spec and the options (or the estimator, whose pickle holds a model reference unless
``embed_weights=True``); the encoder is loaded in the worker process on first use, through the
process-wide registry (:func:`contextembed.encoders._registry.get_encoder`), so once per process
however many tasks or batches run there.

A batch is a ``pyarrow.Table``, a ``pandas.DataFrame``, a dict of NumPy arrays (Ray's batch
formats) or a plain list of rows (a Dask bag partition). Rows come from one column: ``"tokens"``
(a list of str per row) or ``"text"`` (a str, split by ``tokenizer``). The result is the same kind
of batch with a ``features`` column added (the other columns are kept), or a list for a list:

- ``level="word"``: per row a float32 ``(tokens, dim)`` array, one row per input token;
- ``level="text"``: per row a float32 ``(dim,)`` vector.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Optional, Union

import numpy as np

from ..encoders._base import check_encodable, unencodable_position
from ..encoders._registry import EncoderRef
from ..io._settings import EmbedSettings
from ..tokenizers import get_tokenizer
from ..pooling import LayerSpec
from . import _arrow as arrow

#: the input columns looked for, in order, when ``column`` is not given
INPUT_COLUMNS = ("tokens", "text")
#: the column added to every batch
FEATURES = "features"


class BatchEmbedder:
    """Features for batches of rows; the encoder loads lazily, once per process.

    Parameters
    ----------
    source : str, path, TokenEmbedder or TextEmbedder
        An encoder spec (what :func:`contextembed.load_encoder` takes: ``"minilm-l6"``, a model
        directory, a vectors file), or a fitted estimator (its pooling, learned mix included, is
        used as fitted; the options below must then be left unset).
    layers, combine, subword_pooling, text_pooling
        As in :class:`~contextembed.extraction.FeatureExtractor` (``None``: the defaults of ``level``,
        :data:`~contextembed.extraction.LEVEL_DEFAULTS`; at text level the default text vector,
        normalised, as ``contextembed embed --level text``).
    level : {"word", "text"}
        One ``(tokens, dim)`` array per row, or one ``(dim,)`` vector per row. From an estimator:
        ``"word"`` for a TokenEmbedder, ``"text"`` for a TextEmbedder.
    tokenizer : {"auto", "regex", "whitespace", "spacy"}
        Splits a ``text`` column into tokens (as ``contextembed embed --tokenizer``, with its
        defaults per level). An estimator tokenizes with its own ``tokenizer``.
    device, precision, backend, batch_tokens
        Passed to :func:`contextembed.load_encoder` in each worker (``precision="fp32"`` gives the
        same features as the single-process path within 1e-5; see ``docs/reliability.md``).
        ``backend="auto"`` (and ``precision="auto"`` on the engine) is resolved here, on the
        driver, by loading the encoder once (:func:`pinned_backend`): every worker runs the same path.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    column : str, optional
        The input column (default: ``"tokens"`` if present, else ``"text"``).
    id_column : str, optional
        A column whose value names a malformed row in errors (``row <id_column>=<value>``);
        without it a row is named by its pandas index label (Dask: the global row label) or its
        position in the batch.
    """

    def __init__(
        self,
        source,
        *,
        layers: Optional[LayerSpec] = None,
        combine: Optional[str] = None,
        subword_pooling: Optional[str] = None,
        level: Optional[str] = None,
        text_pooling: Optional[str] = None,
        tokenizer: Optional[str] = None,
        device: Optional[str] = None,
        precision: Optional[str] = None,
        backend: Optional[str] = None,
        batch_tokens: Optional[int] = None,
        column: Optional[str] = None,
        id_column: Optional[str] = None,
    ) -> None:
        options = {"layers": layers, "combine": combine, "subword_pooling": subword_pooling, "level": level,
                   "text_pooling": text_pooling, "tokenizer": tokenizer, "device": device,
                   "precision": precision, "backend": backend, "batch_tokens": batch_tokens}
        if isinstance(source, (str, os.PathLike)):
            self.estimator = None
            settings = _settings(_absolute_if_local(source), options)
            #: what the features are made with, checked once here; backend="auto" pinned (pinned_backend)
            self.settings = settings.running(pinned_backend(settings.encoder_ref))
            self.spec, self.level = self.settings.encoder_ref.spec, self.settings.level
        else:
            self.spec, self.estimator, self.settings = None, _for_workers(source, options), None
            self.level = "word" if _is_token_embedder(source) else "text"
        self.column, self.id_column = column, id_column
        self._extractor = None
        # what precision="auto" measured here: workers adopt it, so that all of them pick the same
        # precision (measured in each, the choice could differ between workers under load)
        precision = self.settings.encoder_ref.precision if self.estimator is None else self.estimator.precision
        self._speedups = _auto_speedups() if precision == "auto" else {}

    @property
    def options(self) -> dict:
        """The settings as keywords (``{}`` for an estimator source): what the workers run."""
        if self.settings is None:
            return {}
        return {**self.settings.keywords(), "batch_tokens": self.settings.encoder_ref.batch_tokens}

    # -- loading ------------------------------------------------------------------------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_extractor"] = None  # never ship a loaded model: each process loads its own
        return state

    def load(self) -> "BatchEmbedder":
        """Load the encoder in this process now (a worker calls it once, at start-up)."""
        from .._runtime.devices import adopt_speedups
        from ..encoders._registry import get_encoder

        adopt_speedups(self._speedups)
        if self.estimator is not None:
            get_encoder(self.estimator.encoder_ref_)
            return self
        if self._extractor is None:
            from ..extraction import FeatureExtractor

            s = self.settings
            self._extractor = FeatureExtractor(get_encoder(s.encoder_ref), s.layers, s.combine, s.subword_pooling,
                                               s.text_pooling, s.normalize, level=s.level)
        return self

    @property
    def dim(self) -> int:
        """Width of one feature row (loads the encoder)."""
        if self.estimator is not None:
            return len(self.estimator.get_feature_names_out())
        return self.load()._extractor.dim

    # -- batches ------------------------------------------------------------------------------

    def __call__(self, batch):
        """Features for one batch (see the module docstring for the kinds of batch)."""
        if isinstance(batch, list):
            return self.embed_rows(batch)
        if arrow.is_table(batch):
            column = self.input_column(batch.column_names)
            ids = batch.column(self.id_column).to_pylist() if self.id_column else None
            rows = self.embed_rows(batch.column(column).to_pylist(), self._names(ids, batch.num_rows), kind=column)
            return arrow.with_features(batch, rows, self.level, self.dim, FEATURES)
        if hasattr(batch, "iloc"):  # a pandas DataFrame: rows are named by their index label
            column = self.input_column(list(batch.columns))
            ids = batch[self.id_column].tolist() if self.id_column else None
            names = self._names(ids, len(batch)) if ids else [f"row {label}" for label in batch.index.tolist()]
            out = batch.copy()
            out[FEATURES] = self.embed_rows(batch[column].tolist(), names, kind=column)
            return out
        if isinstance(batch, dict):
            column = self.input_column(list(batch))
            ids = list(batch[self.id_column]) if self.id_column else None
            rows = self.embed_rows(list(batch[column]), self._names(ids, len(batch[column])), kind=column)
            return {**batch, FEATURES: _numpy_column(rows, self.level, self.dim)}
        raise TypeError(
            f"a batch must be a pyarrow Table, a pandas DataFrame, a dict of arrays or a list of rows; got "
            f"{type(batch).__name__}"
        )

    def embed_rows(self, rows: Sequence, names: Optional[Sequence[str]] = None, *, kind: Optional[str] = None
                   ) -> list[np.ndarray]:
        """Features of ``rows`` (token lists or texts), one float32 array per row, in order.

        ``names`` name the rows in errors (default: ``"row <position>"``). ``kind`` ``"tokens"``
        accepts token lists only, ``"text"`` strings only, anything else both.

        Raises
        ------
        TypeError, ValueError
            A row that is not a token list of str (``tokens``) or a str (``text``), or holds a
            lone surrogate; the message names the row (and token).
        """
        names = [f"row {i}" for i in range(len(rows))] if names is None else names
        if self.estimator is not None:
            return self._estimator_rows(rows, names, kind)
        sentences = [self._tokens(row, name, kind) for row, name in zip(rows, names)]
        self.load()
        if self.level == "word":
            return list(self._extractor.iter_words(sentences))
        return list(self._extractor.iter_texts(sentences))

    def row_lengths(self, rows: Sequence) -> list[int]:
        """Tokens per row, as the embedder splits and checks them (no encoder needed)."""
        return [len(self._tokens(row, f"row {i}")) for i, row in enumerate(rows)]

    # -- helpers ------------------------------------------------------------------------------

    def input_column(self, columns: Sequence[str]) -> str:
        """The input column among ``columns`` (``column``, else ``tokens``, else ``text``)."""
        if self.id_column is not None and self.id_column not in columns:
            raise ValueError(f"the batch has no id column {self.id_column!r}; its columns are {list(columns)}")
        if self.column is not None:
            if self.column not in columns:
                raise ValueError(f"the batch has no column {self.column!r}; its columns are {list(columns)}")
            return self.column
        for name in INPUT_COLUMNS:
            if name in columns:
                return name
        raise ValueError(
            f"the batch has neither a 'tokens' (list of str) nor a 'text' (str) column; its columns are "
            f"{list(columns)}: pass column=<name>"
        )

    def _names(self, ids: Optional[list], n_rows: int) -> list[str]:
        if ids is None:
            return [f"row {i} of the batch" for i in range(n_rows)]
        return [f"row {self.id_column}={value!r}" for value in ids]

    def _tokens(self, row, name: str, kind: Optional[str] = None) -> list[str]:
        """One row as a checked token list (a str is split by the tokenizer)."""
        _check_kind(row, name, kind)
        if isinstance(row, str):
            tokenizer = self.settings.tokenizer if self.settings is not None else "whitespace"
            return get_tokenizer(tokenizer)(_checked_text(row, name))
        if isinstance(row, np.ndarray) and row.ndim == 1:
            row = row.tolist()
        if not isinstance(row, (list, tuple)):
            raise TypeError(f"{name} is {type(row).__name__} ({_shown(row)}); expected a list of str tokens or a str")
        for j, token in enumerate(row):
            if not isinstance(token, str):
                raise TypeError(f"{name}, token {j} is {type(token).__name__} ({_shown(token)}); every token "
                                "must be a str")
        check_encodable(row, name, unit="token")
        return list(row)

    def _estimator_rows(self, rows: Sequence, names: list[str], kind: Optional[str]) -> list[np.ndarray]:
        """A TextEmbedder gets texts as they are (it tokenizes them itself) and checked token lists."""
        checked = []
        for row, name in zip(rows, names):
            keep = isinstance(row, str) and self.level == "text"
            checked.append(_checked_text(row, name) if keep and not _check_kind(row, name, kind) else
                           self._tokens(row, name, kind))
        if self.level == "text":
            features = self.estimator.transform(checked) if checked else np.zeros((0, self.dim), np.float32)
            return list(features)
        return self.estimator.transform_sentences(checked) if checked else []


def _check_kind(row, name: str, kind: Optional[str]) -> None:
    """A ``tokens`` row must be a token list, a ``text`` row a str (no silent re-reading of one as the other)."""
    if kind == "tokens" and isinstance(row, str):
        raise TypeError(
            f"{name} of the 'tokens' column is a str ({_shown(row)}); expected a list of str tokens (a column of "
            "texts belongs in 'text'; a dataframe library may have turned the lists into their text)"
        )
    if kind == "text" and not isinstance(row, str):
        raise TypeError(f"{name} of the 'text' column is {type(row).__name__} ({_shown(row)}); expected a str")


def _checked_text(text: str, name: str) -> str:
    position = unencodable_position(text)
    if position is not None:
        raise ValueError(
            f"{name} holds {text[position]!r} at character {position}, a lone surrogate that cannot be encoded "
            "as UTF-8; decode the input as UTF-8 or remove the character"
        )
    return text


def _shown(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _numpy_column(rows: list[np.ndarray], level: str, dim: int) -> np.ndarray:
    if level == "text":
        return np.stack(rows) if rows else np.zeros((0, dim), np.float32)
    column = np.empty(len(rows), dtype=object)
    column[:] = rows
    return column


def _absolute_if_local(spec) -> str:
    """A spec that names a local path, made absolute (a worker's working directory may differ)."""
    text = os.fspath(spec)
    return os.path.abspath(text) if os.path.exists(text) else text


def _settings(spec: str, options: dict) -> EmbedSettings:
    """The options of a spec source as :class:`~contextembed.io._settings.EmbedSettings` (checked
    there, as ``embed_file``'s: ``None`` is each one's default, a text option at word level an error)."""
    ref = EncoderRef(spec, options["device"] or "auto", options["precision"] or "auto", options["batch_tokens"],
                     backend=options["backend"] or "torch")
    return EmbedSettings(ref, tokenizer=options["tokenizer"], layers=options["layers"], combine=options["combine"],
                         subword_pooling=options["subword_pooling"], level=options["level"] or "word",
                         text_pooling=options["text_pooling"])


def _is_token_embedder(estimator) -> bool:
    from ..sklearn import TextEmbedder, TokenEmbedder

    if isinstance(estimator, TokenEmbedder):
        return True
    if isinstance(estimator, TextEmbedder):
        return False
    raise TypeError(
        f"source must be an encoder spec (str or path) or a fitted TokenEmbedder/TextEmbedder, got "
        f"{type(estimator).__name__}"
    )


def _for_workers(estimator, options: dict):
    """A shallow copy of a fitted estimator that runs in one process: no cache, no joblib workers.

    A streamed corpus never repeats a sentence, so the encode cache would only hold memory, and the
    engine, not joblib, decides the parallelism. The fitted state (pooling, learned mix, model
    reference) is shared with the original, which is left unchanged.
    """
    from sklearn.utils.validation import check_is_fitted

    _is_token_embedder(estimator)
    check_is_fitted(estimator)
    given = [name for name, value in options.items() if value is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} cannot be given with a fitted {type(estimator).__name__}: its own parameters "
            "(and learned mix) are used; set them on the estimator and fit it again"
        )
    copy = type(estimator).__new__(type(estimator))
    copy.__dict__.update(estimator.__dict__)
    copy.cache, copy.n_jobs = None, None
    return copy


Source = Union[str, os.PathLike, object]

__all__ = ["FEATURES", "INPUT_COLUMNS", "BatchEmbedder", "pinned_backend"]


def pinned_backend(ref: EncoderRef) -> EncoderRef:
    """``ref`` for workers: as given, except that ``backend="auto"`` (and ``precision="auto"`` on the
    engine, whose measurement workers cannot adopt) is resolved here by loading the encoder once in
    this process (:func:`contextembed.encoders._registry.resolved`), so that every worker runs the
    path chosen here rather than measuring on its own."""
    if ref.backend != "auto" and not (ref.backend == "openvino" and ref.precision == "auto"):
        return ref
    from ..encoders._registry import resolved

    pinned = resolved(ref)
    return dataclasses.replace(ref, backend=pinned.backend, precision=pinned.precision)


def _auto_speedups() -> dict[str, float]:
    """The measurements behind ``precision="auto"`` on this machine's CPU (taken now if not yet)."""
    from .._runtime.devices import cpu_speedups, measured_speedups

    cpu_speedups(int8_allowed=True)
    return measured_speedups()
