"""``distill``: a contextual encoder reduced to static word vectors that load back as an encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _cli import run_cli
from contextembed import StaticVectors, distill, load_encoder
from contextembed.distillation import DISTILLATION_FILE, whole_words
from contextembed.features import FeatureExtractor

CORPUS = [["the", "cat", "sat"], ["the", "dog", "ran", "home"], [], ["a", "cat", "ran"]]


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32")


def _reference(encoder, corpus, layers, combine, fold=lambda w: w):
    """Plain loop: every occurrence's pooled vector, averaged per word."""
    extractor = FeatureExtractor(encoder, layers=layers, combine=combine, subword_pooling="mean")
    vectors: dict[str, list] = {}
    for sentence in corpus:
        if not sentence:
            continue
        (words,) = extractor.words([sentence])
        for word, vector in zip(sentence, words):
            vectors.setdefault(fold(word), []).append(vector)
    return {word: np.mean(rows, axis=0) for word, rows in vectors.items()}


def test_corpus_mean_matches_a_plain_loop_and_loads_back(bert, tmp_path):
    student = distill(bert, tmp_path / "out", corpus=CORPUS, layers=[-2, -1], combine="mean")
    expected = _reference(bert, CORPUS, [-2, -1], "mean")
    assert sorted(student.words) == sorted(expected)
    for word, vector in expected.items():
        np.testing.assert_allclose(student.table[student.lookup(word)], vector, rtol=1e-5, atol=1e-6)
    loaded = load_encoder(tmp_path / "out")
    assert isinstance(loaded, StaticVectors) and loaded.width == bert.width
    np.testing.assert_array_equal(loaded.table, student.table)
    (cat,) = loaded.encode([["cat", "unseen"]])
    np.testing.assert_allclose(cat[0, 0], expected["cat"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cat[0, 1], student.table[:-1].mean(axis=0), rtol=1e-5)  # oov="mean"
    record = json.loads((tmp_path / "out" / DISTILLATION_FILE).read_text())
    assert record["source"] == "corpus" and record["words"] == len(expected) and record["occurrences"] == 10
    assert record["layers"] == [1, 2]  # absolute indexes of the 3-layer tiny BERT


def test_concat_layers_and_min_count(bert):
    student = distill(bert, corpus=CORPUS, layers=[-2, -1], combine="concat", min_count=2)
    assert sorted(student.words) == ["cat", "ran", "the"]
    assert student.width == 2 * bert.width
    expected = _reference(bert, CORPUS, [-2, -1], "concat")
    np.testing.assert_allclose(student.table[student.lookup("ran")], expected["ran"], rtol=1e-5, atol=1e-6)
    assert student.is_oov("dog")


def test_uncased_teacher_folds_case(minilm):
    student = distill(minilm, corpus=[["Paris", "is", "big"], ["paris", "PARIS"]], layers=-1)
    assert sorted(student.words) == ["big", "is", "paris"] and student.lowercase
    expected = _reference(minilm, [["Paris", "is", "big"], ["paris", "PARIS"]], -1, "mean", str.lower)
    np.testing.assert_allclose(student.table[student.lookup("Paris")], expected["paris"], rtol=1e-5, atol=1e-5)


def test_vocabulary_mode_encodes_whole_words_alone(bert):
    words = whole_words(bert)
    assert words and all(bert.pieces([[w]])[0].n_pieces == 1 for w in words)
    assert not any(w.startswith("##") or w in ("[CLS]", "[SEP]", "[PAD]") for w in words)
    student = distill(bert, layers=-1)
    assert student.words == words
    (alone,) = FeatureExtractor(bert, layers=-1, combine="mean", subword_pooling="mean").words([[words[5]]])
    np.testing.assert_allclose(student.table[5], alone[0], rtol=1e-5, atol=1e-6)


def test_roberta_vocabulary_strips_the_space_marker(tiny_roberta_dir):
    roberta = load_encoder(tiny_roberta_dir, device="cpu", precision="fp32")
    words = whole_words(roberta)
    assert words and not any("Ġ" in w for w in words)


def test_pca_reduces_to_dim(bert):
    student = distill(bert, corpus=CORPUS * 3, layers=[-2, -1], combine="concat", dim=4)
    assert student.width == 4
    table = student.table[:-1]
    np.testing.assert_allclose(table.mean(axis=0), 0, atol=1e-5)  # PCA centres


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"corpus": []}, ValueError, "no words"),
        ({"corpus": [[], []]}, ValueError, "no words"),
        ({"corpus": CORPUS, "min_count": 5}, ValueError, "min_count=5"),
        ({"corpus": CORPUS, "dim": 33}, ValueError, "dim=33 is wider"),
        ({"corpus": CORPUS, "dim": 20}, ValueError, "dim=20 needs at least 20 words"),
        ({"corpus": CORPUS, "dim": 0}, ValueError, "dim must be a positive int"),
        ({"corpus": CORPUS, "min_count": 0}, ValueError, "min_count"),
        ({"corpus": CORPUS, "oov": "random"}, ValueError, "oov='random'"),
        ({"corpus": ["the cat sat"]}, TypeError, "corpus sentence 0 is a str"),
        ({"corpus": [["a"]] * 1500 + [["b", None]]}, TypeError, "corpus sentence 1500, word 1 is NoneType"),
        ({"corpus": CORPUS, "combine": "average"}, ValueError, "average"),
    ],
)
def test_bad_input(bert, options, error, message):
    with pytest.raises(error, match=message):
        distill(bert, **options)


def test_static_and_elmo_teachers(tiny_elmo_dir):
    with pytest.raises(ValueError, match="static vectors already"):
        distill(StaticVectors(["a", "b"], np.eye(2)), corpus=CORPUS)
    elmo = load_encoder(tiny_elmo_dir, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="no piece vocabulary.*pass a corpus"):
        distill(elmo)
    student = distill(elmo, corpus=CORPUS)
    assert student.width == elmo.width and "dog" in student.words


def test_existing_output_is_kept(bert, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        distill(bert, out, corpus=CORPUS)
    assert (out / "mine.txt").read_text() == "keep"
    distill(bert, out, corpus=CORPUS, overwrite=True)
    assert not (out / "mine.txt").exists() and load_encoder(out).vocab_size == 7


def test_cli(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat\nthe dog ran home\n\na cat ran\n", encoding="utf-8")
    out = tmp_path / "student"
    result = run_cli(["distill", str(tiny_bert_dir), str(out), "--corpus", str(corpus), "--layers=-2,-1",
                      "--dim", "3", "--precision", "fp32", "--quiet"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stderr.strip().splitlines()[-1]) == {"output": str(out), "words": 7, "dim": 3}
    assert load_encoder(out).width == 3
    again = run_cli(["distill", str(tiny_bert_dir), str(out), "--corpus", str(corpus), "--quiet"])
    assert again.returncode == 2 and "already exists" in again.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    failed = run_cli(["distill", str(tiny_bert_dir), str(tmp_path / "other"), "--corpus", str(empty), "--quiet"])
    assert failed.returncode == 2 and "no words" in failed.stderr and not (tmp_path / "other").exists()
