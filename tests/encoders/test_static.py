import json
import os
import re
from contextlib import contextmanager

import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.encoders._static.vectors import StaticVectors, is_saved_directory, load_saved_directory
from contextembed.encoders._static.files import sniff_format, write_word2vec
from contextembed.errors import FileFormatError, ModelFormatError

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


@pytest.mark.parametrize("bad, error", [("no", ValueError), ("False", ValueError), (0.5, TypeError), (1, TypeError),
                                        (None, TypeError)])
def test_lowercase_is_a_bool_or_auto(tmp_path, vectors, bad, error):
    """``bool("no")`` is True: a string or number is never taken for a bool (it lowercased before)."""
    with pytest.raises(error, match=rf"^lowercase={bad!r} .*expected True, False or 'auto'"):
        StaticVectors(WORDS, vectors, lowercase=bad)
    path = tmp_path / "v.vec"
    path.write_text("1 2\nthe 1 2\n")
    with pytest.raises(error, match=rf"^lowercase={bad!r}"):
        load_encoder(str(path), lowercase=bad)
    assert StaticVectors(WORDS, vectors, lowercase=np.bool_(False)).lowercase is False


@pytest.mark.parametrize("option, value", [("window", 8), ("stride", 4), ("batch_tokens", 512), ("pad_multiple", 16),
                                           ("max_batch_size", 32), ("chunk_size", 0), ("batch_words", 64)])
def test_an_option_of_the_torch_encoders_is_an_error_for_static_vectors(tmp_path, option, value):
    """They used to be dropped without a word; ``None`` (their default) is still accepted."""
    path = tmp_path / "v.vec"
    path.write_text("1 2\nthe 1 2\n")
    with pytest.raises(ValueError, match=rf"^{option}={value} applies to the transformer and ELMo encoders"):
        load_encoder(str(path), **{option: value})
    StaticVectors(["the"], np.ones((1, 2))).save(tmp_path / "saved")
    with pytest.raises(ValueError, match=rf"^{option}={value} applies to"):
        load_encoder(str(tmp_path / "saved"), **{option: value})
    assert load_encoder(str(path), device="cpu", precision="auto", backend="torch", **{option: None}).width == 2


def test_every_option_of_the_torch_encoders_given_is_named(tmp_path):
    path = tmp_path / "v.vec"
    path.write_text("1 2\nthe 1 2\n")
    with pytest.raises(ValueError, match=r"^window=8 and chunk_size=2 apply to the transformer and ELMo encoders"):
        load_encoder(str(path), window=8, chunk_size=2)


@pytest.mark.pretrained
def test_glove_6b_lowercases(glove):
    assert glove.n_layers == 1 and glove.width == 50 and glove.vocab_size == 400_000
    assert glove.lowercase
    out = glove.encode([["Paris", "paris", "THE", "qwzxv_unknown"]])[0][0]
    assert np.array_equal(out[0], out[1]) and np.abs(out[0]).sum() > 0
    assert np.abs(out[2]).sum() > 0
    assert np.array_equal(out[3], np.zeros(50)) and glove.is_oov("qwzxv_unknown")


# -- helpers -------------------------------------------------------------------------------------


@contextmanager
def _raises_at(path, *where, error=FileFormatError):
    """``pytest.raises(error)`` whose message must name ``path`` and hold each of ``where``."""
    with pytest.raises(error) as info:
        yield info
    message = str(info.value)
    assert str(path) in message, message
    for part in where:
        assert part in message, message


def _bits(array):
    return np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)


def _binary(path, entries, header=None, newline=b"\n"):
    """Write word2vec binary ``entries`` [(word bytes, float32 values)] with an optional wrong header."""
    width = len(entries[0][1])
    with open(path, "wb") as handle:
        handle.write(header if header is not None else f"{len(entries)} {width}\n".encode())
        for word, values in entries:
            handle.write(word + b" " + np.asarray(values, "<f4").tobytes() + newline)


# -- happy paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, binary", [("vectors.bin", False), ("vectors.txt", True), ("vectors.vec", True),
                                          ("vectors", True), ("vectors", False)])
def test_format_comes_from_the_content_not_the_name(tmp_path, vectors, name, binary):
    path = tmp_path / name
    write_word2vec(path, WORDS, vectors, binary=binary)
    assert sniff_format(path) == ("word2vec-binary" if binary else "word2vec")
    loaded = StaticVectors.load(path)
    assert loaded.words == WORDS
    np.testing.assert_array_equal(_bits(loaded.table[:-1]), _bits(vectors))


def test_text_round_trip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(1)
    vectors = (rng.normal(size=(4, 7)) * 10.0 ** rng.integers(-40, 38, size=(4, 7))).astype(np.float32)
    vectors[0, :3] = [-0.0, np.finfo(np.float32).tiny / 8, np.finfo(np.float32).max]
    write_word2vec(tmp_path / "v.txt", ["a", "b", "c", "d"], vectors)
    np.testing.assert_array_equal(_bits(StaticVectors.load(tmp_path / "v.txt").table[:-1]), _bits(vectors))


def test_fasttext_vec_with_trailing_spaces_and_crlf(tmp_path):
    path = tmp_path / "wiki.vec"
    path.write_bytes(b"2 3 \r\nthe 0.5 -1 2e-3 \r\ncat 1 2 3 \r\n")
    loaded = StaticVectors.load(path)
    assert loaded.words == ["the", "cat"]
    np.testing.assert_array_equal(loaded.table[:-1], np.float32([[0.5, -1, 2e-3], [1, 2, 3]]))


def test_glove_840b_words_with_spaces(tmp_path):
    path = tmp_path / "glove.840B.txt"
    path.write_text(". . . 0.1 0.2\nat name@domain.com 0.3 0.4\nthe 0.5 0.6\n a\tb  c 0.7 0.8\n"
                    .replace("\n a\tb", "\na\tb"), encoding="utf-8")
    loaded = StaticVectors.load(path)
    assert sniff_format(path) == "glove"
    assert loaded.words == [". . .", "at name@domain.com", "the", "a\tb  c"]
    np.testing.assert_array_equal(loaded.table[:-1], np.float32([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]]))


@pytest.mark.parametrize("header", [b"", b"4 2\n"])
def test_numeric_words_in_the_first_column(tmp_path, header):
    path = tmp_path / "numbers.txt"
    path.write_bytes(header + b"1999 0.1 0.2\nnan 0.3 0.4\n-inf 0.5 0.6\n1e5 0.7 0.8\n")
    loaded = StaticVectors.load(path)
    assert loaded.words == ["1999", "nan", "-inf", "1e5"]
    np.testing.assert_array_equal(loaded.table[:-1], np.float32([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8]]))
    assert loaded.lookup("nan") == 1


def test_a_width_one_glove_file_whose_first_row_looks_like_a_header(tmp_path):
    path = tmp_path / "years.txt"
    path.write_text("1999 5\n2000 6\n")
    with _raises_at(path, "line 2", "expected a word and 5 numbers (the header's width)"):
        StaticVectors.load(path)  # read as a header unless told: a damaged header must not pass for GloVe
    assert StaticVectors.load(path, format="glove").words == ["1999", "2000"]
    header = tmp_path / "w1.txt"
    header.write_text("2 1\na 0.5\nb 0.25\n")  # both readings fit: the header wins, GloVe stays allowed
    assert StaticVectors.load(header).words == ["a", "b"]
    assert StaticVectors.load(header, format="glove").words == ["2", "a", "b"]


def test_byte_order_mark_and_trailing_blank_lines(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfthe 1 2\ncat 3 4\n\n  \n")
    assert StaticVectors.load(path).words == ["the", "cat"]
    with_header = tmp_path / "bom.vec"
    with_header.write_bytes(b"\xef\xbb\xbf2 2\nthe 1 2\ncat 3 4\n")
    assert StaticVectors.load(with_header).words == ["the", "cat"]


def test_unicode_errors_opt_in(tmp_path):
    text = tmp_path / "broken.txt"
    text.write_bytes(b"ok 1 2\nbad\xff\xfeword 3 4\n")
    with _raises_at(text, "line 2", "not valid UTF-8", "unicode_errors='replace'"):
        StaticVectors.load(text)
    assert StaticVectors.load(text, unicode_errors="replace").words == ["ok", "bad\ufffd\ufffdword"]
    assert load_encoder(text, unicode_errors="ignore").words == ["ok", "badword"]
    binary = tmp_path / "GoogleNews.bin"
    _binary(binary, [(b"ok", [1, 2]), (b"bad\xc3", [3, 4])])
    with _raises_at(binary, "entry 1", "not valid UTF-8"):
        StaticVectors.load(binary)
    assert StaticVectors.load(binary, unicode_errors="replace").words == ["ok", "bad\ufffd"]
    with pytest.raises(ValueError, match="unicode_errors='loose' is not one of 'strict', 'replace', 'ignore'"):
        StaticVectors.load(text, unicode_errors="loose")


@pytest.mark.parametrize("kind, where", [("glove", ["line 3", "line 1"]), ("word2vec", ["line 4", "line 2"]),
                                         ("word2vec-binary", ["entry 2", "entry 0"])])
def test_duplicates_first_occurrence_wins_with_one_warning(tmp_path, kind, where):
    words = ["the", "cat", "the", "dog", "cat"]
    vectors = np.arange(10, dtype=np.float32).reshape(5, 2)
    path = tmp_path / "dup"
    if kind == "glove":
        path.write_text("".join(f"{w} {a} {b}\n" for w, (a, b) in zip(words, vectors.tolist())))
    else:
        write_word2vec(path, words, vectors, binary=kind == "word2vec-binary")
    with pytest.warns(UserWarning) as record:
        loaded = StaticVectors.load(path)
    assert len(record) == 1
    message = str(record[0].message)
    assert str(path) in message and "2 row(s) repeat" in message and "'the'" in message
    assert all(part in message for part in where)
    assert loaded.vocab_size == 3 and loaded.words == words
    np.testing.assert_array_equal(loaded.encode([["the", "cat", "dog"]])[0][0], vectors[[0, 1, 3]])
    # a saved directory keeps every row, duplicates included, and says so again when loaded
    loaded.save(tmp_path / "saved")
    with pytest.warns(UserWarning, match=r"words\.json: 2 row\(s\) repeat.*'the' at index 2, which repeats index 0"):
        copy = load_encoder(tmp_path / "saved")
    assert copy.words == words
    np.testing.assert_array_equal(_bits(copy.table), _bits(loaded.table))


# -- saved directories ----------------------------------------------------------------------------


ODD_WORDS = ["a b", "a", "b", "tab\there", "new\nline", "cr\r", " lead", "trail ", "\u00a0nbsp", "😀 emoji",
             "1999", "nan", "at 5", "", "a b"]


def test_save_keeps_any_word_exactly(tmp_path):
    vectors = np.random.default_rng(0).normal(size=(len(ODD_WORDS), 3)).astype(np.float32)
    with pytest.warns(UserWarning):  # "a b" repeats
        original = StaticVectors(ODD_WORDS, vectors, lowercase=False, oov="mean")
        original.save(tmp_path / "copy")
        copy = load_encoder(tmp_path / "copy")
    assert sorted(os.listdir(tmp_path / "copy")) == ["contextembed_provenance.json", "contextembed_static.json",
                                                     "vectors.safetensors", "words.json"]
    assert copy.words == ODD_WORDS and (copy.lowercase, copy.oov) == (False, "mean")
    np.testing.assert_array_equal(_bits(copy.table), _bits(original.table))
    options = json.loads((tmp_path / "copy" / "contextembed_static.json").read_text())
    assert options == {"format_version": 2, "lowercase": False, "oov": "mean"}


def test_save_refuses_a_non_empty_directory_unless_overwrite(tmp_path, vectors):
    target = tmp_path / "copy"
    StaticVectors(WORDS, vectors).save(target)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        StaticVectors(WORDS[:2], vectors[:2]).save(target)
    assert load_encoder(target).words == WORDS
    StaticVectors(WORDS[:2], vectors[:2]).save(target, overwrite=True)
    assert load_encoder(target).words == WORDS[:2]
    (tmp_path / "empty").mkdir()
    StaticVectors(WORDS, vectors).save(tmp_path / "empty")  # an empty directory holds nothing to lose
    assert load_encoder(tmp_path / "empty").words == WORDS


def test_failed_save_leaves_nothing_behind(tmp_path, vectors, monkeypatch):
    import safetensors.numpy

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.numpy, "save_file", fail)
    with pytest.raises(OSError, match="disk full"):
        StaticVectors(WORDS, vectors).save(tmp_path / "copy")
    assert os.listdir(tmp_path) == []


def test_the_earlier_saved_layout_still_loads(tmp_path, vectors):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    write_word2vec(legacy / "vectors.bin", WORDS, vectors, binary=True)
    (legacy / "contextembed_static.json").write_text('{"lowercase": true, "oov": "mean"}')
    assert is_saved_directory(str(legacy))
    copy = load_encoder(legacy)
    assert copy.words == WORDS and (copy.lowercase, copy.oov) == (True, "mean")
    np.testing.assert_array_equal(_bits(copy.table[:-1]), _bits(vectors))
    assert load_encoder(legacy, oov="zeros").oov == "zeros"


def test_broken_saved_directories_are_clear_errors(tmp_path, vectors):
    from contextembed.errors import ProvenanceError
    from contextembed._runtime.provenance import PROVENANCE_FILE

    target = tmp_path / "copy"
    StaticVectors(WORDS, vectors).save(target)
    (target / "words.json").write_text(json.dumps(WORDS[:-1]))
    with pytest.raises(ProvenanceError, match="its files changed after it was saved"):  # the record sees it first
        load_saved_directory(str(target))
    (target / PROVENANCE_FILE).unlink()  # as a table saved before records existed: the content checks alone
    with _raises_at(target, "holds 6 rows but words.json 5 words", error=ModelFormatError):
        load_saved_directory(str(target))
    (target / "words.json").write_text('{"the": 0}')
    with _raises_at(target / "words.json", "JSON list of strings", error=ModelFormatError):
        load_saved_directory(str(target))
    (target / "words.json").write_text(json.dumps(WORDS))
    (target / "vectors.safetensors").write_bytes(b"\x00" * 10)
    with _raises_at(target / "vectors.safetensors", "cannot read the saved vectors", error=ModelFormatError):
        load_saved_directory(str(target))
    (target / "contextembed_static.json").write_text('{"format_version": 6, "lowercase": true, "oov": "zeros"}')
    with _raises_at(target / "contextembed_static.json", "format_version 6", "upgrade", error=ModelFormatError):
        load_saved_directory(str(target))
    (target / "contextembed_static.json").write_text('{"lowercase": true}')  # version 1 needs vectors.bin
    with _raises_at(target, "vectors.bin is missing", error=ModelFormatError):
        load_saved_directory(str(target))


def test_the_saved_directory_format_is_read_without_the_encoder(tmp_path, vectors):
    """``static_directory`` reads the table and its options; the encoder is built from them."""
    from contextembed.encoders._static.directory import read_saved_table

    StaticVectors(WORDS + ["the"], np.vstack([vectors, vectors[:1]]), oov="mean").save(tmp_path / "copy")
    table = read_saved_table(str(tmp_path / "copy"))
    assert table.words == WORDS + ["the"] and table.options == {"lowercase": False, "oov": "mean"}
    assert not table.subwords and table.source == str(tmp_path / "copy" / "words.json")
    np.testing.assert_array_equal(_bits(table.vectors[:-1]), _bits(vectors))
    with pytest.warns(UserWarning, match=r"words\.json: 1 row\(s\) repeat .* 'the' at index 6, which repeats index 0"):
        assert load_saved_directory(tmp_path / "copy").vocab_size == len(WORDS)


# -- the file formats, apart from the encoder -----------------------------------------------------


def test_the_file_formats_are_their_own_module(tmp_path, vectors):
    """``vector_files`` reads, detects and writes the files; ``StaticVectors.load`` reads through it,
    and the public names stay importable where they were documented."""
    from contextembed import encoders
    from contextembed.encoders._static import vectors as static, files as vector_files

    path = tmp_path / "vectors.bin"
    vector_files.write_word2vec(path, WORDS + ["the"], np.vstack([vectors, vectors[:1]]), binary=True)
    found = vector_files.read_vectors(path)
    assert found.words == WORDS + ["the"] and found.row_name(6) == "entry 6"
    np.testing.assert_array_equal(_bits(found.vectors[:-1]), _bits(vectors))
    with pytest.warns(UserWarning, match=r"'the' at entry 6, which repeats entry 0"):
        assert StaticVectors.load(path).words == found.words
    for name in ("write_word2vec", "sniff_format", "StaticFormat", "UnicodeErrors", "FORMAT_DESCRIPTIONS"):
        assert getattr(static, name) is getattr(vector_files, name)
    assert encoders.write_word2vec is vector_files.write_word2vec and encoders.StaticVectors is static.StaticVectors
    with pytest.raises(ValueError, match=r"unicode_errors='loose' is not one of 'strict', 'replace', 'ignore'"):
        vector_files.read_vectors(path, unicode_errors="loose")
    with pytest.raises(ValueError, match=r"format='csv' is not one of 'word2vec', 'word2vec-binary', 'glove'"):
        vector_files.read_vectors(path, format="csv")


# -- the constructor ------------------------------------------------------------------------------


def test_constructor_rejects_bad_tables(vectors):
    bad = vectors.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"must be finite: row 2 \(word 'paris'\) holds nan at column 1"):
        StaticVectors(WORDS, bad)
    with pytest.raises(ValueError, match=r"row 0 \(word 'the'\) holds inf.*float32's range"):
        StaticVectors(WORDS, np.full((len(WORDS), 5), 1e300))
    with pytest.raises(ValueError, match=r"vocab=6 rows.*got shape \(5, 5\)"):
        StaticVectors(WORDS, vectors[:5])
    with pytest.raises(ValueError, match=r"width >= 1, got shape \(6, 0\)"):
        StaticVectors(WORDS, np.zeros((6, 0)))
    with pytest.raises(ValueError, match=r"got shape \(30,\)"):
        StaticVectors(WORDS, vectors.ravel())
    with pytest.raises(TypeError, match=r"words\[1\] is 3 of type int"):
        StaticVectors(["a", 3], vectors[:2])


# -- the writer -----------------------------------------------------------------------------------


@pytest.mark.parametrize("word, binary, reason", [
    ("", True, "is empty"), ("a b", True, "white space"), ("a\tb", True, "white space"), ("a\n", True, "white space"),
    ("", False, "is empty"), ("a\nb", False, "line break"), ("a\rb", False, "line break"),
    (" a", False, "leading or trailing"), ("a ", False, "leading or trailing"), ("a\t", False, "leading or trailing"),
    ("at 1999", False, "'1999' after a space"), ("a nan", False, "'nan' after a space"),
    ("x -inf y", False, "'-inf' after a space"), ("\ud800", True, "UTF-8"), ("\ud800", False, "UTF-8"),
])
def test_writer_refuses_words_that_would_not_read_back(tmp_path, word, binary, reason):
    path = tmp_path / "v.txt"
    path.write_bytes(b"old")
    with pytest.raises(ValueError, match=rf"words\[1\] = {re.escape(repr(word))} .*{re.escape(reason)}"):
        write_word2vec(path, ["ok", word], np.ones((2, 3)), binary=binary)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["v.txt"]


@pytest.mark.parametrize("word", ["a b", "a\tb", "1999", "nan", "a b c", "a  b", "😀", "a\u00a0b", "at name@x.com"])
def test_writer_keeps_words_text_can_hold(tmp_path, word):
    write_word2vec(tmp_path / "v.txt", ["ok", word], np.ones((2, 3)))
    assert StaticVectors.load(tmp_path / "v.txt").words == ["ok", word]


def test_writer_refuses_bad_vectors(tmp_path):
    with pytest.raises(ValueError, match=r"row 1 \(word 'b'\) holds inf"):
        write_word2vec(tmp_path / "v.txt", ["a", "b"], np.float32([[1, 2], [np.inf, 0]]))
    with pytest.raises(ValueError, match=r"vocab=2 rows"):
        write_word2vec(tmp_path / "v.txt", ["a", "b"], np.ones((3, 2)))
    with pytest.raises(ValueError, match="no words to write"):
        write_word2vec(tmp_path / "v.txt", [], np.ones((0, 2)))
    assert os.listdir(tmp_path) == []


# -- errors: rows and widths ----------------------------------------------------------------------


@pytest.mark.parametrize("header", [b"", b"3 3\n"])
def test_one_number_too_many_is_not_a_word_with_a_space(tmp_path, header):
    """The issue's example: ``sat -0.70 0.1 0.2 0.3`` must not become the word "sat -0.70"."""
    path = tmp_path / "extra.txt"
    path.write_bytes(header + b"the 0.1 0.2 0.3\nsat -0.70 0.1 0.2 0.3\ndog 0.4 0.5 0.6\n")
    line = f"line {2 + bool(header)}"
    with _raises_at(path, line, "expected a word and 3 numbers", "'-0.70' parses as a number", "1 number(s) too many"):
        StaticVectors.load(path)


@pytest.mark.parametrize("content, where, what", [
    (b"the 1 2 3\ncat 1 2\n", "line 2", "found only 2 field(s) after the word 'cat'"),
    (b"the 1 2 3\n 1 2 3\n", "line 2", "starts with a space: empty word"),
    (b"the 1 2 3\ncat 1 x 3\n", "line 2", "value 2 of the vector of 'cat' is 'x', which is not a number"),
    (b"the 1 2 3\ncat 1 nan 3\n", "line 2", "value 2 of the vector of 'cat' is 'nan'"),
    (b"the 1 2 3\ncat 1 2 -inf\n", "line 2", "value 3 of the vector of 'cat' is '-inf'"),
    (b"the 1 2 3\ncat 1 2 1e39\n", "line 2", "is '1e39' (inf)"),
    (b"the 1 2 3\n\ncat 1 2 3\n", "line 3", "follows the blank line 2"),
    (b"the 1 2 3\ncat 1 2 3", "line 2", "does not end with a newline"),
    (b"the 1 2 3\ncat 1 2 3\r", "line 2", "does not end with a newline"),
    (b"the\nthe 1 2\n", "line 1", "found no number after 'the'"),
    (b"a 1 b 0.5\n", "line 1", "'1' parses as a number"),
])
def test_text_row_errors_name_file_and_line(tmp_path, content, where, what):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    with _raises_at(path, where, what):
        StaticVectors.load(path)


@pytest.mark.parametrize("content, where, what", [
    (b"3 3\nthe 1 2 3\ncat 1 2 3\n", "", "announces 3 rows, but the file holds 2"),
    (b"1 3\nthe 1 2 3\ncat 1 2 3\n", "line 3", "more rows than the 1 the header"),
    (b"2 2\nthe 1 2 3\ncat 1 2 3\n", "line 2", "expected a word and 2 numbers (the header's width)"),
    (b"2 4\nthe 1 2 3\ncat 1 2 3\n", "line 2", "found only 3 field(s)"),
    (b"2 0\nthe\ncat\n", "line 1", "width 0"),
])
def test_a_text_header_that_disagrees_with_the_rows(tmp_path, content, where, what):
    path = tmp_path / "bad.vec"
    path.write_bytes(content)
    with _raises_at(path, where, what):
        StaticVectors.load(path)


# -- errors: binary -------------------------------------------------------------------------------


def test_binary_entry_errors(tmp_path):
    path = tmp_path / "bad.bin"
    good = [(b"the", [1, 2]), (b"cat", [3, 4])]
    _binary(path, good, header=b"3 2\n")
    with _raises_at(path, "ends inside entry 2 of 3"):
        StaticVectors.load(path)
    _binary(path, good, header=b"1 2\n")
    with _raises_at(path, "bytes follow the last of the 1 entries"):
        StaticVectors.load(path)
    _binary(path, good)
    path.write_bytes(path.read_bytes() + b"junk")
    with _raises_at(path, "5 bytes follow the last of the 2 entries", "'\\njunk'"):
        StaticVectors.load(path)
    _binary(path, good)
    path.write_bytes(path.read_bytes() + b"\n \n")  # white space after the last entry is fine
    assert StaticVectors.load(path).words == ["the", "cat"]
    _binary(path, [(b"the", [1, 2]), (b"cat", [np.nan, 4])])
    with _raises_at(path, "entry 1 ('cat') holds nan at value 1"):
        StaticVectors.load(path)
    _binary(path, [(b"the", [1, 2]), (b"cat", [3, np.inf])])
    with _raises_at(path, "entry 1 ('cat') holds inf at value 2"):
        StaticVectors.load(path)
    _binary(path, [(b"the", [1, 2, 3]), (b"cat", [3, 4, 5])], header=b"2 2\n")  # wrong width
    with _raises_at(path, "entry 1 of 2"):
        StaticVectors.load(path, format="word2vec-binary")
    path.write_bytes(b"2 2\nthe " + np.zeros(2, "<f4").tobytes() + b"\nca")
    with _raises_at(path, "ends inside entry 1 of 2"):
        StaticVectors.load(path)


def test_a_huge_binary_count_is_an_error_not_a_memory_error(tmp_path):
    path = tmp_path / "huge.bin"
    _binary(path, [(b"the", [1, 2])], header=b"999999999999 300\n")
    with _raises_at(path, "ends inside the vector of entry 0 of 999999999999"):
        StaticVectors.load(path, format="word2vec-binary")


# -- errors: detection ----------------------------------------------------------------------------


@pytest.mark.parametrize("content, what", [
    (b"", "is empty"), (b" \n\n", "is empty"), (b"3 5\n", "only a header"), (b"3 5\n\n", "only a header"),
    (bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)), "none of the formats"),
    (b"\x00\x01\x02binary\xff", "none of the formats"),
])
def test_files_of_no_format(tmp_path, content, what):
    path = tmp_path / "odd.vec"
    path.write_bytes(content)
    with _raises_at(path, what):
        StaticVectors.load(path)
    with _raises_at(path, what):
        sniff_format(path)


def test_an_explicit_format_the_content_contradicts(tmp_path, vectors):
    write_word2vec(tmp_path / "text.bin", WORDS, vectors)
    with _raises_at(tmp_path / "text.bin", "format='word2vec-binary' does not match", "looks like word2vec / fastText text"):
        StaticVectors.load(tmp_path / "text.bin", format="word2vec-binary")
    with _raises_at(tmp_path / "text.bin", "format='glove' does not match"):
        StaticVectors.load(tmp_path / "text.bin", format="glove")
    write_word2vec(tmp_path / "binary.txt", WORDS, vectors, binary=True)
    with _raises_at(tmp_path / "binary.txt", "format='word2vec' does not match", "looks like word2vec binary"):
        StaticVectors.load(tmp_path / "binary.txt", format="word2vec")
    _write_glove(tmp_path / "glove.txt", WORDS, vectors)
    with _raises_at(tmp_path / "glove.txt", "format='word2vec' does not match", "looks like GloVe text"):
        StaticVectors.load(tmp_path / "glove.txt", format="word2vec")
    assert StaticVectors.load(tmp_path / "binary.txt", format="word2vec-binary").words == WORDS
    with pytest.raises(ValueError, match="format='fasttext' is not one of 'word2vec', 'word2vec-binary', 'glove'"):
        StaticVectors.load(tmp_path / "glove.txt", format="fasttext")


def test_errors_are_value_errors_that_survive_pickling(tmp_path):
    import pickle

    path = tmp_path / "bad.txt"
    path.write_bytes(b"the 1 2\ncat 1 x\n")
    with pytest.raises(ValueError) as info:
        StaticVectors.load(path)
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, FileFormatError) and str(copy) == str(info.value) and copy.path == str(path)


def test_a_damaged_width_one_text_file_does_not_pass_for_binary(tmp_path):
    """Each "word -1.0\\n" row is also a word, a space and 4 bytes: a damaged row must not flip the
    whole file to binary (and every vector to garbage)."""
    path = tmp_path / "w1.txt"
    path.write_bytes(b"3 1\na -1.0\nb -1.x\nc -1.0\n")
    with _raises_at(path, "line 3", "'-1.x', which is not a number"):
        StaticVectors.load(path)


def test_what_no_reader_can_detect(tmp_path):
    """Damage the formats leave no trace of (they carry no checksum); pinned so that it stays known.

    The property tests in tests/robustness use files of three or more rows of width two or more,
    where no single damaged byte changes more than one row unnoticed.
    """
    glove = tmp_path / "glove.txt"
    glove.write_bytes(b"the 1 2\ncat 3 4\n")  # a header-less file cut after a whole row
    assert StaticVectors.load(glove).words == ["the", "cat"]
    glove.write_bytes(b"the 1 2\n")
    assert StaticVectors.load(glove).words == ["the"]
    narrow = tmp_path / "w1.vec"
    narrow.write_bytes(b"a 1\nx 0.5\ny 0.25\n")  # width 1, header "2 1" damaged to "a 1": a row
    assert StaticVectors.load(narrow).words == ["a", "x", "y"]
    merged = tmp_path / "two.txt"
    merged.write_bytes(b"the 1 2 1999 3 4\n")  # "the 1 2\n1999 3 4\n" with its newline damaged
    assert StaticVectors.load(merged).width == 5
    binary = tmp_path / "v.bin"
    _binary(binary, [(b"the", [1.0, 2.0])])
    data = bytearray(binary.read_bytes())
    data[-3] ^= 1  # a bit of a value
    binary.write_bytes(bytes(data))
    assert StaticVectors.load(binary).table[0, 1] != 2.0
