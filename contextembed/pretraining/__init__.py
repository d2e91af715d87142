"""Pretraining on your own text: BERT-style MLM (+NSP), ELMo-style biLM, static word vectors.

Library functions behind ``contextembed pretrain``; each writes a directory (or vectors files) that
:func:`contextembed.load_encoder` loads.
"""

from ._bilm import BiLMConfig, pretrain_bilm
from ._corpus import Corpus, read_corpus, split_held_out
from ._masking import MaskingOptions, mask_tokens
from ._mlm import BERT_PRESETS, MLMConfig, pretrain_mlm
from ._static import StaticConfig, most_similar, pretrain_static
from ._training import TrainingDivergedError, TrainingOptions

__all__ = [
    "BERT_PRESETS",
    "BiLMConfig",
    "Corpus",
    "MLMConfig",
    "MaskingOptions",
    "StaticConfig",
    "TrainingDivergedError",
    "TrainingOptions",
    "mask_tokens",
    "most_similar",
    "pretrain_bilm",
    "pretrain_mlm",
    "pretrain_static",
    "read_corpus",
    "split_held_out",
]
