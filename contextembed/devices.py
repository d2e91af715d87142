"""Device and numeric precision choices shared by the torch encoders."""

from __future__ import annotations

from typing import Literal, Union, get_args

import torch

from .options import check_choice

PRECISIONS: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def resolve_device(device: Union[str, torch.device, None] = "auto") -> torch.device:
    """``"auto"`` (or ``None``) picks CUDA when present, else the CPU; anything else goes to torch.

    Raises
    ------
    ValueError
        If CUDA is asked for but not available.
    """
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={str(device)!r} was asked for but CUDA is not available here; use device='cpu' "
            "or 'auto'"
        )
    return resolved


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU has native bf16 matrix units (Intel AMX or AVX-512 BF16)."""
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # older torch
        return False
    if "AMX" in capability.upper():
        return True
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = handle.read()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
#: every precision name a torch encoder accepts
PRECISION_NAMES: tuple[str, ...] = get_args(Precision)


def resolve_precision(precision: str, device: torch.device) -> str:
    """Resolve ``"auto"`` to a concrete precision name for ``device`` and validate the others.

    ``"auto"``: on CUDA bf16 where supported (else fp16); on a CPU with native bf16 units (AMX or
    AVX-512 BF16) bf16; elsewhere fp32. ``"int8"`` (dynamic int8 quantization of the linear layers)
    runs on the CPU only.
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "bf16" if cpu_has_fast_bf16() else "fp32"
    check_choice("precision", precision, Precision)
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision='int8' runs on the CPU only, got device={str(device)!r}; use 'bf16' on GPUs")
    return precision


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype weights and activations are held in (int8 keeps fp32 activations)."""
    return PRECISIONS.get(precision, torch.float32)


class BatchDependentWarning(UserWarning):
    """The chosen precision makes a sentence's vectors depend on the other sentences in its batch."""


#: measured on MiniLM-L6, CoNLL-2003 dev: the largest change of one feature between a sentence
#: encoded alone and in a batch (bf16 and fp32: 0.0 and below 1e-5, see docs/reliability.md)
INT8_BATCH_EFFECT = 2.1


def check_cacheable_precision(precision: str, where: str) -> None:
    """Refuse ``precision="int8"`` in adapters that cache features (history would matter)."""
    if precision == "int8":
        raise ValueError(
            f"{where}: precision='int8' quantizes activations with one scale per forward pass, so a "
            "sentence's vectors depend on the other sentences in its batch, and with the adapter's cache "
            "on what was encoded before. Use precision='auto', 'bf16' or 'fp32' (all batch-independent)"
        )


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantization of every ``nn.Linear``: per-channel int8 weights, activations
    quantized per batch (fbgemm; uses VNNI where the CPU has it).

    The activation scale is computed per forward pass over the whole batch, so outputs depend on
    the batch's other sentences: this warns with :class:`BatchDependentWarning`.
    """
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    warnings.warn(
        "precision='int8' quantizes activations with one scale per forward pass: a sentence's vectors "
        f"depend on the other sentences in its batch (by up to {INT8_BATCH_EFFECT} on MiniLM-L6). Use "
        "'bf16' or 'fp32' where features must be reproducible",
        BatchDependentWarning,
        stacklevel=3,
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
