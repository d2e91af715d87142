"""The text formats of vector files (word2vec / fastText text, GloVe ``.txt``), and what every format
reads the same way: the ``count width`` header line, words as UTF-8, bytes shown in messages.

A text row is ``word v1 ... vd``: fields separated by single spaces, the width the header's or, for
GloVe, the number of numeric fields that end the first row, a word with spaces only where none of
its fields after the first parses as a number (the rules of :mod:`contextembed.encoders._static.files`,
which detects a file's format and dispatches to the reader). :func:`_read_text` streams a file line
by line and parses the numbers of every :data:`_BLOCK_ROWS` rows in one vectorised call; its errors
name the file and the line. word2vec binary files (:mod:`contextembed.encoders._static.binary_files`)
share the header line, the words' decoding and the messages' helpers.
"""

from __future__ import annotations

from typing import Literal, Optional

import numpy as np

from ...errors import FileFormatError

#: what a word that is not valid UTF-8 becomes (``unicode_errors``: an error, U+FFFD, or dropped bytes)
UnicodeErrors = Literal["strict", "replace", "ignore"]

_BOM = b"\xef\xbb\xbf"
#: how many rows or entries format detection checks
_SNIFF_ROWS = 20
#: text rows parsed by one vectorised call
_BLOCK_ROWS = 4096
#: bytes that never occur in a text vectors file (C0 controls other than tab, newlines, VT, FF)
_BINARY_BYTES = bytes(sorted(set(range(32)) - {9, 10, 11, 12, 13}))


# -- what every format shares -----------------------------------------------------------------


def _header_of(line: bytes) -> Optional[tuple[int, int]]:
    """``(count, width)`` if ``line`` is two non-negative integers, else ``None``."""
    parts = line.split()
    if len(parts) == 2 and all(part.isdigit() for part in parts):
        return int(parts[0]), int(parts[1])
    return None


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


def _shown(raw: bytes, limit: int) -> str:
    """Bytes from the file as readable text for an error message (bad bytes as ``\\xNN``)."""
    text = raw[:limit].decode("utf-8", errors="backslashreplace")
    return repr(text + ("..." if len(raw) > limit else ""))


# -- format detection -------------------------------------------------------------------------


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


# -- the text reader --------------------------------------------------------------------------


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
