"""``ElmoEncoder``: the ELMo biLM behind the :class:`~contextembed.encoders._base.Encoder` interface.

Layers: 0 is the character-CNN token layer duplicated to ``2 * projection_dim``; layer ``k``
(1..n_lstm_layers) concatenates the forward and backward LSTM layer ``k``. Every input word is a
unit of its own (``word_offsets = arange(words + 1)``); the sentence markers are run but not
returned. Unlike AllenNLP's ``Elmo``, the LSTM state starts at zero for every sentence, so the
output of a sentence depends only on that sentence.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Union

import numpy as np
import torch

from ..._runtime import forking, streams
from ..._inputs.bounds import COUNT, check_values
from ..._runtime.devices import check_settings, compute_dtype, resolve_device, resolve_precision
from ..._runtime.files import atomic_directory
from ..._runtime.quantization import quantize_int8
from ...errors import ModelNotFoundError
from ...pooling._layers import LayerSpec
from .._base import Encoder, PieceEncoding, Sentences, check_savable, check_sentence_chunks, progress_bar
from .characters import BOS_IDS, EOS_IDS, word_char_ids
from .modules import BiLMEncoderModule
from .options import read_options, write_options
from .weights import load_weights, save_weights

OPTIONS_FILE = "options.json"
WEIGHTS_FILE = "weights.hdf5"
#: the batching options: their types and ranges, checked by :meth:`ElmoEncoder.load` before the
#: weights are read and by the constructor
OPTION_BOUNDS = {"batch_words": COUNT, "max_batch_size": COUNT, "chunk_size": COUNT}


def is_elmo_directory(path: Union[str, os.PathLike]) -> bool:
    """Whether ``path`` is a directory holding ``options.json`` and ``weights.hdf5``."""
    return os.path.isfile(os.path.join(path, OPTIONS_FILE)) and os.path.isfile(os.path.join(path, WEIGHTS_FILE))


def load_bilm(directory: Union[str, os.PathLike], dropout: float = 0.0) -> BiLMEncoderModule:
    """Read ``options.json`` + ``weights.hdf5`` from ``directory`` into a (CPU, float32) module."""
    directory = os.fspath(directory)
    options_path = os.path.join(directory, OPTIONS_FILE)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    if not os.path.isdir(directory):
        raise ModelNotFoundError(f"ELMo directory {directory} does not exist")
    for path in (options_path, weights_path):
        if not os.path.isfile(path):
            raise ModelNotFoundError(
                f"{path} does not exist; an ELMo directory holds {OPTIONS_FILE} and {WEIGHTS_FILE} "
                "(rename AllenNLP's *_options.json and *_weights.hdf5 to these names)"
            )
    module = BiLMEncoderModule(read_options(options_path), dropout=dropout, init=False)
    return load_weights(module, weights_path)


def save_bilm(
    module: BiLMEncoderModule, directory: Union[str, os.PathLike], *, overwrite: bool = False, extra=None
) -> None:
    """Write a biLM as ``options.json`` + ``weights.hdf5`` in AllenNLP's original layout.

    The files are written into a temporary directory beside ``directory`` and moved there once
    both are complete, so an interrupted save leaves no half-written model.

    Parameters
    ----------
    module : BiLMEncoderModule
        The biLM to write (float32, whatever its device).
    directory : str or path
        The model directory; ``load_encoder(directory)`` reads it back, and so does AllenNLP.
    overwrite : bool, default=False
        Replace an existing non-empty ``directory``; otherwise ``FileExistsError``.
    extra : mapping of str to np.ndarray, optional
        More datasets for ``weights.hdf5`` beside the encoder's (e.g. a trainer's softmax); loaders
        ignore them. Names are ``"softmax"`` or ``"softmax/W"`` (groups and datasets of HDF5),
        clear of the encoder's own; values arrays of numbers.

    Raises
    ------
    FileExistsError
        ``directory`` is not empty and ``overwrite`` is false.
    TypeError, ValueError
        An ``extra`` that is not a mapping of names to arrays of numbers, or a name the encoder's
        datasets take (``"char_embed"``, the group ``"CNN"``...), naming ``extra`` and the key; before
        anything is written.
    """
    with atomic_directory(directory, overwrite=overwrite, what="ELMo directory") as folder:
        write_bilm(module, folder, extra=extra)


def write_bilm(module: BiLMEncoderModule, folder: str, extra=None) -> None:
    """``options.json`` + ``weights.hdf5`` into ``folder``, a directory the caller is writing (the
    weights first: their ``extra`` is checked before anything is written)."""
    save_weights(module, os.path.join(folder, WEIGHTS_FILE), extra=extra)
    write_options(module.options, os.path.join(folder, OPTIONS_FILE))


def _chosen(kwargs: dict) -> dict:
    """``kwargs`` with the device and precision chosen (``"auto"`` resolved: the precision this
    machine's record names, measured once where none does, :func:`resolve_precision`)."""
    device, precision = resolve_device(kwargs.get("device", "auto")), kwargs.get("precision", "auto")
    return {**kwargs, "device": device, "precision": resolve_precision(precision, device) if precision == "auto" else precision}


class ElmoEncoder(Encoder):
    """A frozen ELMo biLM exposing its ``n_lstm_layers + 1`` layers at word level.

    Parameters
    ----------
    module : BiLMEncoderModule
        The biLM; moved to ``device`` and ``precision``, put in eval mode and frozen *in place*
        (pass ``copy.deepcopy(module)`` to keep training the original).
    spec : str
        What it was loaded from.
    device : str or torch.device
        ``"auto"`` picks CUDA when present.
    precision : {"fp32", "bf16", "fp16", "int8"}
        Compute precision; outputs are always float32. The constructor runs the precision it is
        given and never measures: ``"auto"`` (bf16 on CUDA and on CPUs with native bf16 units that
        measurably beat fp32, else fp32) is chosen by :meth:`load` and :meth:`from_options`. ``"int8"`` (CPU): int8 highway and projection
        layers of the character CNN, fp32 elsewhere.
        Which to choose for a task and a machine: ``docs/choosing.md``.
    batch_words : int
        Budget of padded tokens (markers included) per forward pass; batches are length-sorted.
    max_batch_size : int
        At most this many sentences per forward pass.
    chunk_size : int
        Sentences sorted and held at once; bounds memory on large corpora.

    Raises
    ------
    TypeError
        For a ``batch_words``, ``max_batch_size`` or ``chunk_size`` that is not an int (a bool, a
        float), naming it (:data:`OPTION_BOUNDS`).
    ValueError
        For one below 1.
    """

    family = "elmo"
    no_context = ("ELMo reads words, not pieces, and document context is not implemented for it; encode each "
                  "sentence alone, or use a transformer")
    #: ELMo's usual pooling (Peters et al. 2018): a trainable scalar mix of every layer
    default_layers: LayerSpec = "all"
    default_combine = "scalar_mix"

    def __init__(
        self,
        module: BiLMEncoderModule,
        *,
        spec: str = "",
        device: Union[str, torch.device] = "auto",
        precision: str = "fp32",
        batch_words: int = 4096,
        max_batch_size: int = 128,
        chunk_size: int = 4096,
    ) -> None:
        check_values({"batch_words": batch_words, "max_batch_size": max_batch_size, "chunk_size": chunk_size},
                     OPTION_BOUNDS)
        forking.install()  # forked workers must not hang in torch's inherited thread pool
        self.spec = spec
        if precision == "auto":
            raise ValueError("ElmoEncoder(...) runs the precision it is given, got 'auto': load it with "
                             "ElmoEncoder.load(...) or ElmoEncoder.from_options(...), which choose it, or pass "
                             "'fp32', 'bf16', 'fp16' or 'int8'")
        self.device = resolve_device(device)
        self.precision = resolve_precision(precision, self.device)  # checked: never "auto" here
        self.dtype = compute_dtype(self.precision)
        self.module = module.to(device=self.device, dtype=self.dtype).eval().requires_grad_(False)
        if self.precision == "int8":  # the highway and projection layers; the LSTMs stay fp32
            self.module.token_embedder = quantize_int8(self.module.token_embedder)
        self.batch_words = int(batch_words)
        self.max_batch_size = int(max_batch_size)
        self.chunk_size = int(chunk_size)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def load(cls, directory: Union[str, os.PathLike], **kwargs) -> "ElmoEncoder":
        """Load AllenNLP's original ``options.json`` + ``weights.hdf5`` from ``directory``.

        ``kwargs`` go to the constructor (``device``, ``precision``, ``batch_words``, ...), with
        ``device`` and ``precision`` chosen first where they are ``"auto"`` (the default): the
        precision this machine's record names, measured once where none does.
        """
        check_settings(kwargs.get("device", "auto"), kwargs.get("precision", "auto"), cls.family)  # before loading
        check_values(kwargs, OPTION_BOUNDS)
        module = load_bilm(directory)
        return cls(module, spec=kwargs.pop("spec", os.fspath(directory)), **_chosen(kwargs))

    @classmethod
    def from_options(cls, options, **kwargs) -> "ElmoEncoder":
        """A randomly initialised encoder (bilm-tf's initialisation) from an options dict; ``kwargs``
        as :meth:`load` takes them."""
        check_settings(kwargs.get("device", "auto"), kwargs.get("precision", "auto"), cls.family)
        return cls(BiLMEncoderModule(options), **_chosen(kwargs))

    def _write(self, folder: str) -> None:
        """``options.json`` + ``weights.hdf5`` in AllenNLP's original layout."""
        check_savable(self.precision)
        write_bilm(self.module, folder)

    # -- properties ---------------------------------------------------------------------------

    @property
    def options(self) -> dict:
        return self.module.options

    @property
    def n_layers(self) -> int:
        return self.module.n_output_layers

    @property
    def width(self) -> int:
        return self.module.output_width

    # -- encoding -----------------------------------------------------------------------------

    def iter_encode_pieces(
        self, sentences: Sentences, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        layer_index = self.layer_indexes(layers)
        with progress_bar(sentences, show_progress) as progress:  # an iterator is read chunk by chunk
            for chunk in check_sentence_chunks(sentences, self.chunk_size):
                hidden = self._encode_chunk(chunk, layer_index)
                progress.update(len(chunk))
                for sentence, states in zip(chunk, hidden):
                    yield PieceEncoding(states, np.arange(len(sentence) + 1, dtype=np.int64), None)

    def _encode_chunk(self, chunk: Sentences, layer_index: tuple[int, ...]) -> list[np.ndarray]:
        """``(layers, words, width)`` per sentence of the chunk, in input order."""
        out = [np.zeros((len(layer_index), 0, self.width), dtype=np.float32) for _ in chunk]
        order = sorted((i for i in range(len(chunk)) if chunk[i]), key=lambda i: len(chunk[i]))

        def run(batch: list[int]) -> None:
            for i, array in zip(batch, self._run_batch([chunk[i] for i in batch], layer_index)):
                out[i] = array

        # on a CPU several batches at once (contextembed._runtime.streams), each filing its sentences' states
        batches = list(_batches(order, [len(s) + 2 for s in chunk], self.batch_words, self.max_batch_size))
        streams.run_all(run, batches, self.device)
        return out

    @torch.inference_mode()
    def _run_batch(self, batch: Sequence[Sequence[str]], layer_index: tuple[int, ...]) -> list[np.ndarray]:
        table, index = _token_table(batch)
        lengths = torch.tensor([len(s) + 2 for s in batch])
        # (types, projection): each distinct word embedded once
        types = self.module.embed_tokens(torch.from_numpy(table).to(self.device))
        # (batch, seq, projection)
        tokens = types[torch.from_numpy(index).to(self.device)]
        states = self.module.contextualize(tokens, lengths)
        # (layers, batch, seq, 2 * projection)
        stacked = states.layers(layer_index).float().cpu().numpy()
        return [np.ascontiguousarray(stacked[:, row, 1 : len(s) + 1]) for row, s in enumerate(batch)]


def _token_table(batch: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct token types of a batch and each position's type.

    Returns
    -------
    table : np.ndarray
        ``(types, 50)`` char ids; row 0 is BOS, row 1 EOS.
    index : np.ndarray
        ``(batch, seq)`` int64 rows of ``table``; positions after a sentence's end point at row 0.
    """
    rows: dict[str, int] = {}
    seq = max(len(s) for s in batch) + 2
    index = np.zeros((len(batch), seq), dtype=np.int64)
    for b, sentence in enumerate(batch):
        ids = [rows.setdefault(word, len(rows) + 2) for word in sentence]
        index[b, 1 : len(sentence) + 1] = ids
        index[b, len(sentence) + 1] = 1
    table = np.stack([BOS_IDS, EOS_IDS, *(word_char_ids(word) for word in rows)])
    return table, index


def _batches(order: Sequence[int], lengths: Sequence[int], batch_words: int, max_batch_size: int) -> Iterator[list[int]]:
    """Cut length-sorted sentence indexes into batches within the padded-token budget.

    A sentence longer than the budget gets a batch of its own (it is never cut).
    """
    batch: list[int] = []
    longest = 0
    for i in order:
        grown = max(longest, lengths[i]) * (len(batch) + 1)
        if batch and (grown > batch_words or len(batch) >= max_batch_size):
            yield batch
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, lengths[i])
    if batch:
        yield batch


__all__ = ["ElmoEncoder", "is_elmo_directory", "load_bilm", "save_bilm", "write_bilm"]
