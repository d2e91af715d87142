"""Property tests for static-vector files: what is written reads back bit for bit, and a damaged file
reads back as it was written or raises ``FileFormatError`` naming it, never anything else.

Words are drawn from any unicode (spaces, tabs, newlines, emoji, digits, numeric-looking words,
duplicates); vectors from any finite float32 (subnormals, -0.0, the largest values).
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from contextembed import load_encoder
from contextembed.encoders._static.vectors import StaticVectors
from contextembed.encoders._static.files import write_word2vec
from contextembed.errors import FileFormatError

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

#: words that stress the width rule and the separators
SPECIAL_WORDS = ["1999", "nan", "-inf", "1e5", "a b", ". . .", "at name@domain.com", "at 5", "x nan", "a  b",
                 "\t", "a\tb", " x", "x ", "a\nb", "a\rb", "\x0b", "\u00a0", "\u2028", "😀", "😀 x", "", "\x00"]
ANY_WORD = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=" \t\n0123456789.eE+-nainf😀x", max_size=6),
    st.sampled_from(SPECIAL_WORDS),
)
#: words every format holds: no white space, separators or control characters
PLAIN_WORD = st.text(st.characters(exclude_categories=("Cs", "Z", "Cc")), min_size=1, max_size=6)
#: words text files hold, spaces included
TEXT_WORD = st.one_of(PLAIN_WORD, st.sampled_from(["1999", "nan", "a b", ". . .", "at name@domain.com", "a  b", "😀 x"]))

ASCII_SPACE = set(" \t\n\r\x0b\x0c")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _encodable(word: str) -> bool:
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def binary_holds(word: str) -> bool:
    """The writer's contract for word2vec binary files, written out independently."""
    return bool(word) and _encodable(word) and not ASCII_SPACE & set(word)


def text_holds(word: str) -> bool:
    """The writer's contract for word2vec text files, written out independently."""
    return (
        bool(word) and _encodable(word) and "\n" not in word and "\r" not in word and word == word.strip()
        and not any(_is_number(part) for part in word.split(" ")[1:])
    )


@st.composite
def vocabularies(draw, word=ANY_WORD, min_size=1, min_width=1):
    """Words (with repeats) and a finite float32 ``(vocab, width)`` matrix."""
    pool = draw(st.lists(word, min_size=1, max_size=6))
    words = draw(st.lists(st.sampled_from(pool), min_size=min_size, max_size=10))
    width = draw(st.integers(min_width, 5))
    finite = st.floats(width=32, allow_nan=False, allow_infinity=False)
    vectors = draw(hnp.arrays(np.float32, (len(words), width), elements=finite))
    return words, vectors


def _bits(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


def _load_quietly(path, **options) -> StaticVectors:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # repeated words
        return load_encoder(path, **options)


def _assert_same(encoder: StaticVectors, words, vectors) -> None:
    assert encoder.words == list(words)
    np.testing.assert_array_equal(_bits(encoder.table[:-1]), _bits(vectors))


# -- round trips ----------------------------------------------------------------------------------


@SETTINGS
@given(vocabularies(word=st.one_of(ANY_WORD, st.just("\ud800 lone surrogate"))), st.booleans())
def test_save_reproduces_any_vocabulary_bit_for_bit(tmp_path, vocabulary, lowercase):
    words, vectors = vocabulary
    directory = os.path.join(tempfile.mkdtemp(dir=tmp_path), "saved")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StaticVectors(words, vectors, lowercase=lowercase).save(directory)
        copy = load_encoder(directory)
    _assert_same(copy, words, vectors)
    assert copy.lowercase == lowercase
    repeats = len(words) - len(set(words))
    assert len([w for w in caught if issubclass(w.category, UserWarning)]) == (1 if repeats else 0)
    assert copy.vocab_size == len(set(words))


@SETTINGS
@given(vocabularies(), st.booleans())
def test_write_word2vec_round_trips_or_refuses(tmp_path, vocabulary, binary):
    words, vectors = vocabulary
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "vectors.txt" if binary else "vectors.bin")
    holds = binary_holds if binary else text_holds
    bad = [i for i, word in enumerate(words) if not holds(word)]
    if bad:
        with pytest.raises(ValueError) as info:
            write_word2vec(path, words, vectors, binary=binary)
        assert f"words[{bad[0]}] = {words[bad[0]]!r}" in str(info.value)
        assert os.listdir(os.path.dirname(path)) == []  # nothing half-written
        return
    write_word2vec(path, words, vectors, binary=binary)
    _assert_same(_load_quietly(path), words, vectors)
    expected = "word2vec-binary" if binary else "word2vec"
    _assert_same(_load_quietly(path, format=expected), words, vectors)


def test_control_free_binary_vectors_are_still_binary(tmp_path):
    # float32 5.5533176e16 is the bytes b"!KE[": the file is control-free UTF-8, yet no text
    path = str(tmp_path / "vectors.bin")
    vectors = np.full((1, 2), 5.5533176e16, dtype=np.float32)
    write_word2vec(path, ["0"], vectors, binary=True)
    assert open(path, "rb").read().split(b"\n", 1)[1] == b"0 !KE[!KE[\n"
    _assert_same(_load_quietly(path), ["0"], vectors)


# -- damaged files --------------------------------------------------------------------------------


@st.composite
def clean_files(draw):
    """``(format, words, vectors, bytes)`` of a valid file with at least three rows of two numbers.

    Smaller files have too little redundancy for every damage to show (see
    ``test_what_no_reader_can_detect`` in tests/encoders/test_static.py): in a width-1 file a
    damaged header can read as a row ("2 1" -> "a 1"), and two rows of a header-less file can
    merge into one consistent row.
    """
    kind = draw(st.sampled_from(["word2vec", "word2vec-binary", "glove"]))
    word = PLAIN_WORD if kind == "word2vec-binary" else TEXT_WORD
    words, vectors = draw(vocabularies(word=word, min_size=3, min_width=2))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "v")
        write_word2vec(path, words, vectors, binary=kind == "word2vec-binary")
        with open(path, "rb") as handle:
            data = handle.read()
    if kind == "glove":
        data = data.partition(b"\n")[2]
    return kind, words, vectors, data


def _number_spans(data: bytes, kind: str, width: int) -> list[tuple[int, int]]:
    """Byte spans of every number of a text file (the last ``width`` fields of each row)."""
    spans, start = [], 0
    lines = data.split(b"\n")[:-1]
    for number, line in enumerate(lines):
        if not (kind == "word2vec" and number == 0):
            fields, offset, offsets = line.split(b" "), start, []
            for field in fields:
                offsets.append((offset, offset + len(field)))
                offset += len(field) + 1
            spans += offsets[-width:]
        start += len(line) + 1
    return spans


@st.composite
def damages(draw, clean):
    """A damaged copy of ``clean``, and what kind of damage it is."""
    kind, words, vectors, data = clean
    width = vectors.shape[1]
    options = ["truncate", "flip", "insert", "header"] + (["nan", "extra"] if kind != "word2vec-binary" else ["nan"])
    damage = draw(st.sampled_from(options))
    if damage == "truncate":
        cut = draw(st.integers(0, len(data) - 1))
        return damage, data[:cut]
    if damage in ("flip", "insert"):
        at = draw(st.integers(0, len(data) - (damage == "flip")))
        byte = draw(st.sampled_from(b" \t\n\r0-.e\x00\xff\xc3aX"))
        if damage == "flip":
            byte = byte if byte != data[at] else (byte + 1) % 256
            return damage, data[:at] + bytes([byte]) + data[at + 1 :]
        return damage, data[:at] + bytes([byte]) + data[at:]
    if damage == "header":
        count = draw(st.integers(0, len(words) + 2))
        new_width = draw(st.integers(0, width + 2))
        body = data if kind == "glove" else data.partition(b"\n")[2]
        return damage, f"{count} {new_width}\n".encode() + body
    if kind == "word2vec-binary":  # a nan or inf in place of a value of some entry
        entry, value = draw(st.integers(0, len(words) - 1)), draw(st.integers(0, width - 1))
        position = len(data.partition(b"\n")[0]) + 1
        for i in range(entry):
            position += len(words[i].encode()) + 1 + 4 * width + 1
        position += len(words[entry].encode()) + 1 + 4 * value
        pattern = draw(st.sampled_from([0x7FC00000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFFFFFFF]))
        return damage, data[:position] + np.uint32(pattern).astype("<u4").tobytes() + data[position + 4 :]
    spans = _number_spans(data, kind, width)
    start, end = draw(st.sampled_from(spans))
    if damage == "nan":
        replacement = draw(st.sampled_from([b"nan", b"NaN", b"inf", b"-inf", b"1e39", b"word", b"0x1", b""]))
        return damage, data[:start] + replacement + data[end:]
    number = repr(draw(st.floats(width=32, allow_nan=False, allow_infinity=False))).encode()
    at = draw(st.sampled_from([end, start - 1]))  # after a value, or between the word and the values
    return damage, data[:at] + b" " + number + data[at:]


@pytest.mark.slow
@SETTINGS
@given(st.data())
def test_damaged_files_read_exactly_or_raise_file_format_error(tmp_path, data):
    clean = data.draw(clean_files())
    kind, words, vectors, original = clean
    damage, damaged = data.draw(damages(clean))
    path = os.path.join(tempfile.mkdtemp(dir=tmp_path), "vectors")
    with open(path, "wb") as handle:
        handle.write(damaged)
    try:
        encoder = _load_quietly(path)
    except FileFormatError as error:
        assert path in str(error)
        return
    loaded_words, loaded = encoder.words, _bits(encoder.table[:-1])
    if loaded_words == words and np.array_equal(loaded, _bits(vectors)):
        return  # harmless damage (a dropped final newline of a binary file, a correct header, ...)
    if damage == "truncate" and kind == "glove":
        # no header: a file cut after a whole row is a valid shorter file
        assert damaged.endswith(b"\n") and 0 < len(loaded_words) < len(words)
        _assert_same(encoder, words[: len(loaded_words)], vectors[: len(loaded_words)])
        return
    # one byte without a checksum can change one word or one value undetectably, never more
    assert damage in ("flip", "insert"), (damage, damaged)
    assert len(loaded_words) == len(words) and loaded.shape == vectors.shape, (damage, damaged)
    changed = [i for i in range(len(words)) if loaded_words[i] != words[i] or (loaded[i] != _bits(vectors[i])).any()]
    assert len(changed) == 1, (damage, damaged, changed)
