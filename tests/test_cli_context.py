"""``contextembed embed --context N``: documents read from each input format, provenance on resume."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextembed.cli import main
from contextembed.encoders import load_encoder
from contextembed.errors import FileFormatError
from contextembed.extraction import FeatureExtractor
from contextembed.io import read_documents, read_sentences

DOC_A = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
DOC_B = [["The", "European", "Commission", "said"], ["Germany", "'s", "representative"]]
SENTENCES = DOC_A + DOC_B
TWO_DOCS = [0, 0, 1, 1]


def _conll(docs) -> str:
    return "".join("-DOCSTART- -X- O O\n\n" + "".join("".join(f"{w} X O O\n" for w in s) + "\n" for s in doc)
                   for doc in docs)


def _conllu(docs) -> str:
    out = []
    for doc in docs:
        for k, sentence in enumerate(doc):
            out.append(("# newdoc id = d\n" if k == 0 else "") + "# sent_id = x\n")
            out.append("".join(f"{i + 1}\t{w}\t_\t_\t_\t_\t0\t_\t_\t_\n" for i, w in enumerate(sentence)) + "\n")
    return "".join(out)


def _jsonl(docs) -> str:
    return "".join(json.dumps({"doc": f"d{d}", "tokens": s}) + "\n" for d, doc in enumerate(docs) for s in doc)


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")


def _expected(encoder, sentences, doc_ids, context):
    rows = list(FeatureExtractor(encoder, context=context).iter_words(sentences, doc_ids=doc_ids))
    return np.concatenate([r for r in rows if len(r)])


def _embed(tiny_bert_dir, source, output, *extra):
    args = ["embed", str(tiny_bert_dir), str(source), str(output), "--device", "cpu", "--precision", "fp32",
            "--quiet", *map(str, extra)]
    assert main(args) == 0
    return np.load(output)["features"]


@pytest.mark.parametrize("name, text", [("in.conll", _conll([DOC_A, DOC_B])), ("in.conllu", _conllu([DOC_A, DOC_B])),
                                        ("in.jsonl", _jsonl([DOC_A, DOC_B]))])
def test_context_stays_inside_the_files_documents(tiny_bert_dir, encoder, tmp_path, name, text):
    source = tmp_path / name
    source.write_text(text, encoding="utf-8")
    assert list(read_documents(str(source))) == list(zip(TWO_DOCS, SENTENCES))
    features = _embed(tiny_bert_dir, source, tmp_path / "out.npz", "--context", 6)
    np.testing.assert_array_equal(features, _expected(encoder, SENTENCES, TWO_DOCS, 6))
    assert not np.allclose(features, _expected(encoder, SENTENCES, None, 6), atol=1e-4)  # the boundary counted


def test_zero_context_writes_what_it_wrote_before(tiny_bert_dir, encoder, tmp_path):
    source = tmp_path / "in.conll"
    source.write_text(_conll([DOC_A, DOC_B]), encoding="utf-8")
    features = _embed(tiny_bert_dir, source, tmp_path / "out.npz")
    assert np.array_equal(features, np.concatenate(FeatureExtractor(encoder).words(SENTENCES)))


def test_plain_text_is_one_document_unless_blank_lines_separate(tiny_bert_dir, encoder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(" ".join(s) for s in DOC_A) + "\n\n" + "\n".join(" ".join(s) for s in DOC_B) + "\n",
                      encoding="utf-8")
    sentences = DOC_A + [[]] + DOC_B
    assert list(read_sentences(str(source))) == sentences
    one = _embed(tiny_bert_dir, source, tmp_path / "one.npz", "--context", 6)
    np.testing.assert_array_equal(one, _expected(encoder, sentences, None, 6))
    two = _embed(tiny_bert_dir, source, tmp_path / "two.npz", "--context", 6, "--doc-sep", "blank")
    np.testing.assert_array_equal(two, _expected(encoder, sentences, [0, 0, 0, 1, 1], 6))
    assert np.load(tmp_path / "two.npz")["lengths"].tolist() == [4, 2, 0, 4, 3]  # the blank line: an empty sentence


def test_context_is_recorded_and_a_resume_with_another_is_refused(tiny_bert_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.conll").write_text(_conll([DOC_A, DOC_B]), encoding="utf-8")
    base = ["embed", str(tiny_bert_dir), str(corpus), str(tmp_path / "out"), "--device", "cpu", "--precision", "fp32",
            "--quiet"]
    assert main(base + ["--context", "4"]) == 0
    assert main(base + ["--context", "4"]) == 0  # the same run: the output is checked and kept
    capsys.readouterr()
    assert main(base + ["--context", "8"]) != 0
    assert "was made with context=4, but this run has context=8; pass --overwrite" in capsys.readouterr().err
    assert main(base) != 0
    assert "was made with context=4, but this run has context=<not recorded>" in capsys.readouterr().err


def test_jsonl_documents_must_be_consecutive(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"doc": d, "tokens": ["a"]}) + "\n" for d in ("x", "y", "x")), encoding="utf-8")
    with pytest.raises(FileFormatError, match=r'line 3.*"doc" \'x\' comes back after another document|"doc" \'x\' comes back.*line 3'):
        list(read_documents(str(source)))
    source.write_text(json.dumps({"doc": [1], "tokens": ["a"]}) + "\n", encoding="utf-8")
    with pytest.raises(FileFormatError, match=r'"doc" is an array'):
        list(read_sentences(str(source)))


def _jsonl_lines(docs) -> str:
    """One line per ``(doc, tokens)``; ``doc`` None: a line without the field."""
    return "".join(json.dumps({"tokens": tokens} if doc is None else {"doc": doc, "tokens": tokens}) + "\n"
                   for doc, tokens in docs)


@pytest.mark.parametrize("docs, numbers", [
    ([None, None, None], [0, 0, 0]),  # a file without "doc": one document
    (["a", "a", None], [0, 0, 1]),  # issue 38 item 6: used to be '"doc" None comes back'
    ([None, "a", "a"], [0, 1, 1]),
    (["a", None, None, "b", None, "c"], [0, 1, 1, 2, 3, 4]),  # each run without "doc" is one document
    ([None, "a", None], [0, 1, 2]),  # an unnamed run may come back; it is another document
    ([0, 1, None, 2], [0, 1, 2, 3]),
])
def test_jsonl_lines_without_doc_are_one_document_per_run(tmp_path, docs, numbers):
    source = tmp_path / "in.jsonl"
    tokens = [[f"w{i}"] for i in range(len(docs))]
    source.write_text(_jsonl_lines(zip(docs, tokens)), encoding="utf-8")
    assert list(read_documents(str(source))) == list(zip(numbers, tokens))


def test_embed_reads_a_line_without_doc_after_named_ones_as_its_own_document(tiny_bert_dir, encoder, tmp_path):
    source = tmp_path / "in.jsonl"
    docs = ["d0", "d0", None, None]
    source.write_text(_jsonl_lines(zip(docs, SENTENCES)), encoding="utf-8")
    features = _embed(tiny_bert_dir, source, tmp_path / "out.npz", "--context", 6)
    np.testing.assert_array_equal(features, _expected(encoder, SENTENCES, TWO_DOCS, 6))
    reverse = tmp_path / "reverse.jsonl"
    reverse.write_text(_jsonl_lines(zip([None, None, "d1", "d1"], SENTENCES)), encoding="utf-8")
    np.testing.assert_array_equal(_embed(tiny_bert_dir, reverse, tmp_path / "reverse.npz", "--context", 6), features)


def test_a_named_document_that_comes_back_after_an_unnamed_run_is_refused(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(_jsonl_lines([("x", ["a"]), (None, ["b"]), ("x", ["c"])]), encoding="utf-8")
    with pytest.raises(FileFormatError, match=r'"doc" \'x\' comes back after another document'):
        list(read_documents(str(source)))


@pytest.mark.parametrize("extra, message", [
    (["--doc-sep", "blank"], "doc_sep='blank' (--doc-sep) sets the documents that context reaches across; it does "
                             "nothing without context"),
    (["--context", "4", "--level", "text"], "text vectors take none: pass level='word' (--level word)"),
    (["--context", "-1"], "--context"),
    (["--context", "2.5"], "--context"),
    (["--context", "39"], "context=39 pieces is more than the model takes"),
])
def test_bad_context_options(tiny_bert_dir, tmp_path, capsys, extra, message):
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    try:
        code = main(["embed", str(tiny_bert_dir), str(source), str(tmp_path / "out.npz"), "--quiet", *extra])
    except SystemExit as stopped:  # argparse refused the value
        code = stopped.code
    assert code != 0 and message in capsys.readouterr().err
    assert not (tmp_path / "out.npz").exists()


def test_doc_sep_is_for_plain_text_and_context_for_transformers(tmp_path):
    from contextembed.encoders._static.vectors import write_word2vec
    from contextembed.io import embed_file

    source = tmp_path / "in.conll"
    source.write_text(_conll([DOC_A]), encoding="utf-8")
    with pytest.raises(ValueError, match="is for plain text"):
        embed_file("unused", source, tmp_path / "out.npz", context=4, doc_sep="blank")
    vectors = tmp_path / "vectors.txt"
    write_word2vec(vectors, ["EU", "call"], np.ones((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="transformers only"):
        embed_file(str(vectors), source, tmp_path / "out.npz", context=4, show_progress=False)
