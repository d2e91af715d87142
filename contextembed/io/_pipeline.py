""":func:`embed_file`: a file of sentences to a file of features, checked first, written atomically.

The options, the output path and the whole input are checked before the model is loaded; the input
is read twice (its lengths first, then chunk by chunk to encode, each chunk checked against the
first reading), so memory stays bounded whatever its size. Rows go through
:class:`~contextembed.io.writer.ArrayWriter` and the output carries its provenance record
(:mod:`contextembed.io._records`); :func:`expected_record` is the record a run with the same
arguments would write now, which a resume checks an existing output against. The options are built
once into an :class:`~contextembed.io._settings.EmbedSettings` (checked there), and the functions
below :func:`embed_file` (:func:`embed_with`, :func:`record_for`) take that object.

Part of :mod:`contextembed.io`, which imports :func:`embed_file` from here.
"""

from __future__ import annotations

import os
from itertools import islice
from typing import Optional

import numpy as np

from .._runtime import provenance, terminal
from ..encoders._registry import EncoderRef
from ..extraction import FeatureExtractor, Level
from ..pooling._layers import OutputDtype
from ..tokenizers import get_tokenizer
from ._records import OUTPUT_ARTIFACT, _close_with_record, _record_kept_on_error, check_output, output_fields
from ._settings import LEVEL_OPTIONS, OUTPUT_DTYPES, TEXT_OPTIONS, EmbedSettings  # noqa: F401 (LEVEL_OPTIONS...)
from .readers import DocSep, _check_doc_sep_format, check_input, read_documents, read_sentences
from .writer import ArrayWriter

#: the keywords of :func:`embed_file` that change how one call runs, not what it writes
CALL_KEYWORDS = ("show_progress", "overwrite")


def _extractor(encoder, settings: EmbedSettings) -> FeatureExtractor:
    return FeatureExtractor(encoder, settings.layers, settings.combine, settings.subword_pooling,
                            settings.text_pooling, settings.normalize, level=settings.level, context=settings.context)


def _input_format(input_path: str, settings: EmbedSettings) -> str:
    """The format of ``input_path`` (given or told from its extension), checked against ``doc_sep``."""
    input_format = check_input(input_path, settings.input_format)
    _check_doc_sep_format(settings.doc_sep, input_format)
    return input_format


def _checked_chunks(sentences, lengths: np.ndarray, size: int, path: str):
    """Chunks of the second reading, checked against the lengths of the first."""
    start = 0
    for chunk in _chunks(sentences, size):
        now = np.fromiter((len(s) for s in chunk), dtype=np.int64, count=len(chunk))
        before = lengths[start : start + len(chunk)]
        if len(before) != len(now) or np.any(before != now):
            raise ValueError(
                f"input {path} changed while it was being read (sentences {start}-{start + len(chunk) - 1} "
                "differ from the first reading); nothing was written"
            )
        start += len(chunk)
        yield chunk
    if start != len(lengths):
        raise ValueError(f"input {path} changed while it was being read ({start} sentences, first {len(lengths)}); "
                         "nothing was written")


def embed_file(
    spec: str,
    input_path: str,
    output_path: str,
    *,
    input_format: Optional[str] = None,
    tokenizer: Optional[str] = None,
    layers=None,
    combine: Optional[str] = None,
    subword_pooling: Optional[str] = None,
    level: Level = "word",
    text_pooling: Optional[str] = None,
    normalize: Optional[bool] = None,
    dtype: OutputDtype = "float32",
    device: str = "auto",
    precision: str = "auto",
    backend: str = "torch",
    context: int = 0,
    doc_sep: DocSep = "none",
    chunk_sentences: int = 4096,
    show_progress: bool = True,
    overwrite: bool = False,
    encoder=None,
) -> dict:
    """Embed a file of sentences and stream the features to ``output_path``, atomically.

    Word level writes one row per input token (``.npz`` adds ``lengths``: tokens per sentence); text
    level one row per sentence. Memory stays bounded by ``chunk_sentences`` whatever the corpus size.
    The options ``tokenizer``, ``layers``, ``combine``, ``subword_pooling``, ``text_pooling`` and
    ``normalize`` left ``None`` take the defaults of ``level``
    (:data:`contextembed.extraction.LEVEL_DEFAULTS`): word level splits lines on white space and uses
    the encoder's layers and combine with each word's first piece; text level writes the default text
    vector (:data:`contextembed.pooling.TEXT_DEFAULTS`, what ``TextEmbedder()`` gives). Text options
    given at word level are an error.
    ``context`` (word level, transformers): each sentence is encoded with up to that many pieces of
    its document's text on each side (as ``TokenEmbedder(context=...)``); the documents are the file's
    (:func:`read_documents`; ``doc_sep="blank"`` makes blank lines of plain text end one).
    The options (built once into an :class:`~contextembed.io._settings.EmbedSettings`, which
    :func:`embed_with` takes), the output path (see :func:`check_output`) and the whole input (first
    of two readings) are checked before the model is loaded; the output appears only once complete,
    and an existing one is replaced only with ``overwrite=True``.

    Returns
    -------
    dict
        ``sentences``, ``rows``, ``dim``, ``output``.

    Raises
    ------
    FileExistsError
        If ``output_path`` exists and ``overwrite`` is false.
    FileFormatError
        If the input breaks its format (the message names the file and line).
    """
    settings = EmbedSettings(
        EncoderRef(spec, device, precision, backend=backend), input_format=input_format, tokenizer=tokenizer,
        layers=layers, combine=combine, subword_pooling=subword_pooling, level=level, text_pooling=text_pooling,
        normalize=normalize, dtype=dtype, context=context, doc_sep=doc_sep, chunk_sentences=chunk_sentences,
    )
    return embed_with(settings, input_path, output_path, encoder=encoder, overwrite=overwrite,
                      show_progress=show_progress)


def embed_with(settings: EmbedSettings, input_path: str, output_path: str, *, encoder=None, overwrite: bool = False,
               show_progress: bool = True) -> dict:
    """:func:`embed_file` with its options built already: what the entry points that build one
    :class:`~contextembed.io._settings.EmbedSettings` for many files call (they trust it: nothing
    in it is checked again).

    Parameters
    ----------
    settings : EmbedSettings
        What the output is made with; ``encoder`` (loaded already) or its ``encoder_ref`` runs.
    input_path, output_path, overwrite, show_progress
        As for :func:`embed_file`.
    """
    from ..encoders import load_encoder

    input_path, output_path = os.fspath(input_path), os.fspath(output_path)
    input_format = _input_format(input_path, settings)
    check_output(output_path, input_path=input_path, overwrite=overwrite)
    input_hash = provenance.file_hash(input_path)  # before reading: the record names the text that was read
    split = get_tokenizer(settings.tokenizer)
    documents, lengths = _documents_and_lengths(read_documents(input_path, input_format, split, settings.doc_sep))
    ref = settings.encoder_ref
    encoder = encoder or load_encoder(ref.spec, device=ref.device, precision=ref.precision, backend=ref.backend,
                                      **ref.options())
    extractor = _extractor(encoder, settings)
    fields = output_fields(settings, output_path, extractor, input_hash=input_hash, input_format=input_format)
    n_rows = int(lengths.sum()) if settings.level == "word" else len(lengths)
    chunks = _checked_chunks(read_sentences(input_path, input_format, split), lengths, settings.chunk_sentences,
                             input_path)
    with _record_kept_on_error(output_path), \
            ArrayWriter(output_path, n_rows, extractor.dim, settings.dtype, overwrite=overwrite) as writer:
        _write_rows(writer, extractor, chunks, settings.level, total=len(lengths), show_progress=show_progress,
                    documents=documents)
        if provenance.file_hash(input_path) != input_hash:
            raise ValueError(f"input {input_path} changed while it was being read; nothing was written")
        _close_with_record(writer, fields, lengths)
    return {"sentences": len(lengths), "rows": n_rows, "dim": extractor.dim, "output": output_path,
            "backend": fields["backend"], "precision": fields["precision"]}


def expected_record(spec, input_path: str, output_path: str, *, encoder, **options) -> dict:
    """The record (without ``content``) that ``embed_file(spec, input_path, output_path,
    encoder=encoder, **options)`` would write now: what an existing output must match to be reused.

    ``options`` are :func:`embed_file`'s keyword arguments, with its defaults (``show_progress``
    and ``overwrite`` are taken and change nothing); they are checked as ``embed_file`` checks them
    (:meth:`EmbedSettings.from_keywords`). :func:`record_for` takes settings built already.
    """
    kept = {name: value for name, value in options.items() if name not in CALL_KEYWORDS}
    return record_for(EmbedSettings.from_keywords(spec, **kept), input_path, output_path, encoder=encoder)


def record_for(settings: EmbedSettings, input_path: str, output_path: str, *, encoder) -> dict:
    """The record (without ``content``) that :func:`embed_with` would write now with ``settings``
    and the loaded ``encoder``: its fields from ``settings``, ``encoder`` (as it resolved the
    layers, precision and backend) and ``input_path``'s content."""
    input_path = os.fspath(input_path)
    input_format = _input_format(input_path, settings)
    fields = output_fields(settings, output_path, _extractor(encoder, settings),
                           input_hash=provenance.file_hash(input_path), input_format=input_format)
    return provenance.record(OUTPUT_ARTIFACT, **fields)


def _documents_and_lengths(read) -> tuple[np.ndarray, np.ndarray]:
    """The document number and the length of every sentence ``read`` (:func:`read_documents`) gives."""
    pairs = np.fromiter(((document, len(tokens)) for document, tokens in read), dtype=np.dtype((np.int64, 2)))
    return pairs[:, 0], pairs[:, 1]


def _write_rows(writer: ArrayWriter, extractor, chunks, level: str, *, total: int, show_progress: bool,
                documents: np.ndarray) -> None:
    """Encode each chunk of sentences and append its rows: one per token, or one per sentence. The
    bar shows 0 of the sentences at once, and the encoder counts them on it as its forward passes
    finish (:func:`contextembed.encoders._base.progress_bar`), so the first estimate comes early."""
    with terminal.progress_bar(total, unit="sent", show=show_progress) as progress:
        if extractor.context:
            _write_rows_in_context(writer, extractor, chunks, documents, progress)
            return
        for chunk in chunks:
            if level == "word":
                rows = list(extractor.iter_words(chunk, show_progress=progress))
                if rows:
                    writer.write(np.concatenate(rows))
            else:
                writer.write(np.stack(list(extractor.iter_texts(chunk, show_progress=progress))))


def _write_rows_in_context(writer: ArrayWriter, extractor, chunks, documents: np.ndarray, progress) -> None:
    """Word rows with document context: the chunks read as one stream of sentences, so that context
    reaches across them (the encoder holds its own chunk and the sentences waiting for context)."""
    sentences = (sentence for chunk in chunks for sentence in chunk)
    rows_of = extractor.iter_words(sentences, doc_ids=iter(documents.tolist()), show_progress=progress)
    for block in _chunks(rows_of, 1024):
        rows = [row for row in block if len(row)]
        if rows:
            writer.write(np.concatenate(rows))

def _chunks(iterable, size: int):
    iterator = iter(iterable)
    while chunk := list(islice(iterator, size)):
        yield chunk



__all__ = ["CALL_KEYWORDS", "LEVEL_OPTIONS", "OUTPUT_DTYPES", "TEXT_OPTIONS", "embed_file", "embed_with",
           "expected_record", "record_for"]
