"""How the engine's precision is chosen: each candidate timed on a probe batch once per machine and
model and remembered (:mod:`contextembed.tuning`), int8 only where it keeps the features, and the
timings ``backend="auto"`` shares. What runs the chosen precision is :mod:`._engine`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Sequence
from typing import Optional

import numpy as np

from ...errors import SettingError
from . import _engine as engine
from ._engine import OpenVinoForward, _version, require_openvino

logger = logging.getLogger(__name__)


#: int8 on the engine must keep at least this mean cosine to the engine's fp32 on every hidden state
#: of the probe batch (issue bar for features: 0.995)
ENGINE_INT8_MIN_COSINE = 0.995


def layer_cosines(reference: Sequence[np.ndarray], other: Sequence[np.ndarray], mask: np.ndarray) -> list[float]:
    """Per hidden state, the mean cosine over real positions (``mask``) between two runs'
    ``(batch, seq, width)`` outputs."""
    real = mask.astype(bool).reshape(-1)
    cosines = []
    for a, b in zip(reference, other):
        a = a.reshape(-1, a.shape[-1])[real].astype(np.float64)
        b = b.reshape(-1, b.shape[-1])[real].astype(np.float64)
        norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
        cosines.append(float(np.mean((a * b).sum(axis=1) / norms)))
    return cosines


#: seconds one of ``"auto"``'s timings on the engine may take beyond its first round (the engine's
#: precisions against each other; the engine against torch): at base size, 8 rounds of a probe
#: batch took 50 s of the 124 s that ``backend="auto"`` measured on a busy 2-core EPYC, where
#: rounds of a small model take a tenth of a second and all 8 run (see
#: :func:`contextembed._runtime.devices.best_times`)
TIMING_BUDGET = 4.0


def best_times(runs: dict, rounds: int = 8, warmup: int = 3, budget: Optional[float] = TIMING_BUDGET) -> dict[str, float]:
    """Best wall time of each run (a callable) after ``warmup`` of ``rounds`` alternating rounds,
    fewer where they would take longer than ``budget`` seconds
    (:func:`contextembed._runtime.devices.best_times`)."""
    from ..._runtime.devices import best_times as alternating

    return alternating(runs, rounds, warmup, budget=budget)


#: ``backend="auto"`` takes the engine when it runs the probe batch at least this much faster than torch
ENGINE_MIN_SPEEDUP = 1.05


def sentences_hash(sentences: Sequence[Sequence[str]]) -> str:
    """A hash of calibration sentences (it names them in the cache key)."""
    digest = hashlib.blake2b(digest_size=16)
    for sentence in sentences:
        digest.update("\x1f".join(sentence).encode("utf-8", "surrogatepass") + b"\x1e")
    return digest.hexdigest()


#: version of the measurement :func:`auto_precision` makes (a record of another is measured again)
PRECISION_METHOD = 1


def record_key(fingerprint: str, n_layers: int, input_names: Sequence[str], calibration_hash: str) -> dict:
    """What a measurement of the engine on one model depends on besides the machine
    (:func:`contextembed.tuning.remembered`): the model, its inputs, the calibration text, and the
    versions of the engine, its quantizer and its converter's inputs."""
    ov = require_openvino()
    return {"model": fingerprint, "layers": n_layers, "inputs": list(input_names), "calibration": calibration_hash,
            "engine": ov.__version__, "quantizer": _version("nncf"), "transformers": _version("transformers")}


def auto_precision(make, probe: dict[str, np.ndarray], n_layers: int, key: dict,
                   candidates: Optional[tuple[str, ...]] = None, n_parameters: Optional[int] = None) -> "OpenVinoForward":
    """``precision="auto"`` on the engine: the fastest of fp32, bf16 (on CPUs with bf16 units) and int8
    (when it keeps :data:`ENGINE_INT8_MIN_COSINE` on every hidden state of ``probe``), timed on
    ``probe`` in one alternating run with the thresholds of the torch path
    (:data:`~contextembed._runtime.devices.BF16_MIN_SPEEDUP`, :data:`~contextembed._runtime.devices.INT8_MIN_SPEEDUP`),
    once per machine and model: the choice is remembered (:mod:`contextembed.tuning`, ``key``:
    :func:`record_key`). ``CONTEXTEMBED_AUTO_CPU_PRECISION`` fixes the choice as it does for torch.

    ``make(name)`` builds the engine in precision ``name``. ``candidates`` (default:
    :func:`auto_candidates` of a model of ``n_parameters``) are the precisions timed.
    """
    from ... import tuning
    from ..._runtime.devices import forced_cpu_precision

    forced = forced_cpu_precision(int8_allowed=True)
    if forced:
        return make(check_forced_precision(forced))
    built: dict[str, OpenVinoForward] = {}

    def build(name: str) -> OpenVinoForward:
        if name not in built:
            built[name] = make(name)
        return built[name]

    def precision_key(names: tuple[str, ...]) -> dict:
        return {**key, "method": PRECISION_METHOD, "candidates": list(names)}

    if candidates is None:
        candidates = auto_candidates(n_parameters, "engine precision", precision_key,
                                     lambda names: functools.partial(check_precision_record, candidates=names))
    result = tuning.remembered(
        "engine precision", precision_key(candidates),
        lambda: _measure_precisions(build, probe, n_layers, candidates),
        functools.partial(check_precision_record, candidates=candidates),
        what=f"backend='openvino' precision='auto' is exporting and timing {', '.join(candidates)}")
    return build(result["precision"])


#: parameters beyond which a first use of ``precision="auto"`` on the engine leaves its int8 out
#: (``contextembed tune`` measures it): its calibration (NNCF over the calibration sentences) took
#: 173 s for all-mpnet-base-v2 (110M parameters) on a busy 2-core AMD EPYC, where a first use
#: should cost seconds; a model the size of MiniLM-L6 (23M) is calibrated in the measurement
AUTO_INT8_MAX_PARAMETERS = 40_000_000


def measured_at_first_use(n_parameters: int) -> bool:
    """Whether ``backend="auto"`` exports and times the engine against torch in a use that finds no
    record of it (:mod:`contextembed.tuning`): for a model of at most
    :data:`AUTO_INT8_MAX_PARAMETERS`, or where the measurement is thorough (``contextembed tune``).
    A larger model runs torch until ``contextembed tune`` has measured it: at base size the engine
    won only in its int8, whose calibration takes minutes (all-mpnet-base-v2 on a 2-core Zen 4 EPYC:
    its fp32 0.97x torch's, its bf16 0.84x torch's int8), while the export and the timings alone took
    a bounded first use 68.5 s."""
    from ... import tuning

    return n_parameters <= AUTO_INT8_MAX_PARAMETERS or tuning.measuring_thoroughly()


def auto_candidates(n_parameters: Optional[int], kind: str, key_of, check_of) -> tuple[str, ...]:
    """The precisions ``"auto"`` times on the engine for a model of ``n_parameters``: those of
    :func:`_auto_candidates`, less int8 where the model is larger than
    :data:`AUTO_INT8_MAX_PARAMETERS`, unless the measurement is thorough (``contextembed tune``,
    :func:`contextembed.tuning.thorough`) or a record of the measurement ``kind`` with int8 among
    its candidates is there to read (``key_of(candidates)``, ``check_of(candidates)``: its key and
    check)."""
    from ... import tuning

    every = _auto_candidates()
    if "int8" not in every or n_parameters is None or n_parameters <= AUTO_INT8_MAX_PARAMETERS:
        return every
    if tuning.measuring_thoroughly() or tuning.recorded(kind, key_of(every), check_of(every)) is not None:
        return every
    logger.info("precision='auto' on the engine leaves int8 out for a model of %.0fM parameters (its calibration "
                "takes minutes): `contextembed tune MODEL` measures it once for this machine", n_parameters / 1e6)
    return tuple(name for name in every if name != "int8")


def _auto_candidates() -> tuple[str, ...]:
    """What ``precision="auto"`` times on the engine: fp32, bf16 where the CPU has bf16 units, int8
    where it has integer dot-product units (without them the engine's int8 ran at 1.05x fp32 on an
    AVX2-only AMD EPYC, below :data:`~contextembed._runtime.devices.INT8_MIN_SPEEDUP`, after a calibration
    of about a minute)."""
    from ..._runtime.devices import cpu_has_int8_dot

    return ("fp32",) + (("bf16",) if engine.cpu_has_bf16() else ()) + (("int8",) if cpu_has_int8_dot() else ())


def check_forced_precision(forced: str) -> str:
    """``CONTEXTEMBED_AUTO_CPU_PRECISION``'s precision if the engine runs it here: bf16 on a CPU
    without bf16 units is a :class:`~contextembed.errors.SettingError` naming the variable (the
    engine would compute in f32 under a bf16 label, the case ``precision="bf16"`` refuses)."""
    from ..._runtime.devices import AUTO_CPU_PRECISION_ENV

    if forced == "bf16" and not engine.cpu_has_bf16():
        raise SettingError(
            f"{AUTO_CPU_PRECISION_ENV}='bf16' with backend='openvino': this CPU has no bf16 units (OpenVINO would "
            "compute in f32 under a bf16 label); set it to 'fp32' or 'int8', or unset it")
    return forced


def chosen_precision(speedups: dict[str, float]) -> str:
    """What ``precision="auto"`` runs on the engine given the measured ``speedups`` (fp32 time over
    each candidate's; a candidate left out was not measured or kept): bf16 where it beats fp32 by
    :data:`~contextembed._runtime.devices.BF16_MIN_SPEEDUP`, int8 where it beats the better of those by
    :data:`~contextembed._runtime.devices.INT8_MIN_SPEEDUP`, else fp32."""
    from ..._runtime.devices import BF16_MIN_SPEEDUP, INT8_MIN_SPEEDUP

    chosen, best = "fp32", 1.0
    if speedups.get("bf16", 0.0) >= BF16_MIN_SPEEDUP:
        chosen, best = "bf16", speedups["bf16"]
    if speedups.get("int8", 0.0) >= INT8_MIN_SPEEDUP * best:
        chosen = "int8"
    return chosen


def check_precision_record(result: dict, candidates: Optional[tuple[str, ...]] = None) -> None:
    """Refuse (``ValueError``) an engine-precision record :func:`_measure_precisions` could not have
    written on this CPU timing ``candidates`` (default: :func:`_auto_candidates`): other keys, a
    precision or speedup of the wrong type or out of range, a speedup of a precision not timed here,
    int8 timed without the cosine that admits it, or a choice its own speedups do not imply."""
    from ... import tuning

    tuning.recorded_keys(result, ("precision", "speedups", "int8_cosine"))
    candidates = _auto_candidates() if candidates is None else candidates
    precision = tuning.recorded_choice(result["precision"], candidates, "precision")
    speedups = tuning.recorded_mapping(result["speedups"], "speedups")
    timed = set(candidates) - {"fp32", "int8"}
    cosine = result["int8_cosine"]
    if "int8" in candidates:
        cosine = tuning.recorded_cosine(cosine, "int8_cosine")
        timed |= {"int8"} if cosine >= ENGINE_INT8_MIN_COSINE else set()
    elif cosine is not None:
        raise ValueError(f"recorded int8_cosine={cosine!r}, but int8 is no candidate on this CPU")
    if set(speedups) != timed:
        raise ValueError(f"recorded speedups of {sorted(speedups)}, but {sorted(timed)} were timed against fp32")
    values = {name: tuning.recorded_speedup(value, name) for name, value in speedups.items()}
    tuning.recorded_implied(precision, chosen_precision(values), "precision", f"speedups {speedups}")


def _measure_precisions(build, probe: dict[str, np.ndarray], n_layers: int,
                        names: Optional[tuple[str, ...]] = None) -> dict:
    """Time the engine's precisions ``names`` (default: :func:`_auto_candidates`) on ``probe``:
    ``{"precision": chosen, "speedups": {name: fp32 time over its time}, "int8_cosine": lowest mean
    cosine of int8 to fp32 over the hidden states}``."""
    names = _auto_candidates() if names is None else names
    wanted = tuple(range(n_layers))
    candidates = {name: build(name) for name in names if name != "int8"}
    cosine = None
    if "int8" in names:
        int8 = build("int8")
        reference = candidates["fp32"](probe, wanted)
        cosine = min(layer_cosines(reference, int8(probe, wanted), probe["attention_mask"]))
    if cosine is not None and cosine >= ENGINE_INT8_MIN_COSINE:
        candidates["int8"] = int8
    elif cosine is not None:
        logger.info("openvino int8 left out of precision='auto': mean cosine %.4f to fp32 on a hidden state "
                    "(at least %.3f needed)", cosine, ENGINE_INT8_MIN_COSINE)
    times = best_times({name: (lambda forward=forward: forward(probe, wanted)) for name, forward in candidates.items()})
    speedups = {name: times["fp32"] / t for name, t in times.items() if name != "fp32"}
    chosen = chosen_precision(speedups)
    logger.info("openvino precision='auto' chose %s (%s)", chosen,
                ", ".join(f"{name} {value:.2f}x fp32" for name, value in speedups.items()))
    return {"precision": chosen, "speedups": speedups, "int8_cosine": cosine}
