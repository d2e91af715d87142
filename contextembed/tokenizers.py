"""Word tokenizers for raw text: the one registry that the CLI and the estimators share.

``"auto"`` / ``"regex"``  words (with inner hyphens, apostrophes and periods; a word keeps its
                          combining marks, joiners and invisible characters) and single punctuation
                          marks or symbols (a symbol keeps its modifiers: one emoji sequence is one
                          token); suits static vectors and subword encoders alike
``"whitespace"``          runs of white space
``"spacy"``               spaCy's rule-based tokenizer of a blank English pipeline (no download)

A tokenizer is a callable ``str -> list[str]``; the estimators also take any such callable.
"""

from __future__ import annotations

import itertools
import re

import regex
from collections.abc import Callable
from functools import lru_cache
from typing import Union

from ._inputs.sentences import unencodable_position

Tokenizer = Callable[[str], list[str]]
_INNER = "[-'’.]"
#: invisible characters: the format characters (a soft hyphen, zero-width spaces and joiners, the
#: bidirectional marks, a BOM: Unicode's ``Cf``) and the controls that are not white space to
#: ``\s`` (the information separators U+001C..U+001F among them, which ``str.split`` splits at but
#: Unicode and the models' pre-tokenizers do not). A BERT normaliser removes them and a byte-level
#: one keeps them inside the word they touch, so they belong to that word (or punctuation mark);
#: standing alone they are nothing, as white space is
_INVISIBLE = r"[\p{Cf}\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]"
_ASCII_INVISIBLE = r"[\x00-\x08\x0e-\x1f\x7f]"


def _word_or_punct(word: str, symbol: str, invisible: str = "") -> str:
    """A word (a run of ``word`` characters, joined by inner hyphens, apostrophes and periods) or
    one punctuation mark or symbol (``symbol``, not white space). With ``invisible``, those
    characters join the word or mark they touch: a word is a run of word and invisible characters
    that holds a word character, a mark takes those after it, and each those before it."""
    if not invisible:
        return rf"{word}+(?:{_INNER}{word}+)*|(?!\s){symbol}"
    run = rf"{word}+(?:{invisible}+{word}*)*"
    return rf"{invisible}*(?:{run}(?:{_INNER}{invisible}*{run})*|(?!\s|{invisible}){symbol}{invisible}*)"


#: ASCII text: a word is a run of [A-Za-z0-9_], any other character but white space is a token;
#: the plain expression is the rule where no invisible character occurs (``str.isprintable()``)
_ASCII_PLAIN_FINDALL = re.compile(_word_or_punct(r"\w", "."), re.ASCII | re.DOTALL).findall
_ASCII_FINDALL = re.compile(_word_or_punct(r"\w", ".", _ASCII_INVISIBLE), re.ASCII | re.DOTALL).findall
#: any text: a word character is what ``re``'s ``\w`` holds (letters, digits, numbers such as "²")
#: and the combining marks (an NFD "é", a Devanagari vowel sign) that the ``regex`` module's ``\w``
#: adds (its joiners U+200C and U+200D are invisible characters here); a symbol is one grapheme
#: cluster, ``\X`` (an emoji with its modifiers and joiners). Printable text holds no joiner.
_PLAIN_FINDALL = regex.compile(_word_or_punct(r"[\w\p{N}]", r"\X")).findall
_FINDALL = regex.compile(_word_or_punct(r"(?:[^\W\u200c\u200d]|\p{N})", r"\X", _INVISIBLE)).findall


def regex_tokenize(text: str) -> list[str]:
    """Words (with inner hyphens, apostrophes and periods) and single punctuation marks or symbols.

    A word keeps its combining marks and zero-width joiners, so a text tokenizes the same way in
    NFC and NFD, and a symbol keeps its modifiers (``"👍🏽"`` and a family emoji joined by
    U+200D are one token each). An invisible character (a soft hyphen, a zero-width space, a
    bidirectional mark, a BOM, a control that is not white space) stays in the word or mark it
    touches (``"co\\u00adoperate"`` is one word, which a BERT tokenizer reads as ``cooperate``);
    one that touches none is skipped as white space is. Text without invisible characters (every
    character printable) takes the plain expression, and ASCII text the standard library's faster
    ``re``, with the same result.
    """
    if not text.isascii():
        return (_PLAIN_FINDALL if text.isprintable() else _FINDALL)(text)
    if "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text:
        return _ASCII_FINDALL(text)
    # no match crosses white space, so the expression may run on each run of the rest, and a run of
    # letters and digits alone is one word; str.split() splits ASCII text where ``\s`` does and also
    # at the four information separators, which the expression keeps inside words (handled above)
    tokens: list[str] = []
    for part in text.split():
        if part.isalnum():
            tokens.append(part)
        else:
            tokens += (_ASCII_PLAIN_FINDALL if part.isprintable() else _ASCII_FINDALL)(part)
    return tokens


def whitespace_tokenize(text: str) -> list[str]:
    """Split on runs of white space."""
    return text.split()


def spacy_tokenizer(language: str = "en") -> Tokenizer:
    """spaCy's rule-based tokenizer for ``language`` (a blank pipeline: no model download)."""
    import spacy

    tokenizer = spacy.blank(language).tokenizer
    return lambda text: [token.text for token in tokenizer(text) if not token.is_space]


#: name -> factory of the tokenizer (built on first use)
TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "auto": lambda: regex_tokenize,
    "regex": lambda: regex_tokenize,
    "whitespace": lambda: whitespace_tokenize,
    "spacy": spacy_tokenizer,
}


@lru_cache(maxsize=None)
def _named(name: str) -> Tokenizer:
    return TOKENIZERS[name]()


def get_tokenizer(tokenizer: Union[str, Tokenizer]) -> Tokenizer:
    """The tokenizer a name in :data:`TOKENIZERS` stands for, or ``tokenizer`` itself if callable."""
    if callable(tokenizer):
        return tokenizer
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer={tokenizer!r} is not one of {', '.join(map(repr, TOKENIZERS))} or a callable")
    return _named(tokenizer)


def tokenize_item(item, split: Tokenizer, where: str) -> list[str]:
    """One text as tokens: a str is split, a list of str tokens is kept; anything else is an error.

    Raises
    ------
    TypeError
        ``item`` is neither, a token is not a ``str``, or the tokenizer returned something else;
        the message names ``where`` (``"text 3"``, ``"pair 3, side 1"``) and the token.
    ValueError
        A character UTF-8 cannot encode (a lone surrogate), with its position.
    """
    from ._inputs.sentences import check_encodable

    if isinstance(item, str):
        position = unencodable_position(item)
        if position is not None:
            raise ValueError(
                f"{where} holds {item[position]!r} at character {position}, a lone surrogate that cannot be "
                "encoded as UTF-8; decode the input as UTF-8 or remove the character"
            )
        return _checked_tokens(split(item), where)
    if isinstance(item, (list, tuple)):
        for j, token in enumerate(item):
            if not isinstance(token, str):
                raise TypeError(f"{where}, token {j} is {type(token).__name__} ({str(token)[:40]!r}); every token must be a str")
        check_encodable(item, where, unit="token")
        return list(item)
    raise TypeError(f"{where} is {type(item).__name__} ({str(item)[:40]!r}); expected a str or a list of str tokens")


def _checked_tokens(tokens, where: str) -> list[str]:
    """What a tokenizer returned for ``where``: a list (or tuple) of str, else a ``TypeError`` naming
    what it returned or its first token that is not a str (index, type and value)."""
    if not isinstance(tokens, (list, tuple)):
        raise TypeError(f"the tokenizer returned {type(tokens).__name__} for {where}; a tokenizer must return a list of "
                        "str tokens")
    for j, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"the tokenizer returned a {type(tokens).__name__} for {where} whose token {j} is "
                            f"{type(token).__name__} ({repr(token)[:40]}); a tokenizer must return a list of str tokens")
    return list(tokens)


#: the tokenizers that always return a list of str (what :func:`tokenize_item` checks of any other)
_RETURN_STR_LISTS = (regex_tokenize, whitespace_tokenize)


def tokenize_items(items: list, split: Tokenizer, what: str) -> list[list[str]]:
    """:func:`tokenize_item` of every item, ``where`` being ``f"{what} {i}"``, with the same results
    and errors.

    The common case, raw strings that UTF-8 can encode split by :func:`regex_tokenize` or
    :func:`whitespace_tokenize`, is checked for all items at once (a string encodes if and only if
    none of its characters is a lone surrogate, so the joined strings encode if and only if each
    does) and split without checking what the tokenizer returned.
    """
    if split in _RETURN_STR_LISTS and all(map(isinstance, items, itertools.repeat(str))):
        if unencodable_position("".join(items)) is None:
            return list(map(split, items))
    return [tokenize_item(item, split, f"{what} {i}") for i, item in enumerate(items)]


__all__ = ["TOKENIZERS", "Tokenizer", "get_tokenizer", "regex_tokenize", "spacy_tokenizer", "tokenize_item",
           "tokenize_items", "whitespace_tokenize"]
