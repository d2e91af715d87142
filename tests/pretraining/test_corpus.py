from __future__ import annotations

import pytest

from contextembed.pretraining._corpus import corpus_files, read_corpus, split_held_out


def test_documents_are_split_on_blank_lines(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"\n\none a\r\none b\n\n\n  \ntwo a\n  two b  \ntwo c\n\n")
    corpus = read_corpus(path)
    assert corpus.documents == [["one a", "one b"], ["two a", "two b", "two c"]]
    assert corpus.n_sentences == 5
    assert list(corpus.words())[2] == ["two", "a"]


def test_directory_is_read_recursively_in_order_and_every_file_ends_a_document(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("third\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first\nsecond\n", encoding="utf-8")
    (tmp_path / ".hidden").write_text("never\n", encoding="utf-8")
    corpus = read_corpus(tmp_path)
    assert corpus.documents == [["first", "second"], ["third"]]
    assert [p.rsplit("/", 1)[-1] for p in corpus.files] == ["a.txt", "2.txt"]


def test_non_utf8_lines_are_skipped_with_a_counted_warning(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"good one\nbad \xff\xfe line\ngood two\n\n\xc3\x28\nlast\n")
    with pytest.warns(UserWarning, match=r"skipped 2 line\(s\).*line 2"):
        corpus = read_corpus(path)
    assert corpus.documents == [["good one", "good two"], ["last"]]
    assert corpus.skipped_lines == 2


def test_non_utf8_fails_when_asked(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"good\nbad \xff\n")
    with pytest.raises(ValueError, match=r"line 2: not valid UTF-8"):
        read_corpus(path, encoding_errors="fail")


def test_a_byte_order_mark_is_no_part_of_the_first_word(tmp_path):
    """It used to stay glued to the first word: a vocabulary entry '\ufeffthe' beside 'the'."""
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfthe cat\nthe dog\n")
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfthe \xff bird\n")
    assert read_corpus(tmp_path / "a.txt").documents == [["the cat", "the dog"]]
    with pytest.raises(ValueError, match=r"b.txt, line 1: not valid UTF-8 \(invalid start byte at byte 7\)"):
        read_corpus(tmp_path / "b.txt", encoding_errors="fail")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n\t\n"])
def test_empty_corpus_is_an_error(tmp_path, content):
    path = tmp_path / "c.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="holds no sentences"):
        read_corpus(path)


def test_missing_or_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        corpus_files(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds no files"):
        corpus_files(tmp_path)


def test_a_10_megabyte_line_is_one_sentence(tmp_path):
    line = ("lorem ipsum dolor " * 600_000)[: 10 * 1024 * 1024].strip()
    path = tmp_path / "long.txt"
    path.write_text("short one\n" + line + "\nshort two\n", encoding="utf-8")
    corpus = read_corpus(path)
    assert [len(s) for s in corpus.documents[0]] == [9, len(line), 9]


def test_held_out_split_by_documents():
    documents = [[f"d{i}"] for i in range(20)]
    train, held = split_held_out(documents, 0.1)
    assert held == [["d9"], ["d19"]]
    assert len(train) == 18 and ["d9"] not in train
    assert split_held_out(documents, 0.0) == (documents, [])
    train, held = split_held_out(documents[:3], 0.1)
    assert held == [["d2"]] and train == [["d0"], ["d1"]]


def test_held_out_split_of_a_single_document():
    train, held = split_held_out([[f"s{i}" for i in range(10)]], 0.2)
    assert train == [[f"s{i}" for i in range(8)]] and held == [["s8", "s9"]]
    with pytest.raises(ValueError, match="single document"):
        split_held_out([["only"]], 0.2)
    with pytest.raises(ValueError, match="between 0 and 0.5"):
        split_held_out([["a"], ["b"]], 0.9)


@pytest.mark.parametrize(
    ("content", "line", "character"),
    [
        (b"one a\rone b\r\rtwo a\r", 1, 6),  # classic Mac OS line endings: it used to read as one sentence
        (b"one a\r\none b\rone c\n", 2, 6),  # a lone CR among CR LF endings
        (b"one a\nlast\r", 2, 5),  # the last line ended by a lone CR
    ],
)
def test_a_carriage_return_that_ends_no_line_is_an_error_naming_file_and_line(tmp_path, content, line, character):
    path = tmp_path / "c.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"c\.txt, line {line}: a carriage return \(CR\) at character {character} "):
        read_corpus(path)


def test_cr_lf_and_lf_endings_mixed_read_the_same_as_lf(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one a\r\none b\n\r\ntwo a\r\n")
    (tmp_path / "b.txt").write_bytes(b"one a\none b\n\ntwo a\n")
    assert read_corpus(tmp_path / "a.txt").documents == read_corpus(tmp_path / "b.txt").documents == [["one a", "one b"], ["two a"]]
