"""The transformer encoder: its construction, its properties and the public encoding methods.

Every path runs one way: a chunk planned as arrays (:mod:`._plan`), its batches run with the path's
job (:mod:`._jobs`, :mod:`._means`) by the chunk loops of :mod:`._paths`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional, Union

import numpy as np
import torch

from ..._runtime import forking
from ..._inputs.alignment import PairTemplate, check_window, pair_template
from ..._inputs.documents import InContext
from ..._runtime.backends import check_backend, check_calibration
from ..._inputs.bounds import COUNT, OPTIONAL_COUNT, check_values
from ..._runtime.devices import check_settings
from ..._runtime.quantization import original_state_dict
from ...pooling._layers import LayerPooling, LayerSpec, check_rowwise_pooling
from ...pooling._subword import SubwordPooling, check_subword_pooling
from . import _engine as engine, _unpadded as unpadded
from ._pruning import LayerPruner
from ._sentence_config import SentencePooling, read_sentence_pooling
from ..._inputs.sentences import Pairs, Sentences, check_sentences
from .._base import Encoder
from .._pieces import PairPieces, PieceEncoding
from .._reporting import ShowProgress
from .._hf_files import check_directory, check_tokenizer_fits, load_model, load_tokenizer
from ._runtime_choice import (
    ModelInputs,
    Runtime,
    TorchForward,
    choose_runtime,
    default_pad_multiple,
    engine_forward,
    probe_shape,
)

from .._hf_files import _quiet_transformers, _tokenizer_options
from ._pooled import _DIRECT, _MeansPooled
from ._means import _PieceMeans
from ._paths import _PlannedPaths

logger = logging.getLogger(__name__)


#: default padded pieces per forward pass: big passes feed a GPU; on a CPU they run slower per piece
GPU_BATCH_TOKENS = 8192


CPU_BATCH_TOKENS = 1024


#: the windowing and batching options (``None``: chosen from the model and the device): their types
#: and ranges, checked by :meth:`TransformerEncoder.load` before anything is read and by the
#: constructor; what depends on the model (``window`` fits it, ``stride <= window``, ``batch_tokens``
#: holds one full window) is checked once the model is read
OPTION_BOUNDS = {"window": OPTIONAL_COUNT, "stride": OPTIONAL_COUNT, "batch_tokens": OPTIONAL_COUNT,
                 "pad_multiple": OPTIONAL_COUNT, "max_batch_size": COUNT, "chunk_size": COUNT}


class TransformerEncoder(_PlannedPaths, _PieceMeans, Encoder):
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
        # what the choice built while it measured, where it was built from this very model
        forward = runtime.prepared if runtime.prepared_for is model else None
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
        return self._iter_piece_encodings(self._planned(sentences, show_progress), layers)

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
        yield from self._iter_picked_pieces(sentences, layers, _DIRECT[subword_pooling], show_progress)

    def encode_piece_means(self, sentences: Sentences, layers: LayerSpec = "all", *,
                           pooling: Optional[LayerPooling] = None, show_progress: ShowProgress = False) -> np.ndarray:
        """The mean over each sentence's pieces, summed where the model ran per window (every piece
        once, from the window that owns it): only ``(layers, width)`` per window leaves the device,
        or with ``pooling`` its layers combined there, batch by batch: ``(dim,)``.

        The sentences' model inputs and batches are those of every other path (:class:`~._plan.Plan`). ``show_progress`` (a bar of its own, or the
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

    def encode_cls(self, sentences: Sentences, layers: LayerSpec = "all") -> np.ndarray:
        """The first piece ([CLS]/<s>) of each sentence: ``(sentences, layers, width)`` float32."""
        if not self.has_cls:
            raise ValueError(f"{self.spec or 'this model'} adds no leading special token to pool as CLS")
        cls = [job.cls for _, job in self._iter_cls(sentences, layers, False)]
        n_layers = len(self.layer_indexes(layers))
        return np.concatenate(cls) if cls else np.zeros((0, n_layers, self.width), dtype=np.float32)

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
        return self._iter_pair_encodings(pairs, layers, show_progress)

    def iter_encode_pieces_in_context(
        self, items: Iterable[InContext], layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        """Each sentence encoded in one input with the context pieces around it (as the adapters'
        ``context=N`` asks); a sentence of ``window`` pieces or more in its windows, as
        alone. Only the sentence's own pieces come out (``cls``: the input's first piece)."""
        return self._iter_piece_encodings(self._planned_in_context(items, show_progress), layers)

    def _forward(self, inputs: dict[str, torch.Tensor], layer_index: Sequence[int]) -> list[torch.Tensor]:
        """Hidden states ``layer_index`` of a padded batch, each ``(batch * seq, width)``: the engine's,
        the flat forward's (:mod:`.unpadded`) or the model's own."""
        if self._engine is None:
            return self._torch(inputs, layer_index)
        batch, length = inputs["input_ids"].shape
        wanted = [i % self._n_layers for i in layer_index]
        arrays = self._engine({k: v.numpy() for k, v in inputs.items()}, wanted)
        return [torch.from_numpy(array).reshape(batch * length, -1) for array in arrays]




__all__ = ["TransformerEncoder"]
