"""The corpus readers of the examples and benchmarks: strict, every error naming the file and line."""

from __future__ import annotations

import pytest

from contextembed.errors import FileFormatError
from contextembed.sklearn.datasets import read_conll, read_labelled_text


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
