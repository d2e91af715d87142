"""TokenEmbedder: one layer-pooled vector per input token."""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._inputs.documents import check_context, in_context
from ..pooling import LayerSpec
from ..pooling._layers import OutputDtype
from ._base import LayerFeaturesBase
from ._checks import DocIds, TokenLists, check_codes, check_doc_ids, check_token_lists, token_labels
from ._base import POOL_ROWS
from ._encoding import CacheOption, LayerRows
from ._parameters import shared_docs, store_parameters


@shared_docs
class TokenEmbedder(LayerFeaturesBase):
    """Contextual word vectors from a frozen encoder, as a scikit-learn transformer.

    ``X`` is a list of token lists. :meth:`transform` returns one row per token, sentence after
    sentence in input order (rows ``sum(len(s) for s in X[:i])`` onwards belong to sentence ``i``);
    :meth:`transform_sentences` returns one array per sentence instead.

    Documents: every method that encodes takes ``doc_ids``, one document id per sentence (like
    scikit-learn's ``groups``; each document's sentences consecutive in ``X``). Without it, ``X``'s
    order is one document. Documents matter only with ``context``.

    Parameters
    ----------
    $model_parameters
    context : int
        Encode each sentence with up to this many pieces of its document's text before it and after
        it in the same model input (BERT's feature-based NER); only
        the sentence's own words' rows come out. 0 (default): each sentence alone. Transformers
        only; at most the pieces one model input holds. Longer inputs cost more encoding time.
    $run_parameters

    $fitted_attributes
    """

    def __init__(
        self,
        # the parameters every layer-feature estimator shares are defined in _parameters.py
        encoder: str = "minilm-l6", layers: LayerSpec = "all", combine: str = "scalar_mix",
        subword_pooling: str = "first", context: int = 0,
        device: str = "auto", precision: str = "auto", backend: str = "torch", batch_tokens: Optional[int] = None,
        cache: CacheOption = "memory",
        n_jobs: Optional[int] = None, embed_weights: bool = False,
        max_epochs: int = 20, validation_fraction: float = 0.1, random_state=0, show_progress: bool = False,
        dtype: OutputDtype = "float32", cache_dtype: OutputDtype = "float32",
    ) -> None:
        store_parameters(self, locals())

    def fit(self, X, y=None, doc_ids=None):
        """Load the encoder; with ``y`` and ``combine="scalar_mix"``, learn the mix for the task.

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        y : list of list of labels, or array of one label per token, optional
            Token labels (e.g. NER tags). Only used to learn the scalar mix.
        doc_ids : sequence, optional
            One document id per sentence (see the class docstring).
        """
        sentences = check_token_lists(X, fit=True)
        documents = check_doc_ids(doc_ids, len(sentences))
        self.context_ = check_context(self.context, self._setup())
        if y is not None:  # checked whether or not the mix learns from it
            _, codes = np.unique(token_labels(sentences, y), return_inverse=True)
            self.fit_mix(sentences, codes, doc_ids=documents)
        return self

    def fit_mix(self, X, codes: np.ndarray, *, window: Optional[np.ndarray] = None, extra: Optional[np.ndarray] = None,
                doc_ids=None):
        """Learn the scalar mix (``combine="scalar_mix"``) for per-token classes, with context.

        The hook a tagger uses to learn the mix with the same inputs its classifier sees (ELMo's
        recipe): a linear softmax probe over each token's mixed vector, ``extra`` features and its
        ``window`` neighbours, early-stopped on held-out sentences. The estimator must be fitted
        (``fit(X)`` loads the encoder); a no-op for other combinations or a single layer.

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        codes : np.ndarray
            ``(tokens,)`` int class index of every token, sentence after sentence.
        window : np.ndarray, optional
            ``(tokens, n_window)`` rows of each token's neighbours, ``-1`` beyond the sentence (the
            rows :func:`contextembed.sklearn.feature_extraction.context_window` concatenates);
            default: the token alone.
        extra : np.ndarray, optional
            ``(tokens, n_extra)`` float32 features joined to the mixed vector (e.g. word shape).
        doc_ids : sequence, optional
            One document id per sentence (see the class docstring).

        Returns
        -------
        self
        """
        self._check_fitted()
        sentences = check_token_lists(X)
        documents = check_doc_ids(doc_ids, len(sentences))
        return self._fit_mix_rows(self._word_rows(sentences, documents), sentences, codes, window=window, extra=extra)

    def _fit_mix_rows(self, rows: LayerRows, sentences: TokenLists, codes: np.ndarray, *,
                      window: Optional[np.ndarray] = None, extra: Optional[np.ndarray] = None):
        """:meth:`fit_mix` on the checked ``sentences``' stored ``rows`` (:meth:`layer_rows`)."""
        n_tokens = sum(len(s) for s in sentences)
        codes = check_codes(codes, n_tokens)
        if self.pooling_.mix is None:  # fitted with fixed weights
            return self
        if n_tokens == 0:
            raise ValueError(f"the scalar mix is learned from labelled tokens, but all {len(sentences)} sentences of X "
                             "are empty; pass sentences with tokens, or fit without y")
        groups = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
        self._learn_mix(rows, codes, groups, window=window, extra=extra)
        return self

    def transform(self, X, doc_ids=None) -> np.ndarray:
        """Token features.

        Parameters
        ----------
        X : list of list of str
        doc_ids : sequence, optional
            One document id per sentence (see the class docstring).

        Returns
        -------
        np.ndarray
            ``(total_tokens, n_features)`` in ``dtype`` (float32 by default), one row per token in input
            order.
        """
        self._check_fitted()
        return self._token_features(*self._checked(X, doc_ids))

    def transform_layers(self, X, doc_ids=None) -> np.ndarray:
        """The selected layers of every token, not combined: ``(selected_layers, total_tokens, width)``
        float32, tokens in input order (for models that learn their own mix, e.g.
        :class:`BiLSTMCRFTagger`)."""
        self._check_fitted()
        layers = self._selected_words(*self._checked(X, doc_ids))
        if not np.isfinite(layers).all():
            raise FloatingPointError(
                f"the encoder {self.encoder!r} at precision={self.precision!r} produced NaN or inf features; "
                "use precision='fp32'"
            )
        return layers

    def transform_sentences(self, X, doc_ids=None) -> list[np.ndarray]:
        """Like :meth:`transform`, split per sentence: a list of ``(tokens, n_features)`` arrays."""
        self._check_fitted()
        sentences, documents = self._checked(X, doc_ids)
        features = self._token_features(sentences, documents)
        bounds = np.cumsum([len(s) for s in sentences])[:-1]
        return np.split(features, bounds) if sentences else []

    def fit_transform(self, X, y=None, doc_ids=None, **fit_params):
        """:meth:`fit`, then :meth:`transform` of the same sentences (each checked once).

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        y, doc_ids
            As :meth:`fit` takes them.

        Returns
        -------
        np.ndarray
            ``(total_tokens, n_features)``, as :meth:`transform` returns it.
        """
        sentences = check_token_lists(X, fit=True)
        documents = check_doc_ids(doc_ids, len(sentences))
        return self.fit(sentences, y, doc_ids=documents)._token_features(sentences, documents)

    def __setstate__(self, state):
        super().__setstate__({"context": 0, **state})  # an embedder pickled before context existed: 0

    @staticmethod
    def _checked(X, doc_ids) -> tuple[TokenLists, Optional[DocIds]]:
        sentences = check_token_lists(X)
        return sentences, check_doc_ids(doc_ids, len(sentences))

    def _token_features(self, sentences: TokenLists, documents: Optional[DocIds] = None,
                        rows: Optional[LayerRows] = None) -> np.ndarray:
        """``(total_tokens, n_features)`` in ``dtype`` of checked sentences (from their stored
        ``rows`` where the caller has them)."""
        if sum(len(s) for s in sentences) == 0:
            return self._empty()
        return self._output(self._combine_rows(rows if rows is not None else self._word_rows(sentences, documents)))

    def _selected_words(self, sentences: TokenLists, documents: Optional[DocIds] = None) -> np.ndarray:
        """``(selected_layers, words, width)`` float32 for all sentences (its memory reserved first)."""
        rows = self._word_rows(sentences, documents)
        out = self._reserved((len(self.layer_indexes_), rows.n_rows, self.width_), "the selected layers")
        for begin in range(0, rows.n_rows, POOL_ROWS):
            end = min(begin + POOL_ROWS, rows.n_rows)
            out[:, begin:end] = rows.take(np.arange(begin, end)).numpy()
        return out

    def layer_rows(self, X, doc_ids=None) -> LayerRows:
        """The selected layers of every token, read from the feature store a batch at a time (what a
        tagger trains on: :class:`BiLSTMCRFTagger`), without building them all in memory."""
        self._check_fitted()
        return self._word_rows(*self._checked(X, doc_ids))

    def _word_rows(self, sentences: TokenLists, documents: Optional[DocIds] = None) -> LayerRows:
        """Every token's selected layers, kept in the store: each sentence alone, or (``context``)
        inside its document's text."""
        context = getattr(self, "context_", 0)  # absent from embedders pickled before context existed
        if sum(len(s) for s in sentences) == 0:
            return LayerRows(np.zeros((len(self.layer_indexes_), 0, self.width_), dtype=np.float32))
        options = (self.subword_pooling_,)
        if not context:
            return LayerRows(self._stored(sentences, "sentence", options=options), self.layer_indexes_)
        items = list(in_context(sentences, documents, context))
        return LayerRows(self._stored(items, "in_context", options=options), self.layer_indexes_)
