""":func:`embed_file`: a file of sentences to a file of features, checked first, written atomically.

The options, the output path and the whole input are checked before the model is loaded; the input
is read twice (its lengths first, then chunk by chunk to encode, each chunk checked against the
first reading), so memory stays bounded whatever its size. Rows go through
:class:`~contextembed.io.writer.ArrayWriter` and the output carries its provenance record
(:mod:`contextembed.io._records`); :func:`expected_record` is the record a run with the same
arguments would write now, which a resume checks an existing output against.

Part of :mod:`contextembed.io`, which imports :func:`embed_file` from here.
"""

from __future__ import annotations

import inspect
import os
from itertools import islice
from typing import Optional, get_args

import numpy as np

from .._runtime import provenance, terminal
from ..extraction import LEVELS, FeatureExtractor, Level, level_options
from ..pooling._layers import OutputDtype
from ..tokenizers import TOKENIZERS, get_tokenizer
from ._records import OUTPUT_ARTIFACT, _close_with_record, _record_kept_on_error, check_output, output_fields
from .readers import DocSep, _check_doc_sep_format, check_input, read_documents, read_sentences
from .writer import ArrayWriter

OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)

#: the options of :func:`embed_file` whose default depends on ``level`` (``None``: that default)
LEVEL_OPTIONS = ("tokenizer", "layers", "combine", "subword_pooling", "text_pooling", "normalize")
#: those that shape text vectors only
TEXT_OPTIONS = ("text_pooling", "normalize")


def _embed_options(level: str, given: dict) -> dict:
    """The options of :data:`LEVEL_OPTIONS` with ``level``'s defaults where ``given`` has ``None``.

    Raises
    ------
    ValueError
        For an unknown ``level``, or a text option given at word level (it would be ignored).
    """
    if level not in LEVELS:
        raise ValueError(f"level={level!r} is not one of {', '.join(map(repr, LEVELS))}")
    given_text = [name for name in TEXT_OPTIONS if given[name] is not None]
    if level == "word" and given_text:
        name = given_text[0]
        raise ValueError(f"{name}={given[name]!r} (--{name.replace('_', '-')}) shapes text vectors: pass "
                         "level='text' (--level text), or leave it unset for word features")
    return level_options(level, **given)


def _extractor(encoder, level: str, chosen: dict, context: int = 0) -> FeatureExtractor:
    return FeatureExtractor(encoder, **{name: chosen[name] for name in LEVEL_OPTIONS if name != "tokenizer"},
                            level=level, context=context)


def _check_doc_sep(context: int, doc_sep: str, input_format: str) -> None:
    """``doc_sep`` is a plain-text option that only context uses: never ignored silently."""
    _check_doc_sep_format(doc_sep, input_format)
    if doc_sep != "none" and not context:
        raise ValueError(f"doc_sep={doc_sep!r} (--doc-sep) sets the documents that context reaches across; it does "
                         "nothing without context: pass context=N (--context N) too, or leave it unset")


def _check_embed_options(level: str, tokenizer: str, dtype: str, chunk_sentences: int) -> None:
    checks = {"level": (level, LEVELS), "tokenizer": (tokenizer, tuple(TOKENIZERS)), "dtype": (dtype, OUTPUT_DTYPES)}
    for name, (value, valid) in checks.items():
        if value not in valid:
            raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, valid))}")
    if not isinstance(chunk_sentences, int) or chunk_sentences < 1:
        raise ValueError(f"chunk_sentences={chunk_sentences!r} must be a positive integer")


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
    The options, the output path (see :func:`check_output`) and the whole input (first of two
    readings) are checked before the model is loaded; the output appears only once complete, and an
    existing one is replaced only with ``overwrite=True``.

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
    from ..encoders import load_encoder

    input_path, output_path = os.fspath(input_path), os.fspath(output_path)
    chosen = _embed_options(level, {"tokenizer": tokenizer, "layers": layers, "combine": combine,
                                    "subword_pooling": subword_pooling, "text_pooling": text_pooling,
                                    "normalize": normalize})
    _check_embed_options(level, chosen["tokenizer"], dtype, chunk_sentences)
    input_format = check_input(input_path, input_format)
    _check_doc_sep(context, doc_sep, input_format)
    check_output(output_path, input_path=input_path, overwrite=overwrite)
    input_hash = provenance.file_hash(input_path)  # before reading: the record names the text that was read
    split = get_tokenizer(chosen["tokenizer"])
    documents, lengths = _documents_and_lengths(read_documents(input_path, input_format, split, doc_sep))
    encoder = encoder or load_encoder(spec, device=device, precision=precision, backend=backend)
    extractor = _extractor(encoder, level, chosen, context)
    fields = output_fields(spec, output_path, extractor, input_hash=input_hash, input_format=input_format,
                           tokenizer=chosen["tokenizer"], level=level, dtype=dtype, doc_sep=doc_sep)
    n_rows = int(lengths.sum()) if level == "word" else len(lengths)
    chunks = _checked_chunks(read_sentences(input_path, input_format, split), lengths, chunk_sentences, input_path)
    with _record_kept_on_error(output_path), \
            ArrayWriter(output_path, n_rows, extractor.dim, dtype, overwrite=overwrite) as writer:
        _write_rows(writer, extractor, chunks, level, total=len(lengths), show_progress=show_progress,
                    documents=documents)
        if provenance.file_hash(input_path) != input_hash:
            raise ValueError(f"input {input_path} changed while it was being read; nothing was written")
        _close_with_record(writer, fields, lengths)
    return {"sentences": len(lengths), "rows": n_rows, "dim": extractor.dim, "output": output_path,
            "backend": fields["backend"], "precision": fields["precision"]}


def expected_record(spec, input_path: str, output_path: str, *, encoder, **options) -> dict:
    """The record (without ``content``) that ``embed_file(spec, input_path, output_path,
    encoder=encoder, **options)`` would write now: what an existing output must match to be reused.

    ``options`` are :func:`embed_file`'s keyword arguments, with its defaults.
    """
    given = inspect.signature(embed_file).bind(spec, input_path, output_path, encoder=encoder, **options)
    given.apply_defaults()
    arg = given.arguments
    chosen = _embed_options(arg["level"], {name: arg[name] for name in LEVEL_OPTIONS})
    _check_embed_options(arg["level"], chosen["tokenizer"], arg["dtype"], arg["chunk_sentences"])
    input_format = check_input(input_path, arg["input_format"])
    _check_doc_sep(arg["context"], arg["doc_sep"], input_format)
    extractor = _extractor(encoder, arg["level"], chosen, arg["context"])
    fields = output_fields(spec, output_path, extractor, input_hash=provenance.file_hash(input_path),
                           input_format=input_format, tokenizer=chosen["tokenizer"], level=arg["level"],
                           dtype=arg["dtype"], doc_sep=arg["doc_sep"])
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



__all__ = ["LEVEL_OPTIONS", "OUTPUT_DTYPES", "TEXT_OPTIONS", "embed_file", "expected_record"]
