"""Pre-tokenized sentences, the input of every encoder, and the one check they all pass through."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Optional

#: a batch of pre-tokenized sentences: one list of str tokens per sentence
Sentences = Sequence[Sequence[str]]
#: a batch of pre-tokenized sentence pairs: ``(first tokens, second tokens)`` per pair
Pairs = Sequence[tuple[Sequence[str], Sequence[str]]]


def check_sentences(sentences: object) -> Sentences:
    """Validate a batch of pre-tokenized sentences; return it as a list.

    Raises
    ------
    TypeError
        If ``sentences`` or one of its sentences is a plain string or not a sequence, or a word is
        not a ``str``; the message names the sentence and word index.
    ValueError
        If a word holds a character that cannot be encoded as UTF-8 (a lone surrogate such as
        ``"\\ud800"``, e.g. from text decoded with ``errors="surrogateescape"``); the message
        names the sentence, word and character position.
    """
    if isinstance(sentences, (str, bytes)):
        raise TypeError(
            "expected a list of tokenized sentences (list of list of str), got a single string; "
            "pass [text.split()] or tokenize it first"
        )
    if not isinstance(sentences, Iterable):
        raise TypeError(f"expected a list of tokenized sentences, got {type(sentences).__name__}")
    checked = list(sentences)
    if _all_words_fine(checked):
        return checked
    for i, sentence in enumerate(checked):
        _check_tokens(sentence, f"sentence {i}")
    return checked


def _all_words_fine(sentences: list) -> bool:
    """Whether every sentence is a list or tuple of str that UTF-8 encodes, checked at once in C; the
    sentence-by-sentence check names what is wrong where this says no."""
    if not all(type(sentence) is list or type(sentence) is tuple for sentence in sentences):
        return False
    try:
        "".join(chain.from_iterable(sentences)).encode("utf-8")
    except (TypeError, UnicodeEncodeError):
        return False
    return True


def check_sentence_chunks(sentences: object, size: int) -> Iterator[list[Sequence[str]]]:
    """:func:`check_sentences` in consecutive lists of at most ``size`` sentences, for encoders that
    stream their input.

    An iterator (a generator, ``map(str.split, lines)``, ``iter(...)``) is read and checked one
    chunk at a time, so at most ``size`` of its sentences are held at once; an error names the
    sentence's index in the whole input (the sentences before it have been yielded). Anything else
    (a list, a tuple) goes through :func:`check_sentences` whole before the first chunk.

    Raises
    ------
    TypeError, ValueError
        As :func:`check_sentences`.
    """
    if not isinstance(sentences, Iterator):
        checked = check_sentences(sentences)
        for begin in range(0, len(checked), size):
            yield checked[begin : begin + size]
        return
    first = 0
    while chunk := list(islice(sentences, size)):
        if not _all_words_fine(chunk):
            for i, sentence in enumerate(chunk, start=first):
                _check_tokens(sentence, f"sentence {i}")
        first += len(chunk)
        yield chunk


def _check_tokens(sentence: object, where: str) -> None:
    """One token list: a sequence (not a string) of str that UTF-8 can encode."""
    kind = type(sentence)
    if kind is not list and kind is not tuple:  # the common kinds skip the slower ABC check
        if isinstance(sentence, (str, bytes)):
            raise TypeError(
                f"{where} is a plain string ({_preview(sentence)}); expected a list of tokens, e.g. text.split()"
            )
        if not isinstance(sentence, Sequence):
            raise TypeError(f"{where} is a {type(sentence).__name__}; expected a list of str tokens")
    try:
        "".join(sentence)  # a word that is not a str fails here, in C; the loop below names it
    except TypeError:
        for j, word in enumerate(sentence):
            if not isinstance(word, str):
                raise TypeError(
                    f"{where}, word {j} is {type(word).__name__} ({_preview(word)}); every token must be a str"
                ) from None
        raise
    check_encodable(sentence, where)


def check_pairs(pairs: object) -> list[tuple[Sequence[str], Sequence[str]]]:
    """Validate a batch of pre-tokenized sentence pairs; return it as a list of 2-tuples.

    Raises
    ------
    TypeError
        If the batch is not a list, a pair is not a 2-sequence (``None``, a string, one side only),
        or a side is not a token list; the message names the pair (and side and word).
    ValueError
        If a word cannot be encoded as UTF-8 (see :func:`check_sentences`).
    """
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise TypeError(f"expected a list of (first, second) sentence pairs, got {type(pairs).__name__}")
    checked = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(
                f"pair {i} is {_preview(pair)}; expected a (first, second) pair of token lists"
            )
        for side, tokens in enumerate(pair):
            _check_tokens(tokens, f"pair {i}, side {side}")
        checked.append((pair[0], pair[1]))
    return checked


def check_encodable(words: Sequence[str], where: str, *, unit: str = "word") -> None:
    """Raise ``ValueError`` if a word cannot be encoded as UTF-8 (lone surrogates).

    ``where`` names the container (``"sentence 3"``); the message adds the word index and the
    character's position.
    """
    try:
        "".join(words).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    for j, word in enumerate(words):
        position = unencodable_position(word)
        if position is not None:
            raise ValueError(
                f"{where}, {unit} {j} ({_preview(word)}) holds {word[position]!r} at character {position}, "
                "a lone surrogate that cannot be encoded as UTF-8 (text decoded with "
                "errors='surrogateescape'?); decode the input as UTF-8 or remove the character"
            )


def unencodable_position(text: str) -> Optional[int]:
    """Index of the first character of ``text`` that UTF-8 cannot encode, or ``None``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def _preview(text, limit: int = 40) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "Pairs", "Sentences", "check_encodable", "check_pairs", "check_sentence_chunks", "check_sentences",
    "unencodable_position",
]
