"""What an output of :func:`~contextembed.io.embed_file` records of its making, and the checks before one is reused.

Every output records what made it (:mod:`contextembed._runtime.provenance`, artifact ``"embedding output"``):
the input's content hash, its format and tokenizer, the model's fingerprint
(:func:`contextembed.encoders._identity.identify`), every option that changes the features as the
loaded encoder resolved it (``level``, ``layers`` as indexes, ``combine``, ``subword_pooling``,
``text_pooling`` and ``normalize`` at text level, the precision and backend the encoder runs, its device type,
its ``window`` / ``stride`` / ``pad_multiple``, and ``context`` and ``doc_sep`` where context is used),
``dtype`` and the output format, and ``content``: the rows, width
and hashes of the ``features`` and ``lengths`` as written. A ``.npz`` holds it as its
``provenance`` entry (UTF-8 JSON as ``uint8``, read back without unpickling); a ``.npy``, which
holds one array, has it beside it in ``<output>.provenance.json``, written before the output is
renamed into place (so an output never exists without it; an orphan record is replaced by the next
write). :func:`check_reusable` is what a resume runs before keeping an output
(:mod:`contextembed.corpus`): a record that differs from the one
:func:`~contextembed.io._pipeline.expected_record` gives now,
a missing or damaged one, or content that is not what was written is refused, naming the output,
the field and ``--overwrite``.

:func:`check_output` and :func:`read_output_shape` (public, imported by :mod:`contextembed.io`) check
an output path before any work and read an output's shape from its header.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Optional

import numpy as np

from .._runtime import provenance
from .._runtime.files import atomic_file, check_writable
from ..errors import FileFormatError, ProvenanceError
from ..extraction import LEVELS, Level
from .writer import OUTPUT_EXTENSIONS, OVERWRITE_FLAG, ArrayWriter

#: the kind of artifact an output's record names
OUTPUT_ARTIFACT = "embedding output"
#: a ``.npz`` output holds its record as this entry (the record's UTF-8 JSON bytes as ``uint8``)
RECORD_ENTRY = "provenance"
#: a ``.npy`` output (one array) has its record beside it: ``a.npy`` -> ``a.npy.provenance.json``
RECORD_SUFFIX = ".provenance.json"
#: encoder settings that change the features, recorded where the encoder has them
_ENCODER_OPTIONS = ("window", "stride", "pad_multiple")
#: what a differing field usually means, added to the error
_HINTS = {
    "input": "the input's text changed since",
    "model": "another model, or the model's files changed",
    "precision": "precision='auto' is measured once per machine (contextembed tune) and a resumed run adopts what its "
                 "outputs recorded, so this output was made on another machine or with another precision named",
    "backend": "backend='auto' is measured once per machine (contextembed tune) and a resumed run adopts what its "
               "outputs recorded, so this output was made on another machine or with another backend named (an "
               "output written before backends existed records none: it ran on torch)",
    "device": "the features of another device type differ in rounding",
    "normalize": "a text-level output written before text vectors could be normalised records none (and was "
                 "not normalised; the default text vector is)",
}



def check_output(output_path: str, *, input_path: Optional[str] = None, overwrite: bool = False) -> None:
    """Refuse, before any work, an output that cannot or must not be written.

    Raises
    ------
    ValueError
        If ``output_path`` is the input file, or does not end in ``.npy`` / ``.npz``.
    FileNotFoundError
        If its directory does not exist.
    FileExistsError
        If it exists and ``overwrite`` is false, or it is a directory.
    """
    output_path = os.fspath(output_path)
    if input_path is not None and os.path.exists(output_path) and os.path.samefile(input_path, output_path):
        raise ValueError(f"output {output_path} is the input file; choose another output path")
    if not output_path.endswith(OUTPUT_EXTENSIONS):
        raise ValueError(f"output {output_path!r} must end in .npy or .npz")
    directory = os.path.dirname(os.path.abspath(output_path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write output {output_path}: its directory {directory} does not exist")
    if os.path.isdir(output_path):
        raise FileExistsError(f"output {output_path} is a directory; pass a file name ending in .npy or .npz")
    if output_path.endswith(".npy") and os.path.lexists(record_file(output_path)) and \
            not _is_plain_file(record_file(output_path)):
        raise FileExistsError(f"{record_file(output_path)}, where the output's provenance record goes, is not a "
                              "regular file; move it away")
    check_writable(output_path, overwrite, what="output", flag=OVERWRITE_FLAG)


def read_output_shape(path: str, level: Optional[Level] = "word") -> tuple[int, int]:
    """``(rows, dim)`` of an output written by :func:`embed_file`, read from its header only.

    A ``.npz`` must hold ``features``, and ``lengths`` if it holds them must fit the rows of
    ``level``: at word level their sum is the number of rows (one per token), at text level their
    number is (one per sentence); ``level=None`` checks neither.

    Raises
    ------
    FileFormatError
        If the file is not such an output (not an array file, no 2-D ``features``, lengths that
        disagree).
    """
    path = os.fspath(path)
    try:
        if path.endswith(".npy"):
            shape = np.load(path, mmap_mode="r").shape
        else:
            with zipfile.ZipFile(path) as archive, archive.open("features.npy") as handle:
                shape = _read_npy_header(handle)[0]
                lengths = np.load(path)["lengths"] if "lengths.npy" in archive.namelist() else None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise FileFormatError(f"not a contextembed output ({type(error).__name__}: {error})", path=path) from None
    if len(shape) != 2:
        raise FileFormatError(f"features have shape {shape}; a contextembed output holds (rows, dim)", path=path)
    if path.endswith(".npz") and lengths is not None and level == "word" and int(np.sum(lengths)) != shape[0]:
        raise FileFormatError(f"'lengths' add up to {int(np.sum(lengths))} tokens but 'features' has {shape[0]} rows",
                              path=path)
    if path.endswith(".npz") and lengths is not None and level == "text" and len(lengths) != shape[0]:
        raise FileFormatError(f"'lengths' names {len(lengths)} sentences but 'features' has {shape[0]} rows (one per "
                              "sentence)", path=path)
    return int(shape[0]), int(shape[1])


def _read_npy_header(handle) -> tuple:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` stream ``handle``, left at its first data byte."""
    version = np.lib.format.read_magic(handle)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read_header is None:
        raise ValueError(f"unexpected .npy format version {version}")
    return read_header(handle)


def record_file(output_path: str) -> str:
    """The file that holds the provenance record of the ``.npy`` output ``output_path``."""
    return os.fspath(output_path) + RECORD_SUFFIX


def output_fields(settings, output_path: str, extractor, *, input_hash: str, input_format: str) -> dict:
    """The fields of an output's provenance record, except ``content`` (what was written).

    The input's content hash and format (``input_format``: the one it was read as), and from
    ``settings`` (:class:`~contextembed.io._settings.EmbedSettings`) its tokenizer, level, dtype and
    ``doc_sep``; the model's fingerprint and every option that changes the features as
    ``extractor``'s loaded encoder resolved it (layer indexes, combine, subword pooling; at text
    level the text pooling and ``normalize``; the precision and backend it runs, its device type,
    its window settings), and the output's format.
    """
    from ..encoders._identity import identify

    encoder, level = extractor.encoder, settings.level
    device = getattr(encoder, "device", None)
    text = {"normalize": extractor.normalize} if level == "text" else {}  # word rows are never normalised
    # document context, where there is any (an output of sentences alone records none, as before it existed)
    documents = {"context": extractor.context, "doc_sep": settings.doc_sep} if extractor.context else {}
    return {  # in the order a difference is reported: the level before the options whose default it sets
        "input": input_hash, "input_format": input_format, "level": level, "tokenizer": settings.tokenizer,
        "model": identify(encoder.spec or settings.encoder_ref.spec).fingerprint,
        "layers": list(extractor.pooling.layer_indexes), "combine": extractor.pooling.combine,
        "subword_pooling": extractor.subword_pooling, **documents,
        "text_pooling": extractor.text_pooling if level == "text" else None, **text,
        "precision": getattr(encoder, "precision", None), "backend": getattr(encoder, "backend", None),
        "device": getattr(device, "type", device),
        "encoder_options": {name: getattr(encoder, name) for name in _ENCODER_OPTIONS if hasattr(encoder, name)},
        "dtype": settings.dtype, "output_format": os.path.splitext(os.fspath(output_path))[1].lstrip("."),
    }


def read_output_record(output_path: str, *, artifact: Optional[str] = None) -> Optional[dict]:
    """The provenance record of an output written by :func:`embed_file`; ``None`` if it has none.

    Read without unpickling anything: a ``.npz`` entry must be ``uint8`` bytes.
    """
    output_path = os.fspath(output_path)
    artifact = artifact or f"output {output_path}"
    if output_path.endswith(".npy"):
        return provenance.read(record_file(output_path), artifact=artifact)
    try:
        with zipfile.ZipFile(output_path) as archive:
            if f"{RECORD_ENTRY}.npy" not in archive.namelist():
                return None
            with archive.open(f"{RECORD_ENTRY}.npy") as handle:
                data = np.lib.format.read_array(handle, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise ProvenanceError(f"{artifact} has a damaged provenance record ({type(error).__name__}: {error})",
                              artifact=artifact, field=None) from None
    if data.dtype != np.uint8 or data.ndim != 1:
        raise ProvenanceError(f"{artifact} has a damaged provenance record (a {data.dtype} array of shape "
                              f"{data.shape}, not bytes)", artifact=artifact, field=None)
    return provenance.loads(data.tobytes(), artifact=artifact)


def check_reusable(output_path: str, expected: dict, *, input_path: str) -> None:
    """Refuse to reuse the existing output ``output_path`` unless it is what would be written now.

    It must open as an output, record ``expected`` (:func:`expected_record`: same input content,
    model, options) and hold exactly the features and lengths it recorded when written (a file
    edited or cut since is refused). The features are read once to compare their hash.

    Raises
    ------
    ProvenanceError
        Naming the output, its input, the field that differs and the fix.
    FileFormatError
        If it is not an output of :func:`embed_file` at all (damaged, truncated).
    """
    output_path = os.fspath(output_path)
    artifact = f"output {output_path} (of input {input_path})"
    fix = f"pass {OVERWRITE_FLAG} to redo it"
    shape = _reusable_shape(output_path, None, fix)
    found = read_output_record(output_path, artifact=artifact)
    content = found.pop("content", None) if isinstance(found, dict) else None
    recorded_level = found.get("level") if isinstance(found, dict) else None
    _reusable_shape(output_path, recorded_level if recorded_level in LEVELS else "word", fix)
    try:
        provenance.check(found, expected, artifact=artifact, fix=fix)
    except ProvenanceError as error:
        if error.field not in _HINTS:
            raise
        message = str(error).replace(f"; {fix}", f" ({_HINTS[error.field]}); {fix}")
        raise ProvenanceError(message, artifact=artifact, field=error.field) from None
    _check_content(output_path, content, shape, artifact, fix)


def _reusable_shape(path: str, level: Optional[str], fix: str) -> tuple[int, int]:
    """:func:`read_output_shape`, its error saying that the output cannot be reused and ``fix``:
    first as a file (``level=None``), then its ``lengths`` against the level its record names."""
    try:
        return read_output_shape(path, level=level)
    except FileFormatError as error:
        raise FileFormatError(f"{error}; it cannot be reused: {fix}") from None


def _content(writer: ArrayWriter, lengths: Optional[np.ndarray]) -> dict:
    """What an output holds, as written: its shape and the hashes of its arrays."""
    return {"rows": writer.shape[0], "dim": writer.shape[1], "features": writer.features_hash(),
            "lengths": None if lengths is None else _array_hash(lengths)}


def _array_hash(array: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).hexdigest()


def _check_content(path: str, content, shape: tuple[int, int], artifact: str, fix: str) -> None:
    """``path`` holds the arrays its record's ``content`` describes (nothing edited, cut or added)."""

    def changed(what: str) -> ProvenanceError:
        return ProvenanceError(f"{artifact} {what}: the file was changed after it was written; {fix}",
                               artifact=artifact, field="content")

    if not isinstance(content, dict):
        raise ProvenanceError(f"{artifact} records no content hash, so what it holds cannot be checked; {fix}",
                              artifact=artifact, field="content")
    if [content.get("rows"), content.get("dim")] != list(shape):
        raise changed(f"holds {shape[0]} x {shape[1]} features where {content.get('rows')} x {content.get('dim')} "
                      "were written")
    try:
        features, lengths = _stored_hashes(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise changed(f"cannot be read back ({type(error).__name__}: {error})") from None
    if features != content.get("features"):
        raise changed("holds other features than were written (their hash differs from the one recorded)")
    if lengths != content.get("lengths"):
        raise changed("holds other 'lengths' than were written")


def _stored_hashes(path: str) -> tuple[str, Optional[str]]:
    """Hashes of the data of ``features`` and of ``lengths`` (``None`` if absent) as stored in ``path``."""
    with ExitStack() as stack:
        if path.endswith(".npy"):
            handle, names = stack.enter_context(open(path, "rb")), []
        else:
            archive = stack.enter_context(zipfile.ZipFile(path))
            handle, names = stack.enter_context(archive.open("features.npy")), archive.namelist()
        _read_npy_header(handle)
        digest = hashlib.blake2b(digest_size=16)
        while chunk := handle.read(1 << 20):  # a zip entry also checks its CRC at the end
            digest.update(chunk)
        lengths = None
        if "lengths.npy" in names:
            with archive.open("lengths.npy") as stored:
                lengths = _array_hash(np.lib.format.read_array(stored, allow_pickle=False))
    return digest.hexdigest(), lengths


def _close_with_record(writer: ArrayWriter, fields: dict, lengths: np.ndarray) -> None:
    """Finish ``writer`` with the output's provenance record: a ``.npz`` entry, or beside a ``.npy``
    (written before the output is renamed into place, so an output never exists without it)."""
    npz = writer.path.endswith(".npz")
    record = provenance.record(OUTPUT_ARTIFACT, **fields, content=_content(writer, lengths if npz else None))
    if npz:
        writer.close(lengths=lengths, **{RECORD_ENTRY: np.frombuffer(provenance.dumps(record), dtype=np.uint8)})
    else:
        writer.close()
        provenance.write(record_file(writer.path), record)


@contextmanager
def _record_kept_on_error(output_path: str) -> Iterator[None]:
    """For a ``.npy`` output: if the block fails (after its record was written beside it, before
    the output was renamed into place), put the record file back as it was, or remove a new one."""
    sidecar = record_file(output_path)
    if not output_path.endswith(".npy") or (os.path.lexists(sidecar) and not _is_plain_file(sidecar)):
        yield
        return
    before = _read_bytes(sidecar)
    try:
        yield
    except BaseException:
        if before is None and os.path.lexists(sidecar):
            os.remove(sidecar)
        elif before is not None and _read_bytes(sidecar) != before:
            with atomic_file(sidecar, what="provenance record") as temporary, open(temporary, "wb") as handle:
                handle.write(before)
        raise


def _read_bytes(path: str) -> Optional[bytes]:
    if not _is_plain_file(path):
        return None
    with open(path, "rb") as handle:
        return handle.read()


def _is_plain_file(path: str) -> bool:
    return os.path.isfile(path) and not os.path.islink(path)



__all__ = ["OUTPUT_ARTIFACT", "RECORD_ENTRY", "RECORD_SUFFIX", "check_output", "check_reusable", "output_fields",
           "read_output_record", "read_output_shape", "record_file"]
