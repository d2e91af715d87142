"""The directory :meth:`StaticVectors.save <contextembed.encoders.static.StaticVectors.save>` writes.

Format version 2 holds ``vectors.safetensors`` (one float32 tensor ``"vectors"``, ``(vocab,
width)``, every row including duplicates), ``words.json`` (the exact list of words, any ``str``)
and ``contextembed_static.json`` (``format_version``, ``lowercase``, ``oov``). Version 3 is the same
with a ``subwords`` folder beside them (:class:`~contextembed.encoders.subwords.SubwordVectors`,
which reads and writes that folder itself) and ``"subwords": true``. The earlier layout (version 1),
``vectors.bin`` (word2vec binary) + ``contextembed_static.json`` without a version, is still read,
because pickled estimators embed it. The directory is written under a temporary name and renamed
into place by :meth:`Encoder.save <contextembed.encoders.base.Encoder.save>`.

This module reads and writes the table and its options; the encoder is built from them by
:func:`contextembed.encoders.static.load_saved_directory`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..errors import ModelFormatError
from .vector_files import UnicodeErrors, read_vectors

#: the files :meth:`StaticVectors.save` writes (format version 2)
SAVED_OPTIONS = "contextembed_static.json"
SAVED_VECTORS = "vectors.safetensors"
SAVED_WORDS = "words.json"
SAVED_TENSOR = "vectors"
SAVED_FORMAT_VERSION = 2
#: a table with subword vectors (a ``subwords`` folder beside the table) is format version 3
SUBWORDS_FORMAT_VERSION = 3
#: the vectors file of the earlier layout (format version 1: word2vec binary), still read
LEGACY_SAVED_VECTORS = "vectors.bin"


class SavedTable(NamedTuple):
    """What a saved directory holds, read and checked."""

    words: list[str]
    #: ``(vocab, width)`` float32, finite, one row per word
    vectors: np.ndarray
    #: the saved lookup options: ``lowercase`` and ``oov``
    options: dict
    #: whether a ``subwords`` folder belongs to the table (format version 3)
    subwords: bool
    #: the file the rows were read from, and where row ``i`` is in it (for messages)
    source: str
    row_name: Callable[[int], str]


def is_saved_directory(path: str) -> bool:
    """Whether ``path`` is a directory written by ``StaticVectors.save`` (either layout)."""
    return os.path.isfile(os.path.join(path, SAVED_OPTIONS))


def write_saved_table(folder: str, words: list[str], vectors: np.ndarray, *, lowercase: bool, oov: str,
                      subwords: bool) -> None:
    """Write the table into ``folder`` (format version 2, or 3 with ``subwords``).

    Parameters
    ----------
    words : list of str
        One per row, kept exactly whatever characters they hold.
    vectors : np.ndarray
        ``(vocab, width)`` float32.
    lowercase, oov
        The encoder's lookup options.
    subwords : bool
        Whether the encoder writes a ``subwords`` folder beside the table.
    """
    from safetensors.numpy import save_file

    options = {"format_version": SAVED_FORMAT_VERSION, "lowercase": lowercase, "oov": oov}
    if subwords:
        options.update(format_version=SUBWORDS_FORMAT_VERSION, subwords=True)
    save_file({SAVED_TENSOR: np.ascontiguousarray(vectors)}, os.path.join(folder, SAVED_VECTORS))
    _write_json(os.path.join(folder, SAVED_WORDS), words)
    _write_json(os.path.join(folder, SAVED_OPTIONS), options)


def read_saved_table(path: str, unicode_errors: UnicodeErrors = "strict") -> SavedTable:
    """Read the table of a saved directory (any version; the earlier layout's ``vectors.bin`` with
    ``unicode_errors``).

    Raises
    ------
    ModelFormatError
        For missing, unreadable or inconsistent files; the message names the file.
    FileFormatError
        For a damaged ``vectors.bin`` of the earlier layout (naming the entry).
    """
    path = os.fspath(path)
    saved = _read_saved_options(os.path.join(path, SAVED_OPTIONS))
    version = saved.pop("format_version")
    if version == 1:
        legacy = os.path.join(path, LEGACY_SAVED_VECTORS)
        if not os.path.isfile(legacy):
            raise ModelFormatError(
                f"{SAVED_OPTIONS} describes the earlier layout, but {LEGACY_SAVED_VECTORS} is missing", path=path
            )
        found = read_vectors(legacy, "word2vec-binary", unicode_errors=unicode_errors)
        return SavedTable(found.words, found.vectors, saved, False, legacy, found.row_name)
    words_path = os.path.join(path, SAVED_WORDS)
    words, vectors = _read_saved_words(words_path), _read_saved_vectors(os.path.join(path, SAVED_VECTORS))
    if vectors.shape[0] != len(words):
        raise ModelFormatError(
            f"{SAVED_VECTORS} holds {vectors.shape[0]} rows but {SAVED_WORDS} {len(words)} words; the "
            "directory mixes two saves: save the encoder again",
            path=path,
        )
    return SavedTable(words, vectors, saved, version == SUBWORDS_FORMAT_VERSION, words_path, _index_name)


def _index_name(i: int) -> str:
    return f"index {i}"


def _write_json(path: str, value: object) -> None:
    # ensure_ascii keeps every str exact, lone surrogates included
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, ensure_ascii=True, indent=None if isinstance(value, list) else 2)



def _read_saved_options(path: str) -> dict:
    """``{"format_version", "lowercase", "oov"}`` from ``contextembed_static.json`` (version 1 has none);
    its ``"subwords": true`` is checked against the version (3 alone has subword vectors)."""
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError) as error:
        raise ModelFormatError(f"cannot read the saved options: {error}", path=path) from None
    known = {"format_version", "lowercase", "oov", "subwords"}
    if not isinstance(saved, dict) or not set(saved) <= known:
        raise ModelFormatError(
            f"expected a JSON object with keys among {sorted(known)}, got {saved!r:.200}", path=path
        )
    saved.setdefault("format_version", 1)
    if saved["format_version"] not in (1, SAVED_FORMAT_VERSION, SUBWORDS_FORMAT_VERSION):
        raise ModelFormatError(
            f"format_version {saved['format_version']!r} is not one this contextembed reads (1, "
            f"{SAVED_FORMAT_VERSION}, {SUBWORDS_FORMAT_VERSION}); it was written by a newer contextembed: upgrade it",
            path=path,
        )
    subwords = saved.pop("subwords", False)
    if subwords is not (saved["format_version"] == SUBWORDS_FORMAT_VERSION):
        raise ModelFormatError(
            f'"subwords": {json.dumps(subwords)} does not fit format_version {saved["format_version"]} (version '
            f"{SUBWORDS_FORMAT_VERSION}, and only it, has subword vectors): save the encoder again",
            path=path,
        )
    return saved


def _read_saved_words(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            words = json.load(handle)
    except (OSError, ValueError) as error:
        raise ModelFormatError(f"cannot read the saved words: {error}", path=path) from None
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
        raise ModelFormatError("expected a JSON list of strings (one word per row)", path=path)
    return words


def _read_saved_vectors(path: str) -> np.ndarray:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(path)
    except (OSError, SafetensorError) as error:
        raise ModelFormatError(f"cannot read the saved vectors: {error}", path=path) from None
    vectors = tensors.get(SAVED_TENSOR)
    if set(tensors) != {SAVED_TENSOR} or vectors.dtype != np.float32 or vectors.ndim != 2:
        found = {name: (str(t.dtype), t.shape) for name, t in tensors.items()}
        raise ModelFormatError(
            f"expected one float32 (vocab, width) tensor named {SAVED_TENSOR!r}, found {found}", path=path
        )
    if not np.isfinite(vectors).all():
        row = int(np.argmin(np.isfinite(vectors).all(axis=1)))
        raise ModelFormatError(f"row {row} of the saved vectors is not finite", path=path)
    return vectors


__all__ = ["SavedTable", "is_saved_directory", "read_saved_table", "write_saved_table"]
