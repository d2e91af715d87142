"""Entity-level scoring of tag sequences with seqeval (IO, IOB1, IOB2/BIO, IOBES and BILOU).

:func:`entity_f1` is the taggers' ``score`` (micro F1), :func:`entity_report` their ``report``
(per entity type); both read the tags the same way (:func:`_seqeval_input`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
from sklearn.metrics import make_scorer

from ..heads._crf import PREFIXED_TAG
from ._checks import check_doc_ids, check_nonempty, check_tagged

TagScheme = Literal["IO", "IOB1", "IOB2", "IOBES", "BILOU"]
TAG_SCHEMES: tuple[str, ...] = get_args(TagScheme)


def detect_scheme(*tag_lists: Sequence[Sequence[str]], names: Sequence[str] = ()) -> TagScheme:
    """Name the tagging scheme of some tag sequences.

    ``IO`` when no tag has a scheme prefix (bare types such as ``PER``, ``LOC`` and ``O``, which
    some corpora use: neighbouring tokens of one type are one entity); else ``BILOU`` when a tag
    starts with ``L-`` or ``U-``; ``IOBES`` with ``E-`` or ``S-``; ``IOB1`` when an ``I-X`` tag opens
    an entity (follows ``O`` or another type); otherwise ``IOB2`` (also when every tag is ``O``).

    Parameters
    ----------
    *tag_lists : list of list of str
        Tag sequences, one list per sentence.
    names : sequence of str, optional
        What each of ``tag_lists`` is called in errors (``"y_true"``, ``"y_pred"``).

    Raises
    ------
    ValueError
        Some tags have a prefix (``B-PER``) and others none (``PER``), or a tag is empty or blank
        (whitespace only); the message names the tags with their sentence and token.
    """
    prefixes = set()
    iob1 = False
    first = {True: None, False: None}  # the first prefixed and the first bare tag, with where they are
    for k, tags in enumerate(tag_lists):
        for i, sentence in enumerate(tags):
            previous = "O"
            for j, tag in enumerate(sentence):
                if tag == "O":
                    previous = tag
                    continue
                if not str(tag).strip():
                    raise ValueError(f"tag {tag!r} ({_where(names, len(tag_lists), k, i, j)}) is "
                                     f"{'blank' if tag else 'empty'}; every token needs a tag (O outside entities)")
                prefixed = bool(PREFIXED_TAG.match(tag))
                if first[prefixed] is None:
                    first[prefixed] = (tag, _where(names, len(tag_lists), k, i, j))
                prefix, _, kind = tag.partition("-")
                prefixes.add(prefix)
                if prefix == "I" and previous[2:] != kind:
                    iob1 = True
                previous = tag
    if first[True] is not None and first[False] is not None:
        (bare, bare_at), (prefixed, prefixed_at) = first[False], first[True]
        raise ValueError(
            f"tag {bare!r} ({bare_at}) has no scheme prefix, but tag {prefixed!r} ({prefixed_at}) has one: use one "
            "scheme throughout, IO (PER, LOC, O) or a prefixed one (B-PER, I-PER, O)"
        )
    if first[False] is not None:
        return "IO"
    if prefixes & {"L", "U"}:
        return "BILOU"
    if prefixes & {"E", "S"}:
        return "IOBES"
    return "IOB1" if iob1 else "IOB2"


def _where(names: Sequence[str], n_lists: int, k: int, i: int, j: int) -> str:
    """``"y_pred sentence 3, token 2"``: a tag's place among the tag lists of :func:`detect_scheme`."""
    name = names[k] if k < len(names) else (f"tag list {k}" if n_lists > 1 else "")
    return f"{name} sentence {i}, token {j}".lstrip()


def _check_scheme(scheme: object) -> TagScheme:
    if scheme not in TAG_SCHEMES:
        raise ValueError(f"scheme={scheme!r} is not one of {', '.join(map(repr, TAG_SCHEMES))} (or None: detected)")
    return scheme


def _seqeval_input(y_true: list, y_pred: list, scheme) -> tuple[list, list, dict]:
    """Gold and predicted tags as seqeval reads them, and its options: ``scheme`` (checked, or
    detected), IO tags written as IOB1 (``PER`` as ``I-PER``: seqeval's default reads a run of one
    type as one entity, IO's meaning), strict mode for IOBES and BILOU."""
    from seqeval.scheme import BILOU, IOBES

    detected = detect_scheme(y_true, y_pred, names=("y_true", "y_pred"))
    scheme = detected if scheme is None else _check_scheme(scheme)
    if detected == "IO" and scheme != "IO":
        raise ValueError(f"scheme={scheme!r} reads a prefix (B-PER, I-PER) on every tag but O, and these tags have none "
                         "(the IO scheme): pass scheme='IO', or None to detect it")
    if scheme == "IO":
        y_true, y_pred = (_io_as_iob1(tags, name) for tags, name in ((y_true, "y_true"), (y_pred, "y_pred")))
    strict = {"BILOU": BILOU, "IOBES": IOBES}
    if scheme in strict:
        return y_true, y_pred, {"mode": "strict", "scheme": strict[scheme]}
    return y_true, y_pred, {}  # seqeval's conlleval-compatible default reads IOB1 and IOB2 alike


def _io_as_iob1(tags: list[list[str]], name: str) -> list[list[str]]:
    for i, sentence in enumerate(tags):
        for j, tag in enumerate(sentence):
            if PREFIXED_TAG.match(tag):
                raise ValueError(f"scheme='IO' takes tags without a prefix, but {name} sentence {i}, token {j} is {tag!r}")
    return [[tag if tag == "O" else "I-" + tag for tag in sentence] for sentence in tags]


def entity_f1(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], scheme=None) -> float:
    """Entity-level micro F1 (an entity counts when its type and exact span match).

    Parameters
    ----------
    y_true, y_pred : list of list of str
        Gold and predicted tags, one list per sentence.
    scheme : {"IO", "IOB1", "IOB2", "IOBES", "BILOU"}, optional
        Detected from the tags when not given (:func:`detect_scheme`).
    """
    from seqeval.metrics import f1_score

    y_true, y_pred = _aligned(y_true, y_pred)
    y_true, y_pred, options = _seqeval_input(y_true, y_pred, scheme)
    return float(f1_score(y_true, y_pred, zero_division=0, **options))


#: the rows of :func:`entity_report` after the entity types
AVERAGES = ("micro avg", "macro avg", "weighted avg")


def entity_report(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], scheme=None) -> dict:
    """Entity-level precision, recall, F1 and support per entity type, and their averages.

    seqeval's ``classification_report(output_dict=True)``, reading the tags as :func:`entity_f1`
    does (so ``report["micro avg"]["f1-score"]`` is ``entity_f1``), with plain Python numbers.

    Parameters
    ----------
    y_true, y_pred : list of list of str
        Gold and predicted tags, one list per sentence.
    scheme : {"IO", "IOB1", "IOB2", "IOBES", "BILOU"}, optional
        Detected from the tags when not given (:func:`detect_scheme`).

    Returns
    -------
    dict
        ``{type: {"precision": float, "recall": float, "f1-score": float, "support": int}}`` for
        every entity type of ``y_true`` or ``y_pred`` (sorted), then ``"micro avg"``,
        ``"macro avg"`` and ``"weighted avg"`` (averages over types, the last weighted by support).
        A type never predicted (or never gold) scores 0.0 where its ratio has no denominator; when
        neither holds any entity every score is 0.0 (seqeval's macro average would be NaN).
    """
    from seqeval.metrics import classification_report

    y_true, y_pred = _aligned(y_true, y_pred)
    y_true, y_pred, options = _seqeval_input(y_true, y_pred, scheme)
    with warnings.catch_warnings():  # numpy's "mean of empty slice" when there is no entity at all
        warnings.simplefilter("ignore", RuntimeWarning)
        report = classification_report(y_true, y_pred, output_dict=True, zero_division=0, **options)
    return {name: {key: _plain(value) for key, value in row.items()} for name, row in report.items()}


def _plain(value):
    """A Python int or float for seqeval's NumPy numbers (0.0 for the NaN of an empty average)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    value = float(value)
    return 0.0 if np.isnan(value) else value


def _aligned(y_true, y_pred) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags as lists of lists, one tag each per token, at least one sentence (else
    a ``ValueError``)."""
    y_true = [list(t) for t in y_true]
    y_pred = [list(t) for t in y_pred]
    if not y_true and not y_pred:
        raise ValueError("y_true and y_pred hold no sentence: there is nothing to score")
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} sentences but y_pred has {len(y_pred)}")
    for i, (gold, pred) in enumerate(zip(y_true, y_pred)):
        if len(gold) != len(pred):
            raise ValueError(f"sentence {i}: {len(gold)} gold tags but {len(pred)} predicted tags")
    return y_true, y_pred


class EntityScoresMixin:
    """``score`` and ``report`` of a tagger, from its ``predict`` (given ``doc_ids``, the document
    of each sentence, as ``predict`` is)."""

    def score(self, X, y, doc_ids=None) -> float:
        """Entity-level micro F1 (seqeval) of the predictions against ``y``; an empty ``X`` is a
        ``ValueError`` (there is nothing to score)."""
        return entity_f1(*self._gold_and_predicted(X, y, doc_ids, "score"))

    def report(self, X, y, doc_ids=None) -> dict:
        """Per-entity precision, recall, F1 and support of the predictions against ``y``, with
        micro, macro and weighted averages (:func:`entity_report`; ``score`` is its micro F1).

        Parameters
        ----------
        X : list of list of str
            Tokenized sentences.
        y : list of list of str
            Their gold tags, one list per sentence.
        doc_ids : sequence, optional
            One document id per sentence, for an embedder with ``context`` (see ``predict``).

        Returns
        -------
        dict
            ``{"PER": {"precision": 0.91, "recall": 0.88, "f1-score": 0.89, "support": 1842}, ...,
            "micro avg": {...}, "macro avg": {...}, "weighted avg": {...}}`` (plain floats and
            ints); :func:`format_report` prints it as a table.

        Raises
        ------
        ValueError
            ``X`` is empty (there is nothing to score), or ``y`` does not hold one tag per token.
        """
        return entity_report(*self._gold_and_predicted(X, y, doc_ids, "report"))

    def _gold_and_predicted(self, X, y, doc_ids, method: str) -> tuple[list, list]:
        """``y`` checked against ``X`` (one str tag per token, at least one sentence: ``method`` is
        named otherwise), and the predictions for ``X``."""
        sentences, y, _ = check_tagged(X, y, type(self).__name__, fit=False)
        check_nonempty(sentences, "sentence", method)
        return y, self.predict(sentences, doc_ids=check_doc_ids(doc_ids, len(sentences)))


def format_report(report: dict, digits: int = 3) -> str:
    """A report of :func:`entity_report` as a text table: one line per entity type, then the averages."""
    width = max([len(name) for name in report] + [len("weighted avg")])
    lines = [f"{'':<{width}}  {'precision':>9}  {'recall':>9}  {'f1-score':>9}  {'support':>9}"]
    for name, row in report.items():
        if name == AVERAGES[0]:
            lines.append("")
        lines.append(f"{name:<{width}}  {row['precision']:>9.{digits}f}  {row['recall']:>9.{digits}f}  "
                     f"{row['f1-score']:>9.{digits}f}  {row['support']:>9,}")
    return "\n".join(lines)


#: a scorer for ``GridSearchCV(scoring=...)`` and ``cross_val_score`` on a :class:`SequenceTagger`
entity_f1_scorer = make_scorer(entity_f1)
