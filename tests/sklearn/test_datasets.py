"""The corpus readers of the examples and benchmarks: strict, every error naming the file and line."""

from __future__ import annotations

import pytest

from contextembed.errors import FileFormatError
from contextembed.sklearn.datasets import read_conll, read_conll_doc_ids, read_conll_documents, read_labelled_text


def test_labelled_text_skips_a_header_and_blank_lines_and_stops_at_the_limit(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("label\tsentence\n1\ta gorgeous film\n\n0\tdull\r\n1\tfine\n", encoding="utf-8")
    assert read_labelled_text(path) == (["a gorgeous film", "dull", "fine"], [1, 0, 1])
    assert read_labelled_text(path, limit=2) == (["a gorgeous film", "dull"], [1, 0])
    assert read_labelled_text(path, limit=0) == ([], [])  # was one text


@pytest.mark.parametrize("label", ["x", "²", "٣", " 1", "1.0", ""])
def test_a_label_that_is_not_an_ascii_int_after_the_first_line_names_the_line(tmp_path, label):
    path = tmp_path / "train.tsv"
    path.write_text(f"1\tok\n{label}\tbad\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.tsv, line 2: label .* is not an int"):
        read_labelled_text(path)


def test_text_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"1\tok\n0\tna\xefve\n")
    with pytest.raises(FileFormatError, match="line 2: not UTF-8"):
        read_labelled_text(path)


def test_conll_reads_the_last_column_and_names_a_token_without_tags(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP I-PER\n",
                    encoding="utf-8")
    assert read_conll(path) == ([["EU", "rejects"], ["Peter"]], [["I-ORG", "O"], ["I-PER"]])
    assert read_conll(path, column=1, limit=1) == ([["EU", "rejects"]], [["NNP", "VBZ"]])
    path.write_text("EU NNP B-NP I-ORG\nrejects\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"train.txt, line 2: 1 columns where the file's token lines have 4"):
        read_conll(path)
    path.write_text("EU\nrejects\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train.txt, line 1: column=-1 names no tag column: the file's lines have "
                                         r"only the token column"):
        read_conll(path)


DOC_FILE = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP I-PER\n\n"
            "-DOCSTART- -X- -X- O\n\n-DOCSTART- -X- -X- O\n\nBonn NNP B-NP I-LOC\n")


def test_conll_documents_gives_sentences_tags_and_document_ids_in_one_pass(tmp_path, monkeypatch):
    path = tmp_path / "train.txt"
    path.write_text(DOC_FILE, encoding="utf-8")
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda file, *a, **k: opened.append(str(file)) or real_open(file, *a, **k))
    sentences, tags, doc_ids = read_conll_documents(path)
    assert opened.count(str(path)) == 1  # one pass
    assert sentences == [["EU", "rejects"], ["Peter"], ["Bonn"]]
    assert tags == [["I-ORG", "O"], ["I-PER"], ["I-LOC"]]
    assert doc_ids == [0, 0, 1]  # an empty document (two -DOCSTART- in a row) takes no number
    assert read_conll_documents(path, column=1, limit=2) == ([["EU", "rejects"], ["Peter"]], [["NNP", "VBZ"], ["NNP"]],
                                                             [0, 0])
    assert read_conll_documents(path, limit=0) == ([], [], [])
    assert read_conll(path) == (sentences, tags)


def test_conll_document_ids_go_on_across_files(tmp_path):
    first, second, bare = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    first.write_text(DOC_FILE, encoding="utf-8")
    second.write_text(DOC_FILE, encoding="utf-8")
    bare.write_text("Rome NNP B-NP I-LOC\n", encoding="utf-8")  # no -DOCSTART-: the file is one document
    corpus = read_conll_documents(first, second, bare, bare)
    assert corpus.doc_ids == [0, 0, 1, 2, 2, 3, 4, 5]
    assert len(corpus.sentences) == len(corpus.tags) == 8
    assert read_conll_documents(first, second, limit=4).doc_ids == [0, 0, 1, 2]


def test_the_deprecated_doc_ids_reader_still_gives_one_file_s_ids(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text(DOC_FILE, encoding="utf-8")
    with pytest.warns(DeprecationWarning, match="use read_conll_documents"):
        assert read_conll_doc_ids(path) == read_conll_documents(path).doc_ids


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3"])
def test_conll_documents_refuses_a_bad_limit(tmp_path, limit):
    path = tmp_path / "train.txt"
    path.write_text(DOC_FILE, encoding="utf-8")
    with pytest.raises(ValueError, match=f"limit must be a non-negative int or None .*got {limit!r}"):
        read_conll_documents(path, limit=limit)


def test_conll_documents_names_the_file_and_its_sentence(tmp_path):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(DOC_FILE, encoding="utf-8")
    bad.write_text("EU NNP B-NP I-ORG\n\nPeter NNP B-NP I-PER\nBlackburn\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r"bad.txt, line 4: 1 columns where the file's token lines have 4"):
        read_conll_documents(good, bad)
    bad.write_bytes(b"EU NNP B-NP I-ORG\nna\xefve NN B-NP O\n")
    with pytest.raises(FileFormatError, match="line 2: not UTF-8"):
        read_conll_documents(good, bad)
    with pytest.raises(ValueError, match="at least one path"):
        read_conll_documents()
    with pytest.raises(FileNotFoundError):
        read_conll_documents(tmp_path / "absent.txt")


def test_labelled_text_reads_glue_s_sentence_then_label_order_from_its_header(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\nhide new secretions \t0\na\ttab inside\t1\n", encoding="utf-8")
    assert read_labelled_text(path) == (["hide new secretions ", "a\ttab inside"], [0, 1])
    path.write_text("sentence\tlabel\n1\tlabel first\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2: label 'label first' is not an int"):
        read_labelled_text(path)


# -- ragged, mixed-ending and mis-typed input -----------------------------------------------------


def test_a_line_missing_its_last_column_is_an_error_not_its_chunk_tag(tmp_path):
    """``German JJ B-NP`` in a 4-column file gave ``B-NP`` as its entity tag."""
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP\ncall NN I-NP O\n", encoding="utf-8")
    for read in (read_conll, read_conll_documents):
        with pytest.raises(FileFormatError, match=r"^.*train.txt, line 3: 3 columns where the file's token lines have "
                                                  r"4 \(line 1 has 4: 'EU NNP B-NP B-ORG'\)"):
            read(path)


def test_files_of_different_columns_are_each_read_by_their_own(tmp_path):
    four, three = tmp_path / "four.txt", tmp_path / "three.txt"
    four.write_text("EU NNP B-NP B-ORG\n", encoding="utf-8")
    three.write_text("Bonn NNP B-LOC\n", encoding="utf-8")
    assert read_conll_documents(four, three) == ([["EU"], ["Bonn"]], [["B-ORG"], ["B-LOC"]], [0, 1])
    assert read_conll_documents(four, three, column=1).tags == [["NNP"], ["NNP"]]
    with pytest.raises(ValueError, match=r"^.*three.txt, line 1: column=-3 is outside the tag columns of this file's "
                                         r"3 columns: the token is column 0 \(-3\), the tags 1 to 2 \(-2 to -1\)"):
        read_conll_documents(four, three, column=-3)


@pytest.mark.parametrize("read", [read_conll, read_conll_documents, read_labelled_text])
def test_cr_only_line_endings_are_an_error_naming_the_file_and_line(tmp_path, read):
    """A CR-only file was one token (each later word a column of it) or one text."""
    path = tmp_path / "train.txt"
    content = DOC_FILE if read is not read_labelled_text else "1\ta gorgeous film\n0\tdull\n"
    path.write_bytes(content.replace("\n", "\r").encode("utf-8"))
    with pytest.raises(FileFormatError, match=r"train.txt, line 1: a carriage return \(CR\) at byte \d+ of the line is "
                                              r"not followed by a line feed"):
        read(path)
    path.write_bytes(content.replace("\n", "\r\n", 2).encode("utf-8"))  # mixed LF and CR LF: read alike
    mixed = read(path)
    path.write_text(content, encoding="utf-8")
    assert mixed == read(path) and mixed[0]


@pytest.mark.parametrize("column, error, message", [
    (4, ValueError, r"^.*train.txt, line 3: column=4 is outside the tag columns of this file's 4 columns: the token "
                    r"is column 0 \(-4\), the tags 1 to 3 \(-3 to -1\)"),
    (-4, ValueError, "column=-4 is outside"),
    (0, ValueError, "column=0 is outside"),
    ("1", TypeError, r"^column must be an int \(the index of the tag column, -1 the last\), got str '1'"),
    (True, TypeError, "column must be an int .*got bool True"),
    (1.0, TypeError, "column must be an int .*got float 1.0"),
    (None, TypeError, "column must be an int .*got NoneType None"),
])
def test_a_column_that_is_not_a_tag_column_is_refused_naming_column(tmp_path, column, error, message):
    """``column=3`` on a 4-column file (a bare IndexError), ``"1"`` (a TypeError from inside) and
    ``True`` (read as 1: the POS column) are refused."""
    path = tmp_path / "train.txt"
    path.write_text(DOC_FILE, encoding="utf-8")
    for read in (read_conll, read_conll_documents):
        with pytest.raises(error, match=message):
            read(path, column=column)


def test_a_column_in_range_reads_it_and_numpy_ints_are_ints(tmp_path):
    import numpy as np

    path = tmp_path / "train.txt"
    path.write_text(DOC_FILE, encoding="utf-8")
    for column, first in [(1, "NNP"), (2, "B-NP"), (3, "I-ORG"), (-1, "I-ORG"), (-3, "NNP"), (np.int64(2), "B-NP")]:
        assert read_conll_documents(path, column=column).tags[0][0] == first
    assert read_conll_documents(path, column=5, limit=0) == ([], [], [])  # nothing read, nothing to check against


@pytest.mark.parametrize("paths, error, message", [
    ((None,), TypeError, r"^paths\[0\] is NoneType \(None\); expected a file path"),
    ((3,), TypeError, r"^paths\[0\] is int \(3\); expected a file path"),
])
def test_conll_documents_refuses_a_path_that_is_not_one(paths, error, message):
    with pytest.raises(error, match=message):
        read_conll_documents(*paths)


def test_conll_documents_checks_every_path_before_reading(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_text(DOC_FILE, encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"absent.txt' does not exist"):
        read_conll_documents(good, tmp_path / "absent.txt")
    with pytest.raises(FileNotFoundError, match=r"is a directory; pass a file"):
        read_conll_documents(good, tmp_path)


@pytest.mark.parametrize("line", ["1", "0 no tab here", "label only\t"])
def test_a_labelled_line_without_its_tab_names_the_line(tmp_path, line):
    """``1`` alone was read as the label 1 of an empty text."""
    path = tmp_path / "train.tsv"
    path.write_text(f"1\tok\n{line}\n", encoding="utf-8")
    if line.endswith("\t"):
        with pytest.raises(ValueError, match=r"train.tsv, line 2: label 'label only' is not an int"):
            read_labelled_text(path)
        return
    with pytest.raises(ValueError, match=rf"train.tsv, line 2: expected 'label<TAB>text', got {line!r} \(no tab\)"):
        read_labelled_text(path)
    path.write_text(f"sentence\tlabel\nok\t1\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"train.tsv, line 3: expected 'text<TAB>label', got {line!r} \(no tab\)"):
        read_labelled_text(path)


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3"])
def test_labelled_text_refuses_a_bad_limit(tmp_path, limit):
    path = tmp_path / "train.tsv"
    path.write_text("1\tok\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"limit must be a non-negative int or None .*got {limit!r}"):
        read_labelled_text(path, limit=limit)
