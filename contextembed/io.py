"""Reading token files and streaming features to ``.npy`` / ``.npz`` with bounded memory.

Input formats
-------------
``text``   one sentence per line, split by the chosen tokenizer (blank lines are empty sentences)
``conll``  CoNLL columns: the first column is the token; blank lines end sentences; ``-DOCSTART-``
           lines are skipped
``jsonl``  one JSON object per line with ``"tokens"`` (a list of str) or ``"text"`` (a str, split by
           the tokenizer)
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Optional

import numpy as np

Tokenizer = Callable[[str], list[str]]
INPUT_FORMATS = ("text", "conll", "jsonl")
_EXTENSIONS = {".txt": "text", ".conll": "conll", ".conllu": "conll", ".jsonl": "jsonl", ".json": "jsonl"}


def whitespace_tokenizer(text: str) -> list[str]:
    """Split on runs of whitespace."""
    return text.split()


def spacy_tokenizer(language: str = "en") -> Tokenizer:
    """spaCy's rule-based tokenizer for ``language`` (no model download: a blank pipeline)."""
    import spacy

    tokenizer = spacy.blank(language).tokenizer
    return lambda text: [token.text for token in tokenizer(text) if not token.is_space]


TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "whitespace": lambda: whitespace_tokenizer,
    "spacy": spacy_tokenizer,
}


def guess_format(path: str) -> str:
    """Input format from the file extension; ``ValueError`` if it cannot be told."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in _EXTENSIONS:
        raise ValueError(
            f"cannot tell the format of {path!r} from its extension; pass --format "
            f"({', '.join(INPUT_FORMATS)})"
        )
    return _EXTENSIONS[extension]


def read_sentences(path: str, input_format: Optional[str] = None, tokenizer: Tokenizer = whitespace_tokenizer) -> Iterator[list[str]]:
    """Stream tokenized sentences from ``path`` (see the module docstring for formats)."""
    input_format = input_format or guess_format(path)
    readers = {"text": _read_text, "conll": _read_conll, "jsonl": _read_jsonl}
    if input_format not in readers:
        raise ValueError(f"input format {input_format!r} is not one of {', '.join(INPUT_FORMATS)}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"input file {path!r} does not exist")
    return readers[input_format](path, tokenizer)


def _read_text(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            yield tokenizer(line.rstrip("\n"))


def read_conll(path: str) -> Iterator[tuple[list[str], list[list[str]]]]:
    """Stream ``(tokens, other_columns)`` per sentence of a CoNLL column file."""
    tokens: list[str] = []
    columns: list[list[str]] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                if tokens:
                    yield tokens, columns
                tokens, columns = [], []
            elif fields[0] == "-DOCSTART-":
                continue
            else:
                tokens.append(fields[0])
                columns.append(fields[1:])
    if tokens:
        yield tokens, columns


def _read_conll(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    for tokens, _ in read_conll(path):
        yield tokens


def _read_jsonl(path: str, tokenizer: Tokenizer) -> Iterator[list[str]]:
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("tokens"), list):
                yield [str(t) for t in record["tokens"]]
            elif isinstance(record, dict) and isinstance(record.get("text"), str):
                yield tokenizer(record["text"])
            else:
                raise ValueError(f"{path}, line {number}: expected an object with 'tokens' (list) or 'text' (str)")


class ArrayWriter:
    """Write a 2-D array row block by row block, never holding it all in memory.

    ``.npy`` is written through a memory map; ``.npz`` streams ``features.npy`` into the archive and
    adds ``extra`` arrays (e.g. ``lengths``) at the end.
    """

    def __init__(self, path: str, n_rows: int, dim: int, dtype: str = "float32") -> None:
        if not path.endswith((".npy", ".npz")):
            raise ValueError(f"output {path!r} must end in .npy or .npz")
        self.path, self.shape, self.dtype = path, (n_rows, dim), np.dtype(dtype)
        self.row = 0
        if path.endswith(".npy"):
            self._memmap = np.lib.format.open_memmap(path, mode="w+", dtype=self.dtype, shape=self.shape)
        else:
            self._zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
            self._stream = self._zip.open("features.npy", "w", force_zip64=True)
            header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
            np.lib.format.write_array_header_2_0(self._stream, header)

    def write(self, block: np.ndarray) -> None:
        """Append ``(rows, dim)``."""
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.ndim != 2 or block.shape[1] != self.shape[1] or self.row + len(block) > self.shape[0]:
            raise ValueError(f"block of shape {block.shape} does not fit at row {self.row} of {self.shape}")
        if self.path.endswith(".npy"):
            self._memmap[self.row : self.row + len(block)] = block
        else:
            self._stream.write(block.tobytes())
        self.row += len(block)

    def abort(self) -> None:
        """Close and delete a partly written output."""
        if self.path.endswith(".npy"):
            del self._memmap
        else:
            self._stream.close()
            self._zip.close()
        os.remove(self.path)

    def close(self, **extra: np.ndarray) -> None:
        if self.row != self.shape[0]:
            raise RuntimeError(f"wrote {self.row} rows, expected {self.shape[0]}")
        if self.path.endswith(".npy"):
            self._memmap.flush()
            del self._memmap
            return
        self._stream.close()
        for name, array in extra.items():
            with self._zip.open(f"{name}.npy", "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, np.asarray(array))
        self._zip.close()


def _chunks(iterable, size: int):
    iterator = iter(iterable)
    while chunk := list(islice(iterator, size)):
        yield chunk


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
    level: str = "word",
    text_pooling: str = "mean",
    dtype: str = "float32",
    device: str = "auto",
    precision: str = "auto",
    chunk_sentences: int = 4096,
    show_progress: bool = True,
    encoder=None,
) -> dict:
    """Embed a file of sentences and stream the features to ``output_path``.

    Word level writes one row per input token (``.npz`` adds ``lengths``: tokens per sentence); text
    level one row per sentence. Memory stays bounded by ``chunk_sentences`` whatever the corpus size.

    Returns
    -------
    dict
        ``sentences``, ``rows``, ``dim``, ``output``.
    """
    from .encoders import load_encoder
    from .features import FeatureExtractor

    if not output_path.endswith((".npy", ".npz")):
        raise ValueError(f"output {output_path!r} must end in .npy or .npz")
    if level not in ("word", "text"):
        raise ValueError(f"level={level!r} is not one of 'word', 'text'")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer={tokenizer!r} is not one of {', '.join(TOKENIZERS)}")
    split = TOKENIZERS[tokenizer]()
    input_format = input_format or guess_format(input_path)
    lengths = np.fromiter((len(s) for s in read_sentences(input_path, input_format, split)), dtype=np.int64)
    encoder = encoder or load_encoder(spec, device=device, precision=precision)
    extractor = FeatureExtractor(encoder, layers, combine, subword_pooling, text_pooling)
    n_rows = int(lengths.sum()) if level == "word" else len(lengths)
    writer = ArrayWriter(output_path, n_rows, extractor.dim, dtype)
    try:
        from tqdm.auto import tqdm

        with tqdm(total=len(lengths), unit="sent", disable=not show_progress) as progress:
            for chunk in _chunks(read_sentences(input_path, input_format, split), chunk_sentences):
                if level == "word":
                    rows = list(extractor.iter_words(chunk))
                    if rows:
                        writer.write(np.concatenate(rows))
                else:
                    writer.write(np.stack(list(extractor.iter_texts(chunk))))
                progress.update(len(chunk))
    except BaseException:
        writer.abort()
        raise
    writer.close(lengths=lengths)
    return {"sentences": len(lengths), "rows": n_rows, "dim": extractor.dim, "output": output_path}
