"""The token readers of contextembed.io on ragged, mixed-ending and mis-typed input: every error a
FileFormatError (a ValueError) naming the file and the line, nothing guessed."""

from __future__ import annotations

import pytest

from contextembed.errors import FileFormatError
from contextembed.io import read_conll, read_documents, read_sentences

GOOD = {
    "in.txt": "EU rejects German call\nto boycott British lamb .\n",
    "in.conll": "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nGerman JJ B-NP B-MISC\n",
    "in.conllu": "1\tEU\tEU\tPROPN\t_\t_\t2\tnsubj\t_\t_\n2\trejects\treject\tVERB\t_\t_\t0\troot\t_\t_\n\n"
                 "1\tGerman\tgerman\tADJ\t_\t_\t0\troot\t_\t_\n",
    "in.jsonl": '{"tokens": ["EU", "rejects"]}\n{"text": "German call"}\n',
}


@pytest.mark.parametrize("name", list(GOOD))
def test_cr_only_line_endings_are_an_error_naming_the_line(tmp_path, name):
    """A file with CR-only line endings (classic Mac OS) was one line: one sentence of text, one
    token of CoNLL (every later word a column of it)."""
    source = tmp_path / name
    source.write_bytes(GOOD[name].replace("\n", "\r").encode("utf-8"))
    first = len(GOOD[name].split("\n")[0].encode("utf-8")) + 1
    with pytest.raises(FileFormatError, match=rf"^{source}, line 1: a carriage return \(CR\) at byte {first} of the "
                                              r"line is not followed by a line feed: lines end with LF or CR LF"):
        list(read_sentences(str(source)))


@pytest.mark.parametrize("name", list(GOOD))
def test_mixed_line_endings_read_alike_and_a_lone_cr_names_its_line(tmp_path, name):
    source = tmp_path / name
    lines = GOOD[name].split("\n")
    source.write_bytes("\r\n".join(lines[:2]).encode("utf-8") + b"\n" + "\n".join(lines[2:]).encode("utf-8"))
    crlf = list(read_sentences(str(source)))
    source.write_text(GOOD[name], encoding="utf-8")
    assert crlf == list(read_sentences(str(source))) and crlf
    source.write_bytes(("\n".join(lines[:1]) + "\n" + lines[1] + "\r\r\n" + "\n".join(lines[2:])).encode("utf-8"))
    with pytest.raises(FileFormatError, match=rf"^{source}, line 2: a carriage return \(CR\) at byte "
                                              rf"{len(lines[1].encode()) + 1} of the line is not followed by a line feed"):
        list(read_sentences(str(source)))


@pytest.mark.parametrize("line, count", [("German JJ B-NP", 3), ("German", 1), ("German JJ B-NP B-MISC extra", 5)])
def test_a_conll_line_with_other_columns_than_the_files_others_names_the_line(tmp_path, line, count):
    """``German JJ B-NP`` in a 4-column file gave the chunk tag as its entity tag."""
    source = tmp_path / "in.conll"
    source.write_text(f"-DOCSTART-\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n{line}\ncall NN I-NP O\n",
                      encoding="utf-8")
    message = (rf"^{source}, line 6: {count} columns where the file's token lines have 4 \(line 3 has 4: "
               r"'EU NNP B-NP B-ORG'\)")
    with pytest.raises(FileFormatError, match=message):
        list(read_sentences(str(source)))
    with pytest.raises(FileFormatError, match=message):
        list(read_conll(str(source)))
    with pytest.raises(FileFormatError, match=message):
        list(read_documents(str(source)))


def test_a_conll_file_whose_docstart_has_fewer_columns_reads(tmp_path):
    """``-DOCSTART-`` is a boundary, not a token line: its columns do not count."""
    source = tmp_path / "in.conll"
    source.write_text("-DOCSTART-\n\nEU NNP B-ORG\n\n-DOCSTART- -X- -X- -X- O\nrejects VBZ O\n", encoding="utf-8")
    assert list(read_conll(str(source))) == [(["EU"], [["NNP", "B-ORG"]]), (["rejects"], [["VBZ", "O"]])]


def test_a_conllu_file_read_as_conll_names_the_first_line_that_differs(tmp_path):
    source = tmp_path / "in.conll"
    source.write_text("# sent_id = 1\n" + GOOD["in.conllu"], encoding="utf-8")
    with pytest.raises(FileFormatError, match=rf"^{source}, line 2: 10 columns where the file's token lines have 4 "
                                              r"\(line 1 has 4: '# sent_id = 1'\)"):
        list(read_sentences(str(source)))
