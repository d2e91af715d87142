"""TextEmbedder: one layer-pooled vector per text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Optional, Union

import numpy as np

from ..encoders.transformer._sentence_config import SentencePooling
from ..pooling import LayerSpec, check_text_options, check_text_pooling, normalize_rows
from ..pooling._layers import OutputDtype
from ._base import LayerFeaturesBase, _check_finite, check_flag, check_n_jobs
from ._checks import check_texts
from ._encoding import CacheOption, pooled_piece_means, uses_memory
from ._parameters import shared_docs, store_parameters

#: texts encoded per block in ``transform`` (bounds memory on large corpora)
STREAM_TEXTS = 4096
#: the text poolings that reproduce a sentence-transformers directory's own (:func:`model_pooling`)
MODEL_POOLINGS = ("model", "model_truncated")


def model_pooling(encoder, text_pooling: str, name) -> "SentencePooling":
    """The sentence pooling ``encoder``'s directory declares, for ``text_pooling="model"``.

    Raises
    ------
    ValueError
        The encoder is no transformer, its directory declares none, or one other than the mean.
    FileFormatError
        A damaged or contradictory ``modules.json`` or pooling configuration (naming the file and field).
    """
    pooling = getattr(encoder, "sentence_pooling", None)
    if pooling is None:
        raise ValueError(f"text_pooling={text_pooling!r} reproduces a sentence-transformers directory's own sentence "
                         f"vector, but the encoder {name!r} has none (no modules.json beside its model); use "
                         "text_pooling='piece_mean' for the mean of its pieces")
    if pooling.mode != "mean":
        raise ValueError(f"text_pooling={text_pooling!r}: the encoder {name!r} pools its sentence vector by "
                         f"{pooling.mode!r}, which contextembed reproduces as text_pooling={pooling.mode!r}; "
                         "text_pooling='model' reproduces mean pooling")
    return pooling


@shared_docs
class TextEmbedder(LayerFeaturesBase):
    """Text vectors from a frozen encoder, as a scikit-learn transformer.

    Each text is encoded once with all layers; its words are pooled to one vector per layer
    (``text_pooling``), then the layers are combined (``layers``, ``combine``). For ``"mean"`` and
    ``"cls"`` pooling, and for ``combine="concat"``, this equals combining layers first.

    Parameters
    ----------
    $model_parameters
    text_pooling : {"piece_mean", "mean", "max", "cls", "model", "model_truncated"}
        How a text's words become one vector: ``"piece_mean"`` averages every piece of the text (a
        word of three pieces counts three times; needs ``subword_pooling="mean"``), ``"mean"``
        every word; ``"cls"`` (transformers only) takes the first special piece. ``"model"``: the
        model's own sentence pooling, as its sentence-transformers directory declares it
        (``modules.json``, ``1_Pooling/config.json``: the mean over every position of the model
        input, special tokens included; texts lowercased where ``sentence_bert_config.json`` says
        so): with ``layers=-1`` the vector ``SentenceTransformer(path).encode`` gives, within 1e-5
        in fp32, for every text within its ``max_seq_length``; a longer text is read in windows,
        nothing dropped. ``"model_truncated"``: the same, a longer text's pieces beyond
        ``max_seq_length`` dropped as sentence-transformers does (its vector then, exactly).
    normalize : bool
        Scale each text vector to unit length (an empty text stays all zeros), as
        sentence-transformers does. A classifier's regularisation (``C``) then means the same
        whatever the layers, combine or encoder; the scalar mix is learned on normalised vectors
        too. ``docs/sklearn.md`` has the SST-2 measurements behind this default and
        ``subword_pooling="mean"``.
    tokenizer : {"auto", "regex", "whitespace", "spacy"} or callable
        Splits raw strings into words (token lists in ``X`` are used as given). ``"auto"``: words
        and punctuation marks, which suits static vectors and subword encoders alike.
    $run_parameters

    $fitted_attributes
    """

    FITTED_OPTIONS = ("subword_pooling", "text_pooling", "normalize")

    def __init__(
        self,
        # the parameters every layer-feature estimator shares are defined in _parameters.py
        encoder: str = "minilm-l6", layers: LayerSpec = "all", combine: str = "scalar_mix",
        subword_pooling: str = "mean",
        text_pooling: str = "piece_mean",
        normalize: bool = True,
        tokenizer: Union[str, Callable[[str], list]] = "auto",
        device: str = "auto", precision: str = "auto", backend: str = "torch", batch_tokens: Optional[int] = None, cache: CacheOption = "memory",
        n_jobs: Optional[int] = None, embed_weights: bool = False,
        max_epochs: int = 20, validation_fraction: float = 0.1, random_state=0, show_progress: bool = False,
        dtype: OutputDtype = "float32", cache_dtype: OutputDtype = "float32",
    ) -> None:
        store_parameters(self, locals())

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
        return self._fit(check_texts(X, self.tokenizer, fit=True), y)

    def transform(self, X) -> np.ndarray:
        """Text features.

        Returns
        -------
        np.ndarray
            ``(n_texts, n_features)`` in ``dtype`` (float32 by default), one row per text in input order.
        """
        self._check_fitted()
        return self._text_features(check_texts(X, self.tokenizer))

    def fit_transform(self, X, y=None, **fit_params):
        """:meth:`fit`, then :meth:`transform` of the same texts (each text tokenized and checked once).

        Parameters
        ----------
        X : iterable of str, or of token lists
            Raw texts (split by ``tokenizer``) or pre-tokenized texts.
        y
            As :meth:`fit` takes it.

        Returns
        -------
        np.ndarray
            ``(n_texts, n_features)``, as :meth:`transform` returns it.
        """
        texts = check_texts(X, self.tokenizer, fit=True)
        return self._fit(texts, y)._text_features(texts)

    def _fit(self, texts: list[list[str]], y) -> "TextEmbedder":
        if self.text_pooling not in MODEL_POOLINGS:
            check_text_pooling(self.text_pooling)
        check_flag("normalize", self.normalize)
        encoder = self._setup()
        if self.text_pooling in MODEL_POOLINGS:
            # plain data (what skops loads without trusting a class): mode, normalize, max_seq_length, lowercase
            self.sentence_pooling_ = dataclasses.asdict(model_pooling(encoder, self.text_pooling, self.encoder))
            texts = self._as_model_reads(texts)
        else:
            check_text_options(self.text_pooling, self.subword_pooling, encoder.has_cls, f"the encoder {self.encoder!r}")
            self.__dict__.pop("sentence_pooling_", None)
        codes = self._mix_codes(y, len(texts), "text")
        if codes is not None:
            self._learn_mix(self._layer_vectors(texts), codes, np.arange(len(texts)), normalize=bool(self.normalize_))
        return self

    def _as_model_reads(self, texts: list[list[str]]) -> list[list[str]]:
        """``texts`` as the model's own pooling reads them: lowercased where its directory says so."""
        pooling = getattr(self, "sentence_pooling_", None)
        if pooling is None or not pooling["lowercase"]:
            return texts
        return [[word.lower() for word in text] for text in texts]

    def _text_features(self, texts: list[list[str]]) -> np.ndarray:
        if not texts:
            return self._empty()
        texts = self._as_model_reads(texts)
        if self._pools_on_encoder():
            features = self._pooled_piece_means(texts)
        else:
            features = self._combine(self._layer_vectors(texts))
        return self._output(normalize_rows(features) if self.normalize_ else features)

    def _stored_kind(self) -> tuple[str, tuple]:
        """What the store keeps of each text, and its options."""
        if self.text_pooling_ == "piece_mean":
            return "piece_mean", ()
        if self.text_pooling_ in MODEL_POOLINGS:
            return "input_mean", (str(self.sentence_pooling_limit_) if self.text_pooling_ == "model_truncated" else "",)
        return "text_layers", (self.subword_pooling_, self.text_pooling_)

    @property
    def sentence_pooling_limit_(self) -> int:
        """The pieces of a text ``"model_truncated"`` keeps: ``max_seq_length`` less the special tokens
        (the model's window where the directory gives none)."""
        encoder = self.encoder_
        limit = self.sentence_pooling_["max_seq_length"]
        return encoder.window if limit is None else max(1, limit - len(encoder.pieces.prefix) - len(encoder.pieces.suffix))

    def _pools_on_encoder(self) -> bool:
        """Whether the encoder combines the layers of each text's piece means itself, where it ran
        (:func:`~contextembed.sklearn._encoding.pooled_piece_means`), so that one ``(dim,)`` vector
        per text reaches this process: ``text_pooling="piece_mean"`` with nothing cached (the cache
        keeps every layer, for another fit's mix) and in this process (``n_jobs`` effectively 1)."""
        from joblib import effective_n_jobs

        return (self.text_pooling_ == "piece_mean" and not uses_memory(self.cache)
                and effective_n_jobs(check_n_jobs(self.n_jobs)) == 1)

    def _pooled_piece_means(self, texts: list[list[str]]) -> np.ndarray:
        """``(n_texts, n_features)`` float32, finite: the layers combined by the encoder
        (:func:`~contextembed.sklearn._encoding.pooled_piece_means`)."""
        with self._progress("piece_mean") as progress:
            features = pooled_piece_means(self.encoder_ref_, texts, self.layer_indexes_, self.pooling_, progress)
        return _check_finite(features, self.encoder_ref_)

    def _layer_vectors(self, texts: list[list[str]]) -> np.ndarray:
        """Per-layer text vectors: ``(selected_layers, n_texts, width)`` float32.

        Texts are encoded ``STREAM_TEXTS`` at a time, so memory holds one block's rows plus the
        output, whatever the corpus size.
        """
        out = self._reserved((len(self.layer_indexes_), len(texts), self.width_), "the texts' layer vectors")
        # each text's vector of every layer, pooled where the encoder ran: the mean of every piece, or
        # its words pooled from their pieces and then pooled (or its first piece, "cls")
        kind, options = self._stored_kind()
        with self._progress(kind) as progress:  # one bar for all blocks
            for begin in range(0, len(texts), STREAM_TEXTS):
                block = texts[begin : begin + STREAM_TEXTS]
                stored = self._stored(block, kind, progress, options)
                # (texts, layers, width) -> (layers, texts, width)
                out[:, begin : begin + len(block)] = stored.items(0, len(block), self.layer_indexes_).transpose(1, 0, 2)
        return out
