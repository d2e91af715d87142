"""Reading token files strictly and streaming features to ``.npy`` / ``.npz`` with bounded memory.

Input formats
-------------
Every input is UTF-8 text (a leading byte-order mark is allowed); lines end with ``\\n`` or
``\\r\\n``. A byte that is not UTF-8, or a NUL byte (binary files, UTF-16), is a
:class:`~contextembed.errors.FileFormatError` naming the file and the line. Every error a reader
raises names the file and the line; nothing is coerced or skipped silently.

``text``
    One sentence per line, split by the chosen tokenizer. Every line is a sentence: a blank (or
    white-space only) line is an empty sentence, which gives 0 rows at word level and 1 row (zeros)
    at text level. So word-level output has exactly one row per token, and text-level output exactly
    one row per line.
``conll``
    CoNLL-2003 style columns separated by spaces or tabs; the first column is the token (it may hold
    other white space, e.g. a no-break space). A line that is empty or holds only spaces and tabs ends
    the sentence (several in a row are one boundary). A ``-DOCSTART-`` line is a document boundary: it
    ends the current sentence and is skipped.
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
"""

from __future__ import annotations

import codecs
import json
import os
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from itertools import islice
from typing import Literal, Optional, get_args

import numpy as np

from ._files import atomic_file, check_writable
from .errors import FileFormatError
from .tokenizers import TOKENIZERS, Tokenizer, get_tokenizer, spacy_tokenizer  # noqa: F401  (the one registry)
from .tokenizers import whitespace_tokenize as whitespace_tokenizer

InputFormat = Literal["text", "conll", "conllu", "jsonl"]
INPUT_FORMATS: tuple[str, ...] = get_args(InputFormat)
Level = Literal["word", "text"]
LEVELS: tuple[str, ...] = get_args(Level)
OutputDtype = Literal["float32", "float16"]
OUTPUT_DTYPES: tuple[str, ...] = get_args(OutputDtype)
OUTPUT_EXTENSIONS = (".npy", ".npz")
#: how error messages tell the user to allow replacing an existing output
OVERWRITE_FLAG = "--overwrite (overwrite=True)"
_EXTENSIONS = {".txt": "text", ".conll": "conll", ".conllu": "conllu", ".jsonl": "jsonl", ".json": "jsonl"}
#: file extensions whose format :func:`guess_format` knows
INPUT_EXTENSIONS: tuple[str, ...] = tuple(_EXTENSIONS)
DOCSTART = "-DOCSTART-"


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
    return _READERS[input_format](path, tokenizer)


def check_input(path: str, input_format: Optional[str] = None) -> str:
    """Check that ``path`` is an existing file and return its format (given, or from the extension)."""
    input_format = check_input_format(input_format or guess_format(path))
    if os.path.isdir(path):
        raise FileNotFoundError(f"input {path!r} is a directory; pass a {input_format} file")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file {path!r} does not exist")
    return input_format


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


def _decode(raw: bytes, path: str, number: int) -> str:
    """One line without its ending (and the first without a byte-order mark), checked."""
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
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileFormatError(
            f"not UTF-8 text: byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line cannot be "
            f"decoded ({error.reason}); is it a binary file? Convert text to UTF-8 first",
            path=path, line=number,
        ) from None


def _read_text(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    for _, line in _lines(path):
        yield tokenizer(line)


_ASCII_SPACE = " \t\r\f\v"
_COLUMN_SEPARATOR = re.compile(f"[{_ASCII_SPACE}]+")


def _columns(line: str) -> list[str]:
    """Split on ASCII white space only: a token may hold a no-break space (str.split would cut it)."""
    line = line.strip(_ASCII_SPACE)
    return _COLUMN_SEPARATOR.split(line) if line else []


def read_conll(path: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Stream ``(tokens, other_columns)`` per sentence of a CoNLL column file.

    Columns are separated by spaces or tabs. A line that is empty or holds only spaces and tabs ends
    the sentence; a ``-DOCSTART-`` line ends it too and is skipped. An empty file gives nothing.
    Lines that are not UTF-8 raise :class:`~contextembed.errors.FileFormatError` naming the line.
    """
    tokens: list[str] = []
    columns: list[list[str]] = []
    for _, line in _lines(path):
        fields = _columns(line)
        if not fields or fields[0] == DOCSTART:
            if tokens:
                yield tokens, columns
            tokens, columns = [], []
        else:
            tokens.append(fields[0])
            columns.append(fields[1:])
    if tokens:
        yield tokens, columns


def _read_conll(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    for tokens, _ in read_conll(path):
        yield tokens


def _read_conllu(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    tokens: list[str] = []
    for number, line in _lines(path):
        if not line.strip(_ASCII_SPACE):
            if tokens:
                yield tokens
            tokens = []
        elif line.startswith("#"):
            continue
        else:
            tokens.extend(_conllu_form(line, path, number))
    if tokens:
        yield tokens


def _conllu_form(line: str, path: str, number: int) -> list[str]:
    """The FORM of a word line; ``[]`` for multi-word ranges and empty nodes."""
    fields = line.rstrip("\r").split("\t")
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


def _read_jsonl(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    for number, line in _lines(path):
        if line.strip():
            yield _jsonl_tokens(line, tokenizer, path, number)


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


def _jsonl_tokens(line: str, tokenizer: Tokenizer, path: str, number: int) -> list[str]:
    """The tokens of one JSONL line, checked (see the module docstring)."""

    def fail(message: str) -> FileFormatError:
        return FileFormatError(message, path=path, line=number)

    try:
        record = json.loads(line, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise fail(f"not valid JSON ({error.msg} at column {error.colno})") from None
    except _DuplicateKey as error:
        raise fail(str(error)) from None
    expected = 'expected an object with "tokens" (a list of strings) or "text" (a string)'
    if not isinstance(record, dict):
        raise fail(f"{expected}, got {_json_kind(record)}")
    if ("tokens" in record) == ("text" in record):
        raise fail(f"{expected}, got an object with {'both' if 'tokens' in record else 'neither'}")
    escaped = "\\u" in line  # a surrogate can only come from an escape: the line was valid UTF-8
    if "text" in record:
        text = record["text"]
        if not isinstance(text, str):
            raise fail(f'"text" is {_json_kind(text)} ({text!r}); expected a string')
        if escaped and _SURROGATE.search(text):
            raise fail('"text" holds a \\ud800-\\udfff escape that is not a character (a lone surrogate)')
        return tokenizer(text)
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
    return tokens


_READERS: dict[str, Callable[[str, Tokenizer], Iterator[list[str]]]] = {
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
    check_writable(output_path, overwrite, what="output", flag=OVERWRITE_FLAG)


def read_output_shape(path: str) -> tuple[int, int]:
    """``(rows, dim)`` of an output written by :func:`embed_file`, read from its header only.

    A ``.npz`` must hold ``features`` (and, if it holds ``lengths``, their sum must be the number
    of rows).

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
                version = np.lib.format.read_magic(handle)
                read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                               (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if read_header is None:
                    raise ValueError(f"unexpected .npy format version {version}")
                shape = read_header(handle)[0]
                lengths = np.load(path)["lengths"] if "lengths.npy" in archive.namelist() else None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        raise FileFormatError(f"not a contextembed output ({type(error).__name__}: {error})", path=path) from None
    if len(shape) != 2:
        raise FileFormatError(f"features have shape {shape}; a contextembed output holds (rows, dim)", path=path)
    if path.endswith(".npz") and lengths is not None and int(np.sum(lengths)) != shape[0]:
        raise FileFormatError(f"'lengths' add up to {int(np.sum(lengths))} tokens but 'features' has {shape[0]} rows",
                              path=path)
    return int(shape[0]), int(shape[1])


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
        if self._npy:
            self._memmap[self.row : self.row + len(block)] = block
        else:
            self._stream.write(block.tobytes())
        self.row += len(block)

    def _checked(self, block: np.ndarray) -> np.ndarray:
        """``block`` in the output dtype; NaN, infinity or a float16 overflow is an error."""
        with np.errstate(over="ignore", invalid="ignore"):  # checked just below
            converted = np.ascontiguousarray(block, dtype=self.dtype)
        finite = np.isfinite(converted)
        if not finite.all():
            row = int(np.argwhere(~finite)[0, 0])
            overflow = bool(np.isfinite(block[row]).all())
            cause = (f"exceeds the {self.dtype} range (largest magnitude {np.abs(block[row]).max():.4g}); write "
                     "float32 instead" if overflow else "holds NaN or infinite values")
            raise ValueError(f"row {self.row + row} of {self.path} {cause}; nothing was written")
        return converted

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


def _chunks(iterable, size: int):
    iterator = iter(iterable)
    while chunk := list(islice(iterator, size)):
        yield chunk


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
    tokenizer: str = "whitespace",
    layers=None,
    combine: Optional[str] = None,
    subword_pooling: str = "first",
    level: Level = "word",
    text_pooling: str = "mean",
    dtype: OutputDtype = "float32",
    device: str = "auto",
    precision: str = "auto",
    chunk_sentences: int = 4096,
    show_progress: bool = True,
    overwrite: bool = False,
    encoder=None,
) -> dict:
    """Embed a file of sentences and stream the features to ``output_path``, atomically.

    Word level writes one row per input token (``.npz`` adds ``lengths``: tokens per sentence); text
    level one row per sentence. Memory stays bounded by ``chunk_sentences`` whatever the corpus size.
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
    from .features import FeatureExtractor

    input_path, output_path = os.fspath(input_path), os.fspath(output_path)
    _check_embed_options(level, tokenizer, dtype, chunk_sentences)
    input_format = check_input(input_path, input_format)
    check_output(output_path, input_path=input_path, overwrite=overwrite)
    split = get_tokenizer(tokenizer)
    lengths = np.fromiter((len(s) for s in read_sentences(input_path, input_format, split)), dtype=np.int64)
    encoder = encoder or load_encoder(spec, device=device, precision=precision)
    extractor = FeatureExtractor(encoder, layers, combine, subword_pooling, text_pooling)
    n_rows = int(lengths.sum()) if level == "word" else len(lengths)
    from tqdm.auto import tqdm

    sentences = read_sentences(input_path, input_format, split)
    with ArrayWriter(output_path, n_rows, extractor.dim, dtype, overwrite=overwrite) as writer, \
            tqdm(total=len(lengths), unit="sent", disable=not show_progress) as progress:
        for chunk in _checked_chunks(sentences, lengths, chunk_sentences, input_path):
            if level == "word":
                rows = list(extractor.iter_words(chunk))
                if rows:
                    writer.write(np.concatenate(rows))
            else:
                writer.write(np.stack(list(extractor.iter_texts(chunk))))
            progress.update(len(chunk))
        writer.close(**({"lengths": lengths} if output_path.endswith(".npz") else {}))
    return {"sentences": len(lengths), "rows": n_rows, "dim": extractor.dim, "output": output_path}
