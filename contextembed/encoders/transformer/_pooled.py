"""How a chunk's rows are pooled: on the device or on the host, into words, texts or piece means.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ...pooling._layers import LayerPooling, pool_layers_numpy
from ...pooling._subword import SubwordPooling, pool_subwords_numpy
from ...pooling._text import pool_pieces_to_text
from ._host_copies import HostCopies



logger = logging.getLogger(__name__)


#: piece selectors for each subword pooling that can be done by gathering pieces directly
_DIRECT = {"first": ("starts",), "last": ("ends",), "first_last": ("starts", "ends")}


#: each :data:`~contextembed.pooling._layers.OutputDtype` in torch
_OUTPUT_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class _Pooled:
    """Word features pooled where the model ran: each word's pieces (``method``), then the layers
    (``pooling``, on the model's device), so only ``(words, dim)`` rows in ``dtype`` reach the host.

    Exactly the host's pooling of the same hidden states (the same torch operations on each word's
    own values). A sentence in several windows whose words are pooled over all their pieces
    (``"mean"``, ``"max"``) may have a word split between two batches: its pieces come back and are
    pooled on the host (:class:`~._jobs.GroupedWords`).
    """

    pooling: LayerPooling
    #: the same pooling on the CPU (for the words pooled on the host)
    host_pooling: LayerPooling
    method: SubwordPooling
    #: ``"float32"`` or ``"float16"``
    dtype: str
    #: a chunk's copies to the host and its ``(words, dim)`` output: set on the chunk's own copy of
    #: these settings (``dataclasses.replace``), never on the settings shared by every chunk
    copies: Optional[HostCopies] = None
    out: Optional[np.ndarray] = None

    @property
    def grouped(self) -> bool:
        """Whether the words are pooled over all their pieces (not picked by the selectors)."""
        return self.method not in _DIRECT

    def copies_in_place(self, flat: list[torch.Tensor]) -> bool:
        """Whether the units of ``flat`` (float32 hidden states on the CPU) go to the output by one copy
        each: picked pieces concatenated. Exactly what the torch operations give (no arithmetic),
        without their intermediate arrays."""
        return (self.copies is not None and not self.copies.staged and not self.grouped
                and self.pooling.combine == "concat" and all(layer.device.type == "cpu" and layer.dtype == torch.float32
                                                             for layer in flat))

    def pool_on_host(self, pieces: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """``(words, dim)``: a sentence's pieces ``(layers, pieces, width)`` that came back, pooled."""
        return pool_layers_numpy(self.host_pooling, pool_subwords_numpy(pieces, offsets, self.method))


@dataclass(frozen=True)
class _TextPooled:
    """Texts pooled where the model ran: each layer's pieces to words (``method``), then the words to
    one vector (``text_pooling``, ``"mean"`` or ``"max"``), so only ``(layers, width')`` per text (or
    per side of a pair) reaches the host.

    A text whose pieces one model input owns all of is pooled where that input ran: on a CPU by the
    host's own function, text by text (:func:`~contextembed.pooling.pool_pieces_to_text`, so the bits
    are those of pooling its :class:`PieceEncoding`); elsewhere every such text of a batch at once
    (:func:`~._jobs.pool_texts`). A text in several windows (or one side of a long pair) has its pieces come
    back and is pooled on the host when its chunk is done.
    """

    method: SubwordPooling
    text_pooling: str
    n_layers: int
    copies: Optional[HostCopies] = None

    def pool_on_host(self, pieces: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """``(layers, width')``: a text's pieces ``(layers, pieces, width)`` that came back, pooled."""
        return pool_pieces_to_text(pieces, offsets, self.method, self.text_pooling)


@dataclass
class _MeansPooled:
    """Piece means whose layers are combined where the model ran (``pooling.combine_selected``, each
    sentence on its own), so only ``(dim,)`` per sentence reaches the host: exactly the host's
    combination of the same float32 means."""

    #: on the model's device
    pooling: LayerPooling
    #: the same pooling on the CPU (for the means of sentences in several windows)
    host_pooling: LayerPooling

    @classmethod
    def on(cls, pooling: LayerPooling, device: torch.device) -> "_MeansPooled":
        return cls(pooling if device.type == "cpu" else copy.deepcopy(pooling).to(device), pooling)

    def on_host(self, means: np.ndarray) -> np.ndarray:
        """``(layers, sentences, width)`` float32 -> ``(sentences, dim)`` float32: the layers combined as
        :func:`~contextembed.pooling.pool_layers_numpy` combines them (laid out layer after layer, as it
        lays them out: a scalar mix's product then reads them where they lie)."""
        with torch.inference_mode():
            return self.host_pooling.combine_selected(torch.from_numpy(np.ascontiguousarray(means))).float().numpy()

    def on_device(self, means: torch.Tensor) -> torch.Tensor:
        """:meth:`on_host`'s combination on the model's device: ``(sentences, layers, width)`` ->
        ``(sentences, dim)``."""
        return self.pooling.combine_selected(means.movedim(1, 0)).float()


def _fill_rows(columns: np.ndarray, dest: np.ndarray, words: np.ndarray) -> None:
    """``columns[dest] = words``: pooled ``(units, dim_k)`` rows to their places in the chunk's output."""
    columns[dest] = words.reshape(len(words), *columns.shape[1:])


def _selector_columns(out: np.ndarray, k: int, selectors: int, width: int) -> np.ndarray:
    """The columns of ``out`` ``(words, dim)`` that selector ``k`` of ``selectors`` fills, as
    ``(words, dim / selectors)``: all of them for one selector; for ``first_last``, its ``width``
    columns in each layer's block of ``2 * width`` (``(words, layers or 1, width)``)."""
    if selectors == 1:
        return out
    return out.reshape(len(out), -1, selectors, width)[:, :, k]
