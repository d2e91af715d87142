"""Words <-> subword pieces, and overlapping windows for inputs longer than a model takes.

Alignment rule
--------------
Every input word owns a contiguous, non-empty run of pieces, in word order. Words are tokenized
the way the model saw words during pretraining (Hugging Face ``is_split_into_words``: a word-initial
piece where the model marks one, e.g. RoBERTa's leading space). A word the tokenizer turns into *no*
pieces (``"\u200b"``, a soft hyphen, control characters, an empty or whitespace-only token) is given
the tokenizer's unknown token as its single piece: it keeps its own position and a contextual
vector, and never shifts the words after it.

Window rule
-----------
A sentence of more pieces than ``window`` is cut into windows of ``window`` pieces whose starts are
``stride`` apart (the last window is aligned to the end). Each piece takes its vectors from the
window where it has the most context on both sides: consecutive windows split their overlap at its
midpoint, so each window owns a contiguous range and no piece is dropped or repeated.

Context rule
------------
With document context (``context=N``, :mod:`contextembed._inputs.documents`) a sentence that fits one
window shares it with up to ``N`` pieces of the text before it and ``N`` after it: the room left,
``window - pieces``, goes to both sides when it holds both; when it is short, each side gets half
(the left side the smaller half of an odd room) and a side that needs less than its half gives the
rest to the other (:func:`split_context`). A sentence of ``window`` pieces or more is windowed as
without context: its windows are full, so no room is left.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .bounds import COUNT, check_setting
from .sentences import Sentences


@dataclass
class SentencePieces:
    """The pieces of one sentence.

    Attributes
    ----------
    ids : np.ndarray
        ``(pieces,)`` int64 vocabulary ids, without special tokens.
    offsets : np.ndarray
        ``(words + 1,)`` int64: word ``i`` owns ``ids[offsets[i]:offsets[i + 1]]`` (never empty).
    """

    ids: np.ndarray
    offsets: np.ndarray

    @property
    def n_pieces(self) -> int:
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class Window:
    """One model input over pieces ``[start, end)`` of a sentence; it owns ``[own_start, own_end)``."""

    start: int
    end: int
    own_start: int
    own_end: int


class PieceTokenizer:
    """Tokenize pre-tokenized sentences into pieces with a word -> pieces map.

    Parameters
    ----------
    tokenizer : transformers.PreTrainedTokenizerBase
        A Hugging Face tokenizer with a fast (``tokenizers``) backend, so that ``word_ids`` exist.
    """

    def __init__(self, tokenizer) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(
                f"{type(tokenizer).__name__} has no fast (Rust) backend, so words cannot be mapped to "
                "pieces reliably; save the model with a tokenizer.json (tokenizers library)"
            )
        self.tokenizer = tokenizer
        self.unk_id = _unknown_id(tokenizer)
        self.prefix, self.suffix = special_tokens_around(tokenizer)
        #: ``prefix`` and ``suffix`` as ``(pieces,)`` int64 arrays
        self.around = (np.asarray(self.prefix, dtype=np.int64), np.asarray(self.suffix, dtype=np.int64))
        self._words = WordPieces(self) if context_free(tokenizer) else None

    def __call__(self, sentences: Sentences) -> list[SentencePieces]:
        """Tokenize each sentence; ``sentences`` must already be validated lists of str.

        A tokenizer that cuts each word into pieces alone (:func:`context_free`) looks each word up
        in a bounded cache of the words it has seen (:class:`WordPieces`); any other runs its batch
        call and its pieces are aligned to the words.
        """
        if self._words is not None:
            return self._words.sentences(sentences)
        non_empty = [i for i, s in enumerate(sentences) if len(s)]
        results = [_empty_pieces() for _ in sentences]
        if not non_empty:
            return results
        batch = self.tokenizer(
            [list(sentences[i]) for i in non_empty],
            is_split_into_words=True,
            add_special_tokens=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            truncation=False,
            verbose=False,
        )
        for row, i in enumerate(non_empty):
            word_ids = batch.word_ids(row)
            results[i] = self._align(batch["input_ids"][row], word_ids, len(sentences[i]))
        return results

    def joined(self, sentences: Sentences) -> tuple[np.ndarray, np.ndarray]:
        """The pieces of :meth:`__call__`, sentence after sentence, without an object per sentence.

        Returns
        -------
        ids : np.ndarray
            ``(pieces,)`` int64: every sentence's piece ids, one sentence after the other.
        n_pieces : np.ndarray
            ``(sentences,)`` int64: how many pieces each sentence has.
        """
        ids, starts, first_word, n_words = self.word_pieces(sentences)
        return ids, starts[first_word + n_words] - starts[first_word]

    def word_pieces(self, sentences: Sentences) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The pieces of :meth:`__call__` word after word, without an object per sentence.

        Returns
        -------
        ids : np.ndarray
            ``(pieces,)`` int64: every word's piece ids, one sentence after the other.
        starts : np.ndarray
            ``(words + 1,)`` int64: where each word's pieces start in ``ids`` (the last: ``len(ids)``).
        first_word, n_words : np.ndarray
            ``(sentences,)`` int64: where each sentence's words start among all, and how many it has.
        """
        if self._words is not None:
            return self._words.words(sentences)
        pieces = self(sentences)
        n_words = np.fromiter((len(p.offsets) - 1 for p in pieces), dtype=np.int64, count=len(pieces))
        if not int(n_words.sum()):
            return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), _offsets(n_words)[:-1], n_words
        n_pieces = np.fromiter((p.n_pieces for p in pieces), dtype=np.int64, count=len(pieces))
        first_piece = _offsets(n_pieces)[:-1]
        word_starts = [p.offsets[:-1] + begin for p, begin in zip(pieces, first_piece.tolist())]
        starts = np.concatenate([*word_starts, [int(n_pieces.sum())]]).astype(np.int64, copy=False)
        return np.concatenate([p.ids for p in pieces]), starts, _offsets(n_words)[:-1], n_words

    def words_alone(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The pieces of each word as a one-word sentence (what ``self([[word]])`` gives), by one
        call of the fast backend: many words at a fraction of the cost of full alignment.

        Returns
        -------
        ids : np.ndarray
            ``(pieces,)`` int64: every word's pieces, word after word.
        counts : np.ndarray
            ``(words,)`` int64: how many pieces each word has, never 0 (a word without pieces is
            the unknown token, as in a sentence).
        """
        encodings = self.tokenizer.backend_tokenizer.encode_batch(
            [[word] for word in words], is_pretokenized=True, add_special_tokens=False
        )
        pieces = [e.ids or [self.unk_id] for e in encodings]
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        return np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64, count=int(counts.sum())), counts

    def _align(self, ids: list[int], word_ids: list[Optional[int]], n_words: int) -> SentencePieces:
        ids_array = np.asarray(ids, dtype=np.int64)
        owners = np.asarray([-1 if w is None else w for w in word_ids], dtype=np.int64)
        keep = owners >= 0
        ids_array, owners = ids_array[keep], owners[keep]
        if owners.size and np.any(np.diff(owners) < 0):
            raise RuntimeError("the tokenizer returned pieces out of word order; cannot align words")
        counts = np.bincount(owners, minlength=n_words)
        if np.all(counts > 0):
            return SentencePieces(ids_array, _offsets(counts))
        # words with no piece get the unknown token, inserted at their own position
        empty = np.flatnonzero(counts == 0)
        starts = _offsets(counts)[:-1]
        ids_array = np.insert(ids_array, starts[empty], self.unk_id)
        counts[empty] = 1
        return SentencePieces(ids_array, _offsets(counts))


#: the parts of a tokenizer (``tokenizer.json``) under which each word of a pre-split sentence is
#: normalized, split and cut into pieces alone, so that its pieces depend on the word only:
#: BERT's normalizer works character by character, its pre-tokenizer splits inside a word, and
#: WordPiece cuts each split alone (an over-long split is one unknown piece)
CONTEXT_FREE_PARTS = {"normalizer": (None, "BertNormalizer"), "pre_tokenizer": ("BertPreTokenizer",),
                      "model": ("WordPiece",)}
#: words whose pieces :class:`WordPieces` keeps (about 100 bytes each, and their strings)
WORD_CACHE_SIZE = 200_000


def context_free(tokenizer) -> bool:
    """Whether ``tokenizer`` (a fast Hugging Face tokenizer) gives every word of a pre-split sentence
    the pieces it gives the word alone (:data:`CONTEXT_FREE_PARTS`): then a word's pieces can be
    looked up. Any other (byte-level BPE, SentencePiece's ``Metaspace``, which marks the first word
    differently) is tokenized sentence by sentence."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    parts = {"normalizer": backend.normalizer, "pre_tokenizer": backend.pre_tokenizer, "model": backend.model}
    return all((None if part is None else type(part).__name__) in CONTEXT_FREE_PARTS[name] for name, part in parts.items())


class WordPieces:
    """A context-free tokenizer's pieces of each word seen, for :meth:`PieceTokenizer.__call__`.

    Unknown words are tokenized together by one call (:meth:`PieceTokenizer.words_alone`: a word
    without pieces is the unknown token, as in a sentence); at most :data:`WORD_CACHE_SIZE` words are
    kept, the oldest dropped first. The words are keyed by their exact string (case, accents and
    all: the tokenizer's normalizer runs on every new word). The cache belongs to one tokenizer and
    starts again when its vocabulary or backend changes (``add_tokens``), so no pieces of another
    vocabulary are ever looked up.

    Each known word has a slot in three arrays (its pieces' place in one array of all of them, and
    their count), so that a call looks its words up in one pass of C (``map`` over the dict) and
    gathers their pieces in NumPy, with no Python object per word.
    """

    def __init__(self, pieces: PieceTokenizer, max_words: int = WORD_CACHE_SIZE) -> None:
        self._pieces, self.max_words = pieces, max_words
        #: word -> its slot, oldest first; the slots in use are ``range(len(_known))``
        self._known: dict[str, int] = {}
        # (slots,) where each slot's pieces start in (pieces,) ``_ids``, and how many it has; each
        # with room to grow, the first ``len(_known)`` slots and ``_n_ids`` pieces in use (:meth:`_tables`)
        self._ids = self._starts = self._counts = np.zeros(0, dtype=np.int64)
        self._n_ids = 0
        self._vocabulary: tuple = ()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickled without its words (a copy starts empty) and without its lock."""
        return {"_pieces": self._pieces, "max_words": self.max_words}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["_pieces"], state["max_words"])

    def sentences(self, sentences: Sentences) -> list[SentencePieces]:
        """Each sentence's pieces, exactly what the tokenizer's batch call aligned gives."""
        ids, starts, first_word, n_words = self.words(sentences)
        # (words + sentences,): each sentence's word offsets from its own first piece, one after the other
        offsets = starts[ragged_arange(first_word, n_words + 1)] - np.repeat(starts[first_word], n_words + 1)
        bounds = _offsets(n_words + 1).tolist()
        begins, ends = starts[first_word].tolist(), starts[first_word + n_words].tolist()
        return [SentencePieces(ids[begin:end], offsets[bounds[i] : bounds[i + 1]])
                for i, (begin, end) in enumerate(zip(begins, ends))]

    def words(self, sentences: Sentences) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every word's pieces, word after word.

        Returns
        -------
        ids : np.ndarray
            ``(pieces,)`` int64 piece ids of every word of every sentence.
        starts : np.ndarray
            ``(words + 1,)`` int64: where each word's pieces start in ``ids``.
        first_word, n_words : np.ndarray
            ``(sentences,)`` int64: where each sentence's words start among all, and how many it has.
        """
        n_words = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
        with self._lock:
            slots, table_ids, table_starts, table_counts = self._lookup(sentences, int(n_words.sum()))
        counts = table_counts[slots]
        starts = _offsets(counts)
        return table_ids[ragged_arange(table_starts[slots], counts)], starts, _offsets(n_words)[:-1], n_words

    def _lookup(self, sentences: Sentences, n_words: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The slot of every word, word after word, and the tables they index (:meth:`_tables` as
        they were when looked up); new words tokenized and remembered."""
        tokenizer = self._pieces.tokenizer
        vocabulary = (id(tokenizer.backend_tokenizer), len(tokenizer))
        if vocabulary != self._vocabulary:
            self._forget(len(self._known))
            self._vocabulary = vocabulary
        known = self._known
        try:  # every word seen before: one pass
            slots = self._slots(sentences, n_words)
            return (slots, *self._tables())
        except KeyError:
            pass
        new = list(dict.fromkeys(word for sentence in sentences for word in sentence if word not in known))
        backend = tokenizer.backend_tokenizer
        if backend.truncation is not None or backend.padding is not None:  # what the tokenizer's own call does
            backend.no_truncation()
            backend.no_padding()
        ids, counts = self._pieces.words_alone(new)
        first = len(known)
        self._starts = _put(self._starts, first, _offsets(counts)[:-1] + self._n_ids)
        self._counts = _put(self._counts, first, counts)
        self._ids = _put(self._ids, self._n_ids, ids)
        self._n_ids += len(ids)
        known.update(zip(new, range(first, first + len(new))))  # the words last: their slots are filled
        slots = self._slots(sentences, n_words)
        tables = self._tables()
        self._forget(max(0, len(known) - self.max_words))
        return (slots, *tables)

    def _slots(self, sentences: Sentences, n_words: int) -> np.ndarray:
        """``(words,)`` the slot of every word, word after word (KeyError: a word not known)."""
        return np.fromiter(map(self._known.__getitem__, itertools.chain.from_iterable(sentences)),
                           dtype=np.intp, count=n_words)

    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, starts, counts)``: the parts of the tables in use (views; nothing in them is ever
        written again, so a call may read them after the lock is released)."""
        n = len(self._known)
        return self._ids[: self._n_ids], self._starts[:n], self._counts[:n]

    def _forget(self, n: int) -> None:
        """Drop the ``n`` oldest words (all of them: ``n >= len(_known)``) and compact the tables.
        The arrays are replaced, not changed, so those a call is still reading stay as they were."""
        if not n:
            return
        kept = list(itertools.islice(self._known.items(), n, None))
        if not kept:
            self._known = {}
            self._ids = self._starts = self._counts = np.zeros(0, dtype=np.int64)
            self._n_ids = 0
            return
        old = np.fromiter((slot for _, slot in kept), dtype=np.intp, count=len(kept))
        counts = self._counts[old]
        self._ids = self._ids[ragged_arange(self._starts[old], counts)]
        self._starts, self._counts, self._n_ids = _offsets(counts)[:-1], counts, len(self._ids)
        self._known = {word: slot for slot, (word, _) in enumerate(kept)}


def _put(array: np.ndarray, at: int, values: np.ndarray) -> np.ndarray:
    """``array`` with ``values`` written from ``at`` on: in place where it has room, else into a new
    array of at least twice the size (so that growing by appends costs amortized constant time per
    value, and what a reader holds of ``array[:at]`` never changes)."""
    end = at + len(values)
    if end > len(array):
        grown = np.empty(max(end, 2 * len(array), 1024), dtype=array.dtype)
        grown[:at] = array[:at]
        array = grown
    array[at:end] = values
    return array


def ragged_arange(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``counts[j]`` consecutive integers from ``starts[j]`` for each ``j``, one run after the other:
    ``(counts.sum(),)`` int64."""
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(ends[-1] if len(ends) else 0)


def _offsets(counts: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _empty_pieces() -> SentencePieces:
    return SentencePieces(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))


def _unknown_id(tokenizer) -> int:
    for candidate in (tokenizer.unk_token_id, tokenizer.pad_token_id):
        if candidate is not None:
            return int(candidate)
    raise ValueError(
        f"{type(tokenizer).__name__} has neither an unknown nor a padding token, so a word that "
        "yields no pieces could not be represented"
    )


def special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after one sequence (e.g. [CLS] / [SEP]).

    Found by tokenizing one word with and without special tokens, so it works for any
    single-sequence template (BERT, RoBERTa, ELECTRA, DistilBERT, XLM-R, ...).
    """
    plain = tokenizer(["a"], is_split_into_words=True, add_special_tokens=False)["input_ids"]
    full = tokenizer(["a"], is_split_into_words=True, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain) :])
    raise ValueError(f"could not locate the content inside {type(tokenizer).__name__}'s special tokens")


@dataclass(frozen=True)
class PairTemplate:
    """Where a tokenizer puts its special tokens around a sentence pair, and each region's segment id.

    The model input of a pair is ``prefix + first + middle + second + suffix``: BERT's
    ``[CLS] A [SEP] B [SEP]`` (segments 0, 0, 0, 1, 1), RoBERTa's ``<s> A </s></s> B </s>`` (all 0).
    """

    prefix: tuple[int, ...]
    middle: tuple[int, ...]
    suffix: tuple[int, ...]
    #: segment (token type) id of prefix, first, middle, second, suffix
    types: tuple[int, int, int, int, int]

    @property
    def n_special(self) -> int:
        return len(self.prefix) + len(self.middle) + len(self.suffix)

    def ids(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """``(pieces,)`` int64 ids of the pair's model input."""
        parts = (self.prefix, first, self.middle, second, self.suffix)
        return np.concatenate([np.asarray(part, dtype=np.int64) for part in parts])

    def type_ids(self, n_first: int, n_second: int) -> np.ndarray:
        """``(pieces,)`` int64 segment ids matching :meth:`ids`."""
        sizes = (len(self.prefix), n_first, len(self.middle), n_second, len(self.suffix))
        return np.repeat(np.asarray(self.types, dtype=np.int64), sizes)


def pair_template(tokenizer) -> PairTemplate:
    """The tokenizer's own pair template, read off a probe pair (``sequence_ids`` of the fast tokenizer).

    Works for any template of the form ``prefix A middle B suffix`` (BERT, RoBERTa, ELECTRA,
    DeBERTa, XLM-R, ...); segment ids come from the tokenizer (zeros for models without them).
    """
    probe = tokenizer(["a"], ["b"], is_split_into_words=True, add_special_tokens=True, return_token_type_ids=True)
    ids, owners = probe["input_ids"], probe.sequence_ids()
    types = probe.get("token_type_ids") or [0] * len(ids)
    first = [i for i, owner in enumerate(owners) if owner == 0]
    second = [i for i, owner in enumerate(owners) if owner == 1]
    if not first or not second or first[-1] > second[0]:
        raise ValueError(f"{type(tokenizer).__name__} has no 'prefix A middle B suffix' pair template")
    regions = [range(0, first[0]), first, range(first[-1] + 1, second[0]), second, range(second[-1] + 1, len(ids))]
    region_types = []
    for k, region in enumerate(regions):
        # an empty region takes the segment of the content before it (prefix: of the first sentence)
        region_types.append(types[region[0]] if len(region) else (types[first[0]] if k == 0 else region_types[-1]))
    return PairTemplate(
        tuple(ids[i] for i in regions[0]), tuple(ids[i] for i in regions[2]), tuple(ids[i] for i in regions[4]),
        tuple(int(t) for t in region_types),
    )


def plan_windows(n_pieces: int, window: int, stride: int) -> list[Window]:
    """Cut ``n_pieces`` into overlapping windows and assign each piece to one window.

    Parameters
    ----------
    n_pieces : int
        Length of the sentence in pieces (0 gives one empty window, so that every sentence has a
        model input, e.g. for its [CLS] vector).
    window : int
        Pieces per window (without special tokens).
    stride : int
        Distance between consecutive window starts, ``1 <= stride <= window``.

    Returns
    -------
    list of Window
        In order; their owned ranges tile ``[0, n_pieces)`` exactly.
    """
    check_window(window, stride)
    if n_pieces <= window:
        return [Window(0, n_pieces, 0, n_pieces)]
    starts = list(range(0, n_pieces - window, stride)) + [n_pieces - window]
    bounds = [(s, s + window) for s in starts]
    windows = []
    own_start = 0
    for k, (start, end) in enumerate(bounds):
        if k + 1 < len(bounds):
            next_start = bounds[k + 1][0]
            # the overlap [next_start, end) is split at its midpoint
            own_end = (next_start + end + 1) // 2
        else:
            own_end = n_pieces
        windows.append(Window(start, end, own_start, own_end))
        own_start = own_end
    return windows


def split_context(room, left, right):
    """How many context pieces each side gets in ``room`` free pieces of a window (ints, or arrays of
    them: one sentence each).

    Parameters
    ----------
    room : int
        Pieces of the window the sentence leaves free (``>= 0``).
    left, right : int
        Context pieces available (and wanted) on each side.

    Returns
    -------
    (int, int)
        Pieces taken on the left and on the right: all of both when they fit; else half of the room
        each, the unused part of one side's half going to the other side.
    """
    taken_left = np.minimum(left, np.maximum(room // 2, room - right))
    return taken_left, np.minimum(right, room - taken_left)


def check_window(window: int, stride: int, max_window: Optional[int] = None) -> None:
    """Validate window settings: ``TypeError`` for a ``window`` or ``stride`` that is not an int (a
    bool, a float), ``ValueError`` saying what is allowed for one out of range."""
    check_setting("window", window, COUNT)
    check_setting("stride", stride, COUNT)
    if max_window is not None and window > max_window:
        raise ValueError(
            f"window={window} pieces does not fit the model, which takes at most {max_window} "
            "pieces besides its special tokens"
        )
    if stride > window:
        raise ValueError(f"stride must be between 1 and window={window}, got {stride!r}")
