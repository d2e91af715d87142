"""BERT-style transformer encoders: any local Hugging Face encoder that ``AutoModel`` loads.

Layers are the embedding output followed by every hidden layer (``hidden_states`` of
``output_hidden_states=True``): 13 for BERT-base, 7 for MiniLM-L6.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import functools
import itertools
import logging
import os
import threading
from contextlib import contextmanager
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import torch

from .._runtime import forking, pages, streams
from .._inputs.alignment import (
    PairTemplate,
    SentencePieces,
    Window,
    check_window,
    pair_template,
    plan_windows,
    ragged_arange,
    split_context,
)
from .._inputs.documents import InContext, check_in_context
from .._runtime.backends import check_backend, check_calibration
from .._inputs.bounds import COUNT, OPTIONAL_COUNT, check_values
from .._runtime.devices import check_settings
from .._runtime.quantization import original_state_dict
from ..pooling._layers import LayerPooling, LayerSpec, check_rowwise_pooling, pool_layers_numpy
from ..pooling._subword import (
    SubwordPooling,
    check_subword_pooling,
    pool_subwords,
    pool_subwords_numpy,
    subword_output_width,
)
from ..pooling._text import pool_pieces_to_text, pool_text
from . import _engine as engine, _unpadded as unpadded
from ._pruning import LayerPruner
from ._sentence_config import SentencePooling, read_sentence_pooling
from ._host_copies import HostCopies
from ._base import (
    Encoder,
    PairPieces,
    Pairs,
    PieceEncoding,
    Sentences,
    ShowProgress,
    check_pairs,
    check_sentence_chunks,
    check_sentences,
    progress_bar,
    warn_long_pairs,
)
from ._hf_files import check_directory, check_tokenizer_fits, load_model, load_tokenizer, read_config
from ._runtime_choice import (
    ModelInputs,
    Runtime,
    TorchForward,
    choose_runtime,
    default_pad_multiple,
    engine_forward,
    probe_shape,
)

logger = logging.getLogger(__name__)

#: piece selectors for each subword pooling that can be done by gathering pieces directly
_DIRECT = {"first": ("starts",), "last": ("ends",), "first_last": ("starts", "ends")}
#: each :data:`~contextembed.pooling._layers.OutputDtype` in torch
_OUTPUT_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: default padded pieces per forward pass: big passes feed a GPU; on a CPU they run slower per piece
GPU_BATCH_TOKENS = 8192
CPU_BATCH_TOKENS = 1024
#: the windowing and batching options (``None``: chosen from the model and the device): their types
#: and ranges, checked by :meth:`TransformerEncoder.load` before anything is read and by the
#: constructor; what depends on the model (``window`` fits it, ``stride <= window``, ``batch_tokens``
#: holds one full window) is checked once the model is read
OPTION_BOUNDS = {"window": OPTIONAL_COUNT, "stride": OPTIONAL_COUNT, "batch_tokens": OPTIONAL_COUNT,
                 "pad_multiple": OPTIONAL_COUNT, "max_batch_size": COUNT, "chunk_size": COUNT}


@dataclass
class _Pending:
    """Per-sentence state while its windows run: the gathered blocks of each selector, by window."""

    pieces: SentencePieces
    positions: list[np.ndarray]
    #: per selector, ``(own_start, (layers, units, width))`` blocks in the order they were computed
    blocks: list[list[tuple[int, np.ndarray]]] = field(default_factory=list)
    cls: Optional[np.ndarray] = None
    #: pooled on the device (:class:`_Pooled`): this sentence's ``(words, dim)`` rows of the chunk's
    #: output, filled as its windows run; ``None`` where its pieces come back to be pooled on the host
    rows: Optional[np.ndarray] = None
    #: where ``rows`` start in the chunk's output
    first_row: int = 0

    def joined(self, k: int) -> np.ndarray:
        """Selector ``k``'s blocks in piece order: ``(layers, units, width)``."""
        blocks = [array for _, array in sorted(self.blocks[k], key=lambda block: block[0])]
        return np.ascontiguousarray(blocks[0]) if len(blocks) == 1 else np.concatenate(blocks, axis=1)


@dataclass
class _Part:
    """A window of one sentence inside a model input row, its first piece at row position ``offset``;
    ``owned``: the row delivers the vectors of the pieces the window owns."""

    item: _Pending
    window: Window
    offset: int
    owned: bool = True


@dataclass
class _Row:
    """One model input: piece ids, segment ids (``None``: the model's default), the sentence windows
    it holds, and the sentences that take its first-piece ([CLS]) vector."""

    ids: np.ndarray
    types: Optional[np.ndarray]
    parts: list[_Part]
    cls_owners: list[_Pending]


@dataclass
class _ChunkWindows:
    """The model inputs of a chunk's piece sums (:meth:`TransformerEncoder.encode_piece_means`) and
    picked words (:meth:`TransformerEncoder._iter_picked`): one per window of each sentence
    (:func:`plan_windows`), held as arrays instead of :class:`_Row` objects, in the order the rows
    run: by length, stably, as :meth:`TransformerEncoder._run_rows` sorts rows, so that the batches
    are those of every other path.

    Attributes
    ----------
    ids : np.ndarray
        ``(pieces,)`` int64: the chunk's pieces, sentence after sentence.
    text : np.ndarray
        ``(windows,)`` int64: each window's sentence.
    first : np.ndarray
        ``(windows,)`` int64: where the window's pieces start in ``ids``.
    length : np.ndarray
        ``(windows,)`` int64: the window's pieces (without special tokens).
    own : np.ndarray
        ``(windows,)`` int64: where the pieces the window owns start in it.
    count : np.ndarray
        ``(windows,)`` int64: how many pieces it owns.
    slot : np.ndarray
        ``(windows,)`` int64: ``-1`` for a window holding a whole sentence; for a window of a sentence
        in several, the place of its sums among those of :attr:`split` (its sentence's windows in order).
    split : np.ndarray
        ``(sentences in several windows,)`` int64: those sentences, in input order.
    split_offsets : np.ndarray
        ``(len(split) + 1,)`` int64: sentence ``split[i]``'s windows are slots
        ``split_offsets[i]:split_offsets[i + 1]``.
    row : np.ndarray
        ``(sentences,)`` int64: the place in run order of each sentence's first window (where a
        sentence's piece means are, among the windows' rows: :meth:`TransformerEncoder._piece_means`).
    leads, ends : np.ndarray
        ``(windows,)`` bool: whether the window starts (ends) its sentence, so that its leading
        (trailing) special tokens are the sentence's own (means over the whole model input).
    """

    ids: np.ndarray
    text: np.ndarray
    first: np.ndarray
    length: np.ndarray
    own: np.ndarray
    count: np.ndarray
    slot: np.ndarray
    split: np.ndarray
    split_offsets: np.ndarray
    row: np.ndarray
    leads: np.ndarray
    ends: np.ndarray

    @classmethod
    def plan(cls, ids: np.ndarray, n_pieces: np.ndarray, window: int, stride: int) -> "_ChunkWindows":
        """Every window of each sentence (one for a sentence that fits, an empty sentence included),
        sorted by length; ``ids`` ``(pieces,)`` holds the sentences' pieces one after the other,
        ``n_pieces`` ``(sentences,)`` how many each has (:meth:`PieceTokenizer.joined`)."""
        # (sentences,) windows of each
        split = np.flatnonzero(n_pieces > window)
        planned = [plan_windows(int(n_pieces[i]), window, stride) for i in split]
        n_windows = np.ones(len(n_pieces), dtype=np.int64)
        n_windows[split] = [len(windows) for windows in planned]
        # (windows,) in input order: a sentence that fits is window (0, n, 0, n)
        text = np.repeat(np.arange(len(n_pieces)), n_windows)
        start, end = np.zeros(len(text), dtype=np.int64), n_pieces[text]
        own_start, own_end = start.copy(), end.copy()
        slot = np.full(len(text), -1, dtype=np.int64)
        first_window = np.cumsum(n_windows) - n_windows
        for i, windows in zip(split, planned):
            place = slice(first_window[i], first_window[i] + len(windows))
            start[place], end[place], own_start[place], own_end[place] = np.array(
                [(w.start, w.end, w.own_start, w.own_end) for w in windows], dtype=np.int64).T
        if len(split):
            slot[n_windows[text] > 1] = np.arange(int(n_windows[split].sum()))
        # (sentences,) where each sentence's pieces start in ``ids``
        sentence_start = np.cumsum(n_pieces) - n_pieces
        order = np.argsort(end - start, kind="stable")
        split_offsets = np.concatenate([[0], np.cumsum(n_windows[split])])
        # (windows,) the place in run order of each window in input order
        place = np.empty_like(order)
        place[order] = np.arange(len(order))
        return cls(ids, text[order], (sentence_start[text] + start)[order], (end - start)[order],
                   (own_start - start)[order], (own_end - own_start)[order], slot[order], split, split_offsets,
                   place[first_window], (start == 0)[order], (end == n_pieces[text])[order])

    def __len__(self) -> int:
        return len(self.text)

    def inputs(self, rows: slice, length: int, around: tuple[np.ndarray, np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, attention mask)`` of windows ``rows``, each ``prefix + pieces + suffix`` padded to
        ``length``: both ``(batch, seq)`` int64, what :meth:`TransformerEncoder._run_batch` builds from
        the same windows' rows."""
        prefix, suffix = around
        n = self.length[rows]
        columns = np.arange(length)
        # (batch, seq)
        ids = np.full((len(n), length), pad_id, dtype=np.int64)
        ids[:, : len(prefix)] = prefix
        content = (columns >= len(prefix)) & (columns < (len(prefix) + n)[:, None])
        ids[content] = self.ids[ragged_arange(self.first[rows], n)]
        ids[np.arange(len(n))[:, None], (len(prefix) + n)[:, None] + np.arange(len(suffix))] = suffix
        mask = (columns < (len(prefix) + n + len(suffix))[:, None]).astype(np.int64)
        return ids, mask


@dataclass
class _WordUnits:
    """One selector's units (each word's first or last piece) of a chunk's windows (:class:`_ChunkWindows`),
    grouped by the window that owns them, in run order, so that a batch of windows ``[a, b)`` has
    units ``window_units[a]:window_units[b]``: arrays instead of :class:`_Pending` and :class:`_Part`
    objects.

    Attributes
    ----------
    window_units : np.ndarray
        ``(windows + 1,)`` int64: where each window's units start.
    window : np.ndarray
        ``(units,)`` int64: the window (its place in run order) that owns each unit.
    position : np.ndarray
        ``(units,)`` int64: the unit's position in its window's model input.
    word : np.ndarray
        ``(units,)`` int64: its word among the chunk's words (the row of the chunk's output).
    """

    window_units: np.ndarray
    window: np.ndarray
    position: np.ndarray
    word: np.ndarray

    @classmethod
    def plan(cls, windows: _ChunkWindows, pieces: np.ndarray, n_prefix: int) -> "_WordUnits":
        """The units at chunk pieces ``pieces`` ``(words,)`` (one per word, increasing) of ``windows``,
        whose model inputs start with ``n_prefix`` special tokens."""
        # (windows,) where each window's owned pieces start among the chunk's; owned ranges tile them
        owned = windows.first + windows.own
        holding = np.flatnonzero(windows.count > 0)
        holding = holding[np.argsort(owned[holding], kind="stable")]
        # (words,) the window owning each word's unit, then the units by window, in piece order
        window = holding[np.searchsorted(owned[holding], pieces, side="right") - 1]
        order = np.argsort(window, kind="stable")
        window = window[order]
        window_units = np.zeros(len(windows) + 1, dtype=np.int64)
        np.cumsum(np.bincount(window, minlength=len(windows)), out=window_units[1:])
        return cls(window_units, window, pieces[order] - windows.first[window] + n_prefix, order)


@dataclass
class _Pooled:
    """Word features pooled where the model ran: each word's pieces (``method``), then the layers
    (``pooling``, on the model's device), so only ``(words, dim)`` rows in ``dtype`` reach the host.

    Exactly the host's pooling of the same hidden states (the same torch operations on each word's
    own values). A sentence in several windows whose words are pooled over all their pieces
    (``"mean"``, ``"max"``) may have a word split between two batches: its pieces come back and are
    pooled on the host (:meth:`TransformerEncoder._run`).
    """

    pooling: LayerPooling
    #: the same pooling on the CPU (for the words pooled on the host)
    host_pooling: LayerPooling
    method: SubwordPooling
    #: ``"float32"`` or ``"float16"``
    dtype: str
    copies: Optional[HostCopies] = None
    #: the current chunk's ``(words, dim)`` output
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

    def on_device(self, n_pieces: int, window: int) -> bool:
        """Whether a sentence of ``n_pieces`` pieces is pooled on the device."""
        return not self.grouped or n_pieces <= window

    def pool_on_host(self, item: "_Pending") -> np.ndarray:
        """``(words, dim)``: the sentence's pieces that came back, pooled."""
        words = pool_subwords_numpy(item.joined(0), item.pieces.offsets, self.method)
        return pool_layers_numpy(self.host_pooling, words)


@dataclass
class _TextPooled:
    """Texts pooled where the model ran: each layer's pieces to words (``method``), then the words to
    one vector (``text_pooling``, ``"mean"`` or ``"max"``), so only ``(layers, width')`` per text (or
    per side of a pair) reaches the host.

    A text whose pieces one model input owns all of is pooled where that input ran: on a CPU by the
    host's own function, text by text (:func:`~contextembed.pooling.pool_pieces_to_text`, so the bits
    are those of pooling its :class:`PieceEncoding`); elsewhere every such text of a batch at once
    (:func:`_pool_texts`). A text in several windows (or one side of a long pair) has its pieces come
    back and is pooled on the host when its chunk is done.
    """

    method: SubwordPooling
    text_pooling: str
    n_layers: int
    copies: Optional[HostCopies] = None

    def pool_on_host(self, item: _Pending) -> np.ndarray:
        """``(layers, width')``: the text's pieces that came back, pooled."""
        return pool_pieces_to_text(item.joined(0), item.pieces.offsets, self.method, self.text_pooling)


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


class TransformerEncoder(Encoder):
    """A frozen Hugging Face encoder exposing every layer at word level.

    Build it with :meth:`load` (or :func:`contextembed.load_encoder`), which never downloads.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The encoder (for encoder-decoder models, the encoder half is used).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its fast tokenizer.
    runtime : Runtime
        What runs the forward pass: the device, backend and precision, as
        :func:`~contextembed.encoders.choose_runtime` chose them from the settings
        below (:meth:`load` calls it). The constructor never measures, exports or writes.
    spec : str
        What the encoder was loaded from (kept by adapters instead of the weights).

    Other Parameters
    ----------------
    device : str or torch.device
        (:meth:`load`) ``"auto"`` picks CUDA when present.
    precision : {"auto", "fp32", "bf16", "fp16", "int8"}
        (:meth:`load`)
        Compute precision; outputs are always float32. ``"int8"``: int8 linear layers with a
        scale per token (CPU only). ``"auto"``: bf16 on CUDA; on
        a CPU the fastest of fp32, bf16 and int8 as measured once per machine and remembered
        (:mod:`contextembed.tuning`; bf16 only on CPUs
        with native bf16 units and 1.25x faster than fp32, int8 only 1.15x faster than both:
        :func:`contextembed.encoders.auto_cpu_precision`), int8 only if the quantized model keeps
        a mean cosine of at least 0.99 to fp32 on every hidden state of a few probe sentences.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    window, stride : int, optional
        Pieces per window and distance between window starts for long inputs; defaults: the
        model's maximum length without special tokens, and half of it.
    batch_tokens : int, optional
        Budget of padded pieces per forward pass (batches are length-sorted). ``None`` (default):
        8192 on CUDA; on a CPU 1024 (or one full window of a model with longer inputs), where big
        passes run slower per piece: their activations leave the caches (1024 ran 1.3-1.9x the
        words/s of 8192 with MiniLM: ``benchmarks/throughput.py --paths fp32 fp32@8192``).
    max_batch_size : int
        At most this many windows per forward pass.
    chunk_size : int
        Sentences tokenized, sorted and held at once; bounds memory on large corpora.
    pad_multiple : int, optional
        Every forward pass pads its sequences to a multiple of this many positions (capped at the
        model's maximum). ``None`` (default): 16 in bf16, fp16 and int8, where attention kernels
        process keys in blocks of 16 and sum a partial last block in another order, so that without
        it a sentence's vectors change with the other sentences of its batch (by up to 0.08 on
        MiniLM in bf16; in int8 a rounding flip downstream makes it up to 0.17);
        1 (pad to the longest sequence only) in fp32, where that effect stays below 1e-5 anyway and
        the padding would cost about 16% of the speed (``benchmarks/batch_invariance.py``). On
        ``backend="openvino"``: 16 in bf16 only; 1 in fp32 and int8, where padding to 16 ran 0.84x and
        0.83x the speed and no extra padding moved a sentence's vectors across batch neighbours by at
        most 3.8e-6 (fp32) and 0 (int8) on MiniLM.
    backend : {"torch", "openvino", "auto"}
        (:meth:`load`) What runs the forward pass; ``"auto"`` measures both on a probe
        batch once per machine and model (remembered: :mod:`contextembed.tuning`), and keeps torch
        (logged to ``contextembed``) where the engine is not installed, not on a CPU, or cannot
        export the model.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    calibration : iterable of (list of str or str), optional
        Sentences that calibrate the engine's static int8 (default: a bundled sample), read once
        (a generator will do): token lists, or raw texts, which are split by the tokenizer the
        estimators use for raw text (``tokenizer="auto"``); empty ones are left out, and at most
        300 are used. Only with ``backend="openvino"`` or ``"auto"`` and ``precision="int8"`` or
        ``"auto"``; elsewhere a ``ValueError``.
        A token that is not a str is a ``TypeError`` naming the sentence and token index.

    Raises
    ------
    TypeError
        For a ``window``, ``stride``, ``batch_tokens``, ``pad_multiple``, ``max_batch_size`` or
        ``chunk_size`` that is not an int (a bool, a float, a string; ``None`` stands for the default
        of the four that have one), naming it (:data:`OPTION_BOUNDS`).
    ValueError
        For one below 1, a ``window`` longer than the model takes, a ``stride`` longer than the
        window, or a ``batch_tokens`` that cannot hold one full window.
    """

    family = "transformer"
    default_combine = "concat"
    no_context = None

    def __init__(
        self,
        model,
        tokenizer,
        runtime: Runtime,
        *,
        spec: str = "",
        calibration: Optional[Sequence[Sequence[str]]] = None,
        window: Optional[int] = None,
        stride: Optional[int] = None,
        batch_tokens: Optional[int] = None,
        max_batch_size: int = 128,
        chunk_size: int = 4096,
        pad_multiple: Optional[int] = None,
    ) -> None:
        check_values({"window": window, "stride": stride, "batch_tokens": batch_tokens, "pad_multiple": pad_multiple,
                      "max_batch_size": max_batch_size, "chunk_size": chunk_size}, OPTION_BOUNDS)
        if not isinstance(runtime, Runtime):
            raise TypeError(f"runtime={runtime!r} is not a Runtime: pass what choose_runtime(model, tokenizer, ...) "
                            "returns, or load the encoder with TransformerEncoder.load (which chooses it)")
        forking.install()  # forked workers must not hang in torch's inherited thread pool
        self.spec = spec
        self.device = runtime.device
        if getattr(model.config, "is_encoder_decoder", False):
            model = model.get_encoder()
        model = model.to(device=self.device, dtype=torch.float32).eval().requires_grad_(False)
        self._inputs = ModelInputs(model, tokenizer)
        self.tokenizer = tokenizer
        self.pieces = self._inputs.pieces
        self.pad_id = self._inputs.pad_id
        self._max_length = self._inputs.max_length
        self._n_layers, self._width = probe_shape(model, self._inputs, self.device)
        self.runtime = Runtime(runtime.device, runtime.backend, runtime.precision)  # what runs, without the forward
        self.backend = runtime.backend
        self.precision = runtime.precision
        forward = runtime.prepared
        if runtime.backend == "openvino":
            if forward is None:  # a precision named, not measured: the engine exports on its first batch
                forward = engine_forward(model, self._inputs, self._n_layers, runtime.precision,
                                         check_calibration(calibration, "openvino", runtime.precision),
                                         engine.model_fingerprint(model), self.device)
            self._engine: Optional[engine.OpenVinoForward] = forward
            self._torch: Optional[TorchForward] = None
            self.model = model  # fp32: saved, and the shape
            self.dtype = torch.float32
        else:
            check_calibration(calibration, "torch", runtime.precision)
            self._engine = None
            self._torch = forward or TorchForward(model, runtime.precision, self._inputs, self._n_layers, self.device)
            self.model = self._torch.model
            self.dtype = self._torch.dtype
        self.pad_multiple = default_pad_multiple(runtime.backend, runtime.precision) if pad_multiple is None \
            else int(pad_multiple)
        if self._torch is not None:
            self._torch.flat = self.pad_multiple > 1 and unpadded.supports(self.model)
        n_special = len(self.pieces.prefix) + len(self.pieces.suffix)
        max_window = self._max_length - n_special
        self.window = max_window if window is None else int(window)
        self.stride = max(1, self.window // 2) if stride is None else int(stride)
        check_window(self.window, self.stride, max_window)
        if batch_tokens is None:
            batch_tokens = max(self._max_length, GPU_BATCH_TOKENS if self.device.type == "cuda" else CPU_BATCH_TOKENS)
        if batch_tokens < self._max_length:
            raise ValueError(
                f"batch_tokens={batch_tokens} cannot hold one full window of {self._max_length} pieces"
            )
        self.batch_tokens = int(batch_tokens)
        self.max_batch_size = int(max_batch_size)
        self.chunk_size = int(chunk_size)
        self._pair: Optional[PairTemplate] = None

    @property
    def _unpadded(self) -> bool:
        """Whether torch runs the flat forward (:mod:`._unpadded`); never on the engine."""
        return self._torch is not None and self._torch.flat

    @_unpadded.setter
    def _unpadded(self, flat: bool) -> None:
        self._torch.flat = flat

    @property
    def _pruner(self) -> LayerPruner:
        """What runs torch's hidden states without the layers above the last one wanted."""
        return self._torch.pruner

    # -- saving and loading -------------------------------------------------------------------

    def _write(self, folder: str) -> None:
        """A Hugging Face model directory: fp32 safetensors weights, config and tokenizer (an int8
        encoder saves the weights it was quantized from)."""
        state = {name: value.float() for name, value in original_state_dict(self.model).items()}
        with _quiet_transformers():
            self.model.save_pretrained(folder, state_dict=state, safe_serialization=True)
            self.tokenizer.save_pretrained(folder)

    @classmethod
    def load(cls, name_or_path: Union[str, os.PathLike], **kwargs) -> "TransformerEncoder":
        """Load a local model directory (config, weights, tokenizer); never downloads.

        The directory is checked first and the loaded model against its checkpoint: missing
        tokenizer files, truncated or corrupt files, and weights that do not cover the configured
        model raise :class:`~contextembed.errors.ModelFormatError` naming the file.
        """
        runtime = kwargs.pop("runtime", None)
        settings = {name: kwargs.pop(name) for name in ("device", "precision", "backend") if name in kwargs}
        if runtime is not None and settings:
            raise TypeError(f"pass runtime= or {', '.join(settings)}=, not both: a Runtime names its device, "
                            "backend and precision")
        check_settings(settings.get("device", "auto"), settings.get("precision", "auto"), cls.family)  # before loading
        check_backend(settings.get("backend", "torch"), cls.family)
        check_values(kwargs, OPTION_BOUNDS)
        if kwargs.get("calibration") is not None:  # read once, here: a generator is passed on as the list it held
            kwargs["calibration"] = check_calibration(kwargs["calibration"], settings.get("backend", "torch"),
                                                      settings.get("precision", "auto"))
        source = os.fspath(name_or_path)
        model, tokenizer = cls.read(source)
        if runtime is None:
            runtime = choose_runtime(model, tokenizer, calibration=kwargs.get("calibration"), **settings)
        encoder = cls(model, tokenizer, runtime, spec=kwargs.pop("spec", source), **kwargs)
        encoder._directory = source
        return encoder

    @staticmethod
    def read(directory: Union[str, os.PathLike]) -> tuple:
        """The fp32 model and the fast tokenizer of a local model directory, checked as :meth:`load`
        checks them (what :func:`~contextembed.encoders.choose_runtime` and the constructor take)."""
        source = os.fspath(directory)
        check_directory(source)
        with _quiet_transformers():
            tokenizer = load_tokenizer(source, _tokenizer_options(source))
            model = load_model(source)
        check_tokenizer_fits(tokenizer, model, source)
        return model, tokenizer

    @property
    def sentence_pooling(self) -> Optional[SentencePooling]:
        """How the model's own sentence vector is made, where its directory is a sentence-transformers
        one (``modules.json``); ``None`` otherwise.

        Raises
        ------
        FileFormatError
            A damaged, unsupported or contradictory ``modules.json`` or pooling configuration,
            naming the file and field (read when first asked for).
        """
        if not hasattr(self, "_sentence_pooling"):
            directory = getattr(self, "_directory", None)
            self._sentence_pooling = None if directory is None else read_sentence_pooling(
                directory, self.width, self._max_length)
        return self._sentence_pooling

    # -- properties ---------------------------------------------------------------------------

    @property
    def default_layers(self) -> tuple[int, ...]:
        """The BERT paper's best feature-based NER setting (Table 7): the last four layers (all of
        them for models with fewer)."""
        return tuple(range(-min(4, self.n_layers), 0))

    @property
    def n_layers(self) -> int:
        return self._n_layers

    @property
    def width(self) -> int:
        return self._width

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def max_context(self) -> int:
        """One window's pieces (``window``): what context can fill beside a sentence at most."""
        return self.window

    @property
    def has_cls(self) -> bool:
        return bool(self.pieces.prefix)

    @property
    def pair(self) -> PairTemplate:
        """The tokenizer's template for sentence pairs (read on first use)."""
        if self._pair is None:
            self._pair = pair_template(self.tokenizer)
        return self._pair

    @property
    def is_subword(self) -> bool:
        return True

    # -- encoding -----------------------------------------------------------------------------

    def iter_encode_pieces(
        self, sentences: Sentences, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        for pending in self._iter_pending(sentences, layers, ("all",), show_progress):
            yield PieceEncoding(pending.joined(0), pending.pieces.offsets, pending.cls, pending.pieces.ids)

    def iter_encode(
        self,
        sentences: Sentences,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "first",
        *,
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        check_subword_pooling(subword_pooling)
        if subword_pooling not in _DIRECT:
            yield from super().iter_encode(sentences, layers, subword_pooling, show_progress=show_progress)
            return
        selectors = _DIRECT[subword_pooling]
        for pending in self._iter_pending(sentences, layers, selectors, show_progress):
            parts = [pending.joined(k) for k in range(len(selectors))]
            yield parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1)

    def _iter_pooled(self, sentences, pooling: LayerPooling, subword_pooling: str, in_context: bool, dtype: str,
                     show_progress: bool) -> Iterator[np.ndarray]:
        """Words pooled where the model ran (:class:`_Pooled`): only ``(words, dim)`` rows in ``dtype``
        come to the host, views of one array per chunk of sentences.

        A scalar mix with ``layer_norm`` normalises each layer over the rows it is given: the device
        pools a batch of many sentences at once, so it is combined on the host, each sentence's words
        on their own (:meth:`Encoder._iter_pooled`), and a sentence's features never depend on its
        neighbours."""
        if pooling.mix is not None and pooling.mix.layer_norm:
            yield from super()._iter_pooled(sentences, pooling, subword_pooling, in_context, dtype, show_progress)
            return
        on_device = pooling if self.device.type == "cpu" else copy.deepcopy(pooling).to(self.device)
        pooled = _Pooled(on_device, pooling, subword_pooling, dtype)
        if not in_context and subword_pooling in _DIRECT:
            yield from self._iter_picked(sentences, pooled, _DIRECT[subword_pooling], show_progress)
            return
        selectors = _DIRECT.get(subword_pooling, ("all",))
        run = self._iter_in_context if in_context else self._iter_pending
        for pending in run(sentences, pooling.layer_indexes, selectors, show_progress, pooled):
            yield pending.rows

    def _iter_picked(self, sentences, pooled: _Pooled, selectors: Sequence[str], show_progress: bool) -> Iterator[np.ndarray]:
        """:meth:`_iter_pooled` of words picked by ``selectors`` (their first or last pieces), each chunk
        planned as arrays (:class:`_ChunkWindows`, :class:`_WordUnits`) instead of an object per sentence,
        window and unit; the same batches, so the same bits, as :meth:`_iter_pending` runs."""
        layer_index = pooled.pooling.layer_indexes
        dim = pooled.pooling.output_width(subword_output_width(self.width, pooled.method))
        chunks = check_sentence_chunks(sentences, self.chunk_size)
        ahead = self._tokenizes_ahead(sentences)

        def tokenize(chunk: list) -> tuple[np.ndarray, tuple]:
            # (words of the chunk, dim): every row is written, as its word's window runs; its pages
            # are faulted in on another thread while the chunk is tokenized
            out = np.empty((sum(map(len, chunk)), dim), dtype=pooled.dtype)
            pages.populate(out)
            return out, self.pieces.word_pieces(chunk)

        with progress_bar(sentences, show_progress) as progress:
            for chunk, (out, (ids, starts, first_word, n_words)) in _tokenized(chunks, tokenize, ahead):
                windows = _ChunkWindows.plan(ids, starts[first_word + n_words] - starts[first_word], self.window, self.stride)
                units = [_WordUnits.plan(windows, _UNIT_PIECES[name](starts), len(self.pieces.prefix)) for name in selectors]
                pooled.out = out
                pooled.copies = HostCopies(self.device)
                padded, batches = self._window_batches(windows)
                run = functools.partial(self._pick_batch, windows=windows, padded=padded, units=units,
                                        layer_index=layer_index, pooled=pooled)
                self._run_windows(run, batches, padded, _ChunkProgress(progress, len(chunk)))
                pooled.copies.flush()
                for begin, end in zip(first_word.tolist(), (first_word + n_words).tolist()):
                    yield out[begin:end]

    @torch.inference_mode()
    def _pick_batch(self, rows: slice, windows: _ChunkWindows, padded: np.ndarray, units: list[_WordUnits],
                    layer_index: tuple[int, ...], pooled: _Pooled) -> None:
        """Run windows ``rows`` (one batch) and pool each selector's units into their words' rows."""
        length = int(padded[rows].max())
        ids, mask = windows.inputs(rows, length, self.pieces.around, self.pad_id)
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(mask).to(self.device)}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        for k, unit in enumerate(units):
            begin, end = unit.window_units[rows.start], unit.window_units[rows.stop]
            if begin < end:
                # (units,) their rows of flat
                index = (unit.window[begin:end] - rows.start) * length + unit.position[begin:end]
                self._pool_words(flat, index, unit.word[begin:end], k, len(units), pooled)

    def _window_batches(self, windows: _ChunkWindows) -> tuple[np.ndarray, list[slice]]:
        """Each window's model input length (``(windows,)``, as :meth:`_padded_length` gives it) and the
        batches :meth:`_run_rows` cuts from them, as slices of the windows in run order."""
        n_special = len(self.pieces.prefix) + len(self.pieces.suffix)
        padded = np.minimum(-(-(windows.length + n_special) // self.pad_multiple) * self.pad_multiple, self._max_length)
        batches = [slice(batch[0], batch[-1] + 1) for batch in _batches(
            range(len(windows)), padded.tolist().__getitem__, self.batch_tokens, self.max_batch_size)]
        return padded, batches

    def _run_windows(self, run: Callable[[slice], None], batches: list[slice], padded: np.ndarray,
                     progress: Optional["_ChunkProgress"] = None) -> None:
        """:meth:`_run_rows` of batches of planned windows (``padded``: each one's input length)."""
        if progress is not None:
            cost = [(batch.stop - batch.start) * int(padded[batch].max()) for batch in batches]
            progress.expect(sum(cost))
            costs = dict(zip((batch.start for batch in batches), cost))
            run = functools.partial(_counted, run, lambda batch: progress.advance(costs[batch.start]))
        streams.run_all(run, batches, self.device)
        if progress is not None:
            progress.finish()

    def encode_piece_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                           pooling: Optional[LayerPooling] = None, show_progress: ShowProgress = False) -> np.ndarray:
        """The mean over each sentence's pieces, summed where the model ran per window (every piece
        once, from the window that owns it): only ``(layers, width)`` per window leaves the device,
        or with ``pooling`` its layers combined there, batch by batch: ``(dim,)``.

        The sentences' model inputs are arrays (:class:`_ChunkWindows`), not an object per sentence;
        the batches are those of the other paths. ``show_progress`` (a bar of its own, or the
        caller's: anything with ``update(n)``) counts the sentences as the batches finish.

        Returns
        -------
        np.ndarray
            ``(sentences, layers, width)`` float32, or ``(sentences, pooling.output_width(width))``
            (:meth:`Encoder.encode_piece_means`); zeros for an empty sentence.
        """
        sentences = check_sentences(sentences)
        n_layers = len(self.layer_indexes(layers))
        check_rowwise_pooling(pooling, n_layers, "encode_piece_means")
        pooled = None if pooling is None else _MeansPooled.on(pooling, self.device)
        # every row is written (an empty sentence's mean is 0 / 1)
        out = np.empty((len(sentences), *self._mean_shape(n_layers, pooled)), dtype=np.float32)
        begin = 0
        for rows, where in self._chunk_piece_means(sentences, layers, show_progress, pooled):
            np.take(rows, where, axis=0, out=out[begin : begin + len(where)])
            begin += len(where)
        return out

    def iter_encode_piece_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                                show_progress: ShowProgress = False) -> Iterator[np.ndarray]:
        """:meth:`encode_piece_means` one sentence after the other, in input order, without gathering
        them into one array: each ``(layers, width)`` is a view of its chunk's means (which it keeps
        alive; copy the few to keep of many)."""
        chunks = self._chunk_piece_means(check_sentences(sentences), layers, show_progress)
        return (means for rows, where in chunks for means in map(rows.__getitem__, where.tolist()))

    def iter_encode_input_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                                max_pieces: Optional[int] = None,
                                show_progress: ShowProgress = False) -> Iterator[np.ndarray]:
        """The mean over every position of each sentence's model input, special tokens included
        (sentence-transformers' mean pooling), one ``(layers, width)`` float32 after the other.

        Parameters
        ----------
        max_pieces : int, optional
            Keep each sentence's first ``max_pieces`` pieces and drop the rest, as
            sentence-transformers truncates at ``max_seq_length`` (special tokens not counted here).
            ``None``: a sentence longer than one window is read in windows, every piece counted
            once and the special tokens once (those that start its first window and end its last).
        """
        check_values({"max_pieces": max_pieces}, {"max_pieces": OPTIONAL_COUNT})
        chunks = self._chunk_piece_means(check_sentences(sentences), layers, show_progress, special=True,
                                         max_pieces=max_pieces)
        return (means for rows, where in chunks for means in map(rows.__getitem__, where.tolist()))

    def _chunk_piece_means(self, sentences: list, layers: LayerSpec, show_progress: ShowProgress,
                           pooled: Optional[_MeansPooled] = None, special: bool = False,
                           max_pieces: Optional[int] = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """:meth:`_piece_means` of each chunk of the checked ``sentences``, in order (the next chunk
        tokenized while one runs); ``special``: the special tokens around each sentence counted too,
        ``max_pieces``: its pieces beyond that many dropped first."""
        layer_index = self.layer_indexes(layers)
        tokenize = self.pieces.joined if max_pieces is None else (
            lambda chunk: _first_pieces(*self.pieces.joined(chunk), max_pieces))
        with progress_bar(sentences, show_progress) as progress:
            for chunk, (ids, n_pieces) in _tokenized(_chunks(sentences, self.chunk_size), tokenize,
                                                     self._tokenizes_ahead(sentences)):
                yield self._piece_means(ids, n_pieces, layer_index, _ChunkProgress(progress, len(chunk)), pooled,
                                        special)

    def _mean_shape(self, n_layers: int, pooled: Optional[_MeansPooled]) -> tuple[int, ...]:
        """The shape of one sentence's piece means: ``(layers, width)``, or ``(dim,)`` pooled."""
        return (n_layers, self.width) if pooled is None else (pooled.host_pooling.output_width(self.width),)

    def _iter_text_layers(self, sentences, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each text pooled where the model ran (:class:`_TextPooled`); ``"cls"``: only the first piece
        leaves the device."""
        if text_pooling == "cls":
            for item in self._iter_pending(sentences, layers, (), show_progress):
                yield item.cls if len(item.pieces.offsets) > 1 else np.zeros_like(item.cls)  # an empty text: zeros
            return
        pooled = _TextPooled(subword_pooling, text_pooling, len(self.layer_indexes(layers)))
        for item in self._iter_pending(sentences, layers, ("all",), show_progress, pooled):
            yield item.rows

    def encode_cls(self, sentences: Sentences, layers: LayerSpec = "all") -> np.ndarray:
        """The first piece ([CLS]/<s>) of each sentence: ``(sentences, layers, width)`` float32."""
        if not self.has_cls:
            raise ValueError(f"{self.spec or 'this model'} adds no leading special token to pool as CLS")
        cls = [p.cls for p in self._iter_pending(sentences, layers, (), False)]
        n_layers = len(self.layer_indexes(layers))
        return np.stack(cls) if cls else np.zeros((0, n_layers, self.width), dtype=np.float32)

    def iter_encode_pair_pieces(
        self, pairs: Pairs, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PairPieces]:
        """Encode sentence pairs jointly, with the model's own pair template and segment ids.

        Each pair is one model input, ``[CLS] A [SEP] B [SEP]`` for BERT, ``<s> A </s></s> B </s>``
        for RoBERTa. A pair longer than the model
        takes is encoded by the window policy of :meth:`_pair_windows`, with one
        :class:`LongPairWarning` per call.

        Yields
        ------
        PairPieces
            Per pair, in input order: each side's pieces (every word of each side owns at least one)
            and the pair's first-piece vector.
        """
        for a, b in self._iter_pairs(pairs, layers, ("all",), show_progress):
            first = PieceEncoding(a.joined(0), a.pieces.offsets, a.cls)
            yield PairPieces(first, PieceEncoding(b.joined(0), b.pieces.offsets, a.cls), a.cls)

    def _iter_pair_layers(self, pairs: Pairs, layers: LayerSpec, subword_pooling: str, text_pooling: str,
                          show_progress: bool) -> Iterator[np.ndarray]:
        """Each side pooled where the model ran (:class:`_TextPooled`); ``"cls"``: only the pair's first
        piece leaves the device."""
        if text_pooling == "cls":
            for a, _ in self._iter_pairs(pairs, layers, (), show_progress):
                yield a.cls[None]
            return
        pooled = _TextPooled(subword_pooling, text_pooling, len(self.layer_indexes(layers)))
        for a, b in self._iter_pairs(pairs, layers, ("all",), show_progress, pooled):
            yield np.stack([a.rows, b.rows])

    def _iter_pairs(self, pairs: Pairs, layers: LayerSpec, selectors: Sequence[str], show_progress: bool,
                    pooled: Optional[_TextPooled] = None) -> Iterator[tuple[_Pending, _Pending]]:
        """Run the model over pairs in chunks; yield each pair's finished sides in input order."""
        pairs = check_pairs(pairs)
        layer_index = self.layer_indexes(layers)
        long_pairs = 0
        chunks = (pairs[begin : begin + self.chunk_size] for begin in range(0, len(pairs), self.chunk_size))
        with progress_bar(pairs, show_progress, unit="pair") as progress:
            # the next chunk tokenized on a producer while this one runs
            for chunk, (firsts, seconds) in _tokenized(chunks, self._pair_pieces, len(pairs) > self.chunk_size):
                sides = [(self._pending(a, selectors), self._pending(b, selectors)) for a, b in zip(firsts, seconds)]
                rows = []
                for a, b in sides:
                    rows.extend(self._pair_rows(a, b))
                    long_pairs += a.pieces.n_pieces + b.pieces.n_pieces > self._pair_budget()
                self._run([side for pair in sides for side in pair], rows, layer_index, pooled,
                          _ChunkProgress(progress, len(chunk)))
                yield from sides
        if long_pairs:
            warn_long_pairs(long_pairs, len(pairs), self._pair_budget())

    def _pair_pieces(self, chunk: list) -> tuple[list[SentencePieces], list[SentencePieces]]:
        """The pieces of each first side and of each second side of a chunk of pairs."""
        return self.pieces([a for a, _ in chunk]), self.pieces([b for _, b in chunk])

    def _iter_pending(
        self, sentences: Sentences, layers: LayerSpec, selectors: Sequence[str], show_progress: bool,
        pooled: Union[_Pooled, _TextPooled, None] = None,
    ) -> Iterator[_Pending]:
        """Run the model over sentences in chunks; yield finished sentences in input order (an iterator
        is read one chunk at a time)."""
        layer_index = self.layer_indexes(layers)
        chunks = check_sentence_chunks(sentences, self.chunk_size)
        ahead = self._tokenizes_ahead(sentences)
        with progress_bar(sentences, show_progress) as progress:
            for chunk, pieces in _tokenized(chunks, self.pieces, ahead):
                pending = [self._pending(p, selectors) for p in pieces]
                self._run(pending, [row for item in pending for row in self._single_rows(item)], layer_index, pooled,
                          _ChunkProgress(progress, len(chunk)))
                yield from pending

    def _tokenizes_ahead(self, sentences) -> bool:
        """Whether the next chunk of ``sentences`` is tokenized on a producer while one runs: an iterator
        is read no further than one chunk ahead of the outputs (tokenized as it comes), and a list of
        one chunk has nothing to tokenize ahead."""
        return not isinstance(sentences, Iterator) and isinstance(sentences, Sized) and len(sentences) > self.chunk_size

    def _run(self, pending: list[_Pending], rows: list[_Row], layer_index: tuple[int, ...],
             pooled: Union[_Pooled, _TextPooled, None], progress: Optional["_ChunkProgress"] = None) -> None:
        """Run ``rows`` for the sentences ``pending`` (``progress`` counts them as batches finish);
        with ``pooled``, their word rows are laid out in one array first and filled as the batches
        finish."""
        if pooled is None:
            self._run_rows(rows, layer_index, progress=progress)
            return
        if isinstance(pooled, _TextPooled):
            on_host = self._lay_out_texts(pending, rows, pooled)
        else:
            on_host = self._lay_out_rows(pending, pooled)
        pooled.copies = HostCopies(self.device)
        self._run_rows(rows, layer_index, pooled, progress)
        pooled.copies.flush()
        for item, item_rows in on_host:  # their pieces came back: see _Pooled, _TextPooled
            item_rows[...] = pooled.pool_on_host(item)
            item.rows, item.blocks = item_rows, []

    def _lay_out_rows(self, pending: list[_Pending], pooled: _Pooled) -> list[tuple[_Pending, np.ndarray]]:
        """One ``(words, dim)`` output for the chunk (``pooled.out``), each sentence's ``rows`` a view of
        it; the sentences pooled on the host instead, with their rows (their ``rows`` stay ``None``)."""
        dim = pooled.pooling.output_width(subword_output_width(self.width, pooled.method))
        counts = [len(item.pieces.offsets) - 1 for item in pending]
        # (words of the chunk, dim)
        out = pooled.out = np.empty((sum(counts), dim), dtype=pooled.dtype)
        on_host = []
        for item, end, count in zip(pending, itertools.accumulate(counts), counts):
            item.first_row = end - count
            if pooled.on_device(item.pieces.n_pieces, self.window):
                item.rows = out[end - count : end]
            else:
                on_host.append((item, out[end - count : end]))
        return on_host

    def _lay_out_texts(self, pending: list[_Pending], rows: list[_Row], pooled: _TextPooled) -> list[tuple[_Pending, np.ndarray]]:
        """One ``(texts, layers, width')`` float32 output for the chunk, each text's ``rows`` a view of
        it where one model input owns all of its pieces; the other texts, with their rows (their
        ``rows`` stay ``None``: their pieces come back)."""
        dim = subword_output_width(self.width, pooled.method)
        out = np.empty((len(pending), pooled.n_layers, dim), dtype=np.float32)
        # how many model inputs own some of each text's pieces
        owners = collections.Counter(id(part.item) for row in rows for part in row.parts if part.owned)
        on_host = []
        for item, item_rows in zip(pending, out):
            if owners[id(item)] == 1:
                item.rows = item_rows
            else:
                on_host.append((item, item_rows))
        return on_host

    def iter_encode_pieces_in_context(
        self, items: Iterable[InContext], layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        """Each sentence encoded in one input with the context pieces around it (as the adapters'
        ``context=N`` asks); a sentence of ``window`` pieces or more in its windows, as
        alone. Only the sentence's own pieces come out (``cls``: the input's first piece)."""
        for item in self._iter_in_context(items, layers, ("all",), show_progress):
            yield PieceEncoding(item.joined(0), item.pieces.offsets, item.cls, item.pieces.ids)

    def _iter_in_context(self, items: Iterable[InContext], layers: LayerSpec, selectors: Sequence[str],
                         show_progress: bool, pooled: Optional[_Pooled] = None) -> Iterator[_Pending]:
        """:meth:`_iter_pending` of sentences with their context pieces around them."""
        layer_index = self.layer_indexes(layers)
        with progress_bar(items, show_progress) as progress:
            for chunk in _chunks(check_in_context(items), self.chunk_size):
                own, lefts, rights = (self.pieces([getattr(item, side) for item in chunk])
                                      for side in ("words", "left", "right"))
                pending = [self._pending(pieces, selectors) for pieces in own]
                rows = [row for item, before, after, wanted in zip(pending, lefts, rights, chunk)
                        for row in self._context_rows(item, before.ids, after.ids, wanted.size)]
                self._run(pending, rows, layer_index, pooled, _ChunkProgress(progress, len(chunk)))
                yield from pending

    def _context_rows(self, item: _Pending, before: np.ndarray, after: np.ndarray, size: int) -> Iterator[_Row]:
        """``prefix + context before + sentence + context after + suffix`` when the sentence leaves room
        in a window; its plain windows otherwise."""
        n_pieces = item.pieces.n_pieces
        room = self.window - n_pieces
        if not n_pieces or room <= 0:
            yield from self._single_rows(item)
            return
        n_left, n_right = split_context(room, min(size, len(before)), min(size, len(after)))
        prefix, suffix = np.asarray(self.pieces.prefix, dtype=np.int64), np.asarray(self.pieces.suffix, dtype=np.int64)
        ids = np.concatenate([prefix, before[len(before) - n_left :], item.pieces.ids, after[:n_right], suffix])
        part = _Part(item, Window(0, n_pieces, 0, n_pieces), len(prefix) + n_left)
        yield _Row(ids, None, [part], [item] if len(prefix) else [])

    def _pending(self, pieces: SentencePieces, selectors: Sequence[str]) -> _Pending:
        """``selectors``: ``"all"`` pieces, word ``"starts"`` or ``"ends"``."""
        positions = [_POSITIONS[name](pieces) for name in selectors]
        return _Pending(pieces, positions, [[] for _ in selectors])

    def _single_rows(self, item: _Pending) -> Iterator[_Row]:
        """One row per window of a sentence: ``prefix + window + suffix``."""
        prefix = self.pieces.prefix
        around = self.pieces.around
        for window in plan_windows(item.pieces.n_pieces, self.window, self.stride):
            ids = np.concatenate([around[0], item.pieces.ids[window.start : window.end], around[1]])
            owners = [item] if window.start == 0 and prefix else []
            yield _Row(ids, None, [_Part(item, window, len(prefix))], owners)

    def _pair_budget(self) -> int:
        """Pieces of both sides that one model input takes (besides the pair's special tokens)."""
        return min(self.window + len(self.pieces.prefix) + len(self.pieces.suffix), self._max_length) - self.pair.n_special

    def _pair_windows(self, n_first: int, n_second: int) -> tuple[list[Window], list[Window]]:
        """The window policy for pairs (docs/pairs.md).

        A pair that fits is one window per side. Otherwise each side gets a share of the budget:
        a side that fits in half of it keeps all of its pieces and the other side takes the rest;
        else both get half. A side longer than its share is cut into overlapping windows (stride:
        half a window) as a single sentence is, and every piece takes its vectors from the window
        where it has most context; each window of one side is paired with the other side's first
        window, so every word is encoded jointly with (the start of) the other side.
        """
        budget = self._pair_budget()
        if n_first + n_second <= budget:
            return [Window(0, n_first, 0, n_first)], [Window(0, n_second, 0, n_second)]
        half = budget // 2
        if n_first <= half:
            sizes = (n_first, budget - n_first)
        elif n_second <= budget - half:
            sizes = (budget - n_second, n_second)
        else:
            sizes = (half, budget - half)
        return tuple(plan_windows(n, max(1, size), max(1, size // 2)) for n, size in zip((n_first, n_second), sizes))

    def _pair_rows(self, a: _Pending, b: _Pending) -> list[_Row]:
        """The rows of one pair: its first windows together, then each further window of one side
        with the other side's first window."""
        windows_a, windows_b = self._pair_windows(a.pieces.n_pieces, b.pieces.n_pieces)
        rows = [self._pair_row(a, windows_a[0], b, windows_b[0], owned=(True, True))]
        rows += [self._pair_row(a, w, b, windows_b[0], owned=(True, False)) for w in windows_a[1:]]
        rows += [self._pair_row(a, windows_a[0], b, w, owned=(False, True)) for w in windows_b[1:]]
        return rows

    def _pair_row(self, a: _Pending, wa: Window, b: _Pending, wb: Window, owned: tuple[bool, bool]) -> _Row:
        template = self.pair
        first, second = a.pieces.ids[wa.start : wa.end], b.pieces.ids[wb.start : wb.end]
        types = template.type_ids(len(first), len(second)) if self._inputs.takes_types else None
        offset_b = len(template.prefix) + len(first) + len(template.middle)
        parts = [_Part(a, wa, len(template.prefix), owned[0]), _Part(b, wb, offset_b, owned[1])]
        owners = [a, b] if owned == (True, True) and template.prefix else []
        return _Row(template.ids(first, second), types, parts, owners)

    def _run_rows(self, rows: list[_Row], layer_index: tuple[int, ...], pooled: Union[_Pooled, _TextPooled, None] = None,
                  progress: Optional["_ChunkProgress"] = None) -> None:
        """Run length-sorted batches of ``rows``; on a CPU several at once (:mod:`contextembed._runtime.streams`:
        each batch's results are filed under its windows, whatever order the batches finish in).
        ``progress`` counts the chunk's items as the batches finish, and all of them at the end."""
        rows = sorted(rows, key=lambda row: len(row.ids))
        batches = list(_batches(rows, self._padded_length, self.batch_tokens, self.max_batch_size))
        run = functools.partial(self._run_batch, layer_index=layer_index, pooled=pooled)
        if progress is not None:
            progress.expect(sum(self._batch_positions(batch) for batch in batches))
            run = functools.partial(_counted, run, lambda batch: progress.advance(self._batch_positions(batch)))
        streams.run_all(run, batches, self.device)
        if progress is not None:
            progress.finish()

    def _batch_positions(self, batch: list[_Row]) -> int:
        """The padded positions a batch computes: what the forward pass costs, roughly."""
        return len(batch) * max(self._padded_length(row) for row in batch)

    def _padded_length(self, row: _Row) -> int:
        """Model input length of a row, rounded up to ``pad_multiple`` positions (never beyond the
        model's maximum)."""
        return min(-(-len(row.ids) // self.pad_multiple) * self.pad_multiple, self._max_length)

    @torch.inference_mode()
    def _run_batch(self, batch: list[_Row], layer_index: tuple[int, ...], pooled: Union[_Pooled, _TextPooled, None] = None) -> None:
        length = max(self._padded_length(row) for row in batch)
        # (batch, seq)
        ids = np.full((len(batch), length), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int64)
        types = np.zeros((len(batch), length), dtype=np.int64) if batch[0].types is not None else None
        for r, row in enumerate(batch):
            ids[r, : len(row.ids)] = row.ids
            mask[r, : len(row.ids)] = 1
            if types is not None:
                types[r, : len(row.ids)] = row.types
        inputs = {"input_ids": ids, "attention_mask": mask} if types is None else {
            "input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        inputs = {k: torch.from_numpy(v).to(self.device) for k, v in inputs.items()}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        if pooled is None:  # pooled words take no [CLS] vector
            self._gather_cls(batch, flat, length)
        for k in range(len(batch[0].parts[0].item.positions)):
            self._gather_selector(batch, flat, length, k, pooled)

    def _forward(self, inputs: dict[str, torch.Tensor], layer_index: Sequence[int]) -> list[torch.Tensor]:
        """Hidden states ``layer_index`` of a padded batch, each ``(batch * seq, width)``: the engine's,
        the flat forward's (:mod:`.unpadded`) or the model's own."""
        if self._engine is None:
            return self._torch(inputs, layer_index)
        batch, length = inputs["input_ids"].shape
        wanted = [i % self._n_layers for i in layer_index]
        arrays = self._engine({k: v.numpy() for k, v in inputs.items()}, wanted)
        return [torch.from_numpy(array).reshape(batch * length, -1) for array in arrays]

    def _gather_selector(self, batch: list[_Row], flat: list[torch.Tensor], length: int, k: int,
                         pooled: Union[_Pooled, _TextPooled, None] = None) -> None:
        """Selector ``k``'s owned pieces of every row: pooled into their sentences' rows on the device
        (``pooled``) or gathered to the host."""
        index, targets = [], []
        for r, row in enumerate(batch):
            for part in row.parts:
                if not part.owned:
                    continue
                positions = part.item.positions[k]
                if len(positions) == part.item.pieces.n_pieces:  # every piece: positions[i] == i
                    lo, hi = part.window.own_start, part.window.own_end
                else:
                    lo, hi = np.searchsorted(positions, [part.window.own_start, part.window.own_end])
                index.append(positions[lo:hi] - part.window.start + part.offset + r * length)
                targets.append((part, lo, hi - lo))
        if pooled is not None:
            index, targets = self._pool_selector(flat, index, targets, k, pooled)
            if not targets:
                return
        index_t = torch.from_numpy(np.concatenate(index)).to(self.device)
        # (layers, units, width)
        gathered = torch.stack([layer.index_select(0, index_t) for layer in flat]).float().cpu().numpy()
        start = 0
        for part, _, count in targets:
            part.item.blocks[k].append((part.window.own_start, gathered[:, start : start + count]))
            start += count

    def _piece_means(self, ids: np.ndarray, n_pieces: np.ndarray, layer_index: tuple[int, ...],
                     progress: Optional["_ChunkProgress"] = None, pooled: Optional[_MeansPooled] = None,
                     special: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The piece means of one chunk's sentences (their pieces ``ids`` one after the other, ``n_pieces``
        of each): a sentence in one window is divided into its window's row as its batch finishes, one in
        several once all of its windows' sums are in (into the row of its first window). With ``pooled``,
        each row is the means' layers combined (:class:`_MeansPooled`).

        Returns
        -------
        tuple of np.ndarray
            ``(windows, layers, width)`` (``(windows, dim)`` pooled) float32 in run order, and
            ``(sentences,)`` the row of each sentence's means (the other rows of a sentence's windows
            are not used).
        """
        windows = _ChunkWindows.plan(ids, n_pieces, self.window, self.stride)
        padded, batches = self._window_batches(windows)
        rows = np.empty((len(windows), *self._mean_shape(len(layer_index), pooled)), dtype=np.float32)
        # (layers, windows of the sentences in several, width) float64
        split_sums = np.empty((len(layer_index), int(windows.split_offsets[-1]), self.width), dtype=np.float64)
        copies = HostCopies(self.device)
        run = functools.partial(self._sum_batch, windows=windows, padded=padded, layer_index=layer_index, out=rows,
                                split_sums=split_sums, copies=copies, pooled=pooled, special=special)
        self._run_windows(run, batches, padded, progress)
        copies.flush()  # before the split sentences' means: their first window's row is theirs
        if len(windows.split):
            # (layers, split sentences, width): each one's windows' sums, in window order, added up
            sums = np.stack([split_sums[:, begin:end].sum(axis=1)
                             for begin, end in zip(windows.split_offsets[:-1], windows.split_offsets[1:])], axis=1)
            # (split sentences, layers, width) float32
            n_special = len(self.pieces.prefix) + len(self.pieces.suffix) if special else 0
            counted = n_pieces[windows.split] + n_special
            means = np.divide(sums.transpose(1, 0, 2), counted[:, None, None], dtype=np.float64).astype(np.float32)
            rows[windows.row[windows.split]] = means if pooled is None else pooled.on_host(means.transpose(1, 0, 2))
        return rows, windows.row

    @torch.inference_mode()
    def _sum_batch(self, rows: slice, windows: _ChunkWindows, padded: np.ndarray, layer_index: tuple[int, ...],
                   out: np.ndarray, split_sums: np.ndarray, copies: HostCopies,
                   pooled: Optional[_MeansPooled] = None, special: bool = False) -> None:
        """Run windows ``rows`` (one batch) and sum the pieces each owns: each window's sums divided by
        its pieces into its rows of ``out`` ``(windows, layers, width)`` (a sentence's mean where the
        window holds all of it; with ``pooled``, its layers combined into ``(windows, dim)``), those of
        windows of sentences in several windows also into their slots of ``split_sums``
        ``(layers, slots, width)``.

        A whole sentence's mean is divided in float64 and rounded to float32 once (an empty one's is
        0 / 1): on a CPU in NumPy; elsewhere on the device, so that only the float32 means (or their
        pooled rows) come back, through ``copies`` (on CUDA a pinned buffer, consumed while the next
        batch computes), and the float64 sums only of the windows of sentences in several windows.
        """
        length = int(padded[rows].max())
        ids, mask = windows.inputs(rows, length, self.pieces.around, self.pad_id)
        inputs = {"input_ids": torch.from_numpy(ids).to(self.device), "attention_mask": torch.from_numpy(mask).to(self.device)}
        # each (batch * seq, width)
        flat = self._forward(inputs, layer_index)
        starts = np.arange(len(ids)) * length + len(self.pieces.prefix) + windows.own[rows]
        counts = windows.count[rows]
        n_pieces = np.maximum(windows.length[rows], 1).astype(np.float64)
        if special:  # the sentence's own special tokens too: those starting its first window, ending its last
            prefix, suffix = len(self.pieces.prefix), len(self.pieces.suffix)
            leads, ends = windows.leads[rows], windows.ends[rows]
            starts = starts - prefix * leads
            counts = counts + prefix * leads + suffix * ends
            n_pieces = np.maximum(windows.length[rows] + prefix + suffix, 1).astype(np.float64)
        slot = windows.slot[rows]
        split = np.flatnonzero(slot >= 0)
        if self._sums_on_host(flat):
            # (layers, batch, width) float64, laid out as (batch, layers, width)
            sums = _segment_sums([layer.numpy() for layer in flat], starts, counts)
            if pooled is None:
                np.divide(sums.transpose(1, 0, 2), n_pieces[:, None, None], out=out[rows], casting="same_kind")
            else:
                # (layers, batch, width) float32: the means, rounded as above, then their layers combined
                means = np.empty((len(flat), len(n_pieces), self.width), dtype=np.float32)
                np.divide(sums, n_pieces[None, :, None], out=means, casting="same_kind")
                out[rows] = pooled.on_host(means)
            if len(split):
                split_sums[:, slot[split]] = sums[:, split]
            return
        # (layers, batch, width) float64 on the device
        sums = self._device_window_sums(flat, starts, counts)
        means = (sums / torch.from_numpy(n_pieces).to(sums.device)[:, None]).to(torch.float32).transpose(0, 1)
        copies.put(means if pooled is None else pooled.on_device(means), functools.partial(_fill_means, out, rows))
        if len(split):
            split_sums[:, slot[split]] = sums[:, torch.from_numpy(split).to(sums.device)].cpu().numpy()

    def _sums_on_host(self, flat: list[torch.Tensor]) -> bool:
        """Whether a batch's window sums are taken on the host (:func:`_segment_sums`: NumPy, on a CPU,
        from float32 hidden states) rather than on the model's device (:meth:`_device_window_sums`)."""
        return self.device.type == "cpu" and all(layer.dtype == torch.float32 for layer in flat)

    def _device_window_sums(self, flat: list[torch.Tensor], starts: np.ndarray, counts: np.ndarray) -> torch.Tensor:
        """The sum of each window's ``counts[j]`` rows from ``starts[j]`` of every layer of ``flat``:
        ``(layers, windows, width)`` float64 on the model's device, the values added one after the
        other in row order from +0.0 (torch's ``index_add_``), one layer at a time, so only one layer's
        pieces are gathered and widened at once. Like every other piece mean: a sum of float32 values
        in float64 is exact in practice, so the result does not depend on the order, the windows, or
        whether it was taken from cached pieces; :func:`_segment_sums` gives the same bits on the host.
        """
        index_t = torch.from_numpy(ragged_arange(starts, counts)).to(self.device)
        owner = torch.repeat_interleave(torch.arange(len(counts), device=self.device), torch.from_numpy(counts).to(self.device))
        return torch.stack([
            flat[0].new_zeros(len(counts), self.width, dtype=torch.float64).index_add_(0, owner, layer.index_select(0, index_t).double())
            for layer in flat])

    def _pool_selector(self, flat: list[torch.Tensor], index: list[np.ndarray], targets: list[tuple[_Part, int, int]],
                       k: int, pooled: _Pooled) -> tuple[list[np.ndarray], list[tuple[_Part, int, int]]]:
        """Pool selector ``k``'s units of the sentences pooled on the device and hand them to their
        rows (:meth:`_fill_rows`); the index and targets of the others, whose pieces come back."""
        mine = [j for j, (part, _, _) in enumerate(targets) if part.item.rows is not None]
        if mine:
            self._pool_units(flat, np.concatenate([index[j] for j in mine]), [targets[j] for j in mine], k, pooled)
        rest = [j for j, (part, _, _) in enumerate(targets) if part.item.rows is None]
        return [index[j] for j in rest], [targets[j] for j in rest]

    def _pool_units(self, flat: list[torch.Tensor], index: np.ndarray, chosen: list[tuple[_Part, int, int]], k: int,
                    pooled: _Pooled) -> None:
        """Pool selector ``k``'s units ``index`` (rows of ``flat``) of the windows ``chosen`` into their
        rows of the chunk's output."""
        if isinstance(pooled, _TextPooled):
            self._pool_texts(flat, index, chosen, pooled)
            return
        if pooled.grouped:  # whole sentences (one window each): their rows in order
            starts, lengths = [part.item.first_row for part, _, _ in chosen], [len(part.item.rows) for part, _, _ in chosen]
        else:
            starts, lengths = [part.item.first_row + lo for part, lo, _ in chosen], [count for _, _, count in chosen]
        # the rows of the chunk's output the units go to, in order
        dest = np.repeat(np.asarray(starts) - np.cumsum([0] + lengths[:-1]), lengths) + np.arange(sum(lengths))
        # (words,) pieces of each word pooled over all of them
        counts = np.concatenate([np.diff(part.item.pieces.offsets) for part, _, _ in chosen]) if pooled.grouped else None
        self._pool_words(flat, index, dest, k, len(chosen[0][0].item.positions), pooled, counts)

    def _pool_words(self, flat: list[torch.Tensor], index: np.ndarray, dest: np.ndarray, k: int, n_selectors: int,
                    pooled: _Pooled, counts: Optional[np.ndarray] = None) -> None:
        """Rows ``index`` of ``flat`` (selector ``k``'s units of ``n_selectors``) pooled into rows ``dest``
        of the chunk's output; ``counts``: grouped words, each pooled over that many consecutive units."""
        # (words, dim_k): selector k's columns
        columns = _selector_columns(pooled.out, k, n_selectors, self.width)
        if pooled.copies_in_place(flat):
            # (words, layers, width): the concatenation's blocks, each layer's units copied straight there
            blocks = columns.reshape(len(columns), len(flat), self.width)
            with np.errstate(over="ignore"):  # float16 beyond its range: found by iter_encode_pooled's check
                for j, layer in enumerate(flat):
                    blocks[dest, j] = layer.numpy()[index]
            return
        index_t = torch.from_numpy(index).to(self.device)
        gathered = [layer.index_select(0, index_t).float() for layer in flat]
        if counts is not None:  # (layers, words, width)
            offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)])).to(self.device)
            words = pooled.pooling.combine_selected(pool_subwords(torch.stack(gathered), offsets, pooled.method))
        elif pooled.pooling.combine == "concat":  # (units, layers, width) -> (units, layers * width)
            words = torch.stack(gathered, dim=1).flatten(1)
        else:  # (layers, units, width) -> (units, dim)
            words = pooled.pooling.combine_selected(torch.stack(gathered))
        pooled.copies.put(words.to(_OUTPUT_DTYPES[pooled.dtype]), functools.partial(_fill_rows, columns, dest))

    def _pool_texts(self, flat: list[torch.Tensor], index: np.ndarray, chosen: list[tuple[_Part, int, int]],
                    pooled: _TextPooled) -> None:
        """Pool the texts of the windows ``chosen`` (each owning all of its text's pieces, rows ``index``
        of ``flat``) into their ``(layers, width')`` rows of the chunk's output."""
        index_t = torch.from_numpy(index).to(self.device)
        # (layers, units, width)
        gathered = torch.stack([layer.index_select(0, index_t) for layer in flat]).float()
        items = [part.item for part, _, _ in chosen]
        if gathered.device.type == "cpu":  # the host's own pooling, text by text: the same bits
            pieces = gathered.numpy()
            start = 0
            for item, (_, _, count) in zip(items, chosen):
                item.rows[...] = pool_pieces_to_text(pieces[:, start : start + count], item.pieces.offsets,
                                                     pooled.method, pooled.text_pooling)
                start += count
            return
        texts = _pool_texts(gathered, [item.pieces.offsets for item in items], pooled.method, pooled.text_pooling)
        pooled.copies.put(texts, functools.partial(_fill_texts, items))

    def _gather_cls(self, batch: list[_Row], flat: list[torch.Tensor], length: int) -> None:
        rows = [r for r, row in enumerate(batch) if row.cls_owners]
        if not rows:
            return
        index = torch.tensor([r * length for r in rows], device=self.device)
        # (rows, layers, width)
        cls = torch.stack([layer.index_select(0, index) for layer in flat], dim=1).float().cpu().numpy()
        for r, vector in zip(rows, cls):
            for owner in batch[r].cls_owners:
                owner.cls = vector


#: the pieces of each selector's units among a chunk's, from where its words' pieces start
#: (``(words + 1,)``, :meth:`~contextembed._inputs.alignment.PieceTokenizer.word_pieces`)
_UNIT_PIECES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "starts": lambda starts: starts[:-1],
    "ends": lambda starts: starts[1:] - 1,
}
#: the positions of each selector's units among a sentence's pieces (:meth:`TransformerEncoder._pending`)
_POSITIONS: dict[str, Callable[[SentencePieces], np.ndarray]] = {
    "all": lambda pieces: np.arange(pieces.n_pieces),
    "starts": lambda pieces: pieces.offsets[:-1],
    "ends": lambda pieces: pieces.offsets[1:] - 1,
}


def _segment_sums(layers: list[np.ndarray], starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``layer[starts[j] : starts[j] + counts[j]]`` summed in float64 for each segment ``j`` and layer,
    the values added one after the other from +0.0 in row order (as ``index_add_`` adds them):
    ``layers`` x ``(rows, width)`` float32 -> ``(layers, segments, width)``.

    Consecutive segments of one count whose starts are evenly spaced (a batch's windows of one
    length) are read as one ``(segments, count, width)`` view of the rows, nothing copied, and summed
    over its middle axis, which NumPy reduces one slice after the other
    (``tests/encoders/test_pooled.py`` checks the bits against torch).
    """
    layers = [np.ascontiguousarray(rows) for rows in layers]
    width = layers[0].shape[1] if layers else 0
    # (layers, segments, width), each segment's layers side by side in memory: the layout of the
    # (sentences, layers, width) means they become
    out = np.empty((len(counts), len(layers), width), dtype=np.float64).transpose(1, 0, 2)
    for begin, end, step in _even_runs(starts, counts):
        count = int(counts[begin])
        if not count:
            out[:, begin:end] = 0.0
            continue
        for rows, sums in zip(layers, out):
            # (segments, count, width): segment j is rows[starts[begin] + j * step :][:count], a view
            row_bytes, item_bytes = rows.strides
            block = np.ndarray((end - begin, count, width), rows.dtype, rows, int(starts[begin]) * row_bytes,
                               (step * row_bytes, row_bytes, item_bytes))
            block.sum(axis=1, dtype=np.float64, out=sums[begin:end], initial=0.0)  # from +0.0, as index_add_ starts
    return out


def _pool_texts(pieces: torch.Tensor, offsets: list[np.ndarray], method: SubwordPooling, text_pooling: str) -> torch.Tensor:
    """Many texts pooled at once, each layer on its own: their words from their pieces (``method``),
    then each text's words (``text_pooling``, ``"mean"`` or ``"max"``).

    Parameters
    ----------
    pieces : torch.Tensor
        ``(layers, units, width)``: the texts' pieces one after the other.
    offsets : list of np.ndarray
        Per text, ``(words + 1,)`` word offsets into its own pieces (from 0).

    Returns
    -------
    torch.Tensor
        ``(texts, layers, width')`` float32; zeros for a text without words. The values of
        :func:`~contextembed.pooling.pool_pieces_to_text`, text by text, up to the order of the
        device's sums.
    """
    device = pieces.device
    n_words = np.array([len(o) - 1 for o in offsets], dtype=np.int64)
    per_word = np.concatenate([np.diff(o) for o in offsets]) if offsets else np.zeros(0, dtype=np.int64)
    word_offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(per_word)]).astype(np.int64)).to(device)
    # (layers, words, width')
    words = pool_subwords(pieces, word_offsets, method)
    n_layers, total, dim = words.shape
    # each word's text and place in it
    text = np.repeat(np.arange(len(offsets)), n_words)
    place = np.arange(total) - np.repeat(np.cumsum(n_words) - n_words, n_words)
    text_t, place_t = torch.from_numpy(text).to(device), torch.from_numpy(place).to(device)
    # (texts, longest, layers * width'), zeros past each text's words
    padded = words.new_zeros(len(offsets), int(n_words.max(initial=0)), n_layers * dim)
    padded[text_t, place_t] = words.transpose(0, 1).reshape(total, n_layers * dim)
    mask = torch.zeros(padded.shape[:2], dtype=torch.bool, device=device)
    mask[text_t, place_t] = True
    return pool_text(padded, mask, text_pooling).view(len(offsets), n_layers, dim)


def _fill_texts(items: list[_Pending], texts: np.ndarray) -> None:
    """Pooled ``(texts, layers, width')`` to each text's rows of the chunk's output."""
    for item, vectors in zip(items, texts):
        item.rows[...] = vectors


def _even_runs(starts: np.ndarray, counts: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """``(begin, end, step)`` of each run of consecutive segments of one count whose starts are
    ``step`` rows apart (``step`` >= 1; 0 for a run of one segment), covering every segment in order."""
    if not len(starts):
        return
    # (segments - 1,): whether segment j + 1 starts another run: another count, or another step
    steps = np.diff(starts)
    breaks = (np.diff(counts) != 0) | (steps < 1)
    breaks[1:] |= steps[1:] != steps[:-1]
    begin = 0
    for end in [*(np.flatnonzero(breaks) + 1).tolist(), len(starts)]:
        yield begin, end, int(steps[begin]) if end - begin > 1 else 0
        begin = end


def _selector_columns(out: np.ndarray, k: int, selectors: int, width: int) -> np.ndarray:
    """The columns of ``out`` ``(words, dim)`` that selector ``k`` of ``selectors`` fills, as
    ``(words, dim / selectors)``: all of them for one selector; for ``first_last``, its ``width``
    columns in each layer's block of ``2 * width`` (``(words, layers or 1, width)``)."""
    if selectors == 1:
        return out
    return out.reshape(len(out), -1, selectors, width)[:, :, k]


def _first_pieces(ids: np.ndarray, n_pieces: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The sentences' pieces (``ids``, ``n_pieces`` of each, one sentence after the other) with each
    sentence's pieces beyond its first ``limit`` dropped."""
    kept = np.minimum(n_pieces, limit)
    starts = np.cumsum(n_pieces) - n_pieces
    return ids[ragged_arange(starts, kept)], kept


def _fill_means(out: np.ndarray, rows: slice, means: np.ndarray) -> None:
    """``out[rows] = means``: a batch's ``(windows, layers, width)`` piece means, once on the host."""
    out[rows] = means


def _fill_rows(columns: np.ndarray, dest: np.ndarray, words: np.ndarray) -> None:
    """``columns[dest] = words``: pooled ``(units, dim_k)`` rows to their places in the chunk's output."""
    columns[dest] = words.reshape(len(words), *columns.shape[1:])


def _batches(rows: list[_Row], padded_length: Callable[[_Row], int], batch_tokens: int, max_batch_size: int) -> Iterator[list[_Row]]:
    """Cut length-sorted rows into batches whose padded size stays within the token budget."""
    batch: list = []
    longest = 0
    for row in rows:
        size = padded_length(row)
        grown = max(longest, size) * (len(batch) + 1)
        if batch and (grown > batch_tokens or len(batch) >= max_batch_size):
            yield batch
            batch, longest = [], 0
        batch.append(row)
        longest = max(longest, size)
    if batch:
        yield batch


def _counted(run: Callable, count: Callable, batch) -> None:
    run(batch)
    count(batch)


class _ChunkProgress:
    """Counts a chunk's ``n_items`` on ``bar`` as its batches finish, in proportion to the padded
    positions each batch computed (an estimate: a sentence's windows may sit in several batches),
    so that a bar moves, and its rate is measured, long before the chunk is done; :meth:`finish`
    makes the count exact. Batches finish on several streams at once: a lock keeps the count."""

    def __init__(self, bar, n_items: int) -> None:
        self._bar, self._n_items = bar, n_items
        self._total = self._done = self._counted = 0
        self._lock = threading.Lock()

    def expect(self, total: int) -> None:
        self._total = total

    def advance(self, cost: int) -> None:
        with self._lock:
            self._done += cost
            self._count(self._n_items * self._done // max(self._total, 1))

    def finish(self) -> None:
        with self._lock:
            self._count(self._n_items)

    def _count(self, target: int) -> None:
        step = min(target, self._n_items) - self._counted
        if step > 0:
            self._counted += step
            self._bar.update(step)


def _tokenized(chunks: Iterator[list], tokenize: Callable[[list], object], ahead: bool) -> Iterator[tuple[list, object]]:
    """``(chunk, tokenize(chunk))`` for each chunk, in order. With ``ahead``, a producer thread takes
    and tokenizes the next chunk while the caller runs the current one (the tokenizer's batch call
    releases the GIL); where no thread can start (the interpreter shuts down), one after the other."""
    def produce() -> Optional[tuple[list, list]]:
        chunk = next(chunks, None)
        return None if chunk is None else (chunk, tokenize(chunk))

    if not ahead:
        while (item := produce()) is not None:
            yield item
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="contextembed-tokenize") as producer:
        try:
            future = producer.submit(produce)
        except RuntimeError:  # no new threads at interpreter shutdown (an atexit handler)
            yield from _tokenized(chunks, tokenize, ahead=False)
            return
        while (item := future.result()) is not None:
            future = producer.submit(produce)
            yield item


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of at most ``size`` items (an iterator read one list at a time)."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


@contextmanager
def _quiet_transformers():
    """Silence transformers' loading progress bar and its logged loading report (which
    :func:`~contextembed.encoders._hf_files.check_loading_report` checks instead: a pretraining
    checkpoint's MLM/NSP heads are fine, missing encoder weights are an error), restoring the
    caller's settings afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()


#: model types with byte-level BPE tokenizers, which need ``add_prefix_space`` for pre-split words
_BYTE_LEVEL_TYPES = {"roberta", "gpt2", "longformer", "bart", "deberta", "camembert", "roberta-prelayernorm",
                     "data2vec-text", "luke", "mpnet", "ibert", "xlm-roberta"}


def _tokenizer_options(source: str) -> dict:
    """Byte-level BPE tokenizers need ``add_prefix_space`` to take pre-split words."""
    model_type = read_config(source).get("model_type")
    return {"add_prefix_space": True} if isinstance(model_type, str) and model_type in _BYTE_LEVEL_TYPES else {}


__all__ = ["TransformerEncoder"]
