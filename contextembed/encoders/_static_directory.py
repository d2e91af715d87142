"""The directory :meth:`StaticVectors.save <contextembed.encoders._static.StaticVectors.save>` writes.

Format version 2 holds ``vectors.safetensors`` (one float32 tensor ``"vectors"``, ``(vocab,
width)``, every row including duplicates), ``words.json`` (the exact list of words, any ``str``)
and ``contextembed_static.json`` (``format_version``, ``lowercase``, ``oov``). Version 3 is the same
with a ``subwords`` folder beside them (:class:`~contextembed.encoders._subwords.SubwordVectors`,
which reads and writes that folder itself) and ``"subwords": true``. Version 4 is a table stored
otherwise than as float32 rows (float16, int8 with its scales, or clustered:
:mod:`~contextembed.encoders._table_storage`), its options naming the ``"storage"`` and whether
``"subwords"`` are present. The earlier layout (version 1),
``vectors.bin`` (word2vec binary) + ``contextembed_static.json`` without a version, is still read,
because pickled estimators embed it. The directory is written under a temporary name and renamed
into place by :meth:`Encoder.save <contextembed.encoders._base.Encoder.save>`.

Every save since version 4 exists also writes ``contextembed_provenance.json``
(:mod:`contextembed._provenance`, artifact ``"static vectors table"``): the storage, the number of
rows and columns, and the hash of every file that holds vectors or words. A reader that finds it
checks it before reading the table, so an edited, truncated or swapped file is a
:class:`~contextembed.errors.ProvenanceError`; version 4 must have it. Tables saved before it
existed (versions 1 to 3, no record) load exactly as before.

This module reads and writes the table and its options; the encoder is built from them by
:func:`contextembed.encoders._static.load_saved_directory`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .. import _provenance as provenance
from ..errors import ModelFormatError
from ._table_storage import TableStorage, decode, encode
from ._vector_files import UnicodeErrors, read_vectors

#: the files :meth:`StaticVectors.save` writes (format version 2)
SAVED_OPTIONS = "contextembed_static.json"
SAVED_VECTORS = "vectors.safetensors"
SAVED_WORDS = "words.json"
SAVED_TENSOR = "vectors"
SAVED_FORMAT_VERSION = 2
#: a table with subword vectors (a ``subwords`` folder beside the table) is format version 3
SUBWORDS_FORMAT_VERSION = 3
#: a table stored as float16, int8 or clustered (the options name its ``"storage"``)
STORAGE_FORMAT_VERSION = 4
#: what a saved table's provenance record calls it
TABLE_ARTIFACT = "static vectors table"
#: the piece vectors' file inside the ``subwords`` folder (hashed in the provenance record)
PIECES_FILE = "subwords/piece_vectors.safetensors"
#: the vectors file of the earlier layout (format version 1: word2vec binary), still read
LEGACY_SAVED_VECTORS = "vectors.bin"


class SavedTable(NamedTuple):
    """What a saved directory holds, read and checked."""

    words: list[str]
    #: ``(vocab, width)`` float32, finite, one row per word
    vectors: np.ndarray
    #: the saved lookup options: ``lowercase`` and ``oov``
    options: dict
    #: whether a ``subwords`` folder belongs to the table (format version 3, or 4 saying so)
    subwords: bool
    #: how the vectors were stored (float32 rows for every version before 4)
    storage: TableStorage
    #: the file the rows were read from, and where row ``i`` is in it (for messages)
    source: str
    row_name: Callable[[int], str]


def is_saved_directory(path: str) -> bool:
    """Whether ``path`` is a directory written by ``StaticVectors.save`` (either layout)."""
    return os.path.isfile(os.path.join(path, SAVED_OPTIONS))


def write_saved_table(folder: str, words: list[str], vectors: np.ndarray, *, lowercase: bool, oov: str,
                      subwords: bool, storage: TableStorage = TableStorage()) -> None:
    """Write the table into ``folder`` (format version 2, 3 with ``subwords``, 4 when ``storage`` is
    not float32 rows) and its provenance record.

    Parameters
    ----------
    words : list of str
        One per row, kept exactly whatever characters they hold.
    vectors : np.ndarray
        ``(vocab, width)`` float32.
    lowercase, oov
        The encoder's lookup options.
    subwords : bool
        Whether the encoder wrote a ``subwords`` folder beside the table (before this call: its
        piece vectors' hash is recorded).
    storage : TableStorage
        How the vectors are stored (:mod:`~contextembed.encoders._table_storage`).

    Raises
    ------
    ValueError
        If ``storage.clusters`` exceeds the number of rows.
    """
    from safetensors.numpy import save_file

    if storage.clusters is not None and storage.clusters > len(vectors):
        raise ValueError(f"clusters={storage.clusters} exceeds the table's {len(vectors)} rows: pass at most "
                         f"{len(vectors)}")
    options = {"format_version": SAVED_FORMAT_VERSION, "lowercase": lowercase, "oov": oov}
    if subwords:
        options.update(format_version=SUBWORDS_FORMAT_VERSION, subwords=True)
    if not storage.is_default:
        options.update(format_version=STORAGE_FORMAT_VERSION, subwords=subwords, storage=storage.as_record())
    save_file(encode(vectors, storage), os.path.join(folder, SAVED_VECTORS))
    _write_json(os.path.join(folder, SAVED_WORDS), words)
    _write_json(os.path.join(folder, SAVED_OPTIONS), options)
    provenance.write(os.path.join(folder, provenance.PROVENANCE_FILE),
                     _table_record(folder, storage, len(words), vectors.shape[1], subwords))


def _table_record(folder: str, storage: TableStorage, rows: int, width: int, subwords: bool) -> dict:
    """The provenance record of the table in ``folder``: its storage, shape and files' hashes."""
    files = [SAVED_VECTORS, SAVED_WORDS, SAVED_OPTIONS] + ([PIECES_FILE] if subwords else [])
    return provenance.record(TABLE_ARTIFACT, storage=storage.as_record(), rows=rows, width=width,
                             files={name: provenance.file_hash(os.path.join(folder, name)) for name in files})


def read_saved_table(path: str, unicode_errors: UnicodeErrors = "strict") -> SavedTable:
    """Read the table of a saved directory (any version; the earlier layout's ``vectors.bin`` with
    ``unicode_errors``), after checking its provenance record where it has one.

    Raises
    ------
    ModelFormatError
        For missing, unreadable or inconsistent files (int8 scales that are not finite and
        positive, cluster indices outside the centroids); the message names the file.
    ProvenanceError
        For a file changed since the table was saved (edited, truncated, swapped), or a version 4
        table without its record.
    FileFormatError
        For a damaged ``vectors.bin`` of the earlier layout (naming the entry).
    """
    path = os.fspath(path)
    saved = _read_saved_options(os.path.join(path, SAVED_OPTIONS))
    version = saved.pop("format_version")
    subwords = saved.pop("subwords")
    storage = saved.pop("storage")
    if version == 1:
        legacy = os.path.join(path, LEGACY_SAVED_VECTORS)
        if not os.path.isfile(legacy):
            raise ModelFormatError(
                f"{SAVED_OPTIONS} describes the earlier layout, but {LEGACY_SAVED_VECTORS} is missing", path=path
            )
        found = read_vectors(legacy, "word2vec-binary", unicode_errors=unicode_errors)
        return SavedTable(found.words, found.vectors, saved, False, storage, legacy, found.row_name)
    words_path = os.path.join(path, SAVED_WORDS)
    found_record = provenance.read(os.path.join(path, provenance.PROVENANCE_FILE), artifact=f"static table {path}")
    if found_record is None and version == STORAGE_FORMAT_VERSION:
        raise ModelFormatError(f"a format {version} table must have its {provenance.PROVENANCE_FILE}, which is "
                               "missing: save the table again", path=path)
    words = _read_saved_words(words_path)
    if found_record is not None:  # before the vectors are read: a changed file is named as such
        expected = _table_record(path, storage, len(words), found_record.get("width"), subwords)
        provenance.check(found_record, expected, artifact=f"static table {path}",
                         fix="its files changed after it was saved: save the table again")
    vectors = _read_saved_vectors(os.path.join(path, SAVED_VECTORS), storage)
    if found_record is not None and vectors.shape[1] != found_record["width"]:
        raise ModelFormatError(f"{SAVED_VECTORS} holds {vectors.shape[1]} columns, its record "
                               f"{found_record['width']!r}: save the table again", path=path)
    if vectors.shape[0] != len(words):
        raise ModelFormatError(
            f"{SAVED_VECTORS} holds {vectors.shape[0]} rows but {SAVED_WORDS} {len(words)} words; the "
            "directory mixes two saves: save the encoder again",
            path=path,
        )
    return SavedTable(words, vectors, saved, subwords, storage, words_path, _index_name)


def _index_name(i: int) -> str:
    return f"index {i}"


def _write_json(path: str, value: object) -> None:
    # ensure_ascii keeps every str exact, lone surrogates included
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, ensure_ascii=True, indent=None if isinstance(value, list) else 2)



def _read_saved_options(path: str) -> dict:
    """``{"format_version", "lowercase", "oov", "subwords", "storage"}`` from ``contextembed_static.json``
    (version 1 has none). ``"subwords": true`` belongs to version 3, and version 4 names both
    ``"subwords"`` and its ``"storage"``; the earlier versions get float32 rows."""
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError) as error:
        raise ModelFormatError(f"cannot read the saved options: {error}", path=path) from None
    known = {"format_version", "lowercase", "oov", "subwords", "storage"}
    if not isinstance(saved, dict) or not set(saved) <= known:
        raise ModelFormatError(
            f"expected a JSON object with keys among {sorted(known)}, got {saved!r:.200}", path=path
        )
    saved.setdefault("format_version", 1)
    versions = (1, SAVED_FORMAT_VERSION, SUBWORDS_FORMAT_VERSION, STORAGE_FORMAT_VERSION)
    if saved["format_version"] not in versions:
        raise ModelFormatError(
            f"format_version {saved['format_version']!r} is not one this contextembed reads "
            f"({', '.join(map(str, versions))}); it was written by a newer contextembed: upgrade it",
            path=path,
        )
    if saved["format_version"] == STORAGE_FORMAT_VERSION:
        if not isinstance(saved.get("subwords"), bool) or "storage" not in saved:
            raise ModelFormatError(f'format_version {STORAGE_FORMAT_VERSION} names "subwords" (true or false) and '
                                   f'"storage", got {saved!r:.200}: save the encoder again', path=path)
        saved["storage"] = TableStorage.from_record(saved["storage"], path)
        return saved
    subwords = saved.setdefault("subwords", False)
    if subwords is not (saved["format_version"] == SUBWORDS_FORMAT_VERSION) or "storage" in saved:
        raise ModelFormatError(
            f'"subwords": {json.dumps(subwords)} does not fit format_version {saved["format_version"]} (version '
            f"{SUBWORDS_FORMAT_VERSION}, and only it, has subword vectors; version {STORAGE_FORMAT_VERSION} alone names "
            '"storage"): save the encoder again',
            path=path,
        )
    saved["storage"] = TableStorage()
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


def _read_saved_vectors(path: str, storage: TableStorage) -> np.ndarray:
    """``(rows, width)`` float32, decoded from ``storage`` and checked (finite, one tensor set)."""
    return decode(read_tensors(path, "the saved vectors"), storage, path)


def read_tensors(path: str, what: str) -> dict[str, np.ndarray]:
    """The tensors of the safetensors file ``path``; ``ModelFormatError`` naming ``what`` and the file."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (OSError, SafetensorError) as error:
        raise ModelFormatError(f"cannot read {what}: {error}", path=path) from None


__all__ = ["SavedTable", "is_saved_directory", "read_saved_table", "read_tensors", "write_saved_table"]
