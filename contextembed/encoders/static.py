"""Static word vectors: word2vec (text and binary), GloVe ``.txt``, fastText ``.vec``.

One layer, one row per word. Lookup rule, in order: the word as given; its lowercase form (always
tried first for an all-lowercase vocabulary such as GloVe 6B, so that "Paris" finds "paris"). A word
found neither way (out of vocabulary) gets the ``oov`` vector: zeros by default, or the mean of all
vectors with ``oov="mean"``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Literal, Optional, Union

import numpy as np

from ..pooling.layers import LayerSpec
from .base import Encoder, PieceEncoding, Sentences, check_sentences

StaticFormat = Literal["word2vec", "word2vec-binary", "glove"]


#: the files :meth:`StaticVectors.save` writes
SAVED_VECTORS = "vectors.bin"
SAVED_OPTIONS = "contextembed_static.json"


class StaticVectors(Encoder):
    """A table of word vectors behind the encoder interface.

    Parameters
    ----------
    words : list of str
        Vocabulary, row ``i`` of ``vectors`` belongs to ``words[i]`` (first occurrence wins).
    vectors : np.ndarray
        ``(vocab, width)`` float32.
    spec : str
        What it was loaded from.
    lowercase : bool or "auto"
        Look words up lowercased first; ``"auto"`` does so when the vocabulary has no uppercase word.
    oov : {"zeros", "mean"}
        The vector of a word not in the vocabulary.
    """

    family = "static"

    def __init__(
        self,
        words: list[str],
        vectors: np.ndarray,
        *,
        spec: str = "",
        lowercase: Union[bool, Literal["auto"]] = "auto",
        oov: Literal["zeros", "mean"] = "zeros",
    ) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(
                f"vectors must be (vocab, width) with vocab={len(words)} rows, got shape {vectors.shape}"
            )
        if oov not in ("zeros", "mean"):
            raise ValueError(f"oov={oov!r} is not one of 'zeros', 'mean'")
        self.spec = spec
        self.words = list(words)
        self.index: dict[str, int] = {}
        for i, word in enumerate(self.words):
            self.index.setdefault(word, i)
        self.lowercase = _is_lowercase_vocab(self.words) if lowercase == "auto" else bool(lowercase)
        oov_vector = vectors.mean(axis=0) if oov == "mean" and len(vectors) else np.zeros(vectors.shape[1])
        # the OOV vector is the extra last row
        self.table = np.vstack([vectors, oov_vector[None].astype(np.float32)])
        self.oov = oov

    @property
    def n_layers(self) -> int:
        return 1

    @property
    def width(self) -> int:
        return int(self.table.shape[1])

    @property
    def vocab_size(self) -> int:
        return len(self.index)

    def lookup(self, word: str) -> int:
        """Row of ``word`` in :attr:`table` following the lookup rule (the last row is OOV)."""
        first, second = (word.lower(), word) if self.lowercase else (word, word.lower())
        found = self.index.get(first)
        if found is None:
            found = self.index.get(second, len(self.words))
        return found

    def is_oov(self, word: str) -> bool:
        """Whether ``word`` falls back to the OOV vector."""
        return self.lookup(word) == len(self.words)

    def iter_encode_pieces(
        self, sentences: Sentences, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        sentences = check_sentences(sentences)
        self.layer_indexes(layers)  # validates: only 0 / -1 / "all" exist
        for sentence in sentences:
            rows = np.fromiter((self.lookup(w) for w in sentence), dtype=np.int64, count=len(sentence))
            # (layers=1, words, width)
            hidden = self.table[rows][None]
            yield PieceEncoding(hidden, np.arange(len(sentence) + 1, dtype=np.int64))

    # -- loading and saving -------------------------------------------------------------------

    def _write(self, directory: str) -> None:
        """Write ``vectors.bin`` (word2vec binary) and the lookup options into ``directory``."""
        write_word2vec(os.path.join(directory, SAVED_VECTORS), self.words, self.table[:-1], binary=True)
        options = {"lowercase": self.lowercase, "oov": self.oov}
        with open(os.path.join(directory, SAVED_OPTIONS), "w", encoding="utf-8") as handle:
            json.dump(options, handle, indent=2)

    @classmethod
    def load(cls, path: Union[str, os.PathLike], format: Optional[StaticFormat] = None, **kwargs) -> "StaticVectors":
        """Read a vectors file; the format is sniffed from the file when not given.

        ``.bin`` is word2vec binary; a text file whose first line is two integers is word2vec /
        fastText ``.vec``; any other text file is GloVe (no header).
        """
        path = os.fspath(path)
        format = format or sniff_format(path)
        readers = {"word2vec": _read_text, "glove": _read_text, "word2vec-binary": _read_binary}
        if format not in readers:
            raise ValueError(f"format={format!r} is not one of {', '.join(map(repr, readers))}")
        words, vectors = readers[format](path)
        return cls(words, vectors, spec=kwargs.pop("spec", path), **kwargs)


def is_saved_directory(path: str) -> bool:
    """Whether ``path`` is a directory written by :meth:`StaticVectors.save`."""
    return os.path.isfile(os.path.join(path, SAVED_OPTIONS)) and os.path.isfile(os.path.join(path, SAVED_VECTORS))


def load_saved_directory(path: str, **options) -> StaticVectors:
    """Read a directory written by :meth:`StaticVectors.save`; ``options`` override the saved ones."""
    with open(os.path.join(path, SAVED_OPTIONS), encoding="utf-8") as handle:
        saved = json.load(handle)
    return StaticVectors.load(os.path.join(path, SAVED_VECTORS), spec=path, **{**saved, **options})


def sniff_format(path: str) -> StaticFormat:
    """Guess the static-vectors format of ``path`` from its name and first line."""
    if path.endswith(".bin"):
        return "word2vec-binary"
    with open(path, "rb") as handle:
        first = handle.readline(4096)
    return "word2vec" if _is_header(first) else "glove"


def _is_header(line: bytes) -> bool:
    parts = line.split()
    return len(parts) == 2 and all(p.isdigit() for p in parts)


def _read_text(path: str) -> tuple[list[str], np.ndarray]:
    """word2vec/fastText text (header ``n width``) or GloVe (no header); ``word v1 ... vd`` lines."""
    words: list[str] = []
    rows: list[np.ndarray] = []
    width = None
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number == 1 and _is_header(line):
                width = int(line.split()[1])
                continue
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            # the word is everything before the last `width` fields (GloVe 840B has words with spaces)
            fields = line.rstrip().split(b" ")
            width = width or len(fields) - 1
            if len(fields) < width + 1:
                raise ValueError(
                    f"{path}, line {number}: expected a word and {width} numbers, got {len(fields)} fields"
                )
            word = b" ".join(fields[: len(fields) - width]).decode("utf-8", errors="replace")
            words.append(word)
            rows.append(np.asarray(fields[len(fields) - width :], dtype=np.float32))
    if not rows:
        raise ValueError(f"{path} holds no vectors")
    return words, np.vstack(rows)


def _read_binary(path: str) -> tuple[list[str], np.ndarray]:
    """word2vec binary: header ``n width\\n``, then per word ``word<space>`` and ``width`` float32."""
    with open(path, "rb") as handle:
        header = handle.readline()
        if not _is_header(header):
            raise ValueError(f"{path}: word2vec binary must start with 'count width', got {header[:40]!r}")
        count, width = map(int, header.split())
        words, vectors = [], np.empty((count, width), dtype=np.float32)
        for i in range(count):
            word = _read_word(handle, path, i)
            data = handle.read(4 * width)
            if len(data) != 4 * width:
                raise ValueError(f"{path}: file ends inside vector {i} of {count}")
            vectors[i] = np.frombuffer(data, dtype="<f4")
            words.append(word)
    return words, vectors


def _read_word(handle, path: str, i: int) -> str:
    chars = bytearray()
    while True:
        char = handle.read(1)
        if not char:
            raise ValueError(f"{path}: file ends inside word {i}")
        if char == b" ":
            break
        if char != b"\n" or chars:  # a newline may end the previous vector
            chars += char
    return chars.decode("utf-8", errors="replace")


def _is_lowercase_vocab(words: list[str], sample: int = 50_000) -> bool:
    return not any(w != w.lower() for w in words[:sample])


def write_word2vec(path: Union[str, os.PathLike], words: list[str], vectors: np.ndarray, binary: bool = False) -> None:
    """Write vectors in word2vec text or binary format (readable by :class:`StaticVectors` and gensim)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    with open(path, "wb") as handle:
        handle.write(f"{len(words)} {vectors.shape[1]}\n".encode())
        for word, vector in zip(words, vectors):
            if binary:
                handle.write(word.encode("utf-8") + b" " + vector.astype("<f4").tobytes() + b"\n")
            else:
                handle.write((word + " " + " ".join(f"{x:.6g}" for x in vector) + "\n").encode("utf-8"))
