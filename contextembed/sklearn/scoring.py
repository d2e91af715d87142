"""Entity-level scoring of tag sequences with seqeval (IOB1, IOB2/BIO, IOBES and BILOU)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sklearn.metrics import make_scorer

TagScheme = Literal["IOB1", "IOB2", "IOBES", "BILOU"]


def detect_scheme(*tag_lists: Sequence[Sequence[str]]) -> TagScheme:
    """Name the tagging scheme of some tag sequences.

    ``BILOU`` when a tag starts with ``L-`` or ``U-``; ``IOBES`` with ``E-`` or ``S-``; ``IOB1``
    when an ``I-X`` tag opens an entity (follows ``O`` or another type); otherwise ``IOB2``.
    """
    prefixes = set()
    iob1 = False
    for tags in tag_lists:
        for sentence in tags:
            previous = "O"
            for tag in sentence:
                prefix, _, kind = tag.partition("-")
                prefixes.add(prefix)
                if prefix == "I" and previous[2:] != kind:
                    iob1 = True
                previous = tag
    if prefixes & {"L", "U"}:
        return "BILOU"
    if prefixes & {"E", "S"}:
        return "IOBES"
    return "IOB1" if iob1 else "IOB2"


def _seqeval_options(scheme: TagScheme) -> dict:
    from seqeval.scheme import BILOU, IOBES

    strict = {"BILOU": BILOU, "IOBES": IOBES}
    if scheme in strict:
        return {"mode": "strict", "scheme": strict[scheme]}
    return {}  # seqeval's conlleval-compatible default reads IOB1 and IOB2 alike


def entity_f1(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], scheme=None) -> float:
    """Entity-level micro F1 (an entity counts when its type and exact span match).

    Parameters
    ----------
    y_true, y_pred : list of list of str
        Gold and predicted tags, one list per sentence.
    scheme : {"IOB1", "IOB2", "IOBES", "BILOU"}, optional
        Detected from the tags when not given.
    """
    from seqeval.metrics import f1_score

    y_true = [list(t) for t in y_true]
    y_pred = [list(t) for t in y_pred]
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} sentences but y_pred has {len(y_pred)}")
    for i, (gold, pred) in enumerate(zip(y_true, y_pred)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted tags")
    scheme = scheme or detect_scheme(y_true, y_pred)
    return float(f1_score(y_true, y_pred, zero_division=0, **_seqeval_options(scheme)))


#: a scorer for ``GridSearchCV(scoring=...)`` and ``cross_val_score`` on a :class:`SequenceTagger`
entity_f1_scorer = make_scorer(entity_f1)
