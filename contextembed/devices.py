"""Device and numeric precision choices shared by the torch encoders."""

from __future__ import annotations

import functools
import os
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


#: environment variable that fixes what ``precision="auto"`` picks on a CPU ("bf16" or "fp32")
AUTO_CPU_PRECISION_ENV = "CONTEXTEMBED_AUTO_CPU_PRECISION"
#: bf16 must run the encoder's matrix products at least this much faster than fp32 to be picked
BF16_MIN_SPEEDUP = 1.25


@functools.lru_cache(maxsize=None)
def cpu_bf16_speedup() -> float:
    """How much faster bf16 matrix products run than fp32 on this CPU: measured once per process on
    a transformer feed-forward shape (512 tokens x 384 -> 1536 and back), best of five each, the
    two alternating.

    CPUs with AVX-512 BF16 differ: on an AMD EPYC (Zen 4) bf16 runs MiniLM about 3x faster than fp32,
    on the 2-core Intel Xeon without AMX of our dev box about 0.7x (0.9x for this product alone).
    The measurement takes about 0.1 s.
    """
    import time

    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(512, 384, generator=generator)
    up, down = torch.randn(384, 1536, generator=generator), torch.randn(1536, 384, generator=generator)
    operands = {dtype: (tokens.to(dtype), up.to(dtype), down.to(dtype)) for dtype in (torch.float32, torch.bfloat16)}
    times: dict[torch.dtype, list[float]] = {dtype: [] for dtype in operands}
    with torch.inference_mode():
        for _ in range(6):  # alternating, so that both see the same load from other processes
            for dtype, (x, a, b) in operands.items():
                start = time.perf_counter()
                torch.mm(torch.mm(x, a), b)
                times[dtype].append(time.perf_counter() - start)
    # the first round warms up
    return min(times[torch.float32][1:]) / min(times[torch.bfloat16][1:])


def auto_cpu_precision() -> str:
    """What ``precision="auto"`` runs on the CPU: bf16 where the CPU has native bf16 units and bf16
    measurably beats fp32 (:func:`cpu_bf16_speedup` >= :data:`BF16_MIN_SPEEDUP`), else fp32.
    ``CONTEXTEMBED_AUTO_CPU_PRECISION=bf16|fp32`` fixes the choice (e.g. the same on every worker of
    a cluster)."""
    forced = os.environ.get(AUTO_CPU_PRECISION_ENV)
    if forced:
        if forced not in ("bf16", "fp32"):
            raise ValueError(f"{AUTO_CPU_PRECISION_ENV}={forced!r}: expected 'bf16' or 'fp32'")
        return forced
    return "bf16" if cpu_has_fast_bf16() and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP else "fp32"


Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
#: every precision name a torch encoder accepts
PRECISION_NAMES: tuple[str, ...] = get_args(Precision)


def resolve_precision(precision: str, device: torch.device) -> str:
    """Resolve ``"auto"`` to a concrete precision name for ``device`` and validate the others.

    ``"auto"``: on CUDA bf16 where supported (else fp16); on a CPU :func:`auto_cpu_precision` (bf16
    where the CPU has native bf16 units and they measurably beat fp32, else fp32). ``"int8"`` (int8
    linear layers with a scale per token, :mod:`contextembed.quantization`) runs on the CPU only.
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return auto_cpu_precision()
    check_choice("precision", precision, Precision)
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision='int8' runs on the CPU only, got device={str(device)!r}; use 'bf16' on GPUs")
    return precision


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype weights and activations are held in (int8 keeps fp32 activations)."""
    return PRECISIONS.get(precision, torch.float32)
