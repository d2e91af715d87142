"""Strict readers of token files: plain text, CoNLL, CoNLL-U and JSONL, by sentence or by document.

Part of :mod:`contextembed.io`, which imports the readers from here.

Input formats
    Every input is UTF-8 text (a leading byte-order mark is allowed); lines end with ``\\n`` or
    ``\\r\\n``, mixed as they may be. A byte that is not UTF-8, a NUL byte (binary files, UTF-16), or a
    carriage return not followed by a line feed (a file with CR-only line endings, from classic Mac OS,
    would read as one line) is a :class:`~contextembed.errors.FileFormatError` naming the file and the
    line. Every error a reader raises names the file and the line; nothing is coerced or skipped
    silently.

    ``text``
        One sentence per line, split by the chosen tokenizer. Every line is a sentence: a blank (or
        white-space only) line is an empty sentence, which gives 0 rows at word level and 1 row (zeros)
        at text level. So word-level output has exactly one row per token, and text-level output exactly
        one row per line.
    ``conll``
        CoNLL-2003 style columns separated by spaces or tabs; the first column is the token (it may hold
        other white space, e.g. a no-break space). Every token line of a file has the columns of its
        first: a line with fewer or more (a missing tag, which would shift the next column into its
        place) is an error naming it. A line that is empty or holds only spaces and tabs ends the sentence
        (several in a row are one boundary). A ``-DOCSTART-`` line is a document boundary, whatever its
        columns: it ends the current sentence and is skipped.
    ``conllu``
        Universal Dependencies CoNLL-U: ten tab-separated columns, the token is the second (FORM);
        ``#`` comment lines, multi-word token ranges (``1-2``) and empty nodes (``8.1``) are skipped; a
        blank line ends the sentence. A line with another number of columns, or an ID that is not a
        number, is an error.
    ``jsonl``
        One JSON object per line with exactly one of ``"tokens"`` (a list of JSON strings, taken
        verbatim) or ``"text"`` (a string, split by the tokenizer); other keys are ignored. Blank lines
        are skipped. Invalid JSON, a value that is not an object, both or neither key, a token that is not
        a string (``null``, ``3``, ``true``, a list...), a ``\\ud800``-style escape that is not a character
        (a lone surrogate cannot be written as UTF-8) and a key given twice are errors naming the line
        (and the token index).

    A file without sentences (empty, or only blank and ``-DOCSTART-`` lines) is valid: it gives an
    output with 0 rows.

Documents
    Document context (``context=N``, ``--context N``) reaches across the sentences of one document
    (:func:`~contextembed.io.read_documents`): CoNLL documents start at ``-DOCSTART-`` lines, CoNLL-U
    documents at ``# newdoc`` comments, JSONL documents where the optional ``"doc"`` field (a string or
    a whole number) changes (a document's lines must be consecutive: a ``"doc"`` that comes back is an
    error naming the line). A JSONL line without ``"doc"`` belongs to the unnamed document of the lines
    without one around it: each run of consecutive lines without ``"doc"`` is one document, wherever it
    stands (before, between or after named documents; a file without any ``"doc"`` is one document), and
    unlike a name it may come back (the next run is another document). A plain text file is one
    document: a blank line is an empty sentence, and ends a document only with ``doc_sep="blank"``
    (``--doc-sep blank``).
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple, Optional, get_args

from .._runtime import json_io as _json
from .._inputs.options import check_choice
from ..errors import FileFormatError
from ..tokenizers import Tokenizer
from ..tokenizers import whitespace_tokenize as whitespace_tokenizer

InputFormat = Literal["text", "conll", "conllu", "jsonl"]
INPUT_FORMATS: tuple[str, ...] = get_args(InputFormat)
_EXTENSIONS = {".txt": "text", ".conll": "conll", ".conllu": "conllu", ".jsonl": "jsonl", ".json": "jsonl"}
#: file extensions whose format :func:`guess_format` knows
INPUT_EXTENSIONS: tuple[str, ...] = tuple(_EXTENSIONS)
DOCSTART = "-DOCSTART-"
#: what starts a document in plain text (``doc_sep``, ``--doc-sep``): ``"none"``, the whole file is
#: one document; ``"blank"``, a blank line ends one (the line is still an empty sentence)
DocSep = Literal["none", "blank"]
DOC_SEPS: tuple[str, ...] = get_args(DocSep)


class _NewDocument:
    """What a reader yields between sentences where a document starts (:func:`read_documents`)."""

    def __repr__(self) -> str:
        return "NEW_DOCUMENT"


NEW_DOCUMENT = _NewDocument()


def guess_format(path: str) -> str:
    """Input format from the file extension; ``ValueError`` if it cannot be told."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise ValueError(
            f"cannot tell the format of {path!r} from its extension; pass --format "
            f"({', '.join(INPUT_FORMATS)})"
        )
    return _EXTENSIONS[extension]


def check_input_format(input_format: str) -> str:
    """Return ``input_format`` if it is one of :data:`INPUT_FORMATS`, else ``ValueError``."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    return input_format


def read_sentences(path: str, input_format: Optional[str] = None, tokenizer: Tokenizer = whitespace_tokenizer) -> Iterator[list[str]]:
    """Stream tokenized sentences from ``path`` (see the module docstring for formats).

    The format and the file's existence are checked at once; the content as it is read, every error
    a :class:`~contextembed.errors.FileFormatError` naming the file and the line.

    Raises
    ------
    ValueError
        If the format is unknown or cannot be told from the extension.
    FileNotFoundError
        If ``path`` is not an existing file.
    """
    input_format = check_input(path, input_format)
    return (item for item in _READERS[input_format](path, tokenizer) if item is not NEW_DOCUMENT)


def read_documents(path: str, input_format: Optional[str] = None, tokenizer: Tokenizer = whitespace_tokenizer,
                   doc_sep: DocSep = "none") -> Iterator[tuple[int, list[str]]]:
    """Stream ``(document number, tokens)`` per sentence of ``path``: :func:`read_sentences` with the
    documents of the file (numbered from 0, in order).

    Documents start at ``-DOCSTART-`` lines (CoNLL), ``# newdoc`` comments (CoNLL-U), a change of
    the ``"doc"`` field (JSONL; each run of consecutive lines without one is one document) and, in plain
    text with ``doc_sep="blank"``, after a blank line (which is still an empty sentence); otherwise a
    file is one document.

    Raises
    ------
    ValueError
        For an unknown format or ``doc_sep``, or ``doc_sep="blank"`` for another format than text.
    """
    input_format = check_input(path, input_format)
    _check_doc_sep_format(doc_sep, input_format)
    return _numbered(_READERS[input_format](path, tokenizer), honoured=input_format != "text" or doc_sep == "blank")


def _numbered(items: Iterator, honoured: bool) -> Iterator[tuple[int, list[str]]]:
    """Sentences numbered by document: a marker starts the next one once the current one has a sentence."""
    document, started = 0, False
    for item in items:
        if item is not NEW_DOCUMENT:
            yield document, item
            started = True
        elif honoured and started:
            document, started = document + 1, False


def _check_doc_sep_format(doc_sep: str, input_format: str) -> None:
    check_choice("doc_sep", doc_sep, DocSep)
    if doc_sep != "none" and input_format != "text":
        raise ValueError(f"doc_sep={doc_sep!r} (--doc-sep) is for plain text; {input_format} files mark their own "
                         "documents (see the input formats), so leave it unset")


def check_input(path: str, input_format: Optional[str] = None) -> str:
    """Check that ``path`` is an existing file and return its format (given, or from the extension).

    Whether the file exists is checked first: a misspelt name (``sample.text``, ``corpusx/``) is
    reported as missing, not as a format that cannot be told.
    """
    path = os.fspath(path)
    if input_format is not None:
        check_input_format(input_format)  # a setting: checked before the file
    if os.path.isdir(path):
        raise FileNotFoundError(f"input {path!r} is a directory; pass a file")
    if not os.path.isfile(path):
        dangling = f" (a link to {os.readlink(path)!r}, which does not exist)" if os.path.islink(path) else ""
        raise FileNotFoundError(f"input file {path!r} does not exist{dangling}")
    return check_input_format(input_format or guess_format(path))


#: bytes decoded before the first line is handed out: a binary file is reported as not being text,
#: not as a format error of its first line
_SNIFF_BYTES = 8192


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """``(number, line)`` for each line of a UTF-8 file, 1-based, without its line ending."""
    with open(path, "rb") as handle:
        numbered = enumerate(handle, start=1)
        head, size = [], 0
        for number, raw in numbered:
            head.append((number, _decode(raw, path, number)))
            size += len(raw)
            if size >= _SNIFF_BYTES:
                break
        yield from head
        for number, raw in numbered:
            yield number, _decode(raw, path, number)


_CR = b"\r"


def _decode(raw: bytes, path: str, number: int) -> str:
    """One line without its ending (and the first without a byte-order mark), checked: UTF-8, no
    NUL byte and no carriage return left (only ``\\n`` and ``\\r\\n`` end a line)."""
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if number == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    if b"\x00" in raw:
        raise FileFormatError(
            f"NUL byte at byte {raw.index(0) + 1} of the line: this is not a text file (binary data, or "
            "UTF-16 text?); the input must be UTF-8 text",
            path=path, line=number,
        )
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileFormatError(
            f"not UTF-8 text: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line cannot be "
            f"decoded ({error.reason}); is it a binary file? Convert text to UTF-8 first",
            path=path, line=number,
        ) from None
    if "\r" in line:
        raise FileFormatError(
            f"a carriage return (CR) at byte {raw.index(_CR) + 1} of the line is not followed by a line feed: "
            "lines end with LF or CR LF. A file with CR-only line endings (classic Mac OS) would read as one line; "
            "convert it first (e.g. tr '\\r' '\\n' < old > new)",
            path=path, line=number,
        )
    return line


def _read_text(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    for _, line in _lines(path):
        yield tokenizer(line)
        if not line.strip():
            yield NEW_DOCUMENT  # taken with doc_sep="blank" only


_ASCII_SPACE = " \t\r\f\v"
_COLUMN_SEPARATOR = re.compile(f"[{_ASCII_SPACE}]+")


def _columns(line: str) -> list[str]:
    """Split on ASCII white space only: a token may hold a no-break space (str.split would cut it)."""
    line = line.strip(_ASCII_SPACE)
    return _COLUMN_SEPARATOR.split(line) if line else []


def read_conll(path: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Stream ``(tokens, other_columns)`` per sentence of a CoNLL column file.

    Columns are separated by spaces or tabs, and every token line has the columns of the file's
    first. A line that is empty or holds only spaces and tabs ends the sentence; a ``-DOCSTART-``
    line ends it too and is skipped. An empty file gives nothing. A line that is not UTF-8, or has
    other columns than the first token line, raises :class:`~contextembed.errors.FileFormatError`
    naming the line.
    """
    return ((sentence.tokens, sentence.columns) for sentence in _conll_items(path) if sentence is not NEW_DOCUMENT)


class ConllSentence(NamedTuple):
    """One sentence of a CoNLL column file, as :func:`_conll_items` reads it."""

    #: the first column of each token line
    tokens: list[str]
    #: the other columns of each token line (as many on every line of the file)
    columns: list[list[str]]
    #: the line of its first token (1-based)
    line: int


def _conll_items(path: str) -> Iterator:
    """:func:`read_conll`'s sentences as :class:`ConllSentence`, and :data:`NEW_DOCUMENT` at each
    ``-DOCSTART-`` line; every token line checked to have the columns of the file's first."""
    tokens: list[str] = []
    columns: list[list[str]] = []
    first: Optional[tuple[int, str, int]] = None  # the first token line: number, text, columns
    for number, line in _lines(path):
        fields = _columns(line)
        if not fields or fields[0] == DOCSTART:
            if tokens:
                yield ConllSentence(tokens, columns, start)
            tokens, columns = [], []
            if fields:
                yield NEW_DOCUMENT
            continue
        if first is None:
            first = (number, line, len(fields))
        elif len(fields) != first[2]:
            raise FileFormatError(
                f"{len(fields)} columns where the file's token lines have {first[2]} (line {first[0]} has "
                f"{first[2]}: {first[1][:60]!r}); every token line needs all the columns (a missing tag would "
                "put the next column in its place)", path=path, line=number)
        if not tokens:
            start = number
        tokens.append(fields[0])
        columns.append(fields[1:])
    if tokens:
        yield ConllSentence(tokens, columns, start)


def _read_conll(path: str, tokenizer: Tokenizer) -> Iterator:
    for item in _conll_items(path):
        yield item if item is NEW_DOCUMENT else item.tokens


def _read_conllu(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    tokens: list[str] = []
    for number, line in _lines(path):
        if not line.strip(_ASCII_SPACE):
            if tokens:
                yield tokens
            tokens = []
        elif line.startswith("#"):
            if re.match(r"#\s*newdoc\b", line):
                if tokens:  # a comment inside a sentence: it ends there
                    yield tokens
                tokens = []
                yield NEW_DOCUMENT
        else:
            tokens.extend(_conllu_form(line, path, number))
    if tokens:
        yield tokens


def _conllu_form(line: str, path: str, number: int) -> list[str]:
    """The FORM of a word line; ``[]`` for multi-word ranges and empty nodes."""
    fields = line.split("\t")
    if len(fields) != 10:
        raise FileFormatError(
            f"expected 10 tab-separated CoNLL-U columns (ID FORM LEMMA ...), got {len(fields)}; "
            "for space-separated CoNLL-2003 columns pass --format conll",
            path=path, line=number,
        )
    identifier = fields[0]
    if re.fullmatch(r"\d+-\d+|\d+\.\d+", identifier):
        return []
    if not identifier.isdecimal():
        raise FileFormatError(f"ID {identifier!r} is not a word number (1, 2, ...), a range (1-2) or an empty node (1.1)",
                              path=path, line=number)
    return [fields[1]]


def _read_jsonl(path: str, tokenizer: Tokenizer) -> Iterator:
    current, ended = None, set()
    for number, line in _lines(path):
        if line.strip():
            tokens, document = _jsonl_tokens(line, tokenizer, path, number)
            if document != current:
                # a named document's lines are consecutive; lines without "doc" (None) are a new
                # unnamed document at each run
                if document is not None and document in ended:
                    raise FileFormatError(f'"doc" {document!r} comes back after another document: the lines of one '
                                          "document must be consecutive", path=path, line=number)
                ended.add(current)
                current = document
                yield NEW_DOCUMENT
            yield tokens


_SURROGATE = re.compile("[\ud800-\udfff]")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise _DuplicateKey(f"key {duplicate!r} is given twice in one object")
    return record


def _json_kind(value: object) -> str:
    kinds = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "an array", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _jsonl_tokens(line: str, tokenizer: Tokenizer, path: str, number: int) -> tuple[list[str], object]:
    """The tokens of one JSONL line and its ``"doc"`` (``None`` without one), checked (see the module
    docstring)."""

    def fail(message: str) -> FileFormatError:
        return FileFormatError(message, path=path, line=number)

    try:  # the line is read already: bounded in depth, not in size
        record = _json.loads(line, max_bytes=len(line), object_pairs_hook=_unique_keys)
    except _json.JSONError as error:
        raise fail(str(error) if error.column is None else f"not valid JSON ({error.parser_message} at column "
                   f"{error.column})") from None
    except _DuplicateKey as error:
        raise fail(str(error)) from None
    expected = 'expected an object with "tokens" (a list of strings) or "text" (a string)'
    if not isinstance(record, dict):
        raise fail(f"{expected}, got {_json_kind(record)}")
    if ("tokens" in record) == ("text" in record):
        raise fail(f"{expected}, got an object with {'both' if 'tokens' in record else 'neither'}")
    document = record.get("doc")
    if "doc" in record and (isinstance(document, bool) or not isinstance(document, (str, int))):
        raise fail(f'"doc" is {_json_kind(document)} ({json.dumps(document)[:40]}); expected a string or a whole number')
    escaped = "\\u" in line  # a surrogate can only come from an escape: the line was valid UTF-8
    if "text" in record:
        text = record["text"]
        if not isinstance(text, str):
            raise fail(f'"text" is {_json_kind(text)} ({text!r}); expected a string')
        if escaped and _SURROGATE.search(text):
            raise fail('"text" holds a \\ud800-\\udfff escape that is not a character (a lone surrogate)')
        return tokenizer(text), document
    tokens = record["tokens"]
    if not isinstance(tokens, list):
        raise fail(f'"tokens" is {_json_kind(tokens)}; expected a list of strings')
    for index, token in enumerate(tokens):
        if not isinstance(token, str):
            shown = json.dumps(token)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise fail(f"token {index} is {_json_kind(token)} ({shown}); every token must be a string")
        if escaped and _SURROGATE.search(token):
            raise fail(f"token {index} holds a \\ud800-\\udfff escape that is not a character (a lone surrogate)")
    return tokens, document


#: each format's reader: its sentences, with :data:`NEW_DOCUMENT` where a document starts
_READERS: dict[str, Callable[[str, Tokenizer], Iterator]] = {
    "text": _read_text, "conll": _read_conll, "conllu": _read_conllu, "jsonl": _read_jsonl,
}


__all__ = ["DOCSTART", "DOC_SEPS", "INPUT_EXTENSIONS", "INPUT_FORMATS", "NEW_DOCUMENT", "ConllSentence", "DocSep",
           "InputFormat", "check_input", "check_input_format", "guess_format", "read_conll", "read_documents",
           "read_sentences"]
