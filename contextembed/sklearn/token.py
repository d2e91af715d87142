"""TokenEmbedder: one layer-pooled vector per input token."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import numpy as np

from ..pooling import LayerSpec
from ._base import LayerFeaturesBase, check_tokens
from ._encoding import CacheOption, stack_words


class TokenEmbedder(LayerFeaturesBase):
    """Contextual word vectors from a frozen encoder, as a scikit-learn transformer.

    ``X`` is a list of token lists. :meth:`transform` returns one row per token, sentence after
    sentence in input order (rows ``sum(len(s) for s in X[:i])`` onwards belong to sentence ``i``);
    :meth:`transform_sentences` returns one array per sentence instead.

    Parameters
    ----------
    encoder : str or path
        What :func:`contextembed.load_encoder` takes: ``"minilm-l6"``, ``"glove-6b-50d"``, a model
        directory or a vectors file. Loaded in ``fit`` and shared by all clones in the process.
    layers : int, sequence of int, "all" or "hidden"
        Which encoder layers to use (0 is the embedding layer, -1 the last).
    combine : {"scalar_mix", "concat", "sum", "mean"}
        How to combine them. ``"scalar_mix"`` learns the mix in ``fit(X, y)`` when token labels
        are given (ELMo's recipe: jointly with a linear softmax probe, early-stopped on a held-out
        split of the training sentences); without ``y`` the weights stay equal.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
        How a word's pieces become one vector (``first_last`` doubles the width).
    device : str
        ``"auto"`` picks CUDA when present.
    precision : {"auto", "fp32", "bf16", "fp16"}
        Compute dtype of the encoder; features are float32 either way.
    batch_tokens : int, optional
        Padded pieces per forward pass (default: the encoder's).
    cache : "memory", None, path or joblib.Memory
        ``"memory"``: the process-wide in-memory cache (bounded by bytes; see
        :func:`contextembed.sklearn.set_cache_size`); a directory path or a
        :class:`joblib.Memory`: also on disk; ``None``: no caching.
    n_jobs : int, optional
        joblib workers encoding blocks of sentences (any joblib backend); results are identical
        to ``n_jobs=1``.
    embed_weights : bool
        Pickle the encoder's weights with the estimator (portable, but large). By default the
        pickle holds only the encoder reference and the learned pooling.
    max_epochs : int
        Most epochs of mix training.
    validation_fraction : float
        Share of training sentences held out for early stopping of mix training.
    random_state : int, RandomState or None
        Seed of the validation split, initialisation and batch order of mix training.

    Attributes
    ----------
    mix_weights_ : np.ndarray
        ``(selected_layers,)`` normalised mix weights (``combine="scalar_mix"`` only).
    gamma_ : float
        The mix's scale (``combine="scalar_mix"`` only).
    layer_indexes_ : tuple of int
        The absolute encoder layers used.
    n_layers_ : int
        Layers of the encoder.
    """

    def __init__(
        self,
        encoder: str = "minilm-l6",
        layers: LayerSpec = "all",
        combine: str = "scalar_mix",
        subword_pooling: str = "first",
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
        """Load the encoder; with ``y`` and ``combine="scalar_mix"``, learn the mix for the task.

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        y : list of list of labels, or array of one label per token, optional
            Token labels (e.g. NER tags). Only used to learn the scalar mix.
        """
        sentences = _check_nonempty(check_tokens(X))
        self._setup()
        if y is not None and self.combine == "scalar_mix":
            labels = token_labels(sentences, y)
            _, codes = np.unique(labels, return_inverse=True)
            self.fit_mix(sentences, codes)
        return self

    def fit_mix(self, X, codes: np.ndarray, *, window: Optional[np.ndarray] = None, extra: Optional[np.ndarray] = None):
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
            ``(tokens, n_window)`` rows of each token's neighbours, ``-1`` beyond the sentence
            (:func:`contextembed.sklearn.features.window_index`); default: the token alone.
        extra : np.ndarray, optional
            ``(tokens, n_extra)`` float32 features joined to the mixed vector (e.g. word shape).

        Returns
        -------
        self
        """
        self._check_fitted()
        sentences = check_tokens(X)
        codes = np.asarray(codes)
        n_tokens = sum(len(s) for s in sentences)
        if codes.shape != (n_tokens,):
            raise ValueError(f"codes must hold one class per token: {n_tokens} tokens, got shape {codes.shape}")
        if self.combine != "scalar_mix":
            return self
        if n_tokens == 0:
            raise ValueError(f"the scalar mix is learned from labelled tokens, but all {len(sentences)} sentences of X "
                             "are empty; pass sentences with tokens, or fit without y")
        hidden = self._selected_words(sentences)
        groups = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
        self._learn_mix(hidden, codes, groups, window=window, extra=extra)
        return self

    def _selected_words(self, sentences) -> np.ndarray:
        """``(selected_layers, words, width)`` for all sentences (float32)."""
        if sum(len(s) for s in sentences) == 0:
            return np.zeros((len(self.layer_indexes_), 0, self.width_), dtype=np.float32)
        encodings = [e for e in self._encodings(sentences) if e.n_words]
        return stack_words(encodings, self.subword_pooling, self.layer_indexes_)

    def transform(self, X) -> np.ndarray:
        """Token features.

        Parameters
        ----------
        X : list of list of str

        Returns
        -------
        np.ndarray
            ``(total_tokens, n_features)`` float32, one row per token in input order.
        """
        self._check_fitted()
        sentences = check_tokens(X)
        if sum(len(s) for s in sentences) == 0:
            return self._empty()
        return self._combine(self._selected_words(sentences))

    def transform_layers(self, X) -> np.ndarray:
        """The selected layers of every token, not combined: ``(selected_layers, total_tokens, width)``
        float32, tokens in input order (for models that learn their own mix, e.g.
        :class:`BiLSTMCRFTagger`)."""
        self._check_fitted()
        layers = self._selected_words(check_tokens(X))
        if not np.isfinite(layers).all():
            raise FloatingPointError(
                f"the encoder {self.encoder!r} at precision={self.precision!r} produced NaN or inf features; "
                "use precision='fp32'"
            )
        return layers

    def transform_sentences(self, X) -> list[np.ndarray]:
        """Like :meth:`transform`, split per sentence: a list of ``(tokens, n_features)`` arrays."""
        sentences = check_tokens(X)
        features = self.transform(sentences)
        bounds = np.cumsum([len(s) for s in sentences])[:-1]
        return np.split(features, bounds) if sentences else []

    def fit_transform(self, X, y=None, **fit_params):
        return self.fit(X, y).transform(X)


def _check_nonempty(sentences: list) -> list:
    if not sentences:
        raise ValueError("fit needs at least one sentence; X is empty")
    return sentences


def token_labels(sentences: Sequence[Sequence[str]], y, *, strings: bool = False) -> np.ndarray:
    """Flatten per-sentence labels to one label per token, checking every length and label.

    ``y`` is a list of label lists (one per sentence) or a flat array of one label per token.

    Parameters
    ----------
    strings : bool
        Require every label to be a ``str`` (tags such as ``"B-PER"``); otherwise ``str`` or
        integer labels are accepted (never mixed).

    Raises
    ------
    ValueError
        If ``len(y)`` matches neither the number of sentences nor of tokens, or a sentence's label
        list length differs from its token count (the message names the sentence).
    TypeError
        If a label is ``None``, a float (``NaN``), a bool or another non-label value (the message
        names the sentence and token, or the flat index); nothing is turned into text silently.
    """
    n_tokens = sum(len(s) for s in sentences)
    if isinstance(y, (str, bytes)):
        raise TypeError("y must be a list of tag lists (one per sentence), got a single string")
    y = list(y)
    if len(y) == len(sentences) and all(_is_label_list(item) for item in y):
        for i, (sentence, tags) in enumerate(zip(sentences, y)):
            if len(tags) != len(sentence):
                raise ValueError(
                    f"sentence {i} has {len(sentence)} tokens but {len(tags)} tags; every token needs "
                    "exactly one tag"
                )
            for j, tag in enumerate(tags):
                _check_label(tag, f"sentence {i}, token {j}", strings)
        flat = [tag for tags in y for tag in tags]
    elif len(y) == n_tokens and not any(_is_label_list(item) for item in y):
        for k, tag in enumerate(y):
            _check_label(tag, f"label {k}", strings)
        flat = y
    else:
        raise ValueError(
            f"y has {len(y)} entries but X has {len(sentences)} sentences ({n_tokens} tokens); pass one "
            "tag list per sentence"
        )
    kinds = {isinstance(tag, str) for tag in flat}
    if len(kinds) > 1:
        raise TypeError("y mixes str and integer labels; use one kind")
    return np.asarray(flat)


def _check_label(tag, where: str, strings: bool) -> None:
    if isinstance(tag, str):
        return
    if not strings and isinstance(tag, (int, np.integer)) and not isinstance(tag, (bool, np.bool_)):
        return
    expected = "a str tag" if strings else "a str or int label"
    raise TypeError(f"{where}: the label is {type(tag).__name__} ({tag!r}); expected {expected}")


def _is_label_list(item) -> bool:
    return isinstance(item, (list, tuple, np.ndarray)) and not isinstance(item, str)
