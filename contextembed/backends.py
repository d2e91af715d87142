"""The backend names: which engine runs a transformer encoder's forward pass.

Plain names with no heavy imports, so that the loaders, the adapters and the CLI check a
``backend=`` before anything is loaded (the engines themselves: :mod:`contextembed.encoders.engine`).

- ``"torch"``: the model's own PyTorch forward (every device, every precision).
- ``"openvino"``: the model exported once to OpenVINO and run by its fused CPU kernels
  (the ``openvino`` extra).
- ``"auto"``: the faster of the two on this machine, measured when the encoder loads, among the
  paths that are installed and meet the quality bar (:mod:`contextembed.encoders.engine`).

Only transformer encoders have an engine: ELMo runs on torch and static vectors are a table that is
looked up, so they take ``"auto"`` and ``"torch"`` (their one path), and an engine name is an error.
"""

from __future__ import annotations

from typing import Literal, Optional, get_args

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


__all__ = ["BACKEND_NAMES", "Backend", "ENGINE_EXTRAS", "FAMILY_BACKENDS", "check_backend"]
