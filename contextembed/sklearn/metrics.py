"""Entity-level scoring of tag sequences, where scikit-learn keeps its scorers (``sklearn.metrics``).

>>> from contextembed.sklearn.metrics import entity_f1
>>> entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]])
1.0
"""

from ._scoring import detect_scheme, entity_f1, entity_f1_scorer, entity_report, format_report

__all__ = ["detect_scheme", "entity_f1", "entity_f1_scorer", "entity_report", "format_report"]
