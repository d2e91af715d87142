"""Which runtime runs a transformer's forward pass: chosen in one place, then only read.

:func:`choose_runtime` is the one step that may measure. It turns the settings a user asked for
(``device``, ``precision``, ``backend``, any of them ``"auto"``) into a frozen :class:`Runtime`: the
device, the backend (torch or the OpenVINO engine) and the precision that runs. It reads the tuning
records (:mod:`contextembed.tuning`) and measures only where a setting says ``"auto"`` and no record
answers: this CPU's precisions, the int8 model's fidelity, torch against the engine. The encoder
(:class:`~contextembed.encoders.transformer.TransformerEncoder`) takes the result and never
measures, exports or writes; ``contextembed tune`` calls it to measure ahead of time.

A choice that measured keeps the forward it built meanwhile (a quantized copy, a compiled engine) in
:attr:`Runtime.prepared`, outside what the choice compares and hashes, so that it is not built twice.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Optional, Union

import numpy as np
import torch

from ..._inputs.alignment import PieceTokenizer, plan_windows
from ..._runtime import streams
from ..._runtime.backends import check_backend, check_calibration
from ..._runtime.devices import auto_cpu_precision, check_precision, compute_dtype, resolve_device, resolve_precision
from ..._runtime.quantization import INT8_MIN_COSINE, int8_fidelity, quantize_int8
from ...errors import EngineError
from . import _engine as engine, _engine_choice as engine_choice, _unpadded as unpadded
from ._plan import padded_inputs
from ._pruning import LayerPruner

logger = logging.getLogger(__name__)

#: version of the measurement ``backend="auto"`` makes (a record of another is measured again)
BACKEND_METHOD = 1

#: model types whose position ids start after the padding index (usable length is shorter)
_OFFSET_POSITION_TYPES = {
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "camembert",
    "roberta-prelayernorm",
    "data2vec-text",
    "longformer",
    "ibert",
    "mpnet",
    "luke",
}


@dataclass(frozen=True)
class Runtime:
    """What runs an encoder's forward pass, as :func:`choose_runtime` chose it.

    Attributes
    ----------
    device : torch.device
        Where the model runs.
    backend : str
        ``"torch"`` (the model's own forward) or ``"openvino"`` (the OpenVINO engine's), never
        ``"auto"``. Which to choose for a task and a machine: ``docs/choosing.md``.
    precision : str
        The precision that runs (on the engine: the engine's): ``"fp32"``, ``"bf16"``, ``"fp16"``
        or ``"int8"``, never ``"auto"``.
    prepared : TorchForward or OpenVinoForward, optional
        The forward the choice built while it measured, used by the encoder instead of building it
        again; not part of the choice (neither compared nor hashed), and used only with the model
        it was built from (``prepared_for``): another model builds its own.
    """

    device: torch.device
    backend: Literal["torch", "openvino"]
    precision: str
    prepared: object = field(default=None, compare=False, hash=False, repr=False)
    #: the model ``prepared`` was built from: the encoder uses it only for that very model
    prepared_for: object = field(default=None, compare=False, hash=False, repr=False)


def max_positions(model, tokenizer) -> int:
    """Longest input the model takes, special tokens included."""
    limits = []
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if tokenizer_limit and tokenizer_limit < 1_000_000:
        limits.append(int(tokenizer_limit))
    config = model.config
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        offset = 0
        if config.model_type in _OFFSET_POSITION_TYPES and config.pad_token_id is not None:
            offset = config.pad_token_id + 1
        limits.append(int(positions) - offset)
    return min(limits) if limits else 512


class ModelInputs:
    """How a model takes its input: the piece tokenizer, the padding id, the longest input and the
    input names; builds padded batches as the forward pass gets them.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The encoder (its config and forward signature are read).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its fast tokenizer.
    """

    def __init__(self, model, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pieces = PieceTokenizer(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.takes_types = "token_type_ids" in inspect.signature(model.forward).parameters and (
            "token_type_ids" in getattr(tokenizer, "model_input_names", ()))
        self.max_length = max_positions(model, tokenizer)

    @property
    def names(self) -> tuple[str, ...]:
        """The model's input names, in the order the engine exports them."""
        return ("input_ids", "attention_mask") + (("token_type_ids",) if self.takes_types else ())

    def padded(self, rows: Sequence[np.ndarray], length: int) -> dict[str, np.ndarray]:
        """``rows`` of piece ids, special tokens included, padded to ``length``: each input the model
        takes, ``(batch, seq)`` int64 (segment ids all 0)."""
        ids = np.concatenate(rows).astype(np.int64, copy=False) if len(rows) else np.zeros(0, dtype=np.int64)
        types = np.zeros_like(ids) if self.takes_types else None
        return padded_inputs(ids, np.array([len(row) for row in rows], dtype=np.int64), length, self.pad_id, types)

    def calibration_batches(self, sentences: Sequence[Sequence[str]], batch_size: int = 1) -> Iterator[dict[str, np.ndarray]]:
        """Padded input batches of ``sentences`` (the first window of each)."""
        prefix = np.asarray(self.pieces.prefix, dtype=np.int64)
        suffix = np.asarray(self.pieces.suffix, dtype=np.int64)
        width = self.max_length - len(prefix) - len(suffix)
        rows = []
        for pieces in self.pieces(list(sentences)):
            window = next(iter(plan_windows(pieces.n_pieces, width, 1)), None)
            content = pieces.ids[: window.end] if window is not None else pieces.ids[:0]
            rows.append(np.concatenate([prefix, content, suffix]))
        for begin in range(0, len(rows), batch_size):
            batch = rows[begin: begin + batch_size]
            yield self.padded(batch, max(len(row) for row in batch))

    def probe(self, sentences: Sequence[Sequence[str]]) -> dict[str, np.ndarray]:
        """One padded batch of (up to) 32 calibration sentences, as the forward pass gets it: the 32
        around the median length, since real batches are length-sorted and carry little padding (a
        batch of mixed lengths is mostly padding, which the torch path skips and the engine computes)."""
        by_length = sorted(sentences, key=len)
        start = max(0, len(by_length) // 2 - 16)
        return next(iter(self.calibration_batches(by_length[start: start + 32], batch_size=32)))

    def short_probe(self, device: torch.device, n_words: int) -> dict[str, torch.Tensor]:
        """A batch of one input of ``n_words`` unknown pieces between the special tokens."""
        ids = self.pieces.prefix + [self.pieces.unk_id] * n_words + self.pieces.suffix
        return {"input_ids": torch.tensor([ids], device=device),
                "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device=device)}


def probe_shape(model, inputs: ModelInputs, device: torch.device) -> tuple[int, int]:
    """The number of layers ``model`` exposes (embeddings included) and their width."""
    with torch.inference_mode():
        out = model(**inputs.short_probe(device, 1), output_hidden_states=True)
    return len(out.hidden_states), int(out.hidden_states[-1].shape[-1])


def default_pad_multiple(backend: str, precision: str) -> int:
    """Positions a batch pads to a multiple of where ``pad_multiple`` is not given: 16 where attention
    kernels work in blocks of 16 (torch's bf16, fp16 and int8; the engine's bf16), else 1."""
    blocked = precision == "bf16" if backend == "openvino" else precision in ("bf16", "fp16", "int8")
    return 16 if blocked else 1


class TorchForward:
    """``model``'s own forward in ``precision``: the hidden states a batch asks for, the layers above
    them not run (:mod:`._pruning`), through the flat forward (:mod:`._unpadded`) where the batches
    are padded to a multiple of positions.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The fp32 encoder on ``device``; for ``"int8"`` it is quantized in place (unless
        ``quantized`` is given).
    precision : {"fp32", "bf16", "fp16", "int8"}
        What runs.
    inputs : ModelInputs
        How the model takes its input.
    n_layers : int
        The layers the model exposes.
    device : torch.device
        Where it runs.
    quantized : transformers.PreTrainedModel, optional
        ``model`` already quantized to int8 (by the choice that checked its fidelity).
    """

    backend = "torch"

    def __init__(self, model, precision: str, inputs: ModelInputs, n_layers: int, device: torch.device,
                 quantized=None) -> None:
        if precision == "int8":
            model = quantized if quantized is not None else quantize_int8(model, f"{model.config.model_type!r}")
        self.precision = precision
        self.dtype = compute_dtype(precision)
        self.model = model.to(device=device, dtype=self.dtype).eval().requires_grad_(False)
        self.n_layers = n_layers
        #: padding costs nothing outside attention in BERT-structured models where batches are padded to
        #: a multiple of positions (1.2x the words/s in bf16 and int8 on MiniLM); set by the encoder
        #: from its ``pad_multiple``
        self.flat = default_pad_multiple("torch", precision) > 1 and unpadded.supports(self.model)
        #: the model to run for the hidden states a batch needs: the layers above them never run
        self.pruner = LayerPruner(self.model, n_layers, inputs.short_probe(device, 3))

    def __call__(self, inputs: dict[str, torch.Tensor], layer_index: Sequence[int]) -> list[torch.Tensor]:
        """Hidden states ``layer_index`` of a padded batch, each ``(batch * seq, width)``."""
        batch, length = inputs["input_ids"].shape
        if self.flat:
            return unpadded.forward(self.model, inputs, layer_index)
        wanted = [i % self.n_layers for i in layer_index]
        states = self.pruner.hidden_states(inputs, max(wanted))
        return [states[i].reshape(batch * length, -1) for i in wanted]


def engine_forward(model, inputs: ModelInputs, n_layers: int, precision: str, calibration, fingerprint: str,
                   device: torch.device, candidates: Optional[tuple[str, ...]] = None) -> "engine.OpenVinoForward":
    """The engine for ``model`` in ``precision`` (``"auto"``: :func:`engine_choice.auto_precision`, timing
    ``candidates``, by default :func:`engine_choice.auto_candidates` of the model's size). A precision
    named here exports nothing yet: the engine exports (or reads its cache) on its first batch."""
    if precision != "auto":
        engine.check_engine_precision(precision, device)
    # the calibration text is read only where int8 may run
    sentences = engine.calibration_sentences(calibration) if precision in ("int8", "auto") else []
    n_streams, threads = streams.cpu_streams()
    calibration_hash = engine_choice.sentences_hash(sentences)

    def make(name: str) -> engine.OpenVinoForward:
        return engine.OpenVinoForward(
            model, precision=name, n_layers=n_layers, input_names=inputs.names,
            calibration_batches=lambda: inputs.calibration_batches(sentences),
            calibration_hash=calibration_hash, streams=n_streams, threads=threads, fingerprint=fingerprint)

    if precision != "auto":
        return make(precision)
    key = engine_choice.record_key(fingerprint, n_layers, inputs.names, calibration_hash)
    return engine_choice.auto_precision(make, inputs.probe(sentences), n_layers, key,
                                 candidates=candidates, n_parameters=parameter_count(model))


def choose_runtime(model, tokenizer, *, device: Union[str, torch.device] = "auto", precision: str = "auto",
                   backend: str = "torch", calibration: Optional[Sequence[Sequence[str]]] = None) -> Runtime:
    """The runtime that runs ``model``: where ``device``, ``precision`` or ``backend`` say ``"auto"``,
    what the tuning records of this machine say, measured (and recorded) where none does.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        The fp32 encoder (for encoder-decoder models, its encoder).
    tokenizer : transformers.PreTrainedTokenizerBase
        Its fast tokenizer.
    device, precision, backend, calibration
        As for :class:`~contextembed.encoders.transformer.TransformerEncoder`. Which to choose for
        a task and a machine: ``docs/choosing.md``.

    Returns
    -------
    Runtime
        The device, backend and precision that run; a measured choice carries the forward it built.

    Raises
    ------
    ValueError
        For a device, precision, backend or calibration the transformer family does not take, or
        does not take together.
    """
    device = resolve_device(device)
    backend = check_backend(backend, "transformer")
    check_precision(precision, "transformer")
    calibration = check_calibration(calibration, backend, precision)  # a generator is read here, once
    if getattr(model.config, "is_encoder_decoder", False):
        model = model.get_encoder()
    chooser = _Chooser(model.to(device=device, dtype=torch.float32), ModelInputs(model, tokenizer), device, calibration)
    if backend == "auto" and not engine.available(device):
        logger.info("backend='auto' chose torch: the engine runs on a CPU with the openvino extra installed%s",
                    "; calibration is not used" if calibration is not None else "")
        backend = "torch"  # auto on a GPU, or without the openvino extra
    if backend == "openvino":
        runtime = chooser.engine(precision)
    elif backend == "auto":
        runtime = chooser.faster(precision)
    else:
        runtime = chooser.torch(precision)
    return runtime if runtime.prepared is None else dataclasses.replace(runtime, prepared_for=chooser.model)


class _Chooser:
    """The measurements behind :func:`choose_runtime`, for one model on one device."""

    def __init__(self, model, inputs: ModelInputs, device: torch.device, calibration) -> None:
        self.model = model
        self.inputs = inputs
        self.device = device
        self.calibration = calibration
        self.n_layers = probe_shape(model, inputs, device)[0]
        self._fingerprint: Optional[str] = None

    @property
    def fingerprint(self) -> str:
        """:func:`engine.model_fingerprint` of the fp32 model, computed once."""
        if self._fingerprint is None:
            self._fingerprint = engine.model_fingerprint(self.model)
        return self._fingerprint

    def torch(self, precision: str) -> Runtime:
        """Torch in ``precision``; for ``"auto"``, int8 only where the quantized model keeps the
        features (:func:`~contextembed._runtime.quantization.int8_fidelity` >= ``INT8_MIN_COSINE``)."""
        chosen = resolve_precision(precision, self.device, int8_allowed=True)
        if chosen != "int8" or precision != "auto":
            return Runtime(self.device, "torch", chosen)
        try:
            quantized = quantize_int8(copy.deepcopy(self.model), f"{self.model.config.model_type!r}")
        except ValueError:  # no linear layer to quantize
            quantized = None
        if quantized is not None and self._int8_fidelity(quantized) >= INT8_MIN_COSINE:
            forward = TorchForward(None, "int8", self.inputs, self.n_layers, self.device, quantized=quantized)
            return Runtime(self.device, "torch", "int8", prepared=forward)
        return Runtime(self.device, "torch", auto_cpu_precision(int8_allowed=False))

    def engine(self, precision: str, candidates: Optional[tuple[str, ...]] = None) -> Runtime:
        """The engine in ``precision`` (``"auto"``: the fastest of ``candidates`` it runs)."""
        forward = engine_forward(self.model, self.inputs, self.n_layers, precision, self.calibration,
                                 self.fingerprint, self.device, candidates)
        return Runtime(self.device, "openvino", forward.precision, prepared=forward)

    def faster(self, precision: str) -> Runtime:
        """``backend="auto"``: the faster of torch and the engine on a probe batch, each in the
        precision ``precision`` gives it (the engine only where it runs that precision), measured
        once per machine and model and remembered (:mod:`contextembed.tuning`)."""
        from ... import tuning

        torch_precision = resolve_precision(precision, self.device, int8_allowed=True)
        if torch_precision not in engine.ENGINE_PRECISIONS and precision != "auto":
            logger.info("backend='auto' chose torch: the engine does not run precision=%r", torch_precision)
            return self.torch(precision)
        sentences = engine.calibration_sentences(self.calibration) if precision in ("int8", "auto") else []
        key = {**engine_choice.record_key(self.fingerprint, self.n_layers, self.inputs.names, engine_choice.sentences_hash(sentences)),
               "method": BACKEND_METHOD, "precision": precision, "torch_precision": torch_precision}
        candidates = engine_choice._auto_candidates()

        def check(result: dict) -> None:
            check_backend_record(result, precision, candidates)

        n_parameters = parameter_count(self.model)
        if not engine_choice.measured_at_first_use(n_parameters) and tuning.recorded("transformer backend", key, check) is None:
            logger.info("backend='auto' chose torch without timing the engine for a model of %.0fM parameters (its "
                        "export and timing take a minute): `contextembed tune MODEL` measures it once for this "
                        "machine", n_parameters / 1e6)
            return self.torch(precision)
        measured: dict[str, Runtime] = {}

        def measure() -> dict:
            measured["torch"] = self._prepared_torch(precision)
            try:
                chosen, speedup = engine_speedup(self, measured["torch"], precision, candidates)
            except EngineError as error:  # a model the engine cannot export (or quantize): torch, which runs it
                logger.warning("backend='auto' chose torch: %s", error)
                return {"backend": "torch", "speedup": None}
            measured["openvino"] = chosen
            return {"backend": chosen_backend(speedup), "speedup": speedup, "engine_precision": chosen.precision}

        result = tuning.remembered("transformer backend", key, measure, check,
                                   what="backend='auto' is exporting the model and timing torch against openvino")
        runtime = measured.get(result["backend"])
        if runtime is None and result["backend"] == "openvino":
            runtime = self._recorded_engine(precision, candidates)
        if runtime is None:
            runtime = self.torch(precision)
        speedup = result.get("speedup") if runtime.backend == result["backend"] else None
        logger.info("backend='auto' chose %s%s", runtime.backend, "" if speedup is None else
                    f" (openvino {result.get('engine_precision')} ran {speedup:.2f}x the speed of torch on a probe "
                    "batch per stream)")
        return runtime

    def _prepared_torch(self, precision: str) -> Runtime:
        """:meth:`torch`'s choice with its forward built, on a copy of the model (the engine exports
        the fp32 original)."""
        runtime = self.torch(precision)
        if runtime.prepared is not None:
            return runtime
        forward = TorchForward(copy.deepcopy(self.model), runtime.precision, self.inputs, self.n_layers, self.device)
        return Runtime(self.device, "torch", runtime.precision, prepared=forward)

    def _recorded_engine(self, precision: str, candidates: tuple[str, ...]) -> Optional[Runtime]:
        """The engine a tuning record chose, exported (or read from the cache) and compiled now, as it
        was when it was measured; ``None`` (torch, with a warning) where it cannot run here now."""
        try:
            runtime = self.engine(precision, candidates)
            runtime.prepared.compiled(self.n_layers - 1)
        except EngineError as error:
            logger.warning("backend='auto' chose torch: %s (the engine its tuning record chose cannot run now)", error)
            return None
        return runtime

    def _int8_fidelity(self, quantized) -> float:
        """:func:`~contextembed._runtime.quantization.int8_fidelity` of ``quantized`` to the model,
        measured once per machine and model and remembered (:mod:`contextembed.tuning`)."""
        from ... import tuning

        def check(result: dict) -> None:
            tuning.recorded_keys(result, ("cosine",))
            tuning.recorded_cosine(result["cosine"], "cosine")

        probe_length = min(64, self.inputs.max_length)
        key = {"method": 1, "model": self.fingerprint, "probe_length": probe_length}
        result = tuning.remembered(
            "int8 fidelity", key,
            lambda: {"cosine": int8_fidelity(self.model, quantized, self.inputs.tokenizer, probe_length)},
            check, what="precision='auto' is checking the int8 model's features against fp32")
        return float(result["cosine"])


def engine_speedup(chooser: _Chooser, torch_runtime: Runtime, precision: str,
                   candidates: Optional[tuple[str, ...]] = None) -> tuple[Runtime, float]:
    """The engine's runtime in ``precision`` (``"auto"``: the fastest of ``candidates``) and its speed
    over ``torch_runtime``'s forward on a probe batch; :class:`~contextembed.errors.EngineError`
    where the engine cannot run the model."""
    runtime = chooser.engine(precision, candidates)
    forward = runtime.prepared
    probe = chooser.inputs.probe(engine.calibration_sentences(chooser.calibration))
    wanted = tuple(range(chooser.n_layers))
    forward(probe, wanted)  # exports (or raises) before the timing
    torch_inputs = {k: torch.from_numpy(v) for k, v in probe.items()}
    n_streams, _ = streams.cpu_streams()

    def torch_forward(_):
        with torch.inference_mode():
            torch_runtime.prepared(torch_inputs, wanted)

    # as the encoders run batches: one per stream at once (torch's many small ops share the GIL
    # between streams, the engine's one call does not; one batch alone measured 1.15x where whole
    # runs went 1.42x, and backend='auto' once kept torch; per stream it measures 1.27x to 1.29x)
    times = engine_choice.best_times({
        "torch": lambda: streams.run_all(torch_forward, range(n_streams), chooser.device),
        "openvino": lambda: streams.run_all(lambda _: forward(probe, wanted), range(n_streams), chooser.device),
    })
    return runtime, times["torch"] / times["openvino"]


def chosen_backend(speedup: Optional[float]) -> str:
    """What ``backend="auto"`` runs given the engine's measured ``speedup`` over torch (``None``: the
    engine could not run the model): the engine where it is at least
    :data:`~contextembed.encoders.transformer._engine_choice.ENGINE_MIN_SPEEDUP` times as fast, else torch."""
    return "openvino" if speedup is not None and speedup >= engine_choice.ENGINE_MIN_SPEEDUP else "torch"


def check_backend_record(result: dict, precision: str, candidates: Optional[tuple[str, ...]] = None) -> None:
    """Refuse (``ValueError``) a backend record that ``backend="auto"`` with ``precision`` could not
    have written (the engine's ``precision="auto"`` timing ``candidates``, by default every precision
    it runs): other keys, a backend, speedup or engine precision of the wrong type or out of range, or
    a backend its own speedup does not imply (torch recorded where the engine ran 3x faster)."""
    from ... import tuning

    if result.get("speedup") is None:  # the engine could not run the model: torch
        tuning.recorded_keys(result, ("backend", "speedup"))
        tuning.recorded_choice(result["backend"], ("torch", "openvino"), "backend")
        tuning.recorded_implied(result["backend"], "torch", "backend", "speedup=None (the engine cannot run the model)")
        return
    tuning.recorded_keys(result, ("backend", "speedup", "engine_precision"))
    backend = tuning.recorded_choice(result["backend"], ("torch", "openvino"), "backend")
    speedup = tuning.recorded_speedup(result["speedup"], "speedup")
    ran = tuning.recorded_choice(result["engine_precision"], (candidates or engine.ENGINE_PRECISIONS)
                                 if precision == "auto" else (precision,), "engine_precision")
    tuning.recorded_implied(backend, chosen_backend(speedup), "backend",
                            f"speedup={speedup!r} of the engine ({ran}) over torch")


def parameter_count(model) -> int:
    """The number of values in ``model``'s parameters (what its size means to the engine's calibration)."""
    return sum(parameter.numel() for parameter in model.parameters())
