"""Readers for the small tabular corpora the examples and benchmarks use (never downloads)."""

from __future__ import annotations

import os
from itertools import islice
from typing import Optional, Union

from ..io import _lines
from ..io import read_conll as read_columns


def read_conll(
    path: Union[str, os.PathLike], column: int = -1, limit: Optional[int] = None
) -> tuple[list[list[str]], list[list[str]]]:
    """Read a CoNLL-2003 style file: a line per token (the word, then tag columns), blank lines between.

    ``-DOCSTART-`` lines are skipped.

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
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    for words, columns in islice(read_columns(os.fspath(path)), limit):
        for position, fields in enumerate(columns):
            if not fields:
                raise ValueError(
                    f"{path}, sentence {len(sentences)}, token {position} ({words[position]!r}): expected "
                    "'word ... tag', got no tag column"
                )
        sentences.append(words)
        tags.append([[word, *fields][column] for word, fields in zip(words, columns)])
    return sentences, tags


def read_conll_doc_ids(path: Union[str, os.PathLike], limit: Optional[int] = None) -> list[int]:
    """The document of each sentence :func:`read_conll` reads (numbered from 0; documents start at
    ``-DOCSTART-`` lines): the ``doc_ids`` of :class:`~contextembed.sklearn.TokenEmbedder` with
    ``context``."""
    from ..io import read_documents

    return [document for document, _ in islice(read_documents(os.fspath(path), "conll"), limit)]


def read_labelled_text(path: Union[str, os.PathLike], limit: Optional[int] = None) -> tuple[list[str], list[int]]:
    """Read ``label<TAB>text`` lines (SST-2 style); a header line whose label is not an int is skipped.

    Blank lines are skipped. A later label that is not an int is a ``ValueError`` naming the line;
    text that is not UTF-8 a :class:`~contextembed.errors.FileFormatError` naming the line.
    """
    texts: list[str] = []
    labels: list[int] = []
    for number, line in _lines(os.fspath(path)):
        if not line.strip():
            continue
        label, _, text = line.partition("\t")
        if not (label.isascii() and label.lstrip("-").isdigit()):
            if number == 1:
                continue
            raise ValueError(f"{path}, line {number}: label {label!r} is not an int")
        texts.append(text)
        labels.append(int(label))
        if limit is not None and len(texts) >= limit:
            break
    return texts, labels
