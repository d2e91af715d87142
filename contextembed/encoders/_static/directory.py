"""The directory :meth:`StaticVectors.save <contextembed.encoders._static.vectors.StaticVectors.save>` writes.

Format version 2 holds ``vectors.safetensors`` (one float32 tensor ``"vectors"``, ``(vocab,
width)``, every row including duplicates), ``words.json`` (the exact list of words, any ``str``)
and ``contextembed_static.json`` (``format_version``, ``lowercase``, ``oov``). Version 3 is the same
with a ``subwords`` folder beside them (:class:`~contextembed.encoders._static.subwords.SubwordVectors`,
which reads and writes that folder itself) and ``"subwords": true``. Version 4 is a table stored
otherwise than as float32 rows (float16, int8 with its scales, or clustered:
:mod:`~contextembed.encoders._static.tables`), its options naming the ``"storage"`` and whether
``"subwords"`` are present. Version 5 is every table with subword vectors since: each distinct
row is stored once. ``vectors.safetensors`` holds the words' rows (one per word, as before) followed
by ``"piece_rows"`` rows (a count in the options) that hold piece vectors no word row equals, in the
table's storage; ``subwords/piece_rows.safetensors`` holds ``ids`` (``(pieces,)`` int32 tokenizer
ids) and ``rows`` (``(pieces,)`` int32: the row of ``vectors`` that is each piece's vector). A
table distilled from a vocabulary, whose pieces are its words, stores every vector once (half the
size of version 4); the ``subwords`` folder keeps the tokenizer's files beside it. The earlier
layout (version 1),
``vectors.bin`` (word2vec binary) + ``contextembed_static.json`` without a version, is still read,
because pickled estimators embed it. The directory is written under a temporary name and renamed
into place by :meth:`Encoder.save <contextembed.encoders._base.Encoder.save>`.

Every save since version 4 exists also writes ``contextembed_provenance.json``
(:mod:`contextembed._runtime.provenance`, artifact ``"static vectors table"``): the storage, the number of
rows and columns, and the hash of every file that holds vectors or words (version 5: every file of
the ``subwords`` folder too, and the number of pieces and piece rows). A reader that finds it
checks it before reading the table, so an edited, truncated, added or swapped file is a
:class:`~contextembed.errors.ProvenanceError` naming the file; versions 4 and 5 must have it.
Tables saved before it existed (versions 1 to 3, no record) load exactly as before.

This module reads and writes the table and its options; the encoder is built from them by
:func:`contextembed.encoders._static.vectors.load_saved_directory`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from typing import NamedTuple, Optional

import numpy as np

from ..._runtime import json_io as _json, provenance
from ...errors import ModelFormatError, ProvenanceError
from .tables import TableStorage, decode, encode
from .files import UnicodeErrors, read_vectors

#: the files :meth:`StaticVectors.save` writes (format version 2)
SAVED_OPTIONS = "contextembed_static.json"
SAVED_VECTORS = "vectors.safetensors"
SAVED_WORDS = "words.json"
#: the largest saved options read (a real one is under 1 KiB)
_MAX_OPTIONS_BYTES = 1 << 20
#: the largest word list read (tens of millions of words)
_MAX_WORDS_BYTES = 2 << 30
SAVED_TENSOR = "vectors"
SAVED_FORMAT_VERSION = 2
#: a table with subword vectors (a ``subwords`` folder beside the table) is format version 3
SUBWORDS_FORMAT_VERSION = 3
#: a table stored as float16, int8 or clustered (the options name its ``"storage"``)
STORAGE_FORMAT_VERSION = 4
#: a table with subword vectors whose piece vectors are rows of ``vectors.safetensors``
SHARED_FORMAT_VERSION = 5
#: what a saved table's provenance record calls it
TABLE_ARTIFACT = "static vectors table"
#: the piece vectors' file inside the ``subwords`` folder of versions 3 and 4 (hashed in the record)
PIECES_FILE = "subwords/piece_vectors.safetensors"
#: version 5's piece ids and the row of each in ``vectors.safetensors``
PIECE_ROWS_FILE = "subwords/piece_rows.safetensors"
#: the folder of the tokenizer's files and the pieces (the ``subwords`` module's own name for it)
_PIECES_FOLDER = os.path.dirname(PIECE_ROWS_FILE)
#: the vectors file of the earlier layout (format version 1: word2vec binary), still read
LEGACY_SAVED_VECTORS = "vectors.bin"


class SavedTable(NamedTuple):
    """What a saved directory holds, read and checked."""

    words: list[str]
    #: ``(vocab, width)`` float32, finite, one row per word
    vectors: np.ndarray
    #: the saved lookup options: ``lowercase`` and ``oov``
    options: dict
    #: whether a ``subwords`` folder belongs to the table (format version 3, 5, or 4 saying so)
    subwords: bool
    #: how the vectors were stored (float32 rows for every version before 4)
    storage: TableStorage
    #: the file the rows were read from, and where row ``i`` is in it (for messages)
    source: str
    row_name: Callable[[int], str]
    #: version 5: the pieces' ``(pieces,)`` tokenizer ids and ``(pieces, width)`` float32 vectors
    #: (versions 3 and 4 keep theirs in ``subwords/piece_vectors.safetensors``: ``None``)
    pieces: Optional[tuple[np.ndarray, np.ndarray]] = None


def is_saved_directory(path: str) -> bool:
    """Whether ``path`` is a directory written by ``StaticVectors.save`` (either layout)."""
    return os.path.isfile(os.path.join(path, SAVED_OPTIONS))


def write_saved_table(folder: str, words: list[str], vectors: np.ndarray, *, lowercase: bool, oov: str,
                      pieces: Optional[tuple[np.ndarray, np.ndarray]] = None,
                      storage: TableStorage = TableStorage()) -> None:
    """Write the table into ``folder`` (format version 2; 4 when ``storage`` is not float32 rows; 5
    with ``pieces``) and its provenance record.

    Parameters
    ----------
    words : list of str
        One per row, kept exactly whatever characters they hold.
    vectors : np.ndarray
        ``(vocab, width)`` float32.
    lowercase, oov
        The encoder's lookup options.
    pieces : (np.ndarray, np.ndarray), optional
        The subword vectors' ``(pieces,)`` tokenizer ids and ``(pieces, width)`` float32 vectors. The
        encoder wrote the tokenizer into the ``subwords`` folder before this call (its files are
        hashed in the record); a piece vector equal to a word's row is stored as that row's index.
    storage : TableStorage
        How the vectors are stored (:mod:`~contextembed.encoders._static.tables`).

    Raises
    ------
    ValueError
        If ``storage.clusters`` exceeds the number of rows, or (float16) naming the row (and its word
        or piece) that holds a value beyond float16's range; raised before any file is written.
    """
    from safetensors.numpy import save_file

    if storage.clusters is not None and storage.clusters > len(vectors):
        raise ValueError(f"clusters={storage.clusters} exceeds the table's {len(vectors)} rows: pass at most "
                         f"{len(vectors)}")
    options = {"format_version": SAVED_FORMAT_VERSION, "lowercase": lowercase, "oov": oov}
    extra, own_ids = {}, np.zeros(0, dtype=np.int64)
    if pieces is not None:
        ids, piece_vectors = pieces
        rows, own = shared_rows(vectors, piece_vectors)
        own_ids = np.asarray(ids)[own]
        # (words + piece rows, width): the words' rows, then the piece vectors no word row equals
        vectors = np.concatenate([vectors, piece_vectors[own]])
        extra = {"pieces": len(ids), "piece_rows": len(own)}
        options.update(format_version=SHARED_FORMAT_VERSION, subwords=True, storage=storage.as_record(),
                       piece_rows=len(own))
    elif not storage.is_default:
        options.update(format_version=STORAGE_FORMAT_VERSION, subwords=False, storage=storage.as_record())
    tensors = encode(vectors, storage, partial(_row_name, words, own_ids))  # checked before anything is written
    if pieces is not None:
        save_file({"ids": np.asarray(ids, dtype=np.int32), "rows": rows}, os.path.join(folder, PIECE_ROWS_FILE))
    save_file(tensors, os.path.join(folder, SAVED_VECTORS))
    _write_json(os.path.join(folder, SAVED_WORDS), words)
    _write_json(os.path.join(folder, SAVED_OPTIONS), options)
    files = _file_hashes(folder, _recorded_files(folder, options["format_version"], pieces is not None))
    provenance.write(os.path.join(folder, provenance.PROVENANCE_FILE),
                     _table_record(files, storage, len(words), vectors.shape[1], **extra))


def _row_name(words: list[str], piece_ids: np.ndarray, row: int) -> str:
    """Row ``row`` of the stored vectors in errors: a word's, or (after them) a piece's."""
    if row < len(words):
        return f"row {row} (word {words[row]!r}) of the table"
    return f"the vector of the piece with tokenizer id {int(piece_ids[row - len(words)])}"


def shared_rows(vectors: np.ndarray, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each piece vector is stored: the first row of ``(vocab, width)`` ``vectors`` equal to it
    bit for bit, else a row of its own after them.

    Returns
    -------
    rows : np.ndarray
        ``(pieces,)`` int32 rows of ``vectors`` followed by the pieces' own rows.
    own : np.ndarray
        ``(own rows,)`` int64: the pieces whose vectors are stored as rows of their own, in order.
    """
    vectors, pieces = np.ascontiguousarray(vectors, np.float32), np.ascontiguousarray(pieces, np.float32)
    first: dict[bytes, int] = {}
    for i, row in enumerate(vectors):
        first.setdefault(row.tobytes(), i)
    rows = np.empty(len(pieces), dtype=np.int32)
    own: list[int] = []
    for i, row in enumerate(pieces):
        key = row.tobytes()
        found = first.get(key)
        if found is None:
            found = first[key] = len(vectors) + len(own)
            own.append(i)
        rows[i] = found
    return rows, np.asarray(own, dtype=np.int64)


def _recorded_files(folder: str, version: int, subwords: bool) -> list[str]:
    """The files a version's record hashes: the table's, version 3 and 4's piece vectors, every
    file of version 5's ``subwords`` folder (so an added or swapped tokenizer file is caught too)."""
    files = [SAVED_VECTORS, SAVED_WORDS, SAVED_OPTIONS]
    if version == SHARED_FORMAT_VERSION:
        pieces = os.path.join(folder, _PIECES_FOLDER)
        found = [f"{_PIECES_FOLDER}/{name}" for name, _ in provenance.tree_files(pieces)] \
            if os.path.isdir(pieces) else []
        return files + sorted(set(found) | {PIECE_ROWS_FILE})
    return files + ([PIECES_FILE] if subwords else [])


def _file_hashes(folder: str, names: list[str]) -> dict[str, Optional[str]]:
    """``{name: hash}`` of the files ``names`` of ``folder``; ``None`` for one that is missing."""
    paths = {name: os.path.join(folder, name) for name in names}
    return {name: provenance.file_hash(path) if os.path.isfile(path) else None for name, path in paths.items()}


def _table_record(files: dict[str, Optional[str]], storage: TableStorage, rows: int, width: int, **extra) -> dict:
    """The provenance record of a table: its storage, shape (version 5: ``pieces`` and
    ``piece_rows`` too) and files' hashes."""
    return provenance.record(TABLE_ARTIFACT, storage=storage.as_record(), rows=rows, width=width, files=files,
                             **extra)


def read_saved_table(path: str, unicode_errors: UnicodeErrors = "strict") -> SavedTable:
    """Read the table of a saved directory (any version; the earlier layout's ``vectors.bin`` with
    ``unicode_errors``), after checking its provenance record where it has one.

    Raises
    ------
    ModelFormatError
        For missing, unreadable or inconsistent files (int8 scales that are not finite and
        positive, cluster indices outside the centroids, piece rows outside the table or unused);
        the message names the file.
    ProvenanceError
        For a file changed since the table was saved (edited, truncated, added or swapped; the
        message names it), or a version 4 or 5 table without its record.
    FileFormatError
        For a damaged ``vectors.bin`` of the earlier layout (naming the entry).
    """
    path = os.fspath(path)
    saved = _read_saved_options(os.path.join(path, SAVED_OPTIONS))
    version = saved.pop("format_version")
    subwords = saved.pop("subwords")
    storage = saved.pop("storage")
    piece_rows = saved.pop("piece_rows", 0)
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
    if found_record is None and version >= STORAGE_FORMAT_VERSION:
        raise ModelFormatError(f"a format {version} table must have its {provenance.PROVENANCE_FILE}, which is "
                               "missing: save the table again", path=path)
    files = _file_hashes(path, _recorded_files(path, version, subwords))
    if found_record is not None:  # before anything is read: a changed file is named as such
        _check_files(path, found_record, files)
    words = _read_saved_words(words_path)
    if found_record is not None:
        extra = {"pieces": found_record.get("pieces"), "piece_rows": piece_rows} if version == SHARED_FORMAT_VERSION else {}
        expected = _table_record(files, storage, len(words), found_record.get("width"), **extra)
        provenance.check(found_record, expected, artifact=f"static table {path}", fix=_CHANGED)
    vectors = _read_saved_vectors(os.path.join(path, SAVED_VECTORS), storage)
    if found_record is not None and vectors.shape[1] != found_record["width"]:
        raise ModelFormatError(f"{SAVED_VECTORS} holds {vectors.shape[1]} columns, its record "
                               f"{found_record['width']!r}: save the table again", path=path)
    if vectors.shape[0] != len(words) + piece_rows:
        pieces_too = f" and {SAVED_OPTIONS} {piece_rows} piece rows" if version == SHARED_FORMAT_VERSION else ""
        raise ModelFormatError(
            f"{SAVED_VECTORS} holds {vectors.shape[0]} rows but {SAVED_WORDS} {len(words)} words{pieces_too}; the "
            "directory mixes two saves: save the encoder again",
            path=path,
        )
    pieces = None
    if version == SHARED_FORMAT_VERSION:
        ids, rows = _read_piece_rows(os.path.join(path, PIECE_ROWS_FILE), len(vectors), len(words))
        if found_record is not None and found_record.get("pieces") != len(ids):
            raise ModelFormatError(f"{PIECE_ROWS_FILE} holds {len(ids)} pieces, its record "
                                   f"{found_record.get('pieces')!r}: save the table again",
                                   path=os.path.join(path, PIECE_ROWS_FILE))
        pieces = (ids, vectors[rows])
        vectors = vectors[: len(words)]
    return SavedTable(words, vectors, saved, subwords, storage, words_path, _index_name, pieces)


_CHANGED = "its files changed after it was saved: save the table again"


def _check_files(path: str, found_record: object, files: dict[str, Optional[str]]) -> None:
    """Refuse, naming the first file whose hash differs from the record's (missing, added, edited)."""
    recorded = found_record.get("files") if isinstance(found_record, dict) else None
    if not isinstance(recorded, dict):
        return  # a damaged record: provenance.check names the field
    for name in sorted(set(recorded) | set(files)):
        if recorded.get(name) == files.get(name):
            continue
        what = ("is missing" if files.get(name) is None else "is not in the table's record" if name not in recorded
                else "differs from the file that was saved (another hash)")
        raise ProvenanceError(f"static table {path}: {name} {what}; {_CHANGED}", artifact=f"static table {path}",
                              field="files")


def _read_piece_rows(path: str, n_rows: int, n_words: int) -> tuple[np.ndarray, np.ndarray]:
    """Version 5's ``(pieces,)`` int32 ``ids`` and ``rows``, each row inside the ``n_rows`` stored
    rows and every row after the ``n_words`` words' rows some piece's (as :func:`write_saved_table`
    writes them)."""
    tensors = read_tensors(path, "the piece rows")
    if set(tensors) != {"ids", "rows"}:
        raise ModelFormatError(f"expected the tensors ['ids', 'rows'], found {sorted(tensors)}", path=path)
    ids, rows = tensors["ids"], tensors["rows"]
    for name, tensor in (("ids", ids), ("rows", rows)):
        if tensor.dtype != np.int32 or tensor.shape != (len(ids),):
            raise ModelFormatError(f"expected a ({len(ids)},) int32 tensor {name!r} (one per piece), found "
                                   f"{tensor.dtype} of shape {tensor.shape}", path=path)
    bad = np.flatnonzero((rows < 0) | (rows >= n_rows))
    if len(bad):
        raise ModelFormatError(f"piece {int(bad[0])} (id {int(ids[bad[0]])}) names row {int(rows[bad[0]])}, outside "
                               f"the {n_rows} rows of {SAVED_VECTORS}: the file is damaged, save the table again",
                               path=path)
    unused = np.setdiff1d(np.arange(n_words, n_rows), rows)
    if len(unused):
        raise ModelFormatError(f"row {int(unused[0])} of {SAVED_VECTORS} is a piece row that no piece names: the "
                               "files mix two saves, save the table again", path=path)
    return ids, rows


def _index_name(i: int) -> str:
    return f"index {i}"


def _write_json(path: str, value: object) -> None:
    # ensure_ascii keeps every str exact, lone surrogates included
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, ensure_ascii=True, indent=None if isinstance(value, list) else 2)



def _read_saved_options(path: str) -> dict:
    """``{"format_version", "lowercase", "oov", "subwords", "storage"}`` (version 5: and
    ``"piece_rows"``) from ``contextembed_static.json`` (version 1 has none). ``"subwords": true``
    belongs to version 3, version 4 names both ``"subwords"`` and its ``"storage"``, version 5
    ``"subwords": true``, ``"storage"`` and ``"piece_rows"``; the earlier versions get float32 rows."""
    try:
        saved = _json.read(path, max_bytes=_MAX_OPTIONS_BYTES)
    except (OSError, ValueError) as error:
        raise ModelFormatError(f"cannot read the saved options: {error}", path=path) from None
    known = {"format_version", "lowercase", "oov", "subwords", "storage", "piece_rows"}
    if not isinstance(saved, dict) or not set(saved) <= known:
        raise ModelFormatError(
            f"expected a JSON object with keys among {sorted(known)}, got {saved!r:.200}", path=path
        )
    saved.setdefault("format_version", 1)
    versions = (1, SAVED_FORMAT_VERSION, SUBWORDS_FORMAT_VERSION, STORAGE_FORMAT_VERSION, SHARED_FORMAT_VERSION)
    if saved["format_version"] not in versions:
        raise ModelFormatError(
            f"format_version {saved['format_version']!r} is not one this contextembed reads "
            f"({', '.join(map(str, versions))}); it was written by a newer contextembed: upgrade it",
            path=path,
        )
    if saved["format_version"] == SHARED_FORMAT_VERSION:
        rows = saved.get("piece_rows")
        if saved.get("subwords") is not True or "storage" not in saved or isinstance(rows, bool) \
                or not isinstance(rows, int) or rows < 0:
            raise ModelFormatError(f'format_version {SHARED_FORMAT_VERSION} names "subwords": true, "storage" and '
                                   f'"piece_rows" (an int >= 0), got {saved!r:.200}: save the encoder again', path=path)
        saved["storage"] = TableStorage.from_record(saved["storage"], path)
        return saved
    if "piece_rows" in saved:
        raise ModelFormatError(f'"piece_rows" belongs to format_version {SHARED_FORMAT_VERSION}, not '
                               f'{saved["format_version"]}: save the encoder again', path=path)
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
        words = _json.read(path, max_bytes=_MAX_WORDS_BYTES)
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


__all__ = ["SavedTable", "is_saved_directory", "read_saved_table", "read_tensors", "shared_rows", "write_saved_table"]
