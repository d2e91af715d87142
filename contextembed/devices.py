"""Device and numeric precision choices shared by the torch encoders."""

from __future__ import annotations

from typing import Union

import torch

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


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """Map ``"auto" | "fp32" | "bf16" | "fp16"`` to a torch dtype for ``device``.

    ``"auto"``: on CUDA bf16 where supported (else fp16); on CPU fp32 (exact; pick ``"bf16"``
    explicitly on CPUs with AMX for speed).
    """
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision={precision!r} is not one of 'auto', {', '.join(map(repr, PRECISIONS))}"
        )
    return PRECISIONS[precision]
