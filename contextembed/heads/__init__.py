"""Plain-torch task heads on frozen features: a linear-chain CRF and a BiLSTM-CRF tagger."""

from ._crf import CRF, allowed_transitions

__all__ = ["CRF", "allowed_transitions"]
