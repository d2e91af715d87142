"""Reading token files strictly and streaming features to ``.npy`` / ``.npz`` with bounded memory.

Input formats
-------------
Every input is UTF-8 text (a leading byte-order mark is allowed); lines end with ``\\n`` or
``\\r\\n``, mixed as they may be. A byte that is not UTF-8, a NUL byte (binary files, UTF-16), or a
carriage return not followed by a line feed (a file with CR-only line endings, from classic Mac OS,
would read as one line) is a :class:`~contextembed.errors.FileFormatError` naming the file and the line. Every error a reader
raises names the file and the line; nothing is coerced or skipped silently.

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
---------
Document context (``context=N``, ``--context N``) reaches across the sentences of one document
(:func:`read_documents`): CoNLL documents start at ``-DOCSTART-`` lines, CoNLL-U documents at
``# newdoc`` comments, JSONL documents where the optional ``"doc"`` field (a string or a whole
number) changes (a document's lines must be consecutive: a ``"doc"`` that comes back is an error
naming the line). A JSONL line without ``"doc"`` belongs to the unnamed document of the lines
without one around it: each run of consecutive lines without ``"doc"`` is one document, wherever it
stands (before, between or after named documents; a file without any ``"doc"`` is one document),
and unlike a name it may come back (the next run is another document). A plain text file is one document: a blank line is an empty sentence, and ends a
document only with ``doc_sep="blank"`` (``--doc-sep blank``).

Output
------
:func:`embed_file` writes through :class:`ArrayWriter`: the array goes to a hidden temporary file
beside the output (``.<name>.<random>.partial``) that is renamed to the output name only when every
row is written. An error, ``KeyboardInterrupt`` or (in the CLI) ``SIGTERM`` removes the temporary
and leaves whatever was at the output path before exactly as it was; only a hard kill (``SIGKILL``,
power loss) can leave a ``*.partial`` file behind, never a file under the output's name. An existing
output is refused unless ``overwrite=True`` (``--overwrite``); the output path, the input and every
option are checked before the model is loaded. A feature that is NaN or infinite, or too large for
``float16``, is an error naming the row, never written as such.

Provenance
----------
Every output records what made it (:mod:`contextembed._provenance`, artifact ``"embedding output"``):
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
(:mod:`contextembed.corpus`): a record that differs from the one :func:`expected_record` gives now,
a missing or damaged one, or content that is not what was written is refused, naming the output,
the field and ``--overwrite``.
"""

from __future__ import annotations

import codecs
import hashlib
import inspect
import json
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from itertools import islice
from typing import Literal, NamedTuple, Optional, get_args

import numpy as np

from . import _json, _provenance as provenance, _terminal as terminal
from ._files import atomic_file, check_writable
from .errors import FileFormatError, ProvenanceError
from ._options import check_choice
from .pooling._layers import OutputDtype, as_output_dtype  # noqa: F401  (OutputDtype: defined with the pooling that delivers it)
from .extraction import LEVELS, Level, level_options  # noqa: F401  (Level, LEVELS re-exported)
from .tokenizers import TOKENIZERS, Tokenizer, get_tokenizer, spacy_tokenizer  # noqa: F401  (the one registry)
from .tokenizers import whitespace_tokenize as whitespace_tokenizer

InputFormat = Literal["text", "conll", "conllu", "jsonl"]
INPUT_FORMATS: tuple[str, ...] = get_args(InputFormat)
OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)
OUTPUT_EXTENSIONS = (".npy", ".npz")
#: how error messages tell the user to allow replacing an existing output
OVERWRITE_FLAG = "--overwrite (overwrite=True)"
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


# -- output -------------------------------------------------------------------------------------


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


class ArrayWriter:
    """Write a ``(rows, dim)`` array block by block, never holding it all in memory, atomically.

    ``.npy`` is written through a memory map; ``.npz`` streams ``features.npy`` into the archive and
    adds ``extra`` arrays (e.g. ``lengths``) at the end. Everything goes to a temporary file beside
    ``path`` that replaces ``path`` only when the ``with`` block ends without an error and exactly
    ``n_rows`` rows were written; otherwise the temporary is removed and ``path`` is untouched::

        with ArrayWriter("out.npz", n_rows, dim) as writer:
            writer.write(block)              # (rows, dim), as many times as needed
            writer.close(lengths=lengths)    # optional: adds extra arrays (.npz)

    Parameters
    ----------
    path : str
        Output ``.npy`` or ``.npz``; its directory must exist.
    n_rows, dim : int
        Shape of the whole array.
    dtype : {"float32", "float16"}
    overwrite : bool
        Replace an existing ``path``; otherwise ``FileExistsError`` (checked on entering and again
        just before the rename).
    """

    def __init__(self, path: str, n_rows: int, dim: int, dtype: str = "float32", *, overwrite: bool = False) -> None:
        path = os.fspath(path)
        if not path.endswith(OUTPUT_EXTENSIONS):
            raise ValueError(f"output {path!r} must end in .npy or .npz")
        self.path, self.shape, self.dtype = path, (int(n_rows), int(dim)), np.dtype(dtype)
        self.overwrite, self.row, self.closed = overwrite, 0, False
        self._npy = path.endswith(".npy")
        self._digest = hashlib.blake2b(digest_size=16)
        self._stack: Optional[ExitStack] = None

    def __enter__(self) -> "ArrayWriter":
        with ExitStack() as stack:
            temporary = stack.enter_context(atomic_file(self.path, overwrite=self.overwrite, what="output",
                                                        flag=OVERWRITE_FLAG))
            stack.callback(self._release)  # runs before the rename or removal of the temporary
            self._open(temporary)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        stack, self._stack = self._stack, None
        if kind is not None:
            return stack.__exit__(kind, value, traceback)  # removes the temporary, re-raises
        with stack:
            self.close()
        return False

    def _open(self, temporary: str) -> None:
        if self._npy:
            self._memmap = np.lib.format.open_memmap(temporary, mode="w+", dtype=self.dtype, shape=self.shape)
            return
        self._zip = zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        self._stream = self._zip.open("features.npy", "w", force_zip64=True)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_2_0(self._stream, header)

    def _release(self) -> None:
        """Close the memory map or archive handles (idempotent); deletes nothing."""
        if self._npy:
            self.__dict__.pop("_memmap", None)
            return
        for name in ("_stream", "_zip"):
            handle = self.__dict__.pop(name, None)
            if handle is not None:
                handle.close()

    def write(self, block: np.ndarray) -> None:
        """Append ``(rows, dim)``."""
        if self._stack is None or self.closed:
            raise RuntimeError("ArrayWriter.write outside its with block (or after close)")
        block = np.asarray(block)
        if block.ndim != 2 or block.shape[1] != self.shape[1] or self.row + len(block) > self.shape[0]:
            raise ValueError(f"block of shape {block.shape} does not fit at row {self.row} of {self.shape}")
        block = self._checked(block)
        self._digest.update(block)  # C-contiguous, in the output dtype: the bytes written
        if self._npy:
            self._memmap[self.row : self.row + len(block)] = block
        else:
            self._stream.write(block.tobytes())
        self.row += len(block)

    def features_hash(self) -> str:
        """``blake2b`` (128-bit, hex) of the rows written so far, as stored (the array's data bytes)."""
        return self._digest.hexdigest()

    def _checked(self, block: np.ndarray) -> np.ndarray:
        """``block`` in the output dtype; NaN, infinity or a float16 overflow is an error
        (:func:`~contextembed.pooling._layers.as_output_dtype`)."""
        try:
            return as_output_dtype(block, self.dtype, lambda row: f"row {self.row + row} of {self.path}",
                                   "write float32 instead")
        except ValueError as error:
            raise ValueError(f"{error}; nothing was written") from None

    def close(self, **extra: np.ndarray) -> None:
        """Check that every row was written and finish the file (``.npz``: add ``extra`` arrays).

        The file is renamed into place when the ``with`` block ends. Raises ``RuntimeError`` if rows
        are missing (then nothing is renamed).
        """
        if self.closed:
            if extra:
                raise RuntimeError("ArrayWriter.close(**extra) after the writer was closed")
            return
        if self.row != self.shape[0]:
            raise RuntimeError(f"wrote {self.row} rows, expected {self.shape[0]}; {self.path} was not written")
        if extra and self._npy:
            raise ValueError(f"a .npy output holds one array; extra arrays ({', '.join(extra)}) need .npz")
        if self._npy:
            self._memmap.flush()
        else:
            self._stream.close()
            for name, array in extra.items():
                with self._zip.open(f"{name}.npy", "w", force_zip64=True) as handle:
                    np.lib.format.write_array(handle, np.asarray(array))
        self._release()
        self.closed = True


# -- provenance of outputs ----------------------------------------------------------------------

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


def record_file(output_path: str) -> str:
    """The file that holds the provenance record of the ``.npy`` output ``output_path``."""
    return os.fspath(output_path) + RECORD_SUFFIX


def output_fields(spec, output_path: str, extractor, *, input_hash: str, input_format: str, tokenizer: str,
                  level: str, dtype: str, doc_sep: str = "none") -> dict:
    """The fields of an output's provenance record, except ``content`` (what was written).

    The input's content hash, its format and tokenizer, the model's fingerprint, every option that
    changes the features as the loaded encoder resolved it (layer indexes, combine, subword pooling;
    at text level the text pooling and ``normalize``; the precision and backend it runs, its device
    type, its window settings) and the output's dtype and format.
    """
    from .encoders._identity import identify

    encoder = extractor.encoder
    device = getattr(encoder, "device", None)
    text = {"normalize": extractor.normalize} if level == "text" else {}  # word rows are never normalised
    # document context, where there is any (an output of sentences alone records none, as before it existed)
    documents = {"context": extractor.context, "doc_sep": doc_sep} if extractor.context else {}
    return {  # in the order a difference is reported: the level before the options whose default it sets
        "input": input_hash, "input_format": input_format, "level": level, "tokenizer": tokenizer,
        "model": identify(encoder.spec or spec).fingerprint,
        "layers": list(extractor.pooling.layer_indexes), "combine": extractor.pooling.combine,
        "subword_pooling": extractor.subword_pooling, **documents,
        "text_pooling": extractor.text_pooling if level == "text" else None, **text,
        "precision": getattr(encoder, "precision", None), "backend": getattr(encoder, "backend", None),
        "device": getattr(device, "type", device),
        "encoder_options": {name: getattr(encoder, name) for name in _ENCODER_OPTIONS if hasattr(encoder, name)},
        "dtype": dtype, "output_format": os.path.splitext(os.fspath(output_path))[1].lstrip("."),
    }


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


def _content(writer: "ArrayWriter", lengths: Optional[np.ndarray]) -> dict:
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


def _close_with_record(writer: "ArrayWriter", fields: dict, lengths: np.ndarray) -> None:
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


def _chunks(iterable, size: int):
    iterator = iter(iterable)
    while chunk := list(islice(iterator, size)):
        yield chunk


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


def _extractor(encoder, level: str, chosen: dict, context: int = 0):
    from .extraction import FeatureExtractor

    return FeatureExtractor(encoder, **{name: chosen[name] for name in LEVEL_OPTIONS if name != "tokenizer"},
                            level=level, context=context)


def _check_doc_sep(context: int, doc_sep: str, input_format: str) -> None:
    """``doc_sep`` is a plain-text option that only context uses: never ignored silently."""
    _check_doc_sep_format(doc_sep, input_format)
    if doc_sep != "none" and not context:
        raise ValueError(f"doc_sep={doc_sep!r} (--doc-sep) sets the documents that context reaches across; it does "
                         "nothing without context: pass context=N (--context N) too, or leave it unset")


def _check_doc_sep_format(doc_sep: str, input_format: str) -> None:
    check_choice("doc_sep", doc_sep, DocSep)
    if doc_sep != "none" and input_format != "text":
        raise ValueError(f"doc_sep={doc_sep!r} (--doc-sep) is for plain text; {input_format} files mark their own "
                         "documents (see the input formats), so leave it unset")


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
    its document's text on each side (:mod:`contextembed._documents`); the documents are the file's
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
    from .encoders import load_encoder

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
