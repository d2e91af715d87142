"""A BiLSTM-CRF tagger on frozen encoder layers (the feature-based setting of BERT's Table 7 and ELMo).

Per token, the layers of each encoder are pooled by their own :class:`~contextembed.LayerPooling`
(a scalar mix is trained with the tagger, ELMo's recipe), concatenated with per-token extra features
(word shape) and an optional character CNN, dropped out, optionally projected, and read by a
bidirectional LSTM whose outputs score the tags; a linear-chain :class:`~contextembed.heads.CRF`
(or a per-token softmax) turns the scores into a tag sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..pooling._layers import LayerPooling
from ._crf import CRF


@dataclass(frozen=True)
class TaggerShape:
    """The sizes a :class:`BiLSTMCRF` is built for.

    Attributes
    ----------
    layers : tuple of (n_layers, width, combine)
        One entry per stacked encoder: its selected layers, their width and how they are pooled.
    n_extra : int
        Per-token extra features (word-shape flags).
    n_shapes, n_chars : int
        Sizes of the word-shape and character vocabularies (0: not used).
    n_tags : int
    """

    layers: tuple[tuple[int, int, str], ...]
    n_extra: int
    n_shapes: int
    n_chars: int
    n_tags: int


@dataclass(frozen=True)
class TaggerSettings:
    """Hyper-parameters of a :class:`BiLSTMCRF` (see :class:`contextembed.sklearn.BiLSTMCRFTagger`)."""

    hidden_size: int = 256
    num_layers: int = 1
    dropout: float = 0.5
    word_dropout: float = 0.05
    projection: Optional[int] = None
    shape_dim: int = 16
    char_dim: int = 0
    crf: bool = True


class CharCNN(nn.Module):
    """Characters -> one vector per word: embedding, width-3 convolution, max over the word."""

    def __init__(self, n_chars: int, dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_chars, dim, padding_idx=0)
        self.convolution = nn.Conv1d(dim, dim, kernel_size=3, padding=1)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """``chars (batch, seq, max_chars)`` int64 (0 = padding) -> ``(batch, seq, dim)``."""
        batch, seq, length = chars.shape
        # (batch * seq, dim, max_chars)
        embedded = self.embedding(chars.reshape(-1, length)).transpose(1, 2)
        hidden = torch.relu(self.convolution(embedded))
        hidden = hidden.masked_fill((chars.reshape(-1, length) == 0).unsqueeze(1), float("-inf"))
        pooled = hidden.max(dim=2).values
        return torch.where(torch.isfinite(pooled), pooled, torch.zeros_like(pooled)).reshape(batch, seq, -1)


class BiLSTMCRF(nn.Module):
    """Frozen layers (one stack per encoder) -> pooled ++ extra ++ shape ++ chars -> BiLSTM -> CRF."""

    def __init__(self, shape: TaggerShape, settings: TaggerSettings, allowed: Optional[torch.Tensor] = None) -> None:
        super().__init__()
        self.shape, self.settings = shape, settings
        self.poolings = nn.ModuleList(LayerPooling(n, "all", combine) for n, _, combine in shape.layers)
        width = sum(p.output_width(w) for p, (_, w, _) in zip(self.poolings, shape.layers)) + shape.n_extra
        self.shapes = nn.Embedding(shape.n_shapes, settings.shape_dim) if shape.n_shapes and settings.shape_dim else None
        width += settings.shape_dim if self.shapes is not None else 0
        self.chars = CharCNN(shape.n_chars, settings.char_dim) if shape.n_chars and settings.char_dim else None
        width += settings.char_dim if self.chars is not None else 0
        self.projection = nn.Linear(width, settings.projection) if settings.projection else None
        width = settings.projection or width
        self.dropout = nn.Dropout(settings.dropout)
        self.lstm = nn.LSTM(width, settings.hidden_size, settings.num_layers, batch_first=True, bidirectional=True,
                            dropout=settings.dropout if settings.num_layers > 1 else 0.0)
        self.emission = nn.Linear(2 * settings.hidden_size, shape.n_tags)
        self.crf = CRF(shape.n_tags, allowed) if settings.crf else None

    def emissions(self, inputs: "TaggerBatch") -> torch.Tensor:
        """Tag scores ``(batch, seq, tags)``."""
        # each (batch, seq, pooled width)
        parts = [pooling(layers) for pooling, layers in zip(self.poolings, inputs.layers)]
        if inputs.extra is not None:
            parts.append(inputs.extra)
        if self.shapes is not None:
            parts.append(self.shapes(inputs.shapes))
        if self.chars is not None:
            parts.append(self.chars(inputs.chars))
        features = torch.cat(parts, dim=-1) * inputs.mask.unsqueeze(-1)
        if self.training and self.settings.word_dropout:
            # drop whole words (flair's word dropout): their vectors become zeros
            keep = torch.rand(features.shape[:2], device=features.device) >= self.settings.word_dropout
            features = features * keep.unsqueeze(-1)
        features = self.dropout(features)
        if self.projection is not None:
            features = self.projection(features)
        lengths = inputs.mask.sum(dim=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(features, lengths, batch_first=True, enforce_sorted=False)
        # (batch, seq, 2 * hidden)
        hidden, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=features.shape[1])
        return self.emission(self.dropout(hidden))

    def loss(self, inputs: "TaggerBatch", tags: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood (CRF) or token cross-entropy (softmax) of the gold ``tags``."""
        scores = self.emissions(inputs)
        if self.crf is not None:
            return -self.crf.log_likelihood(scores, tags, inputs.mask).mean()
        return nn.functional.cross_entropy(scores[inputs.mask], tags[inputs.mask])

    @torch.no_grad()
    def decode(self, inputs: "TaggerBatch") -> list[list[int]]:
        """The predicted tag indexes of every sentence (Viterbi with a CRF)."""
        scores = self.emissions(inputs)
        if self.crf is not None:
            return self.crf.decode(scores, inputs.mask)
        best = scores.argmax(dim=-1)
        return [row[: int(n)].tolist() for row, n in zip(best, inputs.mask.sum(dim=1))]


@dataclass
class TaggerBatch:
    """Padded inputs of a batch of sentences.

    Attributes
    ----------
    layers : list of torch.Tensor
        Per encoder ``(layers, batch, seq, width)``.
    mask : torch.Tensor
        ``(batch, seq)`` bool.
    extra : torch.Tensor or None
        ``(batch, seq, n_extra)``.
    shapes : torch.Tensor or None
        ``(batch, seq)`` int64 word-shape ids.
    chars : torch.Tensor or None
        ``(batch, seq, max_chars)`` int64 character ids (0 = padding).
    """

    layers: Sequence[torch.Tensor]
    mask: torch.Tensor
    extra: Optional[torch.Tensor] = None
    shapes: Optional[torch.Tensor] = None
    chars: Optional[torch.Tensor] = None


__all__ = ["BiLSTMCRF", "CharCNN", "TaggerBatch", "TaggerSettings", "TaggerShape"]
