"""The taggers' hand-made features, where scikit-learn keeps its feature helpers
(``sklearn.feature_extraction``): word shapes for uncased encoders and context windows.

>>> from contextembed.sklearn.feature_extraction import word_shape
>>> word_shape("McDonald's")
"XxXx'x"
"""

from ._tagger import is_cased
from ._tagger_features import SHAPE_NAMES, context_window, shape_features, word_shape

__all__ = ["SHAPE_NAMES", "context_window", "is_cased", "shape_features", "word_shape"]
