"""Device and numeric precision choices shared by the torch encoders."""

from __future__ import annotations

import os
from typing import Callable, Literal, Union, get_args

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


#: environment variable that fixes what ``precision="auto"`` picks on a CPU ("bf16", "fp32" or "int8")
AUTO_CPU_PRECISION_ENV = "CONTEXTEMBED_AUTO_CPU_PRECISION"
#: bf16 must run the encoder's matrix products at least this much faster than fp32 to be picked, and
#: int8 this much faster than the better of the two
BF16_MIN_SPEEDUP = 1.25
INT8_MIN_SPEEDUP = 1.25


def _best_times(products: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best wall time of each product over five rounds, the products alternating (so that all see
    the same load from other processes); a first round warms up."""
    import time

    times: dict[str, list[float]] = {name: [] for name in products}
    with torch.inference_mode():
        for _ in range(6):
            for name, product in products.items():
                start = time.perf_counter()
                product()
                times[name].append(time.perf_counter() - start)
    return {name: min(values[1:]) for name, values in times.items()}


def _feed_forward_operands(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A transformer feed-forward shape: 512 tokens x 384 -> 1536 and back."""
    tokens = torch.randn(512, 384, generator=generator)
    return tokens, torch.randn(384, 1536, generator=generator), torch.randn(1536, 384, generator=generator)


#: speedups measured in this process (or adopted from the process that dispatched its work)
_SPEEDUPS: dict[str, float] = {}


def measured_speedups() -> dict[str, float]:
    """What this process measured so far (``{"bf16": ..., "int8": ...}``), to hand to workers."""
    return dict(_SPEEDUPS)


def adopt_speedups(speedups: dict[str, float]) -> None:
    """Take another process's measurements where this one has none, so that ``precision="auto"``
    picks the same precision in a parallel worker as in the process that dispatched it (two
    processes measuring at once see each other's load)."""
    for name, value in speedups.items():
        _SPEEDUPS.setdefault(name, value)


def _speedup(name: str, measure: Callable[[], float]) -> float:
    if name not in _SPEEDUPS:
        _SPEEDUPS.setdefault(name, measure())
    return _SPEEDUPS[name]


def cpu_bf16_speedup() -> float:
    """How much faster bf16 matrix products run than fp32 on this CPU: measured once per process on
    a transformer feed-forward shape (512 tokens x 384 -> 1536 and back), best of five each, the
    two alternating.

    CPUs with AVX-512 BF16 differ: on an AMD EPYC (Zen 4) bf16 runs MiniLM about 3x faster than fp32,
    on the 2-core Intel Xeon without AMX of our dev box about 0.7x (0.9x for this product alone).
    The measurement takes about 0.1 s.
    """
    return _speedup("bf16", _measure_bf16_speedup)


def _measure_bf16_speedup() -> float:
    x, up, down = _feed_forward_operands(torch.Generator().manual_seed(0))
    bx, bup, bdown = x.bfloat16(), up.bfloat16(), down.bfloat16()
    times = _best_times({"fp32": lambda: torch.mm(torch.mm(x, up), down),
                         "bf16": lambda: torch.mm(torch.mm(bx, bup), bdown)})
    return times["fp32"] / times["bf16"]


def cpu_int8_speedup() -> float:
    """How much faster the int8 linear layers of ``precision="int8"`` (a scale per token, integer
    products: :class:`contextembed.quantization.Int8Linear`) run than fp32 ones on this CPU, measured
    once per process like :func:`cpu_bf16_speedup`, quantization and rescaling included.

    On the 2-core Intel Xeon (AVX-512 VNNI) of our dev box: about 1.5x (MiniLM end to end: 1.5x).
    """
    return _speedup("int8", _measure_int8_speedup)


def _measure_int8_speedup() -> float:
    from .quantization import Int8Linear

    x, up, down = _feed_forward_operands(torch.Generator().manual_seed(0))
    int8_up, int8_down = Int8Linear(up.t(), None), Int8Linear(down.t(), None)
    times = _best_times({"fp32": lambda: torch.mm(torch.mm(x, up), down), "int8": lambda: int8_down(int8_up(x))})
    return times["fp32"] / times["int8"]


def auto_cpu_precision(int8_allowed: bool = False) -> str:
    """What ``precision="auto"`` runs on the CPU: bf16 where the CPU has native bf16 units and bf16
    measurably beats fp32 (:func:`cpu_bf16_speedup` >= :data:`BF16_MIN_SPEEDUP`), else fp32; with
    ``int8_allowed`` (transformers, which then check the quantized model's quality), int8 where it
    beats the better of those by :data:`INT8_MIN_SPEEDUP` (:func:`cpu_int8_speedup`).
    ``CONTEXTEMBED_AUTO_CPU_PRECISION=bf16|fp32|int8`` fixes the choice (e.g. the same on every
    worker of a cluster); ``int8`` applies only where ``int8_allowed``, the rule above elsewhere."""
    forced = os.environ.get(AUTO_CPU_PRECISION_ENV)
    if forced:
        if forced not in ("bf16", "fp32", "int8"):
            raise ValueError(f"{AUTO_CPU_PRECISION_ENV}={forced!r}: expected 'bf16', 'fp32' or 'int8'")
        if forced != "int8" or int8_allowed:
            return forced
    bf16 = cpu_has_fast_bf16() and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP
    if int8_allowed and cpu_int8_speedup() >= INT8_MIN_SPEEDUP * (cpu_bf16_speedup() if bf16 else 1.0):
        return "int8"
    return "bf16" if bf16 else "fp32"


Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
#: every precision name a torch encoder accepts
PRECISION_NAMES: tuple[str, ...] = get_args(Precision)


def resolve_precision(precision: str, device: torch.device, int8_allowed: bool = False) -> str:
    """Resolve ``"auto"`` to a concrete precision name for ``device`` and validate the others.

    ``"auto"``: on CUDA bf16 where supported (else fp16); on a CPU :func:`auto_cpu_precision` (int8
    where ``int8_allowed`` and it measurably beats the others, else bf16 where the CPU has native
    bf16 units and they measurably beat fp32, else fp32). ``"int8"`` (int8 linear layers with a
    scale per token, :mod:`contextembed.quantization`) runs on the CPU only.
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return auto_cpu_precision(int8_allowed)
    check_choice("precision", precision, Precision)
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision='int8' runs on the CPU only, got device={str(device)!r}; use 'bf16' on GPUs")
    return precision


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype weights and activations are held in (int8 keeps fp32 activations)."""
    return PRECISIONS.get(precision, torch.float32)
