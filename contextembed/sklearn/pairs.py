"""TextPairEmbedder: features of sentence pairs from one joint pass of the encoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Optional, Union, get_args

import numpy as np

from ..options import check_choice
from ..pooling import LayerSpec, check_text_pooling, pool_subwords_numpy, pool_text_numpy
from ..tokenizers import get_tokenizer, tokenize_item
from ._base import LayerFeaturesBase, check_iterable, is_dataframe, reject_sparse
from ._encoding import CacheOption, encode_all
from .text import STREAM_TEXTS, _class_labels

PairFeatures = Literal["cls", "segments", "interactions"]
#: how many pooled vectors each kind of pair features joins
_VECTORS = {"cls": 1, "segments": 2, "interactions": 4}


def check_pair_features(value: str) -> str:
    return check_choice("pair_features", value, PairFeatures)


class TextPairEmbedder(LayerFeaturesBase):
    """Features of sentence pairs (entailment, paraphrase, question-answer relevance), as a
    scikit-learn transformer.

    A transformer reads each pair in one pass with its own pair template and segment ids
    (``[CLS] A [SEP] B [SEP]`` for BERT, ``<s> A </s></s> B </s>`` for RoBERTa), so each side's
    vectors are contextualised by the other; static vectors and ELMo encode each side on its own.
    The layers are combined as in :class:`TextEmbedder` (the same ``layers``, ``combine`` and learned
    scalar mix, shared by both sides).

    Parameters
    ----------
    encoder, layers, combine, subword_pooling, device, precision, batch_tokens, cache, n_jobs,
    embed_weights, max_epochs, validation_fraction, random_state
        As in :class:`TextEmbedder`.
    pair_features : {"cls", "segments", "interactions"}
        ``"cls"``: the pair's first piece ([CLS]/<s>; transformers only). ``"segments"``: each
        side's words pooled, ``[u; v]``. ``"interactions"`` (default): InferSent's
        ``[u; v; |u - v|; u * v]``.
    text_pooling : {"mean", "max"}
        How a side's words become ``u`` or ``v`` (an empty side pools to zeros).
    tokenizer : {"auto", "regex", "whitespace", "spacy"} or callable
        Splits raw strings into words (token lists are used as given).

    ``X`` is a sequence of ``(first, second)`` pairs of strings or token lists, or a two-column
    array or DataFrame of texts; ``y`` (optional) holds one class label per pair, used to learn the
    scalar mix through the same pair features.
    """

    def __init__(
        self,
        encoder: str = "minilm-l6",
        layers: LayerSpec = "all",
        combine: str = "scalar_mix",
        pair_features: PairFeatures = "interactions",
        subword_pooling: str = "first",
        text_pooling: str = "mean",
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
        self.pair_features = pair_features
        self.subword_pooling = subword_pooling
        self.text_pooling = text_pooling
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
        """Load the encoder; with class labels ``y`` and ``combine="scalar_mix"``, learn the mix."""
        pairs = self._pairs(X)
        if not pairs:
            raise ValueError("fit needs at least one pair; X is empty")
        check_pair_features(self.pair_features)
        if check_text_pooling(self.text_pooling) == "cls":
            raise ValueError("text_pooling='cls' does not apply to one side of a pair; use pair_features='cls' "
                             "for the pair's first piece, and text_pooling='mean' or 'max' for the sides")
        if self.text_pooling == "piece_mean":
            raise ValueError("text_pooling='piece_mean' is not available for the sides of a pair; use 'mean' or 'max'")
        encoder = self._setup()
        if self.pair_features == "cls" and not encoder.has_cls:
            raise ValueError(f"pair_features='cls' needs an encoder with a leading special piece; the {encoder.family} "
                             f"encoder {self.encoder!r} has none (use 'segments' or 'interactions')")
        self._n_features_out *= _VECTORS[self.pair_features]
        if y is not None and self.combine == "scalar_mix":
            _, codes = np.unique(_class_labels(y, len(pairs)), return_inverse=True)
            self._learn_pair_mix(pairs, codes)
        return self

    def transform(self, X) -> np.ndarray:
        """Pair features: ``(n_pairs, n_features)`` float32, one row per pair in input order."""
        self._check_fitted()
        pairs = self._pairs(X)
        if not pairs:
            return self._empty()
        if self.pair_features == "cls":
            return self._combine(self._layer_vectors(pairs)[0])
        u, v = (self._combine(side) for side in self._layer_vectors(pairs))
        parts = [u, v] if self.pair_features == "segments" else [u, v, np.abs(u - v), u * v]
        return np.hstack(parts).astype(np.float32, copy=False)

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y).transform(X)

    def _learn_pair_mix(self, pairs: list, codes: np.ndarray) -> None:
        vectors = self._layer_vectors(pairs)
        n = len(pairs)
        if self.pair_features == "cls":
            self._learn_mix(vectors[0], codes, np.arange(n))
            return
        # the two sides are rows of one (layers, 2n, width) array; each pair's window is (u, v)
        window = np.stack([np.arange(n), np.arange(n) + n], axis=1)
        self._learn_mix(np.concatenate(vectors, axis=1), codes, np.arange(n), window=window,
                        interactions=self.pair_features == "interactions")

    def _layer_vectors(self, pairs: list) -> tuple[np.ndarray, ...]:
        """Per-layer vectors: ``((selected_layers, n_pairs, width),)`` for ``"cls"``, else one such
        array per side. Pairs are encoded ``STREAM_TEXTS`` at a time (bounded memory)."""
        n_out = 1 if self.pair_features == "cls" else 2
        out = tuple(np.empty((len(self.layer_indexes_), len(pairs), self.width_), dtype=np.float32) for _ in range(n_out))
        index = list(self.layer_indexes_)
        for begin in range(0, len(pairs), STREAM_TEXTS):
            block = pairs[begin : begin + STREAM_TEXTS]
            encoded = encode_all(self.encoder_ref_, block, cache=self.cache, n_jobs=self.n_jobs, kind="pair")
            for i, pair in enumerate(encoded, start=begin):
                if self.pair_features == "cls":
                    out[0][:, i] = pair.cls[index]
                    continue
                for side, encoding in enumerate((pair.first, pair.second)):
                    words = pool_subwords_numpy(encoding.hidden[index], encoding.word_offsets, self.subword_pooling)
                    out[side][:, i] = pool_text_numpy(words, self.text_pooling)
        return out

    def _pairs(self, X) -> list[tuple[list[str], list[str]]]:
        """Pairs of token lists: raw strings are split by the tokenizer; every pair is checked."""
        split = get_tokenizer(self.tokenizer)
        pairs = []
        for i, pair in enumerate(_pair_rows(X)):
            if isinstance(pair, (str, bytes)) or not isinstance(pair, (list, tuple, np.ndarray)) or len(pair) != 2:
                raise TypeError(f"pair {i} is {type(pair).__name__} ({str(pair)[:40]!r}); expected a "
                                "(first, second) pair of texts or token lists")
            pairs.append(tuple(tokenize_item(side, split, f"pair {i}, side {k}") for k, side in enumerate(pair)))
        return pairs


#: what TextPairEmbedder takes as ``X``
PAIRS_EXPECTED = "a sequence of (first, second) pairs of texts or token lists, or a two-column array or DataFrame"


def _pair_rows(X) -> list:
    """Accept a sequence of pairs, or a two-column 2-D array or DataFrame of texts."""
    reject_sparse(X)
    if isinstance(X, (str, bytes)):
        raise TypeError("expected a sequence of (first, second) pairs, got a single string")
    if is_dataframe(X):
        if X.shape[1] != 2:
            columns = ", ".join(map(repr, list(X.columns)[:5]))
            raise TypeError(f"X is a DataFrame with {X.shape[1]} columns ({columns or 'none'}); expected two columns "
                            "of texts (first, second): pass them, e.g. X=df[['premise', 'hypothesis']]")
        X = X.to_numpy()
    X = check_iterable(X, "X", PAIRS_EXPECTED)
    if isinstance(X, np.ndarray):
        if X.ndim != 2 or X.shape[1] != 2:
            raise TypeError(f"expected pairs (a two-column array of texts), got an array of shape {X.shape}")
        return [tuple(row) for row in X]
    return list(X)


PAIR_FEATURES: tuple[str, ...] = get_args(PairFeatures)

__all__ = ["PAIR_FEATURES", "PairFeatures", "TextPairEmbedder", "check_pair_features"]
