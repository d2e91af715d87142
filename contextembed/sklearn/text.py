"""TextEmbedder: one layer-pooled vector per text."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Optional, Union

import numpy as np
from sklearn.preprocessing import normalize as unit_rows

from ..pooling import LayerSpec, check_text_options, check_text_pooling, pool_subwords_numpy, pool_text_numpy
from ._base import LayerFeaturesBase, check_iterable, one_column, reject_sparse
from ..tokenizers import get_tokenizer, tokenize_item
from ._encoding import CacheOption

#: texts encoded per block in ``transform`` (bounds memory on large corpora)
STREAM_TEXTS = 4096


class TextEmbedder(LayerFeaturesBase):
    """Text vectors from a frozen encoder, as a scikit-learn transformer.

    Each text is encoded once with all layers; its words are pooled to one vector per layer
    (``text_pooling``), then the layers are combined (``layers``, ``combine``). For ``"mean"`` and
    ``"cls"`` pooling, and for ``combine="concat"``, this equals combining layers first.

    Parameters
    ----------
    encoder : str or path
        What :func:`contextembed.load_encoder` takes; loaded in ``fit``, shared by clones.
    layers : int, sequence of int, "all" or "hidden"
        Which encoder layers to use.
    combine : {"scalar_mix", "concat", "sum", "mean"}
        ``"scalar_mix"`` learns its weights in ``fit(X, y)`` with class labels ``y`` (jointly with
        a linear softmax probe, early-stopped on a held-out split); equal weights without ``y``.
    subword_pooling : {"mean", "first", "last", "first_last", "max"}
        How a word's pieces become one vector.
    text_pooling : {"piece_mean", "mean", "max", "cls"}
        How a text's words become one vector: ``"piece_mean"`` averages every piece of the text (a
        word of three pieces counts three times; needs ``subword_pooling="mean"``), ``"mean"``
        every word; ``"cls"`` (transformers only) takes the first special piece.
    normalize : bool
        Scale each text vector to unit length (an empty text stays all zeros), as
        sentence-transformers does. A classifier's regularisation (``C``) then means the same
        whatever the layers, combine or encoder; the scalar mix is learned on normalised vectors
        too. ``docs/sklearn.md`` has the SST-2 measurements behind this default and
        ``subword_pooling="mean"``.
    tokenizer : {"auto", "regex", "whitespace"} or callable
        Splits raw strings into words (token lists in ``X`` are used as given). ``"auto"``: words
        and punctuation marks, which suits static vectors and subword encoders alike.
    device, precision, batch_tokens, cache, n_jobs, embed_weights, max_epochs,
    validation_fraction, random_state
        As in :class:`TokenEmbedder`.

    Attributes
    ----------
    mix_weights_ : np.ndarray
        ``(selected_layers,)`` normalised mix weights (``combine="scalar_mix"`` only).
    gamma_ : float
        The mix's scale (``combine="scalar_mix"`` only).
    """

    def __init__(
        self,
        encoder: str = "minilm-l6",
        layers: LayerSpec = "all",
        combine: str = "scalar_mix",
        subword_pooling: str = "mean",
        text_pooling: str = "piece_mean",
        normalize: bool = True,
        tokenizer: Union[str, Callable[[str], list]] = "auto",
        device: str = "auto",
        precision: str = "auto",
        batch_tokens: Optional[int] = None,
        cache: CacheOption = "memory",
        n_jobs: Optional[int] = None,
        embed_weights: bool = False,
        max_epochs: int = 20,
        validation_fraction: float = 0.1,
        random_state=0,
    ) -> None:
        self.encoder = encoder
        self.layers = layers
        self.combine = combine
        self.subword_pooling = subword_pooling
        self.text_pooling = text_pooling
        self.normalize = normalize
        self.tokenizer = tokenizer
        self.device = device
        self.precision = precision
        self.batch_tokens = batch_tokens
        self.cache = cache
        self.n_jobs = n_jobs
        self.embed_weights = embed_weights
        self.max_epochs = max_epochs
        self.validation_fraction = validation_fraction
        self.random_state = random_state

    def fit(self, X, y=None):
        """Load the encoder; with class labels ``y`` and ``combine="scalar_mix"``, learn the mix.

        Parameters
        ----------
        X : iterable of str, or of token lists
            Raw texts (split by ``tokenizer``) or pre-tokenized texts; a one-column 2-D array or
            DataFrame of texts is accepted too.
        y : array-like of shape (n_texts,), optional
            Class labels; only used to learn the scalar mix.
        """
        texts = self._tokenize(X)
        if not texts:
            raise ValueError("fit needs at least one text; X is empty")
        check_text_pooling(self.text_pooling)
        if not isinstance(self.normalize, (bool, np.bool_)):
            raise TypeError(f"normalize must be True or False, got {self.normalize!r}")
        encoder = self._setup()
        check_text_options(self.text_pooling, self.subword_pooling, encoder.has_cls, f"the encoder {self.encoder!r}")
        if y is not None and self.combine == "scalar_mix":
            labels = _class_labels(y, len(texts))
            _, codes = np.unique(labels, return_inverse=True)
            self._learn_mix(self._layer_vectors(texts), codes, np.arange(len(texts)), normalize=bool(self.normalize))
        return self

    def transform(self, X) -> np.ndarray:
        """Text features.

        Returns
        -------
        np.ndarray
            ``(n_texts, n_features)`` float32, one row per text in input order.
        """
        self._check_fitted()
        texts = self._tokenize(X)
        if not texts:
            return self._empty()
        features = self._combine(self._layer_vectors(texts))
        return unit_rows(features) if self.normalize else features

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y).transform(X)

    def _layer_vectors(self, texts: list[list[str]]) -> np.ndarray:
        """Per-layer text vectors: ``(selected_layers, n_texts, width)`` float32.

        Texts are encoded ``STREAM_TEXTS`` at a time, so memory holds one block's all-layer encodings
        plus the output, whatever the corpus size.
        """
        out = np.empty((len(self.layer_indexes_), len(texts), self.width_), dtype=np.float32)
        index = list(self.layer_indexes_)
        for begin in range(0, len(texts), STREAM_TEXTS):
            block = texts[begin : begin + STREAM_TEXTS]
            if self.text_pooling == "piece_mean":  # with subword mean: the mean of every piece
                means = self._encodings(block, kind="piece_mean")
                out[:, begin : begin + len(block)] = np.stack(means, axis=1)[index]
                continue
            for i, encoding in enumerate(self._encodings(block), start=begin):
                if self.text_pooling == "cls":
                    out[:, i] = encoding.cls[index] if encoding.n_words else 0.0  # an empty text: zeros
                    continue
                words = pool_subwords_numpy(encoding.hidden[index], encoding.word_offsets, self.subword_pooling)
                out[:, i] = pool_text_numpy(words, self.text_pooling)
        return out

    def _tokenize(self, X) -> list[list[str]]:
        """Raw strings -> token lists with the tokenizer; token lists are checked and kept."""
        split = get_tokenizer(self.tokenizer)
        return [tokenize_item(item, split, f"text {i}") for i, item in enumerate(_column(X))]


#: what TextEmbedder takes as ``X``
TEXTS_EXPECTED = "an iterable of texts (str) or of token lists, e.g. ['EU rejects German call', 'Peter Blackburn']"


def _column(X) -> list:
    """Accept a list/Series of texts, or a one-column 2-D array/DataFrame of texts."""
    reject_sparse(X)
    if isinstance(X, str):
        raise TypeError("expected an iterable of texts, got a single string; pass [text]")
    X = check_iterable(one_column(X, "X", "texts"), "X", TEXTS_EXPECTED)
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        if X.ndim != 1 or (X.size and not all(isinstance(x, (str, list, tuple)) for x in X.ravel())):
            raise TypeError(
                f"expected texts (an iterable of str, or a one-column array of str), got an array of "
                f"shape {X.shape} and dtype {X.dtype}"
            )
    return list(X)


def _class_labels(y, n_texts: int) -> np.ndarray:
    """Check class labels once, at the entry: ``(n_texts,)``, all str, all numbers or all bools.

    Raises
    ------
    ValueError
        ``y`` has another length or shape, or a label is missing (``None``, NaN, NaT, ``pd.NA``),
        infinite or continuous; the message names its index and value.
    TypeError
        A label is not a str, number or bool, or ``y`` mixes them; the message names the index and
        value (nothing is turned into text silently).
    """
    if isinstance(y, (str, bytes)):
        raise TypeError("y must hold one class label per text, got a single string")
    values = np.asarray(y, dtype=object)  # the labels as given: [1, "a"] is not turned into ["1", "a"]
    if values.ndim != 1 or len(values) != n_texts:
        raise ValueError(f"y must hold one class label per text: {n_texts} texts, got y of shape {values.shape}")
    first = None
    for i, label in enumerate(values):
        kind = _label_kind(label, i)
        if first is None:
            first = (kind, i, label)
        elif kind != first[0]:
            raise TypeError(
                f"y mixes kinds of class labels: y[{first[1]}] is {type(first[2]).__name__} ({first[2]!r}) but y[{i}] "
                f"is {type(label).__name__} ({label!r}); use one kind (all str, all int or all bool)"
            )
    labels = np.asarray(values.tolist())
    if labels.dtype.kind == "f" and not np.all(np.mod(labels, 1) == 0):
        raise ValueError(
            "combine='scalar_mix' learns its weights from class labels, but y is continuous; use "
            "combine='mean' (or another fixed combine) for regression targets"
        )
    return labels


def _label_kind(label, i: int) -> str:
    """``"str"``, ``"number"`` or ``"bool"``; an error naming ``y[i]`` for anything else."""
    if _is_missing(label):
        raise ValueError(f"y[{i}] is {label!r}, a missing class label; give every text a label (drop the texts "
                         "without one, or give them a class of their own)")
    if isinstance(label, str):
        return "str"
    if isinstance(label, (bool, np.bool_)):
        return "bool"
    if isinstance(label, numbers.Real):
        if not math.isfinite(label):
            raise ValueError(f"y[{i}] is {label!r}; class labels are finite")
        return "number"
    raise TypeError(f"y[{i}] is {type(label).__name__} ({str(label)[:40]!r}); expected a class label (str, int or bool)")


def _is_missing(label) -> bool:
    """None, a NaN float, NumPy's NaT, or pandas' ``NA`` / ``NaT`` (pandas is not imported)."""
    if label is None or type(label).__name__ in ("NAType", "NaTType"):
        return True
    if isinstance(label, np.datetime64):
        return bool(np.isnat(label))
    return isinstance(label, numbers.Real) and not isinstance(label, numbers.Integral) and math.isnan(label)
