"""Sentences inside their documents: the words around each sentence that document context adds.

BERT's feature-based NER (Table 7) encoded each sentence inside its document's text and kept only
its own tokens. ``context=N`` does the same: each sentence is encoded with up to ``N`` pieces of the
text before it and ``N`` after it in its document, in the one model input it shares with them
(:func:`contextembed._inputs.alignment.split_context` says how the room is shared when it is short), and
only its own words' rows come out: one row per input word, as without context.

Documents are runs of consecutive sentences with the same document id (``doc_ids``: one per
sentence, like scikit-learn's ``groups``); without ids the whole input is one document. Context
never crosses a document boundary. An empty sentence has no words: it gives no rows and adds
nothing to its neighbours' context (their neighbours are the nearest sentences with words).

Context is counted in pieces, but every word has at least one piece
(:mod:`contextembed._inputs.alignment`), so the ``N`` words on each side of a sentence hold every piece its
context can take. :class:`InContext` carries those words, which the encoder cuts to ``N`` pieces;
they are also what names the encoding in a cache (the same sentence among other neighbours is
another encoding).

Only transformers take context (:attr:`contextembed.encoders._base.Encoder.max_context`): a static
vector is the same whatever the words around it, and ELMo, whose biLSTM reads words, is refused
with a clear error rather than counted in other units.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .sentences import check_sentence_chunks

#: sentences checked and held at once by :func:`in_context` (besides those waiting for their right context)
CHUNK = 4096


@dataclass(frozen=True)
class InContext:
    """One sentence with the words next to it in its document.

    Attributes
    ----------
    words : sequence of str
        The sentence's own tokens (the rows that come out).
    left, right : tuple of str
        At most ``size`` words before and after it in its document (fewer at a document's edge).
    size : int
        Context pieces wanted on each side (``context``), ``>= 1``.
    """

    words: Sequence[str]
    left: tuple[str, ...]
    right: tuple[str, ...]
    size: int


@dataclass
class _Waiting:
    """A sentence whose right context is still being read."""

    words: Sequence[str]
    left: tuple[str, ...]
    right: list[str] = field(default_factory=list)

    def done(self, size: int) -> bool:
        return not self.words or len(self.right) >= size


def in_context(sentences: Iterable, doc_ids: Optional[Iterable], size: int) -> Iterator[InContext]:
    """Each sentence with up to ``size`` words of context on each side, in input order.

    Parameters
    ----------
    sentences : sequence of sequence of str, or an iterator of them
        Checked here (:func:`~contextembed._inputs.sentences.check_sentence_chunks`); an iterator is read
        one chunk at a time, holding besides it only the sentences still waiting for ``size`` words
        after them.
    doc_ids : iterable or None
        One document id per sentence (an iterator too), each document's sentences consecutive;
        checked as they are read (:func:`with_doc_ids`); ``None``: one document.
    size : int
        Context wanted on each side, ``>= 1``.

    Yields
    ------
    InContext
        An empty sentence with no context (it has no rows, and needs none).
    """
    waiting: deque[_Waiting] = deque()
    before: deque[str] = deque(maxlen=size)
    current: object = _START
    for words, doc in with_doc_ids(sentences, doc_ids):
        if current is _START or doc != current:  # a new document: the text before is not its own
            yield from _finished(waiting, size, everything=True)
            before.clear()
            current = doc
        if len(words):
            for item in waiting:
                if len(item.right) < size:
                    item.right.extend(words[: size - len(item.right)])
        waiting.append(_Waiting(words, tuple(before) if len(words) else ()))
        before.extend(words)
        yield from _finished(waiting, size)
    yield from _finished(waiting, size, everything=True)


_START = object()
#: what ``next`` gives past the last document id
_END = object()


def with_doc_ids(sentences: Iterable, doc_ids: Optional[Iterable]) -> Iterator[tuple[Sequence[str], object]]:
    """Each sentence with its document id, in order (``None`` for every sentence without ``doc_ids``).

    The sentences are checked a chunk at a time (:func:`~contextembed._inputs.sentences.check_sentence_chunks`),
    the ids one at a time as they are read (:func:`checked_doc_ids`), and their count where the
    shorter of the two ends: an iterator of either is read as it goes.

    Raises
    ------
    ValueError
        Where the ids end before the sentences, or go on after them (naming the position), and for
        the errors of :func:`checked_doc_ids`.
    TypeError
        As :func:`checked_doc_ids`.
    """
    sentences = (words for chunk in check_sentence_chunks(sentences, CHUNK) for words in chunk)
    if doc_ids is None:
        yield from ((words, None) for words in sentences)
        return
    ids = checked_doc_ids(doc_ids, "sentences")
    n = 0
    for sentence in sentences:
        doc = next(ids, _END)
        if doc is _END:
            raise ValueError(f"doc_ids holds {n} id{'' if n == 1 else 's'} but there are more sentences: sentence {n} "
                             "has no document id; pass one document id per sentence (sentences of one document share it)")
        yield sentence, doc
        n += 1
    if next(ids, _END) is not _END:
        raise ValueError(f"doc_ids holds more ids than the {n} sentences: doc_ids[{n}] has no sentence; pass one "
                         "document id per sentence")


def checked_doc_ids(doc_ids: Iterable, where: str) -> Iterator:
    """The ids of ``doc_ids`` one after the other, each checked as it is read: any hashable value but a
    bool names a document (a str, an int, a tuple), and the sentences of one document are consecutive
    in ``where`` (what the ids go with: ``"X"``, ``"sentences"``), in their order in the document.

    Raises
    ------
    TypeError
        For a single string, or anything that cannot be iterated; naming its index, for an id that
        is a bool or cannot be hashed (a list, a dict).
    ValueError
        Naming its index, for an id that stands for a missing one (``None``, NaN), or one whose
        document already ended (a document split apart).
    """
    if isinstance(doc_ids, (str, bytes)) or not hasattr(doc_ids, "__iter__"):
        what = "a single string" if isinstance(doc_ids, (str, bytes)) else f"{type(doc_ids).__name__} ({doc_ids!r:.40})"
        raise TypeError(f"doc_ids is {what}; expected one document id (e.g. a str or int) per sentence")
    last_of: dict = {}  # the last sentence of every document that ended
    previous = _START
    for i, value in enumerate(doc_ids):
        _check_doc_id(value, i)
        if previous is not _START and value != previous:
            last_of[previous] = i - 1
            if value in last_of:
                raise ValueError(f"doc_ids[{i}] is {value!r}, a document that already ended at sentence "
                                 f"{last_of[value]}: the sentences of one document must be consecutive in {where} "
                                 "(keep each document's sentences together, in their order)")
        previous = value
        yield value


def _check_doc_id(value, i: int) -> None:
    if is_missing(value):
        raise ValueError(f"doc_ids[{i}] is {value!r}, a missing document id; give every sentence its document's id")
    if isinstance(value, (bool, np.bool_)):  # a mask passed by mistake; and True would be the document 1
        raise TypeError(f"doc_ids[{i}] is bool ({value!r}); expected a document id such as a str, an int or a tuple")
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"doc_ids[{i}] is {type(value).__name__} ({str(value)[:40]!r}), which is not hashable; a "
                        "document id is a value such as a str, an int or a tuple") from None


def is_missing(value) -> bool:
    """Whether ``value`` stands for a missing one: None, a NaN float, NumPy's NaT, or pandas' ``NA`` /
    ``NaT`` (pandas is not imported)."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return True
    if isinstance(value, np.datetime64):
        return bool(np.isnat(value))
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and math.isnan(value)


def check_in_context(items: Iterable) -> Iterator[InContext]:
    """``items`` one after the other, each checked to be an :class:`InContext` (what :func:`in_context`
    yields) as it is read, so that an iterator stays one.

    Raises
    ------
    TypeError
        Naming the first item that is not one, and what makes them.
    """
    for i, item in enumerate(items):
        if not isinstance(item, InContext):
            raise TypeError(f"item {i} is a {type(item).__name__}; encoding in context takes the InContext items that "
                            "contextembed._inputs.documents.in_context(sentences, doc_ids, size) yields (plain sentences are "
                            "encoded without in_context)")
        yield item


def _finished(waiting: deque, size: int, everything: bool = False) -> Iterator[InContext]:
    """The sentences at the front of ``waiting`` whose right context is complete (or all of them:
    the document ended), in order."""
    while waiting and (everything or waiting[0].done(size)):
        item = waiting.popleft()
        right = tuple(item.right) if len(item.words) else ()
        yield InContext(item.words, item.left, right, size)


def check_context_value(context) -> int:
    """``context`` if it is a number of pieces (an int ``>= 0``), before any encoder is known
    (:func:`check_context` then bounds it by the encoder's input size).

    Raises
    ------
    TypeError
        ``context`` is not an int (a bool, a float, a string).
    ValueError
        ``context`` is negative.
    """
    if isinstance(context, bool) or not isinstance(context, numbers.Integral):
        raise TypeError(f"context must be a whole number of pieces (an int >= 0), got {context!r} "
                        f"({type(context).__name__})")
    if context < 0:
        raise ValueError(f"context={context}: expected a number of pieces >= 0 (0: each sentence alone)")
    return context


def check_context(context, encoder) -> int:
    """``context`` as a number of pieces ``encoder`` can add on each side of a sentence.

    Parameters
    ----------
    context : int
        ``>= 0``; 0 (no context) is accepted for every encoder.
    encoder : Encoder
        The loaded encoder; its :attr:`~contextembed.encoders._base.Encoder.max_context` bounds
        ``context`` (and refuses encoders that cannot take any).

    Raises
    ------
    TypeError
        ``context`` is not an int (a bool, a float, a string).
    ValueError
        ``context`` is negative, larger than one model input holds, or given to an encoder that
        takes no context (static vectors, ELMo).
    """
    if check_context_value(context) == 0:
        return 0
    limit = encoder.max_context
    if context > limit:
        raise ValueError(f"context={context} pieces is more than the model takes: the encoder "
                         f"{encoder.spec or encoder.family!r} holds {limit} pieces per input besides its special "
                         f"tokens (the sentence's own included); use context <= {limit}")
    return int(context)


__all__ = ["InContext", "check_context", "check_context_value", "check_in_context", "checked_doc_ids", "in_context",
           "is_missing", "with_doc_ids"]
