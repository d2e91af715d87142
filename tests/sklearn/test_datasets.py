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
    with pytest.raises(ValueError, match=r"sentence 0, token 1 \('rejects'\): expected 'word ... tag'"):
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
    with pytest.raises(ValueError, match=r"bad.txt, sentence 1, token 1 \('Blackburn'\): expected 'word ... tag'"):
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
