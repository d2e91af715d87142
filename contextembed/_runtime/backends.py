"""The backend names: which engine runs a transformer encoder's forward pass.

Plain names with no heavy imports, so that the loaders, the adapters and the CLI check a
``backend=`` before anything is loaded (the engines themselves: :mod:`contextembed.encoders.transformer._engine`).

- ``"torch"``: the model's own PyTorch forward (every device, every precision).
- ``"openvino"``: the model exported once to OpenVINO and run by its fused CPU kernels
  (the ``openvino`` extra).
- ``"auto"``: the faster of the two on this machine, measured when the encoder loads, among the
  paths that are installed and meet the quality bar (:mod:`contextembed.encoders.transformer._engine`).

Only transformer encoders have an engine: ELMo runs on torch and static vectors are a table that is
looked up, so they take ``"auto"`` and ``"torch"`` (their one path), and an engine name is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, Optional, get_args

from ..tokenizers import get_tokenizer, tokenize_item

#: the precisions under which calibration text can be used: int8, or ``"auto"``, which measures int8
CALIBRATED_PRECISIONS = ("int8", "auto")

#: every backend name ``backend=`` accepts
Backend = Literal["auto", "torch", "openvino"]
BACKEND_NAMES: tuple[str, ...] = get_args(Backend)
#: the backends that run an exported model, and the extra that installs each
ENGINE_EXTRAS = {"openvino": "openvino"}
#: the backends each encoder family takes (``Encoder.family``)
FAMILY_BACKENDS = {"transformer": BACKEND_NAMES, "elmo": ("auto", "torch"), "static": ("auto", "torch")}

_FAMILY_NOTES = {
    "elmo": "ELMo encoders run on torch: the engines export transformer encoders only",
    "static": "static vectors are a table that is looked up, not a network that runs: no engine applies",
}


def check_backend(backend: object, family: Optional[str] = None, name: str = "backend") -> str:
    """``backend`` if ``family`` (``"transformer"``, ``"elmo"``, ``"static"``; ``None``: any family)
    takes it; else a ``ValueError`` naming ``name``, the value and the accepted values."""
    if not isinstance(backend, str) or backend not in BACKEND_NAMES:
        raise ValueError(f"{name}={backend!r} is not one of {', '.join(map(repr, BACKEND_NAMES))}")
    accepted = FAMILY_BACKENDS[family] if family is not None else BACKEND_NAMES
    if backend not in accepted:
        raise ValueError(
            f"{name}={backend!r} does not apply to {family} encoders ({_FAMILY_NOTES[family]}); "
            f"use {' or '.join(map(repr, accepted))}"
        )
    return backend


def check_calibration(calibration: object, backend: str, precision: str) -> Optional[list[list[str]]]:
    """The calibration sentences, read once and checked, or ``None`` (the bundled sample).

    ``calibration=`` is text for the engine's static int8 (``backend="openvino"``, or ``"auto"``,
    which may pick the engine) with ``precision="int8"`` or ``"auto"``. With ``precision="auto"`` it
    is accepted even when the measurement then picks fp32 or bf16: the int8 candidate that was
    measured was calibrated on it (the choice is logged). ``backend="torch"`` quantizes per token
    without calibration text, and fp32, bf16 and fp16 never quantize: there it is a ``ValueError``,
    never silently ignored.

    ``calibration`` is an iterable (a list, or a generator: it is read exactly once, here) of
    sentences, each a list of str tokens or a raw text str, which is split into words by the
    tokenizer the estimators use for raw text (``tokenizer="auto"``,
    :func:`contextembed.tokenizers.regex_tokenize`). Empty sentences carry nothing to calibrate on
    and are left out.

    Raises
    ------
    TypeError
        ``calibration`` is a str (one text, or a file name? pass a list of sentences), bytes, a
        mapping or not iterable, or a sentence or a token is not a str; the message names the
        sentence and token index.
    ValueError
        ``calibration`` cannot take effect with ``backend`` and ``precision``, holds no non-empty
        sentence, or holds a character UTF-8 cannot encode.
    """
    if calibration is None:
        return None
    if backend == "torch":
        raise ValueError(
            "calibration applies to int8 on the engine (backend='openvino', or 'auto' where the engine is "
            "chosen); backend='torch' quantizes int8 per token without calibration text: leave calibration "
            "unset, or pass backend='openvino'"
        )
    if precision not in CALIBRATED_PRECISIONS:
        raise ValueError(
            f"calibration applies to int8 on the engine (precision='int8', or 'auto', which measures int8); "
            f"precision={precision!r} never quantizes: leave calibration unset, or pass precision='int8'"
        )
    return _calibration_sentences(calibration)


def _calibration_sentences(calibration: object) -> list[list[str]]:
    """``calibration`` read once as token lists (raw texts split by ``tokenizer="auto"``), empty
    sentences left out; the errors of :func:`check_calibration`."""
    if isinstance(calibration, (str, bytes, Mapping)) or not isinstance(calibration, Iterable):
        raise TypeError(
            f"calibration is {type(calibration).__name__} ({str(calibration)[:40]!r}); pass a list of sentences, "
            "each a list of str tokens or a str text, e.g. calibration=[['the', 'cat', 'sat'], 'A raw text.'] "
            "(a file: [line for line in open(path, encoding='utf-8') if line.strip()])"
        )
    split = get_tokenizer("auto")
    sentences = [tokenize_item(sentence, split, f"calibration sentence {i}") for i, sentence in enumerate(calibration)]
    sentences = [sentence for sentence in sentences if sentence]
    if not sentences:
        raise ValueError("calibration holds no non-empty sentence; pass token lists or texts, or None for the bundled "
                         "sample")
    return sentences


def concrete_backend(encoder: object) -> str:
    """The backend name that loads ``encoder``'s numeric path again: ``"openvino"`` for an encoder
    running on the engine, ``"torch"`` for every other (ELMo and static vectors included: their
    one path). What ``backend="auto"`` is pinned to once resolved, so that every process that
    loads the encoder again (joblib, Ray and Dask workers) runs the same path."""
    return "openvino" if getattr(encoder, "backend", "torch") == "openvino" else "torch"


__all__ = ["BACKEND_NAMES", "Backend", "CALIBRATED_PRECISIONS", "ENGINE_EXTRAS", "FAMILY_BACKENDS", "check_backend",
           "check_calibration", "concrete_backend"]
