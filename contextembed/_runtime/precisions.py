"""The precision names: what ``precision=`` accepts, per encoder family.

Plain names with no torch, so that :mod:`contextembed._runtime.devices` (which resolves and checks a
precision) and :mod:`contextembed._runtime.quantization` (which runs ``"int8"``) both take them from here:
the imports run one way (devices -> quantization -> precisions).
"""

from __future__ import annotations

from typing import Literal, get_args

#: the precisions of the torch encoders (transformers and ELMo)
Precision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
#: static vectors are a float32 table that is looked up, not computed: no other precision applies
StaticPrecision = Literal["auto", "fp32"]
#: every precision name a torch encoder accepts
PRECISION_NAMES: tuple[str, ...] = get_args(Precision)
#: the precisions of each encoder family (``Encoder.family``)
FAMILY_PRECISIONS = {"transformer": Precision, "elmo": Precision, "static": StaticPrecision}

__all__ = ["FAMILY_PRECISIONS", "PRECISION_NAMES", "Precision", "StaticPrecision"]
