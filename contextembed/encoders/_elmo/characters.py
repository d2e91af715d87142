"""ELMo character ids: every word becomes ``MAX_CHARACTERS`` (50) ids from its UTF-8 bytes.

Slots of one word: ``[begin-of-word, up to 48 bytes of UTF-8, end-of-word, padding, ...]``. A cut
after 48 bytes may split a multi-byte character; the partial bytes stay. Special ids are
``BOS 256, EOS 257, BOW 258, EOW 259, PAD 260``; every id is shifted by +1 so that 0 means "no word"
(the masked slots of padded positions). The sentence markers are words of their own:
``[BOW, BOS, EOW, PAD, ...]`` and ``[BOW, EOS, EOW, PAD, ...]`` (+1 likewise).

Unlike AllenNLP's ``ELMoCharacterMapper``, the strings ``"<S>"`` and ``"</S>"`` in the input are
ordinary words here (encoded from their bytes); markers are added by position, never by spelling.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from ..._inputs.sentences import check_sentences

MAX_CHARACTERS = 50
#: bytes of a word kept between its begin- and end-of-word marks
MAX_WORD_BYTES = MAX_CHARACTERS - 2
N_CHARACTERS = 262

BOS_CHAR = 256
EOS_CHAR = 257
BOW_CHAR = 258
EOW_CHAR = 259
PAD_CHAR = 260


def _marker_ids(char: int) -> np.ndarray:
    ids = np.full(MAX_CHARACTERS, PAD_CHAR + 1, dtype=np.int64)
    ids[:3] = (BOW_CHAR + 1, char + 1, EOW_CHAR + 1)
    ids.flags.writeable = False
    return ids


#: ``(MAX_CHARACTERS,)`` ids of the begin-of-sentence marker
BOS_IDS = _marker_ids(BOS_CHAR)
#: ``(MAX_CHARACTERS,)`` ids of the end-of-sentence marker
EOS_IDS = _marker_ids(EOS_CHAR)


@lru_cache(maxsize=50_000)
def word_char_ids(word: str) -> np.ndarray:
    """Character ids of one word (read-only, cached).

    Parameters
    ----------
    word : str
        Any string; the empty string gives ``[BOW, EOW, PAD, ...]``.

    Returns
    -------
    np.ndarray
        ``(MAX_CHARACTERS,)`` int64, every id in ``1..N_CHARACTERS - 1``.
    """
    encoded = word.encode("utf-8", errors="surrogatepass")[:MAX_WORD_BYTES]
    ids = np.full(MAX_CHARACTERS, PAD_CHAR + 1, dtype=np.int64)
    ids[0] = BOW_CHAR + 1
    ids[1 : 1 + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8).astype(np.int64) + 1
    ids[1 + len(encoded)] = EOW_CHAR + 1
    ids.flags.writeable = False
    return ids


def sentence_char_ids(
    sentences: Sequence[Sequence[str]], add_markers: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Character ids of a batch of sentences, padded with zeros.

    Parameters
    ----------
    sentences : sequence of sequence of str
        Tokenized sentences (a list, or any iterable, of token lists), checked as every encoder
        checks its input (:func:`~contextembed._inputs.sentences.check_sentences`).
    add_markers : bool
        Wrap every sentence in the begin/end-of-sentence markers (as the biLM expects).

    Returns
    -------
    char_ids : np.ndarray
        ``(batch, seq, MAX_CHARACTERS)`` int64; ``seq`` is the longest sentence (+2 with markers);
        positions after a sentence's end are all zeros.
    lengths : np.ndarray
        ``(batch,)`` int64: tokens per sentence, markers included.

    Raises
    ------
    TypeError
        A single string, a sentence that is a string (it would be read character by character) or
        not a sequence, or a token that is not a ``str``; naming the sentence and word.
    ValueError
        A token holding a character UTF-8 cannot encode (a lone surrogate), naming the sentence,
        word and character.
    """
    sentences = check_sentences(sentences)
    extra = 2 if add_markers else 0
    lengths = np.array([len(s) + extra for s in sentences], dtype=np.int64)
    seq = int(lengths.max()) if len(lengths) else 0
    char_ids = np.zeros((len(sentences), seq, MAX_CHARACTERS), dtype=np.int64)
    for row, sentence in enumerate(sentences):
        rows = [word_char_ids(word) for word in sentence]
        if add_markers:
            rows = [BOS_IDS, *rows, EOS_IDS]
        if rows:
            char_ids[row, : len(rows)] = np.stack(rows)
    return char_ids, lengths
