"""Static word vectors behind the encoder interface: :class:`StaticVectors`.

One layer, one row per word. Lookup rule, in order: the word as given; its lowercase form (always
tried first for an all-lowercase vocabulary such as GloVe 6B, so that "Paris" finds "paris"). A word
found neither way (out of vocabulary) gets the ``oov`` vector: zeros by default, or the mean of all
vectors with ``oov="mean"``.

Duplicates
    The first occurrence of a word wins: its vector is the one looked up, and ``vocab_size``
    counts distinct words. Every row is kept in :attr:`StaticVectors.words` (so that saving and
    reloading reproduces the file), and one ``UserWarning`` per file says how many rows repeat an
    earlier word and where the first of them is.

Where the rest lives
    The vector files (word2vec text and binary, GloVe, fastText ``.vec``: format detection, the
    strict readers, :func:`write_word2vec`) are :mod:`contextembed.encoders._static.files`; the
    directory :meth:`StaticVectors.save` writes is :mod:`contextembed.encoders._static.directory`.
    Their public names stay importable from here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Literal, Optional, Union

import numpy as np

from ..._runtime.files import atomic_directory
from ..._inputs.options import check_choice
from ...pooling._layers import LayerSpec
from ...pooling._subword import SubwordPooling, check_subword_pooling
from .._base import Encoder, PieceEncoding, Sentences, ShowProgress, check_sentence_chunks, progress_bar
from .directory import PIECE_ROWS_FILE, is_saved_directory, read_saved_table, write_saved_table
from .subwords import SubwordVectors
from .tables import TableStorage
from .files import (  # noqa: F401  (re-exported)
    FORMAT_DESCRIPTIONS,
    StaticFormat,
    UnicodeErrors,
    check_table,
    read_vectors,
    sniff_format,
    write_word2vec,
)

OovVector = Literal["zeros", "mean"]

#: sentences looked up together (one gather from the table for all their words)
_LOOKUP_CHUNK = 1024


class StaticVectors(Encoder):
    """A table of word vectors behind the encoder interface.

    Parameters
    ----------
    words : list of str
        Vocabulary, row ``i`` of ``vectors`` belongs to ``words[i]``. A word may repeat; the first
        occurrence wins (its row is the one looked up), the later rows are kept but never used.
    vectors : np.ndarray
        ``(vocab, width)``, finite, converted to float32; ``width >= 1``.
    spec : str
        What it was loaded from.
    lowercase : bool or "auto"
        Look words up lowercased first; ``"auto"`` does so when the vocabulary has no uppercase word.
        Nothing else is read as one of them (:func:`check_lookup`).
    oov : {"zeros", "mean"}
        The vector of a word not in the vocabulary (and, with ``subwords``, none of whose pieces
        has a vector).
    subwords : SubwordVectors, optional
        Piece vectors of a tokenizer (a distilled table's teacher): a word not in the vocabulary
        takes the mean of its known pieces' vectors.
    storage : TableStorage, optional
        How :meth:`save` stores the vectors (float32 rows by default; float16, int8 or clustered:
        :class:`contextembed.encoders.TableStorage`). A table loaded from a directory keeps the
        storage it was saved with; in memory the table is float32 either way.

    Raises
    ------
    ValueError
        For vectors that are not ``(len(words), width)`` or hold ``nan``/``inf`` (also after the
        conversion to float32), for ``subwords`` of another width, and for unknown options.
    TypeError
        For a word that is not a ``str``, or a ``lowercase`` that is not a bool or ``"auto"``.
    """

    family = "static"
    no_context = "a static vector is the same whatever the words around it, so context would change nothing"
    #: a table that is looked up: no network runs, no engine applies
    backend = "numpy"

    def __init__(
        self,
        words: list[str],
        vectors: np.ndarray,
        *,
        spec: str = "",
        lowercase: Union[bool, Literal["auto"]] = "auto",
        oov: OovVector = "zeros",
        subwords: Optional[SubwordVectors] = None,
        storage: Optional[TableStorage] = None,
    ) -> None:
        check_lookup(lowercase, oov)
        if storage is not None and not isinstance(storage, TableStorage):
            raise TypeError(f"storage must be a TableStorage or None, got {type(storage).__name__}")
        words = list(words)
        vectors = check_table(words, vectors)
        if subwords is not None and subwords.width != vectors.shape[1]:
            raise ValueError(f"the subword vectors are {subwords.width} wide, the table {vectors.shape[1]}: "
                             "they must match")
        self.spec = spec
        self.words = words
        self.index: dict[str, int] = {}
        for i, word in enumerate(self.words):
            self.index.setdefault(word, i)
        self.lowercase = _is_lowercase_vocab(self.words) if isinstance(lowercase, str) else bool(lowercase)
        oov_vector = vectors.mean(axis=0) if oov == "mean" and len(vectors) else np.zeros(vectors.shape[1])
        # the OOV vector is the extra last row
        self.table = np.vstack([vectors, oov_vector[None].astype(np.float32)])
        self.oov = oov
        self.subwords = subwords
        self.storage = storage or TableStorage()

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
        return int(self._rows([word])[0])

    def is_oov(self, word: str) -> bool:
        """Whether ``word`` is not in the vocabulary (it takes its pieces' mean when the table has
        ``subwords`` and one of its pieces is known, else the OOV vector)."""
        return self.lookup(word) == len(self.words)

    def iter_encode_pieces(
        self, sentences: Sentences, layers: LayerSpec = "all", *, show_progress: bool = False
    ) -> Iterator[PieceEncoding]:
        for vectors in self._iter_vectors(sentences, layers, show_progress):
            yield PieceEncoding(vectors, np.arange(vectors.shape[1] + 1, dtype=np.int64))

    def iter_encode(
        self,
        sentences: Sentences,
        layers: LayerSpec = "all",
        subword_pooling: SubwordPooling = "first",
        *,
        show_progress: bool = False,
    ) -> Iterator[np.ndarray]:
        """As :meth:`Encoder.iter_encode`; a word is its own single piece, so every pooling but
        ``"first_last"`` (the row twice) returns the looked-up rows as they are."""
        if check_subword_pooling(subword_pooling) == "first_last":
            yield from super().iter_encode(sentences, layers, subword_pooling, show_progress=show_progress)
            return
        yield from self._iter_vectors(sentences, layers, show_progress)

    def _iter_vectors(self, sentences: Sentences, layers: LayerSpec,
                      show_progress: ShowProgress = False) -> Iterator[np.ndarray]:
        """``(layers=1, words, width)`` per sentence: one table gather per chunk of sentences
        (counted on the progress bar as it is looked up)."""
        self.layer_indexes(layers)  # validates: only 0 / -1 / "all" exist
        with progress_bar(sentences, show_progress) as progress:
            for chunk in check_sentence_chunks(sentences, _LOOKUP_CHUNK):  # an iterator is read chunk by chunk
                words = [w for sentence in chunk for w in sentence]
                rows = self._rows(words)
                # (words of the chunk, width)
                vectors = self.table[rows]
                if self.subwords is not None:
                    self._fill_from_subwords(words, rows, vectors)
                progress.update(len(chunk))
                end = 0
                for sentence in chunk:
                    begin, end = end, end + len(sentence)
                    yield vectors[None, begin:end]

    def _rows(self, words: list[str]) -> np.ndarray:
        """``(words,)`` rows of :attr:`table`: the lowercased form first when :attr:`lowercase`, else
        the exact form first, then the other form; the last row where neither is known. The first
        form of every word is looked up in one pass, the second only for the words the first missed."""
        get, oov = self.index.get, len(self.words)
        forms = map(str.lower, words) if self.lowercase else words
        rows = np.fromiter(map(get, forms, repeat(-1)), dtype=np.int64, count=len(words))
        for i in np.flatnonzero(rows < 0).tolist():
            rows[i] = get(words[i] if self.lowercase else words[i].lower(), oov)
        return rows

    def _fill_from_subwords(self, words: list[str], rows: np.ndarray, vectors: np.ndarray) -> None:
        """Give the out-of-vocabulary ``words`` their pieces' mean, where a piece is known."""
        missing = np.flatnonzero(rows == len(self.words))
        if not len(missing):
            return
        # (missing words, width), (missing words,)
        found_vectors, found = self.subwords.lookup([words[i] for i in missing])
        vectors[missing[found]] = found_vectors[found]

    # -- loading and saving -------------------------------------------------------------------

    def save(self, directory: Union[str, os.PathLike], *, overwrite: bool = False,
             storage: Optional[TableStorage] = None) -> None:
        """As :meth:`Encoder.save`; ``storage`` (default: :attr:`storage`) says how the vectors (and
        the piece vectors) are stored: float32, float16, int8 or clustered
        (:mod:`~contextembed.encoders._static.tables`).

        Raises
        ------
        ValueError
            For ``storage.clusters`` above the number of rows, or (float16) naming the first row (and
            its word or piece) holding a value beyond float16's range; before anything is written,
            so a table already at ``directory`` is kept whole.
        """
        storage = self._checked_storage(storage)
        with atomic_directory(directory, overwrite=overwrite, what="encoder directory") as folder:
            self._write(folder, storage)

    def _checked_storage(self, storage: Optional[TableStorage]) -> TableStorage:
        if storage is not None and not isinstance(storage, TableStorage):
            raise TypeError(f"storage must be a TableStorage or None, got {type(storage).__name__}")
        storage = storage or getattr(self, "storage", TableStorage())  # pickles from before storage existed
        if storage.clusters is not None and storage.clusters > len(self.words):
            raise ValueError(f"clusters={storage.clusters} exceeds the table's {len(self.words)} rows: pass at most "
                             f"{len(self.words)}")
        if storage.exact_columns is not None and storage.exact_columns >= self.width:
            raise ValueError(f"exact_columns={storage.exact_columns} leaves none of the table's {self.width} columns to "
                             f"cluster: pass at most {self.width - 1}")
        return storage

    def _write(self, folder: str, storage: Optional[TableStorage] = None) -> None:
        """The vectors, the exact word list and the lookup options (see :meth:`Encoder.save` and
        :mod:`~contextembed.encoders._static.directory`): every word exactly, whatever characters it
        holds, and every row, duplicates included."""
        storage = self._checked_storage(storage)
        pieces = None
        if self.subwords is not None:
            self.subwords.save_tokenizer(folder)
            pieces = (self.subwords.ids, self.subwords.vectors)
        # (vocab, width), the OOV row left out
        write_saved_table(folder, self.words, self.table[:-1], lowercase=self.lowercase, oov=self.oov, pieces=pieces,
                          storage=storage)

    @classmethod
    def load(
        cls,
        path: Union[str, os.PathLike],
        format: Optional[StaticFormat] = None,
        *,
        unicode_errors: UnicodeErrors = "strict",
        **kwargs,
    ) -> "StaticVectors":
        """Read a vectors file: word2vec text or binary, fastText ``.vec`` or GloVe
        (:func:`~contextembed.encoders._static.files.read_vectors`).

        Parameters
        ----------
        path : str or path
            The file. Its format is detected from its content (see
            :mod:`~contextembed.encoders._static.files`), never from its name.
        format : {"word2vec", "word2vec-binary", "glove"}, optional
            Insist on a format; an error if the content says otherwise.
        unicode_errors : {"strict", "replace", "ignore"}
            What to do with a word that is not valid UTF-8: raise (default), replace each bad byte
            with U+FFFD, or drop the bad bytes.
        **kwargs
            ``spec``, ``lowercase``, ``oov``: passed to :class:`StaticVectors`.

        Raises
        ------
        FileFormatError
            For any file that breaks its format; the message names the file and the line or entry.

        Warns
        -----
        UserWarning
            Once per file when words repeat (the first occurrence wins).
        """
        path = os.fspath(path)
        check_lookup(kwargs.get("lowercase", "auto"), kwargs.get("oov", "zeros"))  # before reading a large file
        found = read_vectors(path, format, unicode_errors=unicode_errors)
        encoder = cls(found.words, found.vectors, spec=kwargs.pop("spec", path), **kwargs)
        _warn_duplicates(encoder, path, found.row_name)
        return encoder


def load_saved_directory(path: Union[str, os.PathLike], **options) -> StaticVectors:
    """Read a directory written by :meth:`StaticVectors.save`; ``options`` override the saved ones.

    Reads format version 2 (``vectors.safetensors`` + ``words.json``), version 3 (the same with a
    ``subwords`` folder: :class:`SubwordVectors`), 4 (other storages) and 5 (piece vectors stored
    as rows of the table) and the earlier layout (``vectors.bin``, word2vec
    binary, read with ``unicode_errors`` from ``options``); see
    :mod:`~contextembed.encoders._static.directory`.

    Raises
    ------
    ModelFormatError
        For missing, unreadable or inconsistent files; the message names the file.
    """
    path = os.fspath(path)
    saved = read_saved_table(path, options.pop("unicode_errors", "strict"))
    options = {**saved.options, **options, "spec": options.get("spec", path)}
    if saved.pieces is not None:  # format 5: the piece vectors are rows of the table
        options["subwords"] = SubwordVectors.from_saved(path, *saved.pieces, source=os.path.join(path, PIECE_ROWS_FILE))
    elif saved.subwords:
        options["subwords"] = SubwordVectors.load(path, saved.storage)
    encoder = StaticVectors(saved.words, saved.vectors, storage=saved.storage, **options)
    _warn_duplicates(encoder, saved.source, saved.row_name)
    return encoder


def check_lookup(lowercase, oov) -> None:
    """The lookup options of :class:`StaticVectors`: ``lowercase`` is ``True``, ``False`` or ``"auto"``
    (nothing else is taken for one of them: ``"no"`` is not false), ``oov`` an :data:`OovVector`.

    Raises
    ------
    TypeError
        For a ``lowercase`` that is neither a bool nor a string.
    ValueError
        For another string, or an unknown ``oov``.
    """
    check_choice("oov", oov, OovVector)
    if isinstance(lowercase, str) and lowercase != "auto":
        raise ValueError(f"lowercase={lowercase!r} is not 'auto'; expected True, False or 'auto'")
    if not isinstance(lowercase, (bool, np.bool_, str)):
        raise TypeError(f"lowercase={lowercase!r} is a {type(lowercase).__name__}; expected True, False or 'auto'")


def _warn_duplicates(encoder: StaticVectors, source: str, where: Callable[[int], str]) -> None:
    """One ``UserWarning`` if words repeat, naming how many and the first repeated one."""
    repeats = len(encoder.words) - encoder.vocab_size
    if not repeats:
        return
    first = next(i for i, word in enumerate(encoder.words) if encoder.index[word] != i)
    word = encoder.words[first]
    warnings.warn(
        f"{source}: {repeats} row(s) repeat an earlier word and are never looked up (the first occurrence "
        f"wins); the first is {word!r} at {where(first)}, which repeats {where(encoder.index[word])}",
        UserWarning,
        stacklevel=3,
    )


def _is_lowercase_vocab(words: list[str], sample: int = 50_000) -> bool:
    return not any(w != w.lower() for w in words[:sample])


__all__ = ["OovVector", "StaticVectors", "check_lookup", "is_saved_directory", "load_saved_directory", "sniff_format",
           "write_word2vec"]
