import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.encoders.static import StaticVectors, sniff_format, write_word2vec

WORDS = ["the", "Paris", "paris", "naïve", "東京", "a.b"]


@pytest.fixture
def vectors():
    return np.random.default_rng(0).normal(size=(len(WORDS), 5)).astype(np.float32)


def _write_glove(path, words, vectors):
    with open(path, "w", encoding="utf-8") as handle:
        for word, vector in zip(words, vectors):
            handle.write(word + " " + " ".join(f"{x:.7g}" for x in vector) + "\n")


@pytest.mark.parametrize("name, writer, format", [
    ("vectors.txt", lambda p, w, v: write_word2vec(p, w, v), "word2vec"),
    ("vectors.vec", lambda p, w, v: write_word2vec(p, w, v), "word2vec"),
    ("vectors.bin", lambda p, w, v: write_word2vec(p, w, v, binary=True), "word2vec-binary"),
    ("glove.txt", _write_glove, "glove"),
])
def test_formats_round_trip(tmp_path, vectors, name, writer, format):
    path = tmp_path / name
    writer(str(path), WORDS, vectors)
    assert sniff_format(str(path)) == format
    encoder = load_encoder(str(path))
    assert (encoder.n_layers, encoder.width, encoder.vocab_size) == (1, 5, len(WORDS))
    out = encoder.encode([WORDS, []])
    assert out[0].shape == (1, len(WORDS), 5) and out[1].shape == (1, 0, 5)
    assert np.abs(out[0][0] - vectors).max() < 1e-5


def test_gensim_style_binary_without_newlines(tmp_path, vectors):
    """Some writers omit the newline after each binary vector."""
    path = tmp_path / "nonl.bin"
    with open(path, "wb") as handle:
        handle.write(f"{len(WORDS)} 5\n".encode())
        for word, vector in zip(WORDS, vectors):
            handle.write(word.encode() + b" " + vector.astype("<f4").tobytes())
    assert np.abs(load_encoder(str(path)).encode([WORDS])[0][0] - vectors).max() == 0


def test_lookup_rule_and_oov(vectors):
    cased = StaticVectors(WORDS, vectors)
    assert not cased.lowercase
    out = cased.encode([["Paris", "PARIS", "zzz"]])[0][0]
    assert np.array_equal(out[0], vectors[1])  # exact match first
    assert np.array_equal(out[1], vectors[2])  # then lowercase
    assert np.array_equal(out[2], np.zeros(5))  # OOV -> zeros
    mean = StaticVectors(WORDS, vectors, oov="mean").encode([["zzz"]])[0][0, 0]
    assert np.allclose(mean, vectors.mean(0))
    lower = StaticVectors(["paris", "the"], vectors[:2])
    assert lower.lowercase and np.array_equal(lower.encode([["Paris"]])[0][0, 0], vectors[0])


def test_static_errors(tmp_path, vectors):
    with pytest.raises(ValueError, match="out of range"):
        StaticVectors(WORDS, vectors).encode([["the"]], layers=1)
    with pytest.raises(ValueError, match="oov='random' is not one of"):
        StaticVectors(WORDS, vectors, oov="random")
    bad = tmp_path / "bad.vec"
    bad.write_text("2 3\nthe 1 2 3\ncat 1 2\n")
    with pytest.raises(ValueError, match="line 3: expected a word and 3 numbers"):
        load_encoder(str(bad))
    truncated = tmp_path / "t.bin"
    truncated.write_bytes(b"2 3\nthe " + np.zeros(3, "<f4").tobytes() + b"cat " + b"\x00" * 5)
    with pytest.raises(ValueError, match="ends inside the vector of entry 1"):
        load_encoder(str(truncated))


@pytest.mark.pretrained
def test_glove_6b_lowercases(glove):
    assert glove.n_layers == 1 and glove.width == 50 and glove.vocab_size == 400_000
    assert glove.lowercase
    out = glove.encode([["Paris", "paris", "THE", "qwzxv_unknown"]])[0][0]
    assert np.array_equal(out[0], out[1]) and np.abs(out[0]).sum() > 0
    assert np.abs(out[2]).sum() > 0
    assert np.array_equal(out[3], np.zeros(50)) and glove.is_oov("qwzxv_unknown")
