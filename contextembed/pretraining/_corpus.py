"""Reading a pretraining corpus: plain text, one sentence per line, a blank line between documents.

CORPUS is a file or a directory. A directory is read recursively in sorted path order, skipping
hidden files (names starting with ``.``); every file also ends a document. Lines are stripped of
surrounding white space, and a file's first line of a byte order mark (``EF BB BF``, which some
editors write first). Lines end with LF or CR LF: a carriage return anywhere else (a file with CR-only
line endings) is a ``ValueError`` naming the file and line. Lines of any length are read (a single 10 MB line is one sentence; the
trainers split long sentences into pieces that fit, nothing is dropped).

Bytes that are not valid UTF-8: with ``encoding_errors="skip"`` (the default) the whole line is
skipped and counted, and one :class:`UserWarning` at the end says how many lines were skipped and
where the first one was; with ``encoding_errors="fail"`` reading stops with a ``ValueError`` naming
the file and line.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Union, get_args

from .._runtime import provenance
from .._inputs.options import check_choice

#: what to do with a line that is not UTF-8 (see the module docstring)
EncodingErrors = Literal["skip", "fail"]
ENCODING_ERRORS: tuple[str, ...] = get_args(EncodingErrors)

PathLike = Union[str, os.PathLike]


@dataclass
class Corpus:
    """Documents of sentences read from disk.

    Attributes
    ----------
    documents : list of list of str
        Every document is a non-empty list of non-empty sentences (lines).
    files : list of str
        The files read, in order.
    skipped_lines : int
        Lines skipped because they were not valid UTF-8.
    """

    documents: list[list[str]]
    files: list[str] = field(default_factory=list)
    skipped_lines: int = 0

    @property
    def n_sentences(self) -> int:
        return sum(len(document) for document in self.documents)

    def sentences(self) -> Iterator[str]:
        """Every sentence, in corpus order."""
        for document in self.documents:
            yield from document

    def words(self) -> Iterator[list[str]]:
        """Every sentence split on white space (the unit of the static and biLM trainers)."""
        for sentence in self.sentences():
            yield split_words(sentence)


def check_encoding_errors(value: str) -> str:
    """Return ``value`` if it is one of :data:`ENCODING_ERRORS`, else raise ``ValueError``."""
    return check_choice("encoding_errors", value, EncodingErrors)


def split_words(sentence: str, lowercase: bool = False) -> list[str]:
    """``sentence`` split on white space, every word interned.

    One shared ``str`` per word type: a token held by a trainer costs a list slot, not a new string.
    """
    return list(map(sys.intern, (sentence.lower() if lowercase else sentence).split()))


def corpus_files(path: PathLike) -> list[str]:
    """The files that make up CORPUS: the file itself, or a directory's files (recursive, sorted).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist or a directory holds no (non-hidden) files.
    """
    path = os.fspath(path)
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"corpus {path!r} does not exist; pass a text file or a directory of text files")
    found = []
    for root, directories, names in os.walk(path):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        found.extend(os.path.join(root, name) for name in sorted(names) if not name.startswith("."))
    if not found:
        raise FileNotFoundError(f"corpus directory {path!r} holds no files")
    return sorted(found)


def corpus_hash(path: PathLike) -> str:
    """Content hash of CORPUS: of the file, or of a directory's files (:func:`corpus_files`) by
    relative name and content (:func:`contextembed._runtime.provenance.file_hash`); moving the corpus keeps it."""
    files = corpus_files(path)
    if os.path.isfile(path):
        return provenance.file_hash(files[0])
    digest = hashlib.blake2b(digest_size=16)
    for name in files:
        relative = os.path.relpath(name, path).replace(os.sep, "/")
        digest.update(relative.encode("utf-8", "surrogateescape") + b"\0" + provenance.file_hash(name).encode() + b"\n")
    return digest.hexdigest()


def read_corpus(path: PathLike, *, encoding_errors: EncodingErrors = "skip") -> Corpus:
    """Read CORPUS into documents of sentences.

    Parameters
    ----------
    path : str or path
        A text file or a directory of text files.
    encoding_errors : {"skip", "fail"}
        What to do with a line that is not valid UTF-8 (see the module docstring).

    Raises
    ------
    ValueError
        If the corpus holds no sentence, or (with ``"fail"``) on bytes that are not UTF-8.
    """
    check_encoding_errors(encoding_errors)
    files = corpus_files(path)
    corpus = Corpus(documents=[], files=files)
    first_bad = None
    for name in files:
        for document, bad in _read_file(name, encoding_errors):
            if document:
                corpus.documents.append(document)
            if bad:
                corpus.skipped_lines += len(bad)
                first_bad = first_bad or f"{name}, line {bad[0]}"
    if corpus.skipped_lines:
        warnings.warn(
            f"skipped {corpus.skipped_lines} line(s) that are not valid UTF-8 (first: {first_bad}); "
            "pass encoding_errors='fail' (--encoding-errors fail) to stop at them instead",
            UserWarning,
            stacklevel=2,
        )
    if not corpus.documents:
        raise ValueError(
            f"corpus {os.fspath(path)!r} holds no sentences (read {len(files)} file(s)); expected plain text, "
            "one sentence per line, a blank line between documents"
        )
    return corpus


def _read_file(name: str, encoding_errors: EncodingErrors) -> Iterator[tuple[list[str], list[int]]]:
    """Yield ``(document, numbers of skipped lines)`` per document of one file."""
    document: list[str] = []
    bad: list[int] = []
    with open(name, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if encoding_errors == "fail":
                    raise ValueError(
                        f"{name}, line {number}: not valid UTF-8 ({error.reason} at byte {error.start}); "
                        "re-encode the corpus as UTF-8 or pass encoding_errors='skip' to skip such lines"
                    ) from None
                bad.append(number)
                continue
            _check_line_end(text, name, number)
            line = _first_line(text) if number == 1 else text.strip()
            if line:
                document.append(line)
            elif document:
                yield document, bad
                document, bad = [], []
    yield document, bad


def _check_line_end(text: str, name: str, number: int) -> None:
    """Raise ``ValueError`` if a carriage return in ``text`` does not end it as ``\\r\\n``.

    Lines end with LF or CR LF; a file with CR-only line endings (classic Mac OS) would otherwise read
    as one sentence, its document and sentence boundaries lost.
    """
    body = text[:-2] if text.endswith("\r\n") else text.removesuffix("\n")
    if "\r" in body:
        raise ValueError(
            f"{name}, line {number}: a carriage return (CR) at character {body.index(chr(13)) + 1} of the line is "
            "not followed by a line feed: lines end with LF or CR LF, and a file with CR-only line endings would "
            "read as one sentence; convert it first (e.g. tr '\\r' '\\n' < old > new)"
        )


def _first_line(text: str) -> str:
    """A file's first line, without the byte order mark some editors write first (no part of a word)."""
    return text.removeprefix("\ufeff").strip()


def split_held_out(documents: list[list[str]], fraction: float) -> tuple[list[list[str]], list[list[str]]]:
    """Hold out every ``round(1 / fraction)``-th document (at least one) for evaluation.

    A corpus of one document is split by sentences instead (its last ``fraction`` of sentences).

    Returns
    -------
    (train, held_out) : lists of documents; ``held_out`` is empty when ``fraction`` is 0.

    Raises
    ------
    ValueError
        If ``fraction`` is outside ``[0, 0.5]`` or nothing would be left to train on.
    """
    if not 0.0 <= fraction <= 0.5:
        raise ValueError(f"held_out_fraction={fraction} must be between 0 and 0.5")
    if fraction == 0:
        return documents, []
    if len(documents) == 1:
        sentences = documents[0]
        n_held = max(1, round(len(sentences) * fraction))
        if n_held >= len(sentences):
            raise ValueError(
                f"the corpus has a single document of {len(sentences)} sentence(s), too small to hold out "
                f"{fraction:.0%} for evaluation; add text or pass held_out_fraction=0"
            )
        return [sentences[:-n_held]], [sentences[-n_held:]]
    every = max(2, round(1 / fraction))
    held_indexes = set(range(every - 1, len(documents), every)) or {len(documents) - 1}
    train = [d for i, d in enumerate(documents) if i not in held_indexes]
    held = [d for i, d in enumerate(documents) if i in held_indexes]
    return train, held
