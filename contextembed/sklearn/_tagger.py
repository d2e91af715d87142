"""SequenceTagger: a feature-based tagger (e.g. NER) on frozen contextual word vectors."""

from __future__ import annotations

import logging
from typing import Literal, Optional, Union

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from ..encoders._base import Encoder, is_cased
from ._base import check_flag, checks_n_threads, head_threads
from ._checks import DocIds, TokenLists, check_doc_ids, check_tagged, check_token_lists
from ._parameters import shared_docs
from ._tagger_features import SHAPE_NAMES, context_window, shape_features, window_index
from ._scoring import EntityScoresMixin, detect_scheme
from ._token import TokenEmbedder

logger = logging.getLogger(__name__)


@shared_docs
class SequenceTagger(EntityScoresMixin, BaseEstimator):
    """Tag every token of pre-tokenized sentences from frozen encoder features.

    Each token is described by its pooled contextual vector (from ``embedder``), optionally
    word-shape flags (for encoders that cannot see case), and the same for its ``window``
    neighbours on each side; ``classifier`` predicts one tag per token. With
    ``combine="scalar_mix"`` the embedder's layer weights are first learned for the tags (ELMo's
    recipe: jointly with a linear softmax probe over the same window and shape features,
    early-stopped on a held-out split of the training sentences).

    Parameters
    ----------
    embedder : TokenEmbedder, optional
        The token features; default ``TokenEmbedder()`` (MiniLM-L6, scalar mix of all layers).
    classifier : sklearn classifier, optional
        Fitted on the token feature rows; default ``LogisticRegression(C=DEFAULT_C, max_iter=1000)``
        (see :data:`DEFAULT_C`).
    window : int
        Neighbouring words on each side whose features are concatenated (0: the token alone).
    shape_features : bool or "auto"
        Add word-shape flags (:data:`contextembed.sklearn.feature_extraction.SHAPE_NAMES`); ``"auto"``
        adds them when the encoder is uncased (lowercases its input).
    show_progress : bool
        Progress bars on stderr: the embedder's (the sentences it encodes, the epochs of mix
        training; ``True`` turns them on in the fitted ``embedder_``, which an embedder with
        ``show_progress=True`` does by itself). The classifier's fit draws none.
    $tagger_parameters

    Attributes
    ----------
    embedder_ : TokenEmbedder
        The fitted embedder.
    classifier_ : classifier
        The fitted classifier.
    classes_ : np.ndarray
        Tags seen in training; predictions are always among them.
    tag_scheme_ : {"IO", "IOB1", "IOB2", "IOBES", "BILOU"}
        Detected from the training tags; used by :meth:`score`.
    uses_shape_ : bool
        Whether shape features were used.
    window_ : int
        The ``window`` of ``fit``, which ``predict`` uses (a ``set_params`` after ``fit`` takes
        effect at the next ``fit``).
    mix_weights_, gamma_
        The embedder's learned mix (``combine="scalar_mix"`` only); plot it with
        :func:`contextembed.plotting.plot_layer_weights`.

    :meth:`score` gives the entity-level micro F1, :meth:`report` the scores per entity type.
    """

    def __init__(
        self,
        embedder: Optional[TokenEmbedder] = None,
        classifier=None,
        window: int = 1,
        shape_features: Union[bool, Literal["auto"]] = "auto",
        show_progress: bool = False,
        n_threads: Optional[int] = None,
    ) -> None:
        self.embedder = embedder
        self.classifier = classifier
        self.window = window
        self.shape_features = shape_features
        self.show_progress = show_progress
        self.n_threads = n_threads

    @checks_n_threads
    def fit(self, X, y, doc_ids=None):
        """Fit on tokenized sentences and their tags.

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        y : list of list of str
            One tag per token (IO, IOB1, IOB2/BIO, IOBES or BILOU; :func:`~contextembed.sklearn.metrics.detect_scheme`).
        doc_ids : sequence, optional
            One document id per sentence, handed to the embedder (it matters with its ``context``:
            :class:`TokenEmbedder`); without it ``X``'s order is one document.
        """
        sentences, y, tags = check_tagged(X, y, "SequenceTagger")
        documents = check_doc_ids(doc_ids, len(sentences))
        self._check_params()
        self.window_ = self.window
        self.tag_scheme_ = detect_scheme([[str(t) for t in tags_i] for tags_i in y], names=("y",))
        self.classes_, codes = np.unique(tags, return_inverse=True)
        self.embedder_ = with_progress(self.embedder if self.embedder is not None else TokenEmbedder(),
                                       self.show_progress).fit(sentences, doc_ids=documents)
        self.uses_shape_ = _resolve_shape(self.shape_features, self.embedder_.encoder_)
        lengths = [len(s) for s in sentences]
        extra = shape_features(sentences) if self.uses_shape_ else None
        rows = self.embedder_._word_rows(sentences, documents)  # encoded once, with the encoder's threads
        with head_threads(self):  # the mix is learned with the window and shape features the classifier will see
            self.embedder_._fit_mix_rows(rows, sentences, codes, window=window_index(lengths, self.window_),
                                         extra=extra)
        for name in ("mix_weights_", "gamma_"):
            if hasattr(self.embedder_, name):
                setattr(self, name, getattr(self.embedder_, name))
            else:
                self.__dict__.pop(name, None)  # from an earlier fit with another combine
        features = self._features(sentences, extra, documents, rows)
        self.classifier_ = clone(self.classifier if self.classifier is not None else _default_classifier())
        logger.info("SequenceTagger: fitting %s on %d tokens x %d features", type(self.classifier_).__name__,
                    *features.shape)
        with head_threads(self):
            self.classifier_.fit(features, tags)
        return self

    @checks_n_threads
    def predict(self, X, doc_ids=None) -> list[list[str]]:
        """Tags for every token: one list per sentence, ``len`` equal to the sentence's (``doc_ids``:
        one document id per sentence, as in :meth:`fit`)."""
        check_is_fitted(self)
        sentences = check_token_lists(X)
        documents = check_doc_ids(doc_ids, len(sentences))
        if sum(len(s) for s in sentences) == 0:
            return [[] for _ in sentences]
        extra = shape_features(sentences) if self.uses_shape_ else None
        features = self._features(sentences, extra, documents)
        with head_threads(self):
            predicted = np.asarray(self.classifier_.predict(features))
        bounds = np.cumsum([len(s) for s in sentences])[:-1]
        return [list(map(str, part)) for part in np.split(predicted, bounds)]

    def learned_layer_weights(self) -> list:
        """The embedder's learned scalar mix (:meth:`TokenEmbedder.learned_layer_weights`), for
        :func:`contextembed.plotting.plot_layer_weights`; a ``ValueError`` when it has none."""
        check_is_fitted(self)
        return self.embedder_.learned_layer_weights()

    @checks_n_threads
    def transform_features(self, X, doc_ids=None) -> np.ndarray:
        """The classifier's input rows: ``(total_tokens, n_features)`` float32."""
        check_is_fitted(self)
        sentences = check_token_lists(X)
        documents = check_doc_ids(doc_ids, len(sentences))
        extra = shape_features(sentences) if self.uses_shape_ else None
        return self._features(sentences, extra, documents)

    def feature_names(self) -> list[str]:
        """Names of the classifier's input columns (window position and feature)."""
        from ._tagger_features import window_names

        check_is_fitted(self)
        names = list(self.embedder_.get_feature_names_out())
        names += [f"shape_{n}" for n in SHAPE_NAMES] if self.uses_shape_ else []
        return window_names(names, self.window_)

    def _features(self, sentences: TokenLists, extra: Optional[np.ndarray], documents: Optional[DocIds],
                  rows=None) -> np.ndarray:
        # (tokens, width), from the stored rows where fit has them
        vectors = self.embedder_._token_features(sentences, documents, rows)
        if extra is not None:
            vectors = np.hstack([vectors, extra])
        return context_window(vectors, [len(s) for s in sentences], self.window_)

    def _check_params(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) or self.window < 0:
            raise ValueError(f"window must be an int >= 0, got {self.window!r}")
        if self.shape_features not in (True, False, "auto"):
            raise ValueError(f"shape_features must be True, False or 'auto', got {self.shape_features!r}")
        if self.embedder is not None and not isinstance(self.embedder, TokenEmbedder):
            raise TypeError(f"embedder must be a TokenEmbedder, got {type(self.embedder).__name__}")
        check_flag("show_progress", self.show_progress)

    def __setstate__(self, state):
        if "classifier_" in state:  # fitted before window_ was recorded: the parameter then
            state = {"window_": state["window"], **state}
        super().__setstate__(state)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.two_d_array = True  # a list of token lists (ragged)
        tags.target_tags.required = True
        return tags

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "classifier_")


#: Inverse regularisation strength of the default classifier. Contextual features are wide (a
#: one-word window over four concatenated 384-wide layers is 4,638 columns) and strongly regularised
#: logistic regression generalises much better on them than scikit-learn's ``C=1``: 3-fold
#: cross-validation on 4,000 CoNLL-2003 training sentences picked 0.03 from {0.03, 0.1, 0.3, 1}, and
#: on the full training set it raised dev F1 on every MiniLM Table 7 row (concat of the last four:
#: 82.4 -> 86.6) and left GloVe within 0.2 (docs/sklearn.md).
DEFAULT_C = 0.03


def _default_classifier():
    return LogisticRegression(C=DEFAULT_C, max_iter=1000)


def with_progress(embedder: TokenEmbedder, show_progress: bool) -> TokenEmbedder:
    """An unfitted clone of ``embedder`` for a tagger to fit: with bars where the tagger asks for
    them (an embedder that asks for them itself keeps them)."""
    embedder = clone(embedder)
    return embedder.set_params(show_progress=True) if show_progress else embedder


def _resolve_shape(option, encoder: Encoder) -> bool:
    return (not is_cased(encoder)) if option == "auto" else bool(option)
