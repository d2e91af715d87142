"""Plain-torch task heads on frozen features: a linear-chain CRF and a BiLSTM-CRF tagger."""

from .crf import CRF, allowed_transitions

__all__ = ["CRF", "allowed_transitions"]
