"""Readers for the small tabular corpora the examples and benchmarks use (never downloads)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple, Optional, Union

import numpy as np

from ..io.readers import NEW_DOCUMENT, ConllSentence, _conll_items, _lines, _numbered, check_input


class ConllDocuments(NamedTuple):
    """What :func:`read_conll_documents` reads: unpacks as ``sentences, tags, doc_ids``, and
    ``fit(*corpus)`` / ``score(*corpus)`` hand the document ids to a tagger."""

    #: the tokens of each sentence
    sentences: list[list[str]]
    #: the tags of each sentence, token by token
    tags: list[list[str]]
    #: the document of each sentence: 0, 1, ... in reading order, never reused across the files
    doc_ids: list[int]


def read_conll_documents(
    *paths: Union[str, os.PathLike], column: int = -1, limit: Optional[int] = None
) -> ConllDocuments:
    """Read CoNLL-2003 style files in one pass: sentences, tags and the document of each sentence.

    One ``word ... tag`` line per token, blank lines between sentences; a ``-DOCSTART-`` line starts
    a document (and is not a sentence). Each file starts a document too, and the numbers go on from
    one file to the next, so ids never repeat across the files of one call: the ``doc_ids`` of the
    taggers and of :class:`~contextembed.sklearn.TokenEmbedder` with ``context``.

    Parameters
    ----------
    *paths : str or path
        One or more files, read in order. Each is checked to exist before any is read.
    column : int
        Which whitespace-separated column holds the tag: ``1`` the first after the token, ``-1``
        (default) the last. Every token line of a file has the columns of its first; ``column``
        must name a tag column (not the token's, 0) of each file.
    limit : int, optional
        Stop after this many sentences in all (``None``: read everything).

    Returns
    -------
    ConllDocuments
        ``(sentences, tags, doc_ids)``, aligned sentence by sentence and token by token.

    Raises
    ------
    TypeError
        A path that is not a str or path, or a ``column`` that is not an int (a bool is not).
    ValueError
        No path, a ``limit`` that is not a non-negative int, or a ``column`` outside a file's tag
        columns (naming the file and line).
    FileNotFoundError
        A path that is not an existing file.
    FileFormatError
        A line that is not UTF-8, ends with a lone carriage return, or has other columns than the
        file's first token line, naming the file and line.
    """
    if not paths:
        raise ValueError("read_conll_documents needs at least one path")
    _check_limit(limit)
    _check_column(column)
    paths = [_checked_path(path, i) for i, path in enumerate(paths)]
    corpus = ConllDocuments([], [], [])
    for document, (path, sentence) in islice(_numbered(_conll_files(paths), honoured=True), limit):
        corpus.sentences.append(sentence.tokens)
        corpus.tags.append(_tags(sentence, column, path))
        corpus.doc_ids.append(document)
    return corpus


def _check_limit(limit: Optional[int]) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None (everything), got {limit!r}")


def _check_column(column: int) -> None:
    """``column`` is an int (its range is checked against each file's columns as they are read)."""
    if isinstance(column, (bool, np.bool_)) or not isinstance(column, (int, np.integer)):
        raise TypeError(f"column must be an int (the index of the tag column, -1 the last), got "
                        f"{type(column).__name__} {column!r:.40}")


def _checked_path(path, index: int) -> str:
    """``path`` as a str, an existing file (:func:`~contextembed.io.check_input`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"paths[{index}] is {type(path).__name__} ({path!r:.40}); expected a file path (a str or "
                        "os.PathLike)")
    check_input(os.fspath(path), "conll")
    return os.fspath(path)


def _conll_files(paths: list[str]) -> Iterator:
    """The sentences of every file as ``(path, ConllSentence)``, and
    :data:`~contextembed.io.readers.NEW_DOCUMENT` where a file or a ``-DOCSTART-`` starts a document."""
    for path in paths:
        yield NEW_DOCUMENT
        for item in _conll_items(path):
            yield item if item is NEW_DOCUMENT else (path, item)


def _tags(sentence: ConllSentence, column: int, path: str) -> list[str]:
    """The tags of ``column`` (every line of a file has as many columns: checked on its first)."""
    width = len(sentence.columns[0]) + 1
    if width == 1:
        raise ValueError(f"{path}, line {sentence.line}: column={column} names no tag column: the file's lines have "
                         "only the token column (expected 'word ... tag')")
    if not (1 <= column < width or -width < column <= -1):
        raise ValueError(f"{path}, line {sentence.line}: column={column} is outside the tag columns of this file's "
                         f"{width} columns: the token is column 0 ({-width}), the tags 1 to {width - 1} ({1 - width} "
                         "to -1)")
    return [fields[column - 1 if column > 0 else column] for fields in sentence.columns]


def read_conll(
    path: Union[str, os.PathLike], column: int = -1, limit: Optional[int] = None
) -> tuple[list[list[str]], list[list[str]]]:
    """Read a CoNLL-2003 style file: a line per token (the word, then tag columns), blank lines between.

    ``-DOCSTART-`` lines are skipped (:func:`read_conll_documents` also gives the document of each
    sentence, in the same pass).

    Parameters
    ----------
    path : str or path
    column : int
        Which whitespace-separated column holds the tag (default: the last); checked as
        :func:`read_conll_documents` checks it.
    limit : int, optional
        Stop after this many sentences.

    Returns
    -------
    (sentences, tags) : two lists of lists of str, aligned token by token.

    Raises
    ------
    TypeError, ValueError, FileNotFoundError, FileFormatError
        As :func:`read_conll_documents`.
    """
    sentences, tags, _ = read_conll_documents(path, column=column, limit=limit)
    return sentences, tags


def read_conll_doc_ids(path: Union[str, os.PathLike], limit: Optional[int] = None) -> list[int]:
    """Deprecated: :func:`read_conll_documents` reads the sentences, tags and document ids in one
    pass (and numbers documents across files). The document of each sentence :func:`read_conll`
    reads (numbered from 0; documents start at ``-DOCSTART-`` lines)."""
    warnings.warn("read_conll_doc_ids reads the file a second time: use read_conll_documents(path), which returns "
                  "(sentences, tags, doc_ids) in one pass", DeprecationWarning, stacklevel=2)
    from ..io.readers import read_documents

    _check_limit(limit)
    return [document for document, _ in islice(read_documents(os.fspath(path), "conll"), limit)]


def read_labelled_text(path: Union[str, os.PathLike], limit: Optional[int] = None) -> tuple[list[str], list[int]]:
    """Read ``label<TAB>text`` lines (SST-2 style); a header line whose label is not an int is skipped.

    GLUE's SST-2 ``train.tsv`` has its columns the other way round, and says so in its header
    ``sentence<TAB>label``: after that header every line is read as ``text<TAB>label``.
    Blank lines are skipped. A line without a tab, or a later label that is not an int, is a
    ``ValueError`` naming the line; text that is not UTF-8, or a carriage return without a line
    feed, a :class:`~contextembed.errors.FileFormatError` naming the line. ``limit``: at most this
    many texts (a non-negative int, or ``None`` for all).
    """
    _check_limit(limit)
    texts: list[str] = []
    labels: list[int] = []
    text_first = False
    for number, line in _lines(os.fspath(path)):
        if limit is not None and len(texts) >= limit:
            break
        if not line.strip():
            continue
        if text_first:
            text, tab, label = line.rpartition("\t")
        else:
            label, tab, text = line.partition("\t")
        is_int = label.isascii() and label.lstrip("-").isdigit()
        if number == 1 and not is_int:
            text_first = [field.strip().lower() for field in line.split("\t")] == ["sentence", "label"]
            continue
        if not tab:
            layout = "text<TAB>label" if text_first else "label<TAB>text"
            raise ValueError(f"{path}, line {number}: expected {layout!r}, got {line[:60]!r} (no tab)")
        if not is_int:
            raise ValueError(f"{path}, line {number}: label {label!r} is not an int")
        texts.append(text)
        labels.append(int(label))
    return texts, labels


__all__ = ["ConllDocuments", "read_conll", "read_conll_doc_ids", "read_conll_documents", "read_labelled_text"]
