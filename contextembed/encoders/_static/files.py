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
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from functools import partial
from typing import Literal, NamedTuple, Optional, Union

import numpy as np

from ..._runtime.files import atomic_file
from ...errors import FileFormatError
from ..._inputs.options import check_choice

StaticFormat = Literal["word2vec", "word2vec-binary", "glove"]
UnicodeErrors = Literal["strict", "replace", "ignore"]

#: what each format looks like, for error messages
FORMAT_DESCRIPTIONS: dict[str, str] = {
    "word2vec": "word2vec / fastText text (a 'count width' header, then 'word v1 ... vd' rows)",
    "word2vec-binary": "word2vec binary (a 'count width' header, then words and raw float32 values)",
    "glove": "GloVe text ('word v1 ... vd' rows, no header)",
}

_BOM = b"\xef\xbb\xbf"
#: how much of a file format detection reads
_SNIFF_BYTES = 1 << 20
#: how many rows or entries format detection checks
_SNIFF_ROWS = 20
#: text rows parsed by one vectorised call
_BLOCK_ROWS = 4096
#: bytes that never occur in a text vectors file (C0 controls other than tab, newlines, VT, FF)
_BINARY_BYTES = bytes(sorted(set(range(32)) - {9, 10, 11, 12, 13}))
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


def _header_of(line: bytes) -> Optional[tuple[int, int]]:
    """``(count, width)`` if ``line`` is two non-negative integers, else ``None``."""
    parts = line.split()
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    return None


def _looks_like_text(data: bytes, *, utf8: bool = False, complete: bool = True) -> bool:
    """No control bytes (and, with ``utf8``, valid UTF-8, allowing a character cut at the end of an
    incomplete head)."""
    if len(data.translate(None, _BINARY_BYTES)) != len(data):
        return False
    if not utf8:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return not complete and error.start >= len(data) - 3 and error.reason == "unexpected end of data"
    return True


def _text_rows(lines: list[bytes], width: Optional[int]) -> list[bool]:
    """For each of the first non-blank ``lines``: is it a text row of ``width`` numbers (``None``: GloVe's)?"""
    fits = []
    for line in [line.rstrip() for line in lines if line.strip()][:_SNIFF_ROWS]:
        fields = line.split(b" ")
        try:
            width = width or _glove_width(fields, "", 0)
            _split_word(fields, width, "", 0, "")
            with np.errstate(over="ignore"):
                np.array(fields[len(fields) - width :], dtype=np.float32)
        except ValueError:
            fits.append(False)
        else:
            fits.append(True)
    return fits


def _has_numbers(lines: list[bytes]) -> bool:
    """Whether one of the first non-blank ``lines`` has a number after its first field."""
    rows = [line.split() for line in lines if line.strip()][:_SNIFF_ROWS]
    return any(_is_number(field) for fields in rows for field in fields[1:])


def _binary_entries_fit(body: bytes, count: int, width: int, complete: bool) -> bool:
    """Whether ``body`` starts with word2vec binary entries (all of them when ``complete``)."""
    position = 0
    for _ in range(min(count, _SNIFF_ROWS)):
        position += body.startswith(b"\n", position)
        space = body.find(b" ", position)
        end = space + 1 + 4 * width
        if space < 0 or end > len(body):
            return not complete  # cut short by the sniffing window, or a truncated file
        if space == position or b"\n" in body[position:space]:
            return False
        position = end
    return count > _SNIFF_ROWS or not complete or not body[position:].strip()


# -- readers ----------------------------------------------------------------------------------


def _parse_header(line: bytes, path: str) -> tuple[int, int]:
    header = _header_of(line.removeprefix(_BOM))
    if header is None:
        raise FileFormatError(f"expected a 'count width' header, found {_shown(line, 60)}", path=path, line=1)
    if header[1] < 1:
        raise FileFormatError(f"the header {_shown(line.strip(), 60)} gives width 0; vectors need width >= 1", path=path, line=1)
    return header


def _is_number(field: bytes) -> bool:
    try:
        float(field.decode("utf-8", "replace"))
    except ValueError:
        return False
    return True


def _glove_width(fields: list[bytes], path: str, line: int) -> int:
    """The width of a header-less file: the numeric fields that end its first row."""
    start = len(fields)
    while start > 1 and _is_number(fields[start - 1]):
        start -= 1
    if start == len(fields):
        raise FileFormatError(
            f"expected 'word v1 ... vd' (GloVe) or a 'count width' header (word2vec), found no number "
            f"after {_shown(b' '.join(fields), 60)}",
            path=path,
            line=line,
        )
    return len(fields) - start


def _split_word(fields: list[bytes], width: int, path: str, line: int, source: str) -> bytes:
    """The word of a row (as bytes) by the width rule; ``FileFormatError`` if the row breaks it."""
    if not fields[0]:
        raise FileFormatError("the row starts with a space: empty word", path=path, line=line)
    cut = len(fields) - width
    if cut < 1:
        raise FileFormatError(
            f"expected a word and {width} numbers ({source}), found only {len(fields) - 1} field(s) after "
            f"the word {_shown(fields[0], 60)}",
            path=path,
            line=line,
        )
    for field in fields[1:cut]:
        if _is_number(field):
            raise FileFormatError(
                f"expected a word and {width} numbers ({source}), found {len(fields) - 1} fields after "
                f"{_shown(fields[0], 60)}; {_shown(field, 30)} parses as a number, so the row holds {cut - 1} "
                "number(s) too many rather than a word with spaces",
                path=path,
                line=line,
            )
    return b" ".join(fields[:cut])


def _decode_word(raw: bytes, unicode_errors: str, path: str, where: str, line: Optional[int] = None) -> str:
    try:
        return raw.decode("utf-8", unicode_errors)
    except UnicodeDecodeError as error:
        raise FileFormatError(
            f"{where}the word {_shown(raw, 60)} is not valid UTF-8 ({error.reason} at byte {error.start}); "
            "pass unicode_errors='replace' (or 'ignore') to load a file known to hold broken words, "
            "such as the GoogleNews word2vec vectors",
            path=path,
            line=line,
        ) from None


def _read_text(
    path: str, *, has_header: bool, unicode_errors: UnicodeErrors = "strict"
) -> tuple[list[str], np.ndarray]:
    """word2vec / fastText text (``count width`` header) or GloVe (none); ``word v1 ... vd`` rows.

    Streams the file line by line; the numbers of every :data:`_BLOCK_ROWS` rows are parsed by one
    vectorised call and checked for ``nan``/``inf`` together.
    """
    words: list[str] = []
    blocks: list[np.ndarray] = []
    pending: list[bytes] = []  # the number fields of the rows not parsed yet, row after row
    count, width, source = None, None, "the header's width"
    first_row = 2 if has_header else 1  # line of row 0 (blank lines may only end the file)
    blank = 0
    with open(path, "rb") as handle:
        for number, raw_line in enumerate(handle, start=1):
            if number == 1:
                raw_line = raw_line.removeprefix(_BOM)
                if has_header:
                    count, width = _parse_header(raw_line, path)
                    continue
            line = raw_line.rstrip()
            if not line:
                blank = blank or number
                continue
            if blank:
                raise FileFormatError(
                    f"a row follows the blank line {blank}; blank lines may only end the file", path=path, line=number
                )
            fields = line.split(b" ")
            if width is None:
                width, source = _glove_width(fields, path, number), f"the width of line {number}"
            if len(fields) == width + 1 and fields[0]:
                raw = fields[0]
            else:
                raw = _split_word(fields, width, path, number, source)
            words.append(_decode_word(raw, unicode_errors, path, "", number))
            pending += fields[len(fields) - width :]
            if count is not None and len(words) > count:
                raise FileFormatError(
                    f"more rows than the {count} the header (line 1) announces", path=path, line=number
                )
            if len(pending) >= _BLOCK_ROWS * width:
                blocks.append(_parse_block(pending, width, words, first_row, path))
                pending = []
    if pending:
        blocks.append(_parse_block(pending, width, words, first_row, path))
    if words and not blank and not raw_line.endswith(b"\n"):
        raise FileFormatError(
            "the last row does not end with a newline, so the file looks truncated (its last number may "
            "be cut short); if the file is complete, end it with a newline",
            path=path,
            line=number,
        )
    if not words:
        raise FileFormatError("the file holds no vectors", path=path)
    if count is not None and len(words) != count:
        raise FileFormatError(
            f"the header (line 1) announces {count} rows, but the file holds {len(words)}: it is truncated "
            "or the header is wrong",
            path=path,
        )
    return words, np.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _parse_block(fields: list[bytes], width: int, words: list[str], first_row: int, path: str) -> np.ndarray:
    """``(rows, width)`` float32 from the number fields of the last ``len(fields) // width`` rows."""
    rows = len(fields) // width
    start = len(words) - rows  # index of the block's first row
    try:
        with np.errstate(over="ignore"):  # beyond float32's range is inf, reported below
            values = np.array(fields, dtype=np.float32).reshape(rows, width)
    except ValueError:
        raise _not_a_number(fields, width, words, first_row + start, path) from None
    finite = np.isfinite(values)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise FileFormatError(
            f"value {column + 1} of the vector of {words[start + row]!r} is {_shown(fields[row * width + column], 30)} "
            f"({values[row, column]}); vectors must be finite: fix or drop this row",
            path=path,
            line=first_row + start + row,
        )
    return values


def _not_a_number(fields: list[bytes], width: int, words: list[str], first_line: int, path: str) -> FileFormatError:
    """The error for the first of ``fields`` (rows of ``width`` from ``first_line``) that is no number."""
    start = len(words) - len(fields) // width
    for k, field in enumerate(fields):
        try:
            np.array([field], dtype=np.float32)
        except ValueError:
            return FileFormatError(
                f"value {k % width + 1} of the vector of {words[start + k // width]!r} is {_shown(field, 30)}, "
                "which is not a number",
                path=path,
                line=first_line + k // width,
            )
    return FileFormatError(f"the rows from line {first_line} hold values that are not numbers", path=path)


def _read_binary(path: str, *, unicode_errors: UnicodeErrors = "strict") -> tuple[list[str], np.ndarray]:
    """word2vec binary: header ``count width\\n``, then per word ``word<space>`` and ``width`` float32.

    A newline may follow each vector; only white space may follow the last one.
    """
    size = os.path.getsize(path)
    if size == 0:
        raise FileFormatError("the file is empty; expected a word2vec binary file", path=path)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        newline = data.find(b"\n", 0, 4096)
        if newline < 0:
            raise FileFormatError(f"expected a 'count width' header line, found {_shown(data, 40)}", path=path, line=1)
        count, width = _parse_header(data[:newline], path)
        position = newline + 1
        # every entry takes at least a 1-byte word, a space and 4 * width bytes
        vectors = np.empty((min(count, (size - position) // (4 * width + 2)), width), dtype=np.float32)
        words = []
        for i in range(count):
            position += data[position : position + 1] == b"\n"
            raw, position = _binary_entry(data, position, width, i, count, path)
            vectors[i] = np.frombuffer(data[position - 4 * width : position], dtype="<f4")
            words.append(_decode_word(raw, unicode_errors, path, f"entry {i}: "))
        rest = data[position:]
    if rest.strip():
        raise FileFormatError(
            f"{len(rest)} bytes follow the last of the {count} entries the header announces (from byte "
            f"{position}: {rest[:20]!r}); the header's count or width is wrong or the file is corrupt",
            path=path,
        )
    if not count:
        raise FileFormatError("the header announces 0 entries: the file holds no vectors", path=path)
    _check_binary_values(vectors, words, path)
    return words, vectors


def _binary_entry(data: mmap.mmap, position: int, width: int, i: int, count: int, path: str) -> tuple[bytes, int]:
    """The word of entry ``i`` starting at ``position``, and the position after its vector."""
    space = data.find(b" ", position)
    if space < 0:
        raise FileFormatError(
            f"the file ends inside entry {i} of {count} (byte {position}): no space ends its word", path=path
        )
    raw = data[position:space]
    if not raw or b"\n" in raw:
        raise FileFormatError(
            f"entry {i} of {count} (byte {position}) has the word {_shown(raw, 60)}: an empty word or one holding a "
            f"newline means the previous vectors are not {width} float32 each (wrong header width or a corrupt file)",
            path=path,
        )
    end = space + 1 + 4 * width
    if end > len(data):
        raise FileFormatError(
            f"the file ends inside the vector of entry {i} of {count} ({_shown(raw, 60)}): {len(data) - space - 1} of "
            f"its {4 * width} bytes are there",
            path=path,
        )
    return raw, end


def _check_binary_values(vectors: np.ndarray, words: list[str], path: str) -> None:
    finite = np.isfinite(vectors)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise FileFormatError(
            f"entry {row} ({words[row]!r}) holds {vectors[row, column]} at value {column + 1}; vectors must "
            "be finite: fix or drop this entry",
            path=path,
        )


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


def _shown(raw: bytes, limit: int) -> str:
    """Bytes from the file as readable text for an error message (bad bytes as ``\\xNN``)."""
    text = raw[:limit].decode("utf-8", errors="backslashreplace")
    return repr(text + ("..." if len(raw) > limit else ""))


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
