"""Readers for the small tabular corpora the examples and benchmarks use (never downloads)."""

from __future__ import annotations

import os
from typing import Optional, Union


def read_conll(
    path: Union[str, os.PathLike], column: int = -1, limit: Optional[int] = None
) -> tuple[list[list[str]], list[list[str]]]:
    """Read a CoNLL-2003 style file: one ``word ... tag`` line per token, blank lines between sentences.

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
    words: list[str] = []
    labels: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append(words)
                    tags.append(labels)
                    words, labels = [], []
                    if limit is not None and len(sentences) >= limit:
                        break
                continue
            if len(fields) < 2:
                raise ValueError(f"{path}, line {number}: expected 'word ... tag', got {line.strip()!r}")
            words.append(fields[0])
            labels.append(fields[column])
    if words and (limit is None or len(sentences) < limit):
        sentences.append(words)
        tags.append(labels)
    return sentences, tags


def read_labelled_text(path: Union[str, os.PathLike], limit: Optional[int] = None) -> tuple[list[str], list[int]]:
    """Read ``label<TAB>text`` lines (SST-2 style); a header line whose label is not an int is skipped."""
    texts: list[str] = []
    labels: list[int] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            label, _, text = line.rstrip("\n").partition("\t")
            try:
                value = int(label)
            except ValueError:
                if number == 1:
                    continue
                raise ValueError(f"{path}, line {number}: label {label!r} is not an int") from None
            texts.append(text)
            labels.append(value)
            if limit is not None and len(texts) >= limit:
                break
    return texts, labels
