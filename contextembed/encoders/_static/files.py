"""Vector files: word2vec (text and binary), GloVe ``.txt``, fastText ``.vec``: detecting, reading, writing.

The file formats of :class:`~contextembed.encoders._static.vectors.StaticVectors`, apart from the encoder:
:func:`read_vectors` gives the words and the ``(vocab, width)`` table of a file, :func:`sniff_format`
its format, :func:`write_word2vec` writes one. ``StaticVectors.load`` reads through them.

Reading files
-------------
The readers are strict: a file either loads exactly as written or raises
:class:`~contextembed.errors.FileFormatError` (a ``ValueError``) naming the file and the line (text)
or entry index (binary) at fault. Nothing is skipped, guessed or silently repaired.

Format detection
    By content, never by file name. The first MiB is inspected. A first line of two integers
    ``count width`` is a header; the bytes after it are tried both as text rows (``word v1 ... vd``
    with ``width`` numbers) and as word2vec binary entries (``word<space>`` then ``width``
    little-endian float32, optionally followed by a newline); text wins when both fit, and when
    some rows parse as text and others not (both only conceivable for widths of 1 or 2, where a
    damaged text file could otherwise pass for binary). Without a header the file must be GloVe
    text; a first line of two integers is always read as a header unless ``format="glove"`` says
    it is the first row of a width-1 GloVe file (``"1999 5"``). When neither fits,
    a text-looking file (no control bytes) is read as text and a binary-looking one as binary, so
    that the reader names the exact line or entry; random bytes, an empty file and a file holding
    only a header are errors. An explicit ``format=`` that the content contradicts is an error
    saying what the content looks like. A leading UTF-8 byte-order mark is ignored in text files.
Widths and words with spaces
    Every row must hold a word and exactly ``width`` numbers: the header's width, or for GloVe the
    number of numeric fields that end the first row. Fields are separated by single spaces (tabs
    and other characters belong to the word; trailing white space ends a row). Words with spaces
    exist (GloVe 840B has ``". . ."`` and ``"at name@domain.com"``): a row with more than
    ``width + 1`` fields is read as a word made of the leading fields joined by single spaces
    **only if none of those fields after the first parses as a number** (``float()``, ``nan`` and
    ``inf`` included); otherwise the row has numbers too many and is an error. The first field is
    always the word, so numeric words (``"1999"``, ``"nan"``) load fine. A row with fewer fields,
    an empty word (a row starting with a space), a value that is not a number, and a ``nan`` or
    ``inf`` value are errors; so is a blank line followed by more rows (blank lines may only end
    the file). A text header must agree with the file: exactly ``count`` rows of ``width`` numbers.
    A binary file must hold exactly ``count`` entries of ``width`` float32; it may not end early
    (the error names the entry) nor carry anything but white space after the last entry.
Duplicates
    Every row is read, a repeated word's included, in file order; ``StaticVectors`` looks up the
    first occurrence and warns once per file, naming the rows by :attr:`VectorsFile.row_name`.
Encodings
    Words are UTF-8. A word that is not valid UTF-8 is an error by default; files known to hold
    broken bytes (the GoogleNews word2vec vectors) load with ``unicode_errors="replace"`` (U+FFFD
    for each bad byte) or ``"ignore"`` (bad bytes dropped), passed to :func:`read_vectors`,
    ``StaticVectors.load`` or :func:`contextembed.load_encoder`.

Writing files
-------------
:func:`write_word2vec` writes to a temporary name beside the target and renames it when complete.
Text values are written as the shortest decimal that reads back as the same float32 bits (Python's
``repr`` of the value), so both formats round-trip exactly. Words that would not read back as
written are refused with a ``ValueError`` naming their index: empty words, words with ASCII white
space in binary files (word2vec's readers split on it), and in text files words with a line break,
with leading or trailing white space, or with a space followed by something that parses as a
number (ambiguous by the width rule above).

Modules
-------
This module holds what callers use: :func:`read_vectors`, :func:`sniff_format` (detection, which
tries each format's rules on the first MiB), :func:`write_word2vec` and :func:`check_table`. Each
format's reader is below it: the text formats, with what every format reads the same way (the
header line, words as UTF-8), in :mod:`contextembed.encoders._static.text_files`; word2vec binary in
:mod:`contextembed.encoders._static.binary_files`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Literal, NamedTuple, Optional, Union

import numpy as np

from ..._runtime.files import atomic_file
from ...errors import FileFormatError
from ..._inputs.options import check_choice
from .binary_files import _binary_entries_fit, _read_binary
from .text_files import (_BLOCK_ROWS, _BOM, UnicodeErrors, _has_numbers, _header_of, _is_number, _looks_like_text,
                         _read_text, _shown, _text_rows)

StaticFormat = Literal["word2vec", "word2vec-binary", "glove"]

#: what each format looks like, for error messages
FORMAT_DESCRIPTIONS: dict[str, str] = {
    "word2vec": "word2vec / fastText text (a 'count width' header, then 'word v1 ... vd' rows)",
    "word2vec-binary": "word2vec binary (a 'count width' header, then words and raw float32 values)",
    "glove": "GloVe text ('word v1 ... vd' rows, no header)",
}

#: how much of a file format detection reads
_SNIFF_BYTES = 1 << 20
#: white space that word2vec's binary readers treat as the end of a word
_ASCII_SPACE = frozenset(" \t\n\r\x0b\x0c")


class VectorsFile(NamedTuple):
    """What :func:`read_vectors` read: every row of the file, in order, duplicates included."""

    words: list[str]
    #: ``(vocab, width)`` float32, finite
    vectors: np.ndarray
    #: where row ``i`` is in the file, for messages (``"line 3"``, ``"entry 2"``)
    row_name: Callable[[int], str]


def read_vectors(
    path: Union[str, os.PathLike], format: Optional[StaticFormat] = None, *, unicode_errors: UnicodeErrors = "strict"
) -> VectorsFile:
    """Read a vectors file: word2vec text or binary, fastText ``.vec`` or GloVe.

    Parameters
    ----------
    path : str or path
        The file. Its format is detected from its content (see the module docstring), never
        from its name.
    format : {"word2vec", "word2vec-binary", "glove"}, optional
        Insist on a format; an error if the content says otherwise.
    unicode_errors : {"strict", "replace", "ignore"}
        What to do with a word that is not valid UTF-8: raise (default), replace each bad byte
        with U+FFFD, or drop the bad bytes.

    Raises
    ------
    FileFormatError
        For any file that breaks its format; the message names the file and the line or entry.
    ValueError
        For a ``format`` or ``unicode_errors`` that is none of the choices.
    """
    path = os.fspath(path)
    _check_options(format, unicode_errors)
    detected = _sniff(path)
    if format is None:
        format = detected[0]
    elif format not in detected:
        raise FileFormatError(
            f"format={format!r} does not match the content, which looks like "
            f"{FORMAT_DESCRIPTIONS[detected[0]]}; pass format={detected[0]!r} or leave format unset",
            path=path,
        )
    words, vectors = _READERS[format](path, unicode_errors=unicode_errors)
    return VectorsFile(words, vectors, _ROW_NAMES[format])


def _check_options(format: Optional[StaticFormat], unicode_errors: UnicodeErrors) -> None:
    """``ValueError`` unless ``format`` (or ``None``) and ``unicode_errors`` are among their choices."""
    if format is not None:
        check_choice("format", format, StaticFormat)
    check_choice("unicode_errors", unicode_errors, UnicodeErrors)


def check_table(words: list, vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors`` as float32 after checking its shape against ``words`` and its values."""
    for i, word in enumerate(words):
        if not isinstance(word, str):
            raise TypeError(f"words[{i}] is {word!r} of type {type(word).__name__}; every word must be a str")
    with np.errstate(over="ignore"):
        vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(words) or vectors.shape[1] < 1:
        raise ValueError(
            f"vectors must be (vocab, width) with vocab={len(words)} rows (one per word) and width >= 1, "
            f"got shape {vectors.shape}"
        )
    finite = np.isfinite(vectors)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise ValueError(
            f"vectors must be finite: row {row} (word {words[row]!r}) holds {vectors[row, column]} at column "
            f"{column} (values beyond float32's range become inf); replace or drop that row"
        )
    return vectors


# -- format detection -------------------------------------------------------------------------


def sniff_format(path: Union[str, os.PathLike]) -> StaticFormat:
    """The format of the vectors file ``path``, detected from its content (see the module docstring).

    Raises
    ------
    FileFormatError
        For an empty file, a file holding only a header, or one that is none of the formats.
    """
    return _sniff(os.fspath(path))[0]


def _sniff(path: str) -> tuple[StaticFormat, ...]:
    """The formats the start of ``path`` is consistent with, the most likely first (never empty)."""
    with open(path, "rb") as handle:
        head = handle.read(_SNIFF_BYTES)
    complete = len(head) < _SNIFF_BYTES
    if not head.strip():
        raise FileFormatError(
            "the file is empty (or only white space); expected word vectors in one of the formats: "
            + "; ".join(FORMAT_DESCRIPTIONS.values()),
            path=path,
        )
    text = head.removeprefix(_BOM)
    lines = text.split(b"\n")
    if not complete:
        lines.pop()  # may be cut short
    first, _, body = head.partition(b"\n")
    header = _header_of(first.removeprefix(_BOM))
    if header is None:
        if any(_text_rows(lines, None)) or _looks_like_text(text):
            return ("glove",)  # a malformed text file: the reader names the line
        raise FileFormatError(
            "the content is none of the formats: its first line is no 'count width' header (word2vec) "
            f"and no 'word v1 ... vd' row (GloVe); it starts with {_shown(head, 40)}",
            path=path,
        )
    if not body.strip():
        raise FileFormatError(
            f"the file holds only a header ({first.strip().decode()!r}) and no vectors", path=path
        )
    count, width = header
    text_rows = _text_rows(lines[1:], width)
    if any(text_rows) and not all(text_rows):
        # a text file with a bad row, even where its bytes happen to fit binary entries (widths of 1
        # or 2): the text reader names the row
        fits: tuple[StaticFormat, ...] = ("word2vec", "word2vec-binary")
    elif any(text_rows):
        fits = ("word2vec",) + ("word2vec-binary",) * _binary_entries_fit(body, count, width, complete)
    elif _binary_entries_fit(body, count, width, complete) and not (
        _looks_like_text(body, utf8=True, complete=complete) and _has_numbers(lines[1:])
    ):
        # (a truncated or damaged text file can happen to fit binary entries: control-free UTF-8 with
        # numbers after its words goes to the text reader, which names the line; a few binary
        # vectors can be control-free too, e.g. b"!KE[", but then they hold no number field)
        fits = ("word2vec-binary",)
    else:  # neither parses: let the likelier reader report the exact line or entry
        fits = ("word2vec", "word2vec-binary") if _looks_like_text(body) else ("word2vec-binary", "word2vec")
    if all(_text_rows(lines, None)):
        # the first line may also be a row of a width-1 GloVe file ("1999 5"): read so only when asked
        fits += ("glove",)
    return fits


# -- readers ----------------------------------------------------------------------------------


_READERS: dict[str, Callable[..., tuple[list[str], np.ndarray]]] = {
    "word2vec": partial(_read_text, has_header=True),
    "glove": partial(_read_text, has_header=False),
    "word2vec-binary": _read_binary,
}

#: where row ``i`` of each format is, for messages
_ROW_NAMES: dict[str, Callable[[int], str]] = {
    "word2vec": lambda i: f"line {i + 2}",
    "glove": lambda i: f"line {i + 1}",
    "word2vec-binary": lambda i: f"entry {i}",
}


# -- writer -----------------------------------------------------------------------------------


def _unwritable_reason(word: object, binary: bool) -> Optional[str]:
    """Why ``word`` would not read back exactly from a word2vec file (``None`` if it would).

    Binary: not a ``str``, empty, holding ASCII white space, or not encodable as UTF-8. Text:
    not a ``str``, empty, holding a line break, with leading or trailing white space, with a part
    after a space that parses as a number, or not encodable as UTF-8.
    """
    if not isinstance(word, str):
        return f"is a {type(word).__name__}, not a str"
    if not word:
        return "is empty"
    try:
        word.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"cannot be encoded as UTF-8 ({error.reason})"
    if binary:
        if not _ASCII_SPACE.isdisjoint(word):
            return "holds white space, which ends a word in word2vec binary files"
        return None
    if "\n" in word or "\r" in word:
        return "holds a line break"
    if word != word.strip():
        return "has leading or trailing white space"
    for part in word.split(" ")[1:]:
        if _is_number(part.encode("utf-8")):
            return f"holds {part!r} after a space, which would read back as a number (ambiguous width)"
    return None


def write_word2vec(
    path: Union[str, os.PathLike], words: list[str], vectors: np.ndarray, binary: bool = False
) -> None:
    """Write vectors in word2vec text or binary format (readable by :func:`read_vectors`,
    ``StaticVectors.load`` and gensim).

    The file is written under a temporary name beside ``path`` and renamed when complete; it reads
    back exactly (text values are written with as many digits as float32 needs).

    Parameters
    ----------
    path : str or path
        The file; its directory must exist. An existing file is replaced.
    words : list of str
        One per row. Refused (they would not read back as written): empty words, words that are
        not encodable as UTF-8; in binary files, words holding ASCII white space; in text files,
        words holding a line break, with leading or trailing white space, or with a part after a
        space that parses as a number.
    vectors : np.ndarray
        ``(vocab, width)``, finite, written as float32.
    binary : bool
        word2vec binary instead of text.

    Raises
    ------
    ValueError
        For a word the format cannot hold (naming its index), non-finite values, a shape that does
        not match ``words``, or no words at all.
    """
    words = list(words)
    vectors = check_table(words, vectors)
    if not words:
        raise ValueError("no words to write: a word2vec file needs at least one vector")
    encoded = []
    for i, word in enumerate(words):
        reason = _unwritable_reason(word, binary)
        if reason is not None:
            kind = "binary" if binary else "text"
            raise ValueError(
                f"words[{i}] = {word!r} {reason}, so it would not read back from a word2vec {kind} file; "
                "rename it, or save with StaticVectors.save, which keeps any word"
            )
        encoded.append(word.encode("utf-8"))
    with atomic_file(path, what="vectors file") as temporary, open(temporary, "wb") as handle:
        handle.write(f"{len(words)} {vectors.shape[1]}\n".encode())
        for start in range(0, len(words), _BLOCK_ROWS):
            block = vectors[start : start + _BLOCK_ROWS]
            if binary:
                rows = [w + b" " + v.astype("<f4").tobytes() + b"\n" for w, v in zip(encoded[start:], block)]
            else:
                # repr of the float64 value is exact, and reads back as the same float32 bits
                rows = [w + b" " + " ".join(map(repr, v.tolist())).encode() + b"\n" for w, v in zip(encoded[start:], block)]
            handle.write(b"".join(rows))


__all__ = ["FORMAT_DESCRIPTIONS", "StaticFormat", "UnicodeErrors", "VectorsFile", "check_table", "read_vectors",
           "sniff_format", "write_word2vec"]
