"""Device and numeric precision choices shared by the torch encoders."""

from __future__ import annotations

import copy
import functools
import logging
import re
import time
import warnings
from typing import Callable, Literal, Optional, Union, get_args

import torch

from .. import settings, tuning
from .precisions import FAMILY_PRECISIONS, PRECISION_NAMES, Precision, StaticPrecision  # noqa: F401  (re-exported)
from .quantization import Int8Linear
from .streams import cpu_streams, intra_op_threads

logger = logging.getLogger(__name__)

PRECISIONS: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


#: the device names every encoder family accepts; ``"cuda:N"`` too (N a whole number written in ASCII
#: digits, the index of a GPU that is present), and a ``torch.device`` of type cpu or cuda
Device = Literal["auto", "cpu", "cuda"]
_CUDA_INDEX = re.compile(r"cuda:([0-9]+)")
_DEVICE_TYPES = tuple(name for name in get_args(Device) if name != "auto")


def check_device(device: Union[str, torch.device], name: str = "device") -> Union[str, torch.device]:
    """``device`` if it names a device the encoders run on (its form only; :func:`resolve_device`
    also checks that it is present): ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, or a
    ``torch.device`` of type cpu or cuda.

    Raises
    ------
    ValueError
        For anything else (``"gpu"``, ``"mps"``, ``"xpu"``, ``"meta"``, ``None``, ``""``,
        ``"cuda:-1"``, ``"cuda:²"``), naming ``name``, the value and the accepted values.
    """
    if isinstance(device, torch.device) and device.type in _DEVICE_TYPES:
        return device
    if isinstance(device, str) and (device in get_args(Device) or _CUDA_INDEX.fullmatch(device)):
        return device
    raise ValueError(
        f"{name}={device!r} is not a device contextembed runs on; expected one of "
        f"{', '.join(map(repr, get_args(Device)))}, 'cuda:N' (N the index of a present GPU, e.g. 'cuda:0'), "
        f"or a torch.device of type {' or '.join(map(repr, _DEVICE_TYPES))}"
    )


def resolve_device(device: Union[str, torch.device] = "auto", name: str = "device") -> torch.device:
    """``"auto"`` picks CUDA when present, else the CPU; the others (:func:`check_device`) must be
    present here.

    Raises
    ------
    ValueError
        For a value :func:`check_device` refuses, for CUDA when it is not available, and for a
        ``cuda:N`` beyond the GPUs present.
    """
    if check_device(device, name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, index = (device.type, device.index) if isinstance(device, torch.device) else _type_index(device)
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"{name}={str(device)!r} was asked for but CUDA is not available here; use {name}='cpu' or 'auto'"
        )
    if kind == "cuda" and index is not None and index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ValueError(
            f"{name}={str(device)!r}: this machine has {count} CUDA device{'s' * (count != 1)} "
            f"(cuda:0 to cuda:{count - 1}); pass one of those, or 'cuda' for the current one"
        )
    return torch.device(kind) if index is None else torch.device(kind, index)


def _type_index(device: str) -> tuple[str, Optional[int]]:
    """``"cuda:3"`` -> ``("cuda", 3)``, ``"cpu"`` -> ``("cpu", None)`` (a name :func:`check_device` passed)."""
    match = _CUDA_INDEX.fullmatch(device)
    return ("cuda", int(match[1])) if match else (device, None)


#: CPU flags of integer dot-product units (x86 VNNI, AMX; Arm's dot-product and int8 matrix extensions)
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm"})


def cpu_has_int8_dot() -> bool:
    """Whether this CPU has integer dot-product units (:data:`INT8_DOT_FLAGS`); without them int8
    products are emulated (int8 ran 20x to 30x slower than fp32 on an AVX2-only AMD EPYC). ``True``
    where the flags cannot be read (nothing is ruled out unseen)."""
    from ..tuning import cpu_flags

    flags = cpu_flags()
    return not flags or bool(flags & INT8_DOT_FLAGS)


class SlowPrecisionWarning(UserWarning):
    """A precision asked for by name runs slower than fp32 on this CPU."""


_WARNED_INT8 = False


def warn_slow_int8() -> None:
    """Warn once per process that ``precision="int8"`` (asked for by name) runs torch's int8 layers
    on a CPU without integer dot-product units, with the slowdown measured here where it is known
    (:func:`remembered_speedups`)."""
    global _WARNED_INT8
    if _WARNED_INT8 or cpu_has_int8_dot():
        return
    _WARNED_INT8 = True
    known = _SPEEDUPS.get("int8")
    slowdown = f"measured here at {1 / known:.0f}x slower than fp32" if known else "expect 20x to 30x slower than fp32"
    warnings.warn(
        f"precision='int8' on a CPU without integer dot-product units (none of {', '.join(sorted(INT8_DOT_FLAGS))}): "
        f"torch's int8 products are emulated, {slowdown}; precision='auto' or 'fp32' is faster here (so is "
        "backend='openvino', whose int8 runs at about fp32's speed on such a CPU)",
        SlowPrecisionWarning, stacklevel=4)


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
#: bf16 must run the measured feed-forward blocks at least this much faster than fp32 to be picked
BF16_MIN_SPEEDUP = 1.25
#: int8 must run them this much faster than the better of fp32 and bf16. Its quality is checked apart
#: (the quantized model's cosine to fp32, :data:`contextembed._runtime.quantization.INT8_MIN_COSINE`), so the
#: bar only has to clear the measurement's noise (about 0.04 between processes)
INT8_MIN_SPEEDUP = 1.15
#: the measured stack: blocks of ``tokens`` x ``width`` -> 4 * ``width`` -> ``width``
_BLOCKS, _TOKENS, _WIDTH = 2, 256, 384
#: rounds of the measurement, the first ``_WARMUP`` not counted (a fresh process's allocator and
#: kernels need a few to settle)
_ROUNDS, _WARMUP = 12, 4

#: speedups measured in this process (or adopted from the process that dispatched its work)
_SPEEDUPS: dict[str, float] = {}
tuning.on_forget(lambda: _SPEEDUPS.clear())  # contextembed tune reads (or measures) them again


class _FeedForward(torch.nn.Module):
    """A transformer feed-forward block: ``norm(x + down(gelu(up(x))))``."""

    def __init__(self, width: int, generator: torch.Generator) -> None:
        super().__init__()
        # skip_init: the weights come from ``generator``, the global random state is left alone
        self.up = torch.nn.utils.skip_init(torch.nn.Linear, width, 4 * width)
        self.down = torch.nn.utils.skip_init(torch.nn.Linear, 4 * width, width)
        self.norm = torch.nn.LayerNorm(width)
        with torch.no_grad():
            for linear in (self.up, self.down):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) / linear.in_features**0.5)
                linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def _measure_speedups(names: tuple[str, ...]) -> dict[str, float]:
    """fp32 time over the time of each precision in ``names`` ("bf16", "int8") for a stack of
    :data:`_BLOCKS` transformer feed-forward blocks on :data:`_TOKENS` tokens, all precisions
    alternating in one run (:func:`best_times`).

    Whole blocks, not bare matrix products: each precision's work around its products (int8's
    quantizing and rescaling, GELU, layer norms) counts as in a model. Bare products measured int8
    at 0.8x bf16 on an AMD EPYC, where MiniLM runs int8 at 1.33x bf16 and these blocks measure it at
    1.25x to 1.4x.
    """
    # A process that has loaded a model has freed large buffers, after which glibc serves buffers up
    # to that size from its heap. A fresh one maps each anew and page-faults it on every call, which
    # measured the many short-lived buffers of int8 at about half their speed in some processes:
    # freeing one large buffer first puts this process in the loaded state.
    torch.empty(16 << 20, dtype=torch.uint8)
    generator = torch.Generator().manual_seed(0)
    blocks = torch.nn.Sequential(*(_FeedForward(_WIDTH, generator) for _ in range(_BLOCKS))).eval()
    tokens = torch.randn(_TOKENS, _WIDTH, generator=generator)
    stacks = {"fp32": (blocks, tokens)}
    if "bf16" in names:
        stacks["bf16"] = (copy.deepcopy(blocks).to(torch.bfloat16), tokens.bfloat16())
    if "int8" in names:
        quantized = copy.deepcopy(blocks)
        for block in quantized:
            block.up, block.down = Int8Linear.from_linear(block.up), Int8Linear.from_linear(block.down)
        stacks["int8"] = (quantized, tokens)
    # timed with the threads each batch of a forward pass gets (contextembed._runtime.streams): int8 gains
    # more on one thread than on two (2.85x fp32 against 2.6x on the EPYC, bf16 2.0x on both)
    with intra_op_threads(cpu_streams()[1]):
        hopeless = _hopeless(stacks)
        runs = {name: functools.partial(stack, x) for name, (stack, x) in stacks.items() if name not in hopeless}
        times = best_times(runs)
    return {name: hopeless[name] if name in hopeless else times["fp32"] / times[name] for name in names}


#: a precision whose first calls run slower than fp32 by this factor is not timed further: it cannot
#: win (int8 without integer dot-product units ran 0.02x fp32 on an AVX2-only AMD EPYC, and timing it
#: in full took 20 s)
_HOPELESS = 0.5
#: tokens of the screening calls (an eighth of the measurement's: cheap even where a precision is slow)
_SCREEN_TOKENS = 32


def _hopeless(stacks: dict) -> dict[str, float]:
    """The precisions of ``stacks`` (``{name: (blocks, tokens)}``, fp32 among them) that run below
    :data:`_HOPELESS` times fp32's speed on :data:`_SCREEN_TOKENS` tokens, with that speedup."""
    screen = {name: functools.partial(stack, x[:_SCREEN_TOKENS]) for name, (stack, x) in stacks.items()}
    times = best_times(screen, rounds=2, warmup=1)
    return {name: times["fp32"] / t for name, t in times.items() if name != "fp32" and times["fp32"] / t < _HOPELESS}


def best_times(runs: dict[str, Callable[[], object]], rounds: int = _ROUNDS, warmup: int = _WARMUP,
               budget: Optional[float] = None) -> dict[str, float]:
    """Best wall time of each run over the rounds after the first ``warmup`` of ``rounds``, the
    runs alternating (so that all see the same load from other processes).

    With ``budget`` (seconds), a measurement whose first round shows that ``rounds`` of them would
    take longer runs fewer: that round is the one warm-up, and as many rounds follow as the budget
    holds, at least :data:`MIN_TIMED_ROUNDS` (a base-sized model's probe batch takes about a second a
    run on a 2-core CPU, where a small model's takes a tenth: the count, not the bound, applies to
    those).
    """
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        done = 0
        while done < rounds:
            start = time.perf_counter()
            for name, run in runs.items():
                begin = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - begin)
            done += 1
            first_round = time.perf_counter() - start
            if done == 1 and budget is not None and first_round * (rounds - 1) > budget:
                warmup, rounds = 1, 1 + max(MIN_TIMED_ROUNDS, int(budget // first_round))
    return {name: min(values[warmup:]) for name, values in times.items()}


#: the fewest timed rounds a bounded :func:`best_times` runs after its warm-up
MIN_TIMED_ROUNDS = 2


def measured_speedups() -> dict[str, float]:
    """What this process measured so far (``{"bf16": ..., "int8": ...}``), to hand to workers."""
    return dict(_SPEEDUPS)


def adopt_speedups(speedups: dict[str, float]) -> None:
    """Take another process's measurements where this one has none, so that ``precision="auto"``
    picks the same precision in a parallel worker as in the process that dispatched it (two
    processes measuring at once see each other's load)."""
    for name, value in speedups.items():
        _SPEEDUPS.setdefault(name, value)


def cpu_speedups(int8_allowed: bool = True) -> dict[str, float]:
    """What ``precision="auto"`` compares on this CPU: fp32 time over bf16 time (where the CPU has
    native bf16 units) and over int8 time (with ``int8_allowed``), measured in one alternating run
    (:func:`_measure_speedups`) once per machine and remembered (:func:`remembered_speedups`), or
    adopted from the process that dispatched this one's work (:func:`adopt_speedups`).

    Measured on a 2-core AMD EPYC (Zen 4): bf16 about 2.1x, int8 about 2.6x (1.25x to 1.4x its
    bf16). On a 2-core Intel Xeon without AMX, bare products (the measurement before) ran bf16 at
    0.9x and int8 at 1.5x fp32.
    """
    return _measured((("bf16",) if cpu_has_fast_bf16() else ()) + (("int8",) if int8_allowed else ()))


def _measured(names: tuple[str, ...]) -> dict[str, float]:
    """The speedups ``names``: adopted, else from this machine's tuning record
    (:func:`remembered_speedups`), else measured now."""
    if any(name not in _SPEEDUPS for name in names):
        adopt_speedups(remembered_speedups())
    missing = tuple(name for name in names if name not in _SPEEDUPS)
    if missing:  # bf16 on a CPU without bf16 units (emulated): asked for by name, never recorded
        adopt_speedups(_measure_speedups(missing))
    return {name: _SPEEDUPS[name] for name in names}


#: version of the measurement :func:`_measure_speedups` makes (a record of another is measured again)
SPEEDUP_METHOD = 2


def remembered_speedups() -> dict[str, float]:
    """What ``precision="auto"`` compares on this CPU (bf16 where it has native bf16 units, and
    int8), measured once per machine and remembered (:func:`contextembed.tuning.remembered`)."""
    from .. import tuning

    names = (("bf16",) if cpu_has_fast_bf16() else ()) + ("int8",)

    def check(result: dict) -> None:
        if sorted(result) != sorted(names):
            raise ValueError(f"recorded speedups of {sorted(result)}, expected {sorted(names)}")
        for name, value in result.items():
            tuning.recorded_speedup(value, name)

    what = f"precision='auto' is measuring {' and '.join(names)} against fp32 on this CPU"
    return tuning.remembered("cpu precision", {"method": SPEEDUP_METHOD, "candidates": list(names)},
                             lambda: _measure_speedups(names), check, what=what)


def cpu_bf16_speedup() -> float:
    """fp32 time over bf16 time of the measured blocks on this CPU.

    Measured here even without native bf16 units (where bf16 is emulated and slow), once per
    machine: the result is a tuning record (:mod:`contextembed.tuning`).

    Returns
    -------
    float
        How many times faster bf16 ran than fp32 (below 1: slower).

    See Also
    --------
    auto_cpu_precision : the precision ``precision="auto"`` picks from it; the :doc:`/choosing`
        guide.
    """
    return _measured(("bf16",))["bf16"]


def cpu_int8_speedup() -> float:
    """fp32 time over int8 time of the measured blocks on this CPU (:func:`cpu_speedups`), with the
    int8 linear layers of ``precision="int8"`` (:class:`contextembed._runtime.quantization.Int8Linear`)."""
    return cpu_speedups(int8_allowed=True)["int8"]


def forced_cpu_precision(int8_allowed: bool = False) -> Optional[str]:
    """The precision ``CONTEXTEMBED_AUTO_CPU_PRECISION`` fixes for ``precision="auto"`` on a CPU
    (``int8`` only where ``int8_allowed``); ``None`` where it fixes none."""
    forced = settings.choice(AUTO_CPU_PRECISION_ENV, ("bf16", "fp32", "int8"))
    return forced if forced and (forced != "int8" or int8_allowed) else None


def auto_cpu_precision(int8_allowed: bool = False) -> str:
    """What ``precision="auto"`` runs on this CPU, from speeds measured once per machine.

    bf16 where the CPU has native bf16 units and bf16 beats fp32 by ``BF16_MIN_SPEEDUP`` (1.25),
    else fp32; with ``int8_allowed``, int8 where it beats the better of those by
    ``INT8_MIN_SPEEDUP`` (1.15). The measurements are tuning records (:mod:`contextembed.tuning`).

    Parameters
    ----------
    int8_allowed : bool, default=False
        Consider int8 (transformers do, and then check the quantized model's quality; ELMo and
        static vectors do not).

    Returns
    -------
    str
        ``"bf16"``, ``"fp32"`` or ``"int8"``. ``CONTEXTEMBED_AUTO_CPU_PRECISION=bf16|fp32|int8``
        fixes the choice (e.g. the same on every worker of a cluster); ``int8`` applies only where
        ``int8_allowed``, the rule above elsewhere.

    See Also
    --------
    contextembed.encoders.tune : measure and remember a model's choices ahead of time; the
        :doc:`/choosing` guide.
    """
    forced = forced_cpu_precision(int8_allowed)
    if forced:
        return forced
    speedups = cpu_speedups(int8_allowed)
    bf16 = speedups.get("bf16", 0.0) >= BF16_MIN_SPEEDUP
    best = speedups["bf16"] if bf16 else 1.0
    if int8_allowed and speedups["int8"] >= INT8_MIN_SPEEDUP * best:
        return "int8"
    return "bf16" if bf16 else "fp32"


_FAMILY_NOTES = {
    None: "transformer and ELMo encoders accept all of them; static vectors 'auto' and 'fp32'",
    "transformer": "the precisions of transformer encoders",
    "elmo": "the precisions of ELMo encoders",
    "static": "static vectors are a float32 table that is looked up, not computed: bf16, fp16 and int8 "
              "apply to transformer and ELMo encoders only",
}


def check_precision(precision: str, family: Optional[str] = None, name: str = "precision") -> str:
    """``precision`` if ``family`` (``"transformer"``, ``"elmo"``, ``"static"``; ``None``: any
    family) accepts it (:data:`FAMILY_PRECISIONS`); else a ``ValueError`` naming ``name``, the value,
    the accepted values and the family."""
    choices = get_args(FAMILY_PRECISIONS[family] if family is not None else Precision)
    if isinstance(precision, str) and precision in choices:
        return precision
    raise ValueError(f"{name}={precision!r} is not one of {', '.join(map(repr, choices))} ({_FAMILY_NOTES[family]})")


def check_settings(device: Union[str, torch.device], precision: str, family: Optional[str] = None) -> None:
    """Check an encoder's ``device`` (:func:`resolve_device`) and ``precision``
    (:func:`check_precision`) before anything is loaded."""
    resolve_device(device)
    check_precision(precision, family)


class PrecisionChangedWarning(UserWarning):
    """What a fitted estimator or saved pipeline ran at fit cannot run here: it runs another precision,
    whose features are not bit for bit the ones it was fitted on."""


def unrunnable(precision: str, device: torch.device) -> Optional[str]:
    """Why ``precision`` (a concrete one) cannot run on ``device`` here; ``None`` where it can."""
    if precision == "int8" and device.type != "cpu":
        return "int8 runs on the CPU only"
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bf16"
    return None


def fitted_precision(precision: str, device: Union[str, torch.device], what: str) -> str:
    """``precision``, the one a fitted estimator or saved pipeline ran (``what`` names it), or
    ``"auto"`` where it cannot run on ``device`` here, with one :class:`PrecisionChangedWarning`
    naming both (its features are then not bit for bit the ones it was fitted on)."""
    if precision == "auto":
        return precision
    reason = unrunnable(precision, resolve_device(device))
    if reason is None:
        return precision
    warnings.warn(f"{what} was fitted at precision={precision!r}, which cannot run here ({reason}): it runs at the "
                  "precision 'auto' chooses here, so its features are not the ones it was fitted on; fit again here "
                  "for those", PrecisionChangedWarning, stacklevel=4)
    return "auto"


def resolve_precision(precision: str, device: torch.device, int8_allowed: bool = False) -> str:
    """Resolve ``"auto"`` to a concrete precision name for ``device`` and validate the others.

    ``"auto"``: on CUDA bf16 where supported (else fp16); on a CPU :func:`auto_cpu_precision` (int8
    where ``int8_allowed`` and it measurably beats the others, else bf16 where the CPU has native
    bf16 units and they measurably beat fp32, else fp32). ``"int8"`` (int8 linear layers with a
    scale per token, :mod:`contextembed._runtime.quantization`) runs on the CPU only.
    """
    if precision == "auto":
        if device.type == "cuda":
            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return auto_cpu_precision(int8_allowed)
    check_precision(precision)
    if precision == "int8" and device.type != "cpu":
        raise ValueError(f"precision='int8' runs on the CPU only, got device={str(device)!r}; use 'bf16' on GPUs")
    if precision == "int8":
        warn_slow_int8()
    return precision


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype weights and activations are held in (int8 keeps fp32 activations)."""
    return PRECISIONS.get(precision, torch.float32)
