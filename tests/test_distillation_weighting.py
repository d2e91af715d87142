"""``distill``'s SIF weighting and PCA defaults, against plain-loop references."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from contextembed import distill, load_encoder
from contextembed.pretraining._sif import read_word_counts
from contextembed.pretraining._distillation import DEFAULTS, DISTILLATION_FILE
from contextembed.errors import FileFormatError

CORPUS = [["the", "cat", "sat"], ["the", "dog", "ran", "home"], ["a", "cat", "ran"], ["The", "Cat"]] * 3
A = 1e-4


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32")


def _zipf(token_id: int, vocab_size: int) -> float:
    """Plain loop: model2vec's Zipf estimate, 1 / (id + 2) over the sum for the whole vocabulary."""
    return (1 / (token_id + 2)) / sum(1 / (j + 2) for j in range(vocab_size))


def test_vocabulary_rows_and_pieces_are_weighted_by_their_zipf_rank(bert):
    raw = distill(bert, layers=-1, dim=None, weighting="none")
    weighted = distill(bert, layers=-1, dim=None, weighting="sif")
    vocab_size = len(bert.tokenizer)
    for row, word in enumerate(raw.words):
        (token_id,) = bert.pieces([[word]])[0].ids
        weight = A / (A + _zipf(int(token_id), vocab_size))
        np.testing.assert_allclose(weighted.table[row], raw.table[row] * weight, rtol=1e-5, atol=1e-7)
    for row, token_id in enumerate(raw.subwords.ids):
        weight = A / (A + _zipf(int(token_id), vocab_size))
        np.testing.assert_allclose(weighted.subwords.vectors[row], raw.subwords.vectors[row] * weight,
                                   rtol=1e-5, atol=1e-7)


def test_weights_multiply_the_rows_after_pca(bert):
    from sklearn.decomposition import PCA

    raw = distill(bert, layers=-1, dim=None, weighting="none")
    student = distill(bert, layers=-1, dim=6, weighting="sif", sif_a=1e-3)
    projected = PCA(n_components=6, random_state=0).fit(raw.table[:-1]).transform(raw.table[:-1])
    ids = [int(bert.pieces([[w]])[0].ids[0]) for w in raw.words]
    weights = np.array([1e-3 / (1e-3 + _zipf(i, len(bert.tokenizer))) for i in ids])
    np.testing.assert_allclose(student.table[:-1], projected * weights[:, None], rtol=1e-4, atol=1e-5)


def test_corpus_rows_are_weighted_by_their_counts(bert):
    raw = distill(bert, corpus=CORPUS, layers=-1, dim=None, weighting="none")
    weighted = distill(bert, corpus=CORPUS, layers=-1, dim=None, weighting="sif", sif_a=0.01)
    counts = Counter(w for s in CORPUS for w in s)
    total = sum(counts.values())
    for row, word in enumerate(raw.words):
        # a pooled lowercase row counts every written form
        count = counts[word] if word in counts else sum(c for w, c in counts.items() if w.lower() == word)
        np.testing.assert_allclose(weighted.table[row], raw.table[row] * 0.01 / (0.01 + count / total), rtol=1e-5)
    piece_counts = Counter(int(i) for piece in bert.pieces(CORPUS) for i in piece.ids)
    piece_total = sum(piece_counts.values())
    for row, token_id in enumerate(raw.subwords.ids):
        weight = 0.01 / (0.01 + piece_counts[int(token_id)] / piece_total)
        np.testing.assert_allclose(weighted.subwords.vectors[row], raw.subwords.vectors[row] * weight, rtol=1e-5)


def test_a_word_count_list_gives_p_and_unlisted_words_keep_their_length(bert, tmp_path):
    raw = distill(bert, layers=-1, dim=None, weighting="none")
    listed = {"the": 60, "cat": 30, "Dog": 10}  # "dog" is found by its lowercase form? no: by its exact one
    path = tmp_path / "counts.txt"
    path.write_text("the 60\n\ncat\t30\nDog 10\n", encoding="utf-8")
    for frequencies in (listed, path, str(path)):
        student = distill(bert, layers=-1, dim=None, weighting="sif", sif_a=0.1, frequencies=frequencies)
        for row, word in enumerate(raw.words):
            count = listed.get(word, listed.get(word.lower(), 0))
            np.testing.assert_allclose(student.table[row], raw.table[row] * 0.1 / (0.1 + count / 100), rtol=1e-5)
    assert any(w == "the" for w in raw.words) and any(w not in listed for w in raw.words)
    distill(bert, tmp_path / "out", layers=-1, dim=None, weighting="sif", frequencies=path)
    record = json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())
    assert record["frequencies"] == "word counts" and record["weighting"] == "sif" and record["sif_a"] == A
    assert len(record["frequencies_hash"]) == 32


@pytest.mark.parametrize(("source", "corpus"), [("vocabulary", None), ("corpus", CORPUS)])
def test_auto_takes_the_source_defaults_at_most_the_teacher_width(bert, tmp_path, source, corpus):
    student = distill(bert, tmp_path / source, corpus=corpus, layers=-1)
    record = json.loads((tmp_path / source / DISTILLATION_FILE).read_text())
    default = DEFAULTS[source]
    assert record["weighting"] == default["weighting"]
    if default["dim"] is None:
        assert student.width == bert.width
    else:  # PCA: at most the teacher's width and the number of words
        width = bert.width if default["dim"] == "width" else default["dim"]
        assert student.width == min(width, bert.width, len(student.words))
    if default["dim"] is None:
        assert record["pca_explained_variance"] is None
    else:  # the full width keeps all the variance: the table is centred and rotated, nothing cut
        assert record["pca_explained_variance"] == pytest.approx(1.0, abs=1e-5)
    explicit = distill(bert, corpus=corpus, layers=-1, dim=None if default["dim"] is None else student.width,
                       weighting=default["weighting"])
    np.testing.assert_allclose(student.table, explicit.table, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"weighting": "idf"}, ValueError, "weighting='idf'"),
        ({"sif_a": 0}, ValueError, "sif_a must be a number in (0, 1], got 0"),
        ({"sif_a": float("nan")}, ValueError, "sif_a must be a number in (0, 1], got nan"),
        ({"sif_a": 2.0}, ValueError, "sif_a"),
        ({"sif_a": True}, ValueError, "sif_a"),
        ({"frequencies": {"the": 1}, "weighting": "none"}, ValueError, "need weighting='sif'"),
        ({"frequencies": {"the": -1}}, ValueError, "got 'the': -1"),
        ({"frequencies": {"the": 1.5}}, ValueError, "got 'the': 1.5"),
        ({"frequencies": {"the": 0}}, ValueError, "no word counted more than 0"),
        ({"frequencies": [("the", 1)]}, TypeError, "frequencies must be a mapping"),
        ({"storage": "int8"}, TypeError, "storage must be a TableStorage"),
        ({"dim": "full"}, ValueError, "dim must be a positive int, 'auto' or None"),
    ],
)
def test_bad_weighting_options(bert, options, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        distill(bert, layers=-1, **options)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("the 3\ncat three\n", "line 2: expected 'word count'"),
        ("the 3\ncat 1 2\n", "line 2: expected 'word count'"),
        ("the 3\nthe 4\n", "line 2: 'the' is counted twice"),
        ("the -3\n", "line 1: expected"),
        ("the ３\n", "line 1: expected"),  # a fullwidth digit is not a count
        ("the 0\n\n", "no word counted more than 0"),
    ],
)
def test_word_count_files_are_read_strictly(tmp_path, text, message):
    path = tmp_path / "counts.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FileFormatError, match=message) as caught:
        read_word_counts(path)
    assert str(path) in str(caught.value)


def test_cli_weighting_pca_and_storage(tiny_bert_dir, tmp_path):
    from _cli import call_cli

    counts = tmp_path / "counts.txt"
    counts.write_text("the 5\ncat 2\n", encoding="utf-8")
    out = tmp_path / "out"
    done = call_cli(["distill", str(tiny_bert_dir), str(out), "--layers=-1", "--dim", "none",
                     "--weighting", "sif", "--sif-a", "0.01", "--frequencies", str(counts),
                     "--storage", "int8", "--int8-scale", "dimension", "--quiet"])
    assert done.returncode == 0, done.stderr
    record = json.loads((out / DISTILLATION_FILE).read_text())
    assert (record["weighting"], record["sif_a"], record["frequencies"]) == ("sif", 0.01, "word counts")
    assert record["storage"] == {"precision": "int8", "scale": "dimension", "clusters": None}
    loaded = load_encoder(out)
    assert loaded.storage.precision == "int8" and loaded.width == 32
    for flags, message in [(["--clusters", "0"], "--clusters"), (["--sif-a", "0"], "--sif-a"),
                           (["--dim", "0"], "--dim"), (["--storage", "int4"], "--storage"),
                           (["--int8-scale", "vector"], "--int8-scale applies to --storage int8"),
                           (["--exact-columns", "4"], "--exact-columns 4 keeps columns beside the clusters"),
                           (["--exact-columns", "0", "--clusters", "4"], "--exact-columns"),
                           (["--clusters", "4", "--exact-columns", "32", "--dim", "none", "--layers=-1"],
                            "exact_columns=32 leaves none of the table's 32 columns")]:
        done = call_cli(["distill", str(tiny_bert_dir), str(tmp_path / "bad"), *flags, "--quiet"])
        assert done.returncode != 0 and message in done.stderr, done.stderr
    assert not (tmp_path / "bad").exists()
