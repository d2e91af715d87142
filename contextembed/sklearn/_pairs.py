"""TextPairEmbedder: features of sentence pairs from one joint pass of the encoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Optional, Union, get_args

import numpy as np

from .._inputs.options import check_choice
from ..pooling import LayerSpec, check_text_pooling
from ..pooling._layers import OutputDtype
from ._base import LayerFeaturesBase
from ._checks import check_pairs
from ._encoding import CacheOption
from ._parameters import shared_docs, store_parameters
from ._text import STREAM_TEXTS

PairFeatures = Literal["cls", "segments", "interactions"]
#: how many pooled vectors each kind of pair features joins
_VECTORS = {"cls": 1, "segments": 2, "interactions": 4}


def check_pair_features(value: str) -> str:
    return check_choice("pair_features", value, PairFeatures)


@shared_docs
class TextPairEmbedder(LayerFeaturesBase):
    """Features of sentence pairs (entailment, paraphrase, question-answer relevance), as a
    scikit-learn transformer.

    A transformer reads each pair in one pass with its own pair template and segment ids
    (``[CLS] A [SEP] B [SEP]`` for BERT, ``<s> A </s></s> B </s>`` for RoBERTa), so each side's
    vectors are contextualised by the other; static vectors and ELMo encode each side on its own.
    The layers are combined as in :class:`TextEmbedder` (the same ``layers``, ``combine`` and learned
    scalar mix, shared by both sides).

    ``X`` is a sequence of ``(first, second)`` pairs of strings or token lists, or a two-column
    array or DataFrame of texts; ``y`` (optional) holds one class label per pair, used to learn the
    scalar mix through the same pair features.

    Parameters
    ----------
    $model_parameters
    pair_features : {"cls", "segments", "interactions"}
        ``"cls"``: the pair's first piece ([CLS]/<s>; transformers only). ``"segments"``: each
        side's words pooled, ``[u; v]``. ``"interactions"`` (default): InferSent's
        ``[u; v; |u - v|; u * v]``.
    text_pooling : {"mean", "max"}
        How a side's words become ``u`` or ``v`` (an empty side pools to zeros).
    tokenizer : {"auto", "regex", "whitespace", "spacy"} or callable
        Splits raw strings into words (token lists are used as given).
    $run_parameters

    $fitted_attributes
    """

    FITTED_OPTIONS = ("subword_pooling", "text_pooling", "pair_features")

    def __init__(
        self,
        # the parameters every layer-feature estimator shares are defined in _parameters.py
        encoder: str = "minilm-l6", layers: LayerSpec = "all", combine: str = "scalar_mix",
        pair_features: PairFeatures = "interactions",
        subword_pooling: str = "first",
        text_pooling: str = "mean",
        tokenizer: Union[str, Callable[[str], list]] = "auto",
        device: str = "auto", precision: str = "auto", backend: str = "torch", batch_tokens: Optional[int] = None, cache: CacheOption = "memory",
        n_jobs: Optional[int] = None, embed_weights: bool = False,
        max_epochs: int = 20, validation_fraction: float = 0.1, random_state=0, show_progress: bool = False,
        dtype: OutputDtype = "float32", cache_dtype: OutputDtype = "float32",
    ) -> None:
        store_parameters(self, locals())

    def fit(self, X, y=None):
        """Load the encoder; with class labels ``y`` and ``combine="scalar_mix"``, learn the mix."""
        return self._fit(check_pairs(X, self.tokenizer, fit=True), y)

    def transform(self, X) -> np.ndarray:
        """Pair features: ``(n_pairs, n_features)`` in ``dtype`` (float32 by default), one row per pair in
        input order."""
        self._check_fitted()
        return self._pair_features(check_pairs(X, self.tokenizer))

    def fit_transform(self, X, y=None, **fit_params):
        """:meth:`fit`, then :meth:`transform` of the same pairs (each pair tokenized and checked once).

        Parameters
        ----------
        X : sequence of (first, second) pairs
            Pairs of strings (split by ``tokenizer``) or of token lists, or a two-column array or
            DataFrame of texts.
        y
            As :meth:`fit` takes it.

        Returns
        -------
        np.ndarray
            ``(n_pairs, n_features)``, as :meth:`transform` returns it.
        """
        pairs = check_pairs(X, self.tokenizer, fit=True)
        return self._fit(pairs, y)._pair_features(pairs)

    def _fit(self, pairs: list, y) -> "TextPairEmbedder":
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
        self._n_features_out *= _VECTORS[self.pair_features_]
        codes = self._mix_codes(y, len(pairs), "pair")
        if codes is not None:
            self._learn_pair_mix(pairs, codes)
        return self

    def _column_names(self) -> list[str]:
        """Each side's columns (``a_``, ``b_``), then for ``"interactions"`` their absolute difference
        (``abs_diff_``) and product (``product_``), as :meth:`_pair_features` stacks them."""
        names = super()._column_names()
        if self.pair_features_ == "cls":
            return names
        parts = ("a", "b") if self.pair_features_ == "segments" else ("a", "b", "abs_diff", "product")
        return [f"{part}_{name}" for part in parts for name in names]

    def _pair_features(self, pairs: list) -> np.ndarray:
        if not pairs:
            return self._empty()
        if self.pair_features_ == "cls":
            return self._output(self._combine(self._layer_vectors(pairs)[0]))
        u, v = (self._combine(side) for side in self._layer_vectors(pairs))
        parts = [u, v] if self.pair_features_ == "segments" else [u, v, np.abs(u - v), u * v]
        return self._output(np.hstack(parts).astype(np.float32, copy=False))

    def _learn_pair_mix(self, pairs: list, codes: np.ndarray) -> None:
        vectors = self._layer_vectors(pairs)
        n = len(pairs)
        if self.pair_features_ == "cls":
            self._learn_mix(vectors[0], codes, np.arange(n))
            return
        # the two sides are rows of one (layers, 2n, width) array; each pair's window is (u, v)
        window = np.stack([np.arange(n), np.arange(n) + n], axis=1)
        self._learn_mix(np.concatenate(vectors, axis=1), codes, np.arange(n), window=window,
                        interactions=self.pair_features_ == "interactions")

    def _layer_vectors(self, pairs: list) -> tuple[np.ndarray, ...]:
        """Per-layer vectors: ``((selected_layers, n_pairs, width),)`` for ``"cls"``, else one such
        array per side. Pairs are encoded ``STREAM_TEXTS`` at a time (bounded memory)."""
        n_out = 1 if self.pair_features_ == "cls" else 2
        out = tuple(self._reserved((len(self.layer_indexes_), len(pairs), self.width_), "the pairs' layer vectors")
                    for _ in range(n_out))
        # each side pooled where the encoder ran (or only the pair's first piece comes back, "cls")
        options = (self.subword_pooling_, "cls" if self.pair_features_ == "cls" else self.text_pooling_)
        with self._progress("pair_layers") as progress:  # one bar for all blocks
            for begin in range(0, len(pairs), STREAM_TEXTS):
                block = pairs[begin : begin + STREAM_TEXTS]
                stored = self._stored(block, "pair_layers", progress, options)
                # (pairs * sides, layers, width) -> (pairs, sides, layers, width)
                rows = stored.items(0, len(block), self.layer_indexes_).reshape(len(block), n_out, *out[0].shape[::2])
                for side, side_out in enumerate(out):
                    side_out[:, begin : begin + len(block)] = rows[:, side].transpose(1, 0, 2)
        return out


PAIR_FEATURES: tuple[str, ...] = get_args(PairFeatures)

__all__ = ["PAIR_FEATURES", "PairFeatures", "TextPairEmbedder", "check_pair_features"]
