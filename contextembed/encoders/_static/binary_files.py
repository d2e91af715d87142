"""The word2vec binary format of vector files: a ``count width`` header line, then per word
``word<space>`` and ``width`` little-endian float32, optionally followed by a newline.

:func:`_read_binary` maps the file and reads exactly ``count`` entries: a file that ends early, an
entry whose word is empty or holds a newline (the previous vectors were not ``width`` float32 each),
anything but white space after the last entry and a value that is not finite are errors naming the
entry and its byte offset. :func:`_binary_entries_fit` is format detection's test of the start of a
file (:mod:`contextembed.encoders._static.files`). The header line and the words' decoding are the
text formats' (:mod:`contextembed.encoders._static.text_files`).
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ...errors import FileFormatError
from .text_files import _SNIFF_ROWS, UnicodeErrors, _decode_word, _parse_header, _shown


# -- format detection -------------------------------------------------------------------------


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


# -- the binary reader ------------------------------------------------------------------------


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
