"""scikit-learn adapters: text, text-pair and token embedders, a feature-based sequence tagger, scorers.

>>> from contextembed.sklearn import SequenceTagger, TokenEmbedder
>>> tagger = SequenceTagger(TokenEmbedder("minilm-l6", layers=[-4, -3, -2, -1], combine="concat"))
>>> tagger.fit(train_tokens, train_tags).score(dev_tokens, dev_tags)  # doctest: +SKIP
"""

from ..encoders._registry import clear_encoders
from ._encoding import clear_cache, set_cache_size
from ._pairs import TextPairEmbedder
from ._persistence import TRUSTED_TYPES
from ._neural_tagger import BiLSTMCRFTagger
from ._tagger import SequenceTagger
from ._text import TextEmbedder
from ._token import TokenEmbedder

__all__ = [
    "BiLSTMCRFTagger",
    "SequenceTagger",
    "TRUSTED_TYPES",
    "TextEmbedder",
    "TextPairEmbedder",
    "TokenEmbedder",
    "clear_cache",
    "clear_encoders",
    "set_cache_size",
]


#: names that moved to the public module scikit-learn would keep them in; the old ones still import
MOVED_NAMES = {**{name: "metrics" for name in ("detect_scheme", "entity_f1", "entity_f1_scorer", "entity_report",
                                               "format_report")},
               **{name: "feature_extraction" for name in ("SHAPE_NAMES", "context_window", "is_cased",
                                                          "shape_features", "word_shape")}}


def __getattr__(name: str):
    if name not in MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    module = f"{__name__}.{MOVED_NAMES[name]}"
    warnings.warn(f"{__name__}.{name} moved to {module}.{name}; import it from there", DeprecationWarning,
                  stacklevel=2)
    return getattr(importlib.import_module(module), name)
