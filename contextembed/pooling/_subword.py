"""Subword pooling: the pieces of one word become one vector.

A word owns the contiguous pieces ``offsets[i]:offsets[i + 1]`` (at least one; see
:mod:`contextembed._inputs.alignment` for words that the tokenizer turns into nothing).

``first``       the word's first piece (the BERT paper's NER setting; default)
``last``        its last piece
``mean``        the mean of its pieces
``first_last``  first and last concatenated (doubles the width)
``max``         element-wise maximum over its pieces
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np
import torch

from .._inputs.options import check_choice

SubwordPooling = Literal["first", "last", "mean", "first_last", "max"]
SUBWORD_POOLINGS: tuple[str, ...] = get_args(SubwordPooling)


def check_subword_pooling(method: str) -> str:
    """Return ``method`` if valid, else raise ``ValueError`` listing the valid values."""
    return check_choice("subword_pooling", method, SubwordPooling)


def subword_output_width(width: int, method: str) -> int:
    """Width of a pooled word vector given the piece width."""
    return 2 * width if check_subword_pooling(method) == "first_last" else width


def pool_subwords(pieces: torch.Tensor, offsets: torch.Tensor, method: SubwordPooling = "first") -> torch.Tensor:
    """Pool piece vectors to word vectors.

    Parameters
    ----------
    pieces : torch.Tensor
        ``(layers, pieces, width)``.
    offsets : torch.Tensor
        ``(words + 1,)`` int64, non-decreasing with ``offsets[0] == 0`` and
        ``offsets[-1] == pieces``; every word owns at least one piece.
    method : {"first", "last", "mean", "first_last", "max"}

    Returns
    -------
    torch.Tensor
        ``(layers, words, width)``, or ``(layers, words, 2 * width)`` for ``first_last``.
    """
    check_subword_pooling(method)
    starts, ends = offsets[:-1], offsets[1:]
    if method == "first":
        return pieces.index_select(1, starts)
    if method == "last":
        return pieces.index_select(1, ends - 1)
    if method == "first_last":
        return torch.cat([pieces.index_select(1, starts), pieces.index_select(1, ends - 1)], dim=-1)
    n_layers, _, width = pieces.shape
    n_words = starts.shape[0]
    # (pieces,) the word each piece belongs to
    owner = torch.repeat_interleave(torch.arange(n_words, device=pieces.device), ends - starts)
    if method == "mean":
        total = pieces.new_zeros(n_layers, n_words, width).index_add_(1, owner, pieces)
        counts = (ends - starts).to(pieces.dtype).clamp_min(1)
        return total / counts.view(1, -1, 1)
    index = owner.view(1, -1, 1).expand_as(pieces)
    out = pieces.new_full((n_layers, n_words, width), float("-inf"))
    return out.scatter_reduce(1, index, pieces, reduce="amax", include_self=True)


def pool_subwords_numpy(pieces: np.ndarray, offsets: np.ndarray, method: SubwordPooling = "first") -> np.ndarray:
    """NumPy front of :func:`pool_subwords` (the one implementation; the arrays are shared, not
    copied): ``(layers, pieces, width)`` -> ``(layers, words, width')``."""
    check_subword_pooling(method)
    offsets = np.asarray(offsets, dtype=np.int64)
    if method != "first_last" and len(offsets) - 1 == pieces.shape[1]:
        return pieces  # one piece per word: every pooling but first_last is the identity
    pooled = pool_subwords(torch.from_numpy(np.ascontiguousarray(pieces)), torch.from_numpy(offsets), method)
    return pooled.numpy()
