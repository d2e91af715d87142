"""Encoder + layer pooling + subword/text pooling: the feature stage as one object.

This is what the CLI and benchmarks run; the scikit-learn and spaCy adapters build on the same
pieces (with trainable mixes and caches of their own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import numpy as np
import torch

from .encoders.base import Encoder, Sentences
from .pooling import LayerPooling, LayerSpec, SubwordPooling, TextPooling, check_subword_pooling, check_text_options
from .pooling.subword import subword_output_width
from .pooling.text import pool_text_numpy


class FeatureExtractor:
    """Fixed (untrained) features from an encoder.

    Parameters
    ----------
    encoder : Encoder
        Any loaded encoder.
    layers : int, sequence of int, "all", "hidden" or None
        Layers to use (see :func:`contextembed.pooling.resolve_layers`); ``None``: the encoder's
        ``default_layers`` (transformers: the last four; static vectors and ELMo: all).
    combine : {"concat", "sum", "mean", "scalar_mix"} or None
        How to combine layers; ``scalar_mix`` here has its initial (equal) weights and gamma 1.
        ``None``: the encoder's ``default_combine``.
    subword_pooling : {"first", "last", "mean", "first_last", "max"}
    text_pooling : {"mean", "piece_mean", "max", "cls"}
        Used by :meth:`iter_texts`.
    """

    def __init__(
        self,
        encoder: Encoder,
        layers: Optional[LayerSpec] = None,
        combine: Optional[str] = None,
        subword_pooling: SubwordPooling = "first",
        text_pooling: TextPooling = "mean",
    ) -> None:
        self.encoder = encoder
        layers = encoder.default_layers if layers is None else layers
        combine = encoder.default_combine if combine is None else combine
        self.pooling = LayerPooling(encoder.n_layers, layers, combine).eval()
        self.subword_pooling = check_subword_pooling(subword_pooling)
        check_text_options(text_pooling, subword_pooling, encoder.has_cls, f"the {encoder.family} encoder {encoder.spec!r}")
        self.text_pooling = text_pooling

    @property
    def dim(self) -> int:
        """Width of one output row."""
        return self.pooling.output_width(subword_output_width(self.encoder.width, self.subword_pooling))

    def pool_layers(self, hidden: np.ndarray) -> np.ndarray:
        """Combine the selected layers: ``(layers, rows, width)`` float32 -> ``(rows, dim)``, rows
        being words or pieces (arrays shared with the core module, not copied)."""
        if len(hidden) == 1 and self.pooling.combine in ("concat", "mean", "sum"):
            return hidden[0]  # one layer (static vectors): nothing to combine, and no torch call per sentence
        with torch.no_grad():
            return self.pooling(torch.from_numpy(np.ascontiguousarray(hidden))).numpy()

    def iter_words(self, sentences: Sentences, *, show_progress: bool = False) -> Iterator[np.ndarray]:
        """Yield ``(words, dim)`` float32 per sentence, in input order.

        ``sentences`` may be an iterator (a generator): the encoder reads it one chunk at a time and
        nothing here keeps a sentence once its rows are yielded, so memory stays bounded by the
        chunk size (``tests/robustness/test_resource_bounds.py`` measures it).
        """
        layers = self.pooling.layer_indexes
        for hidden in self.encoder.iter_encode(sentences, layers, self.subword_pooling, show_progress=show_progress):
            yield self.pool_layers(hidden)

    def iter_texts(self, sentences: Sentences, *, show_progress: bool = False) -> Iterator[np.ndarray]:
        """Yield one ``(dim,)`` float32 vector per text, in input order (an iterator is streamed as by
        :meth:`iter_words`)."""
        if self.text_pooling in ("mean", "max"):
            for words in self.iter_words(sentences, show_progress=show_progress):
                yield pool_text_numpy(words, self.text_pooling)
            return
        layers = self.pooling.layer_indexes
        for encoding in self.encoder.iter_encode_pieces(sentences, layers, show_progress=show_progress):
            if self.text_pooling == "piece_mean":  # layer pooling is linear: average each layer's pieces first
                yield self.pool_layers(encoding.piece_means()[:, None, :])[0]
                continue
            cls = encoding.cls if encoding.n_words else np.zeros_like(encoding.cls)  # an empty text: zeros
            yield self.pool_layers(cls[:, None, :])[0]

    def words(self, sentences: Sentences) -> list[np.ndarray]:
        """One ``(words, dim)`` array per sentence."""
        return list(self.iter_words(sentences))

    def texts(self, sentences: Sentences) -> np.ndarray:
        """``(texts, dim)`` float32."""
        rows = list(self.iter_texts(sentences))
        return np.stack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)
