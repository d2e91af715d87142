"""scikit-learn adapters: text, text-pair and token embedders, a feature-based sequence tagger, scorers.

>>> from contextembed.sklearn import SequenceTagger, TokenEmbedder
>>> tagger = SequenceTagger(TokenEmbedder("minilm-l6", layers=[-4, -3, -2, -1], combine="concat"))
>>> tagger.fit(train_tokens, train_tags).score(dev_tokens, dev_tags)  # doctest: +SKIP
"""

from ._encoding import clear_cache, clear_encoders, set_cache_size
from ._pairs import TextPairEmbedder
from ._persistence import TRUSTED_TYPES
from ._tagger_features import SHAPE_NAMES, context_window, shape_features, word_shape
from ._neural_tagger import BiLSTMCRFTagger
from ._scoring import detect_scheme, entity_f1, entity_f1_scorer, entity_report, format_report
from ._tagger import SequenceTagger, is_cased
from ._text import TextEmbedder
from ._token import TokenEmbedder

__all__ = [
    "BiLSTMCRFTagger",
    "SHAPE_NAMES",
    "SequenceTagger",
    "TRUSTED_TYPES",
    "TextEmbedder",
    "TextPairEmbedder",
    "TokenEmbedder",
    "clear_cache",
    "clear_encoders",
    "context_window",
    "detect_scheme",
    "entity_f1",
    "entity_f1_scorer",
    "entity_report",
    "format_report",
    "is_cased",
    "set_cache_size",
    "shape_features",
    "word_shape",
]
