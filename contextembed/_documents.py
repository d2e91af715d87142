"""Sentences inside their documents: the words around each sentence that document context adds.

BERT's feature-based NER (Table 7) encoded each sentence inside its document's text and kept only
its own tokens. ``context=N`` does the same: each sentence is encoded with up to ``N`` pieces of the
text before it and ``N`` after it in its document, in the one model input it shares with them
(:func:`contextembed._alignment.split_context` says how the room is shared when it is short), and
only its own words' rows come out: one row per input word, as without context.

Documents are runs of consecutive sentences with the same document id (``doc_ids``: one per
sentence, like scikit-learn's ``groups``); without ids the whole input is one document. Context
never crosses a document boundary. An empty sentence has no words: it gives no rows and adds
nothing to its neighbours' context (their neighbours are the nearest sentences with words).

Context is counted in pieces, but every word has at least one piece
(:mod:`contextembed._alignment`), so the ``N`` words on each side of a sentence hold every piece its
context can take. :class:`InContext` carries those words, which the encoder cuts to ``N`` pieces;
they are also what names the encoding in a cache (the same sentence among other neighbours is
another encoding).

Only transformers take context (:attr:`contextembed.encoders._base.Encoder.max_context`): a static
vector is the same whatever the words around it, and ELMo, whose biLSTM reads words, is refused
with a clear error rather than counted in other units.
"""

from __future__ import annotations

import itertools
import numbers
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Optional

from ._sentences import check_sentence_chunks

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
        Checked here (:func:`~contextembed._sentences.check_sentence_chunks`); an iterator is read
        one chunk at a time, holding besides it only the sentences still waiting for ``size`` words
        after them.
    doc_ids : iterable or None
        One document id per sentence, each document's sentences consecutive (checked by the caller:
        :func:`contextembed.sklearn._checks.check_doc_ids`); ``None``: one document.
    size : int
        Context wanted on each side, ``>= 1``.

    Yields
    ------
    InContext
        An empty sentence with no context (it has no rows, and needs none).
    """
    ids = itertools.repeat(None) if doc_ids is None else iter(doc_ids)
    waiting: deque[_Waiting] = deque()
    before: deque[str] = deque(maxlen=size)
    current: object = _START
    for chunk in check_sentence_chunks(sentences, CHUNK):
        for words in chunk:
            doc = next(ids)
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
                            "contextembed._documents.in_context(sentences, doc_ids, size) yields (plain sentences are "
                            "encoded without in_context)")
        yield item


def _finished(waiting: deque, size: int, everything: bool = False) -> Iterator[InContext]:
    """The sentences at the front of ``waiting`` whose right context is complete (or all of them:
    the document ended), in order."""
    while waiting and (everything or waiting[0].done(size)):
        item = waiting.popleft()
        right = tuple(item.right) if len(item.words) else ()
        yield InContext(item.words, item.left, right, size)


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
    if isinstance(context, bool) or not isinstance(context, numbers.Integral):
        raise TypeError(f"context must be a whole number of pieces (an int >= 0), got {context!r} "
                        f"({type(context).__name__})")
    if context < 0:
        raise ValueError(f"context={context}: expected a number of pieces >= 0 (0: each sentence alone)")
    if context == 0:
        return 0
    limit = encoder.max_context
    if context > limit:
        raise ValueError(f"context={context} pieces is more than the model takes: the encoder "
                         f"{encoder.spec or encoder.family!r} holds {limit} pieces per input besides its special "
                         f"tokens (the sentence's own included); use context <= {limit}")
    return int(context)


__all__ = ["InContext", "check_context", "check_in_context", "in_context"]
