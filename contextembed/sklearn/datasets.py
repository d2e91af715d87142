"""Readers for the small tabular corpora the examples and benchmarks use (never downloads)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple, Optional, Union

from ..io import NEW_DOCUMENT, _conll_items, _lines, _numbered


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
        One or more files, read in order.
    column : int
        Which whitespace-separated column holds the tag (default: the last).
    limit : int, optional
        Stop after this many sentences in all (``None``: read everything).

    Returns
    -------
    ConllDocuments
        ``(sentences, tags, doc_ids)``, aligned sentence by sentence and token by token.

    Raises
    ------
    ValueError
        No path, a ``limit`` that is not a non-negative int, or a token line without a tag column
        (naming the file, sentence and token).
    FileFormatError
        A line that is not UTF-8, naming the file and line.
    """
    if not paths:
        raise ValueError("read_conll_documents needs at least one path")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None (everything), got {limit!r}")
    corpus = ConllDocuments([], [], [])
    for document, (path, number, words, columns) in islice(_numbered(_conll_files(paths), honoured=True), limit):
        corpus.sentences.append(words)
        corpus.tags.append(_tags(words, columns, column, path, number))
        corpus.doc_ids.append(document)
    return corpus


def _conll_files(paths) -> Iterator:
    """The sentences of every file as ``(path, number in its file, words, columns)``, and
    :data:`~contextembed.io.NEW_DOCUMENT` where a file or a ``-DOCSTART-`` starts a document."""
    for path in paths:
        yield NEW_DOCUMENT
        number = 0
        for item in _conll_items(os.fspath(path)):
            if item is not NEW_DOCUMENT:
                item, number = (path, number, *item), number + 1
            yield item


def _tags(words: list[str], columns: list[list[str]], column: int, path, sentence: int) -> list[str]:
    for position, fields in enumerate(columns):
        if not fields:
            raise ValueError(
                f"{path}, sentence {sentence}, token {position} ({words[position]!r}): expected 'word ... tag', got "
                "no tag column"
            )
    return [[word, *fields][column] for word, fields in zip(words, columns)]


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
        Which whitespace-separated column holds the tag (default: the last).
    limit : int, optional
        Stop after this many sentences.

    Returns
    -------
    (sentences, tags) : two lists of lists of str, aligned token by token.
    """
    sentences, tags, _ = read_conll_documents(path, column=column, limit=limit)
    return sentences, tags


def read_conll_doc_ids(path: Union[str, os.PathLike], limit: Optional[int] = None) -> list[int]:
    """Deprecated: :func:`read_conll_documents` reads the sentences, tags and document ids in one
    pass (and numbers documents across files). The document of each sentence :func:`read_conll`
    reads (numbered from 0; documents start at ``-DOCSTART-`` lines)."""
    warnings.warn("read_conll_doc_ids reads the file a second time: use read_conll_documents(path), which returns "
                  "(sentences, tags, doc_ids) in one pass", DeprecationWarning, stacklevel=2)
    from ..io import read_documents

    return [document for document, _ in islice(read_documents(os.fspath(path), "conll"), limit)]


def read_labelled_text(path: Union[str, os.PathLike], limit: Optional[int] = None) -> tuple[list[str], list[int]]:
    """Read ``label<TAB>text`` lines (SST-2 style); a header line whose label is not an int is skipped.

    GLUE's SST-2 ``train.tsv`` has its columns the other way round, and says so in its header
    ``sentence<TAB>label``: after that header every line is read as ``text<TAB>label``.
    Blank lines are skipped. A later label that is not an int is a ``ValueError`` naming the line;
    text that is not UTF-8 a :class:`~contextembed.errors.FileFormatError` naming the line.
    """
    texts: list[str] = []
    labels: list[int] = []
    text_first = False
    for number, line in _lines(os.fspath(path)):
        if not line.strip():
            continue
        if text_first:
            text, _, label = line.rpartition("\t")
        else:
            label, _, text = line.partition("\t")
        if not (label.isascii() and label.lstrip("-").isdigit()):
            if number == 1:
                text_first = [field.strip().lower() for field in line.split("\t")] == ["sentence", "label"]
                continue
            raise ValueError(f"{path}, line {number}: label {label!r} is not an int")
        texts.append(text)
        labels.append(int(label))
        if limit is not None and len(texts) >= limit:
            break
    return texts, labels
