from __future__ import annotations

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.pretraining._static import (
    StaticConfig,
    Vocabulary,
    WordVectorModel,
    cbow_windows,
    keep_probabilities,
    most_similar,
    pretrain_static,
    skipgram_pairs,
)

from .conftest import VERBS, make_documents, write_corpus


def _tokens(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, 300)
    sentence_of = np.sort(rng.integers(0, 25, 300))
    reduced = rng.integers(1, 4, 300)
    return ids, sentence_of, reduced


def test_skipgram_pairs_match_a_loop():
    ids, sentence_of, reduced = _tokens()
    expected = [
        (ids[i], ids[j])
        for i in range(len(ids))
        for j in range(len(ids))
        if i != j and abs(i - j) <= reduced[i] and sentence_of[i] == sentence_of[j]
    ]
    centres, contexts = skipgram_pairs(ids, sentence_of, reduced)
    assert sorted(zip(centres.tolist(), contexts.tolist())) == sorted((int(a), int(b)) for a, b in expected)


def test_cbow_windows_match_a_loop():
    ids, sentence_of, reduced = _tokens(1)
    pad = 99
    rows = []
    for i in range(len(ids)):
        row = [ids[i + d] if 0 <= i + d < len(ids) and abs(d) <= reduced[i] and sentence_of[i + d] == sentence_of[i]
               else pad for d in (-3, -2, -1, 1, 2, 3)]
        if any(x != pad for x in row):
            rows.append((ids[i], row))
    centres, contexts = cbow_windows(ids, sentence_of, reduced, 3, pad)
    np.testing.assert_array_equal(centres, [c for c, _ in rows])
    np.testing.assert_array_equal(contexts, [r for _, r in rows])


def test_keep_probabilities_formula():
    counts = np.array([1000, 100, 1])
    f = counts / counts.sum()
    np.testing.assert_allclose(keep_probabilities(counts, 1e-2), np.minimum(1, (np.sqrt(f / 1e-2) + 1) * 1e-2 / f))
    np.testing.assert_array_equal(keep_probabilities(counts, 0), [1, 1, 1])


def test_negative_sampling_loss_matches_numpy():
    torch.manual_seed(0)
    model = WordVectorModel(10, 4)
    with torch.no_grad():
        model.outputs.weight.normal_()
    context = torch.tensor([[1, 2, 10], [3, 10, 10]])  # 10 is padding
    target, negatives = torch.tensor([4, 5]), torch.tensor([[6, 7], [8, 9]])
    W_in, W_out = model.inputs.weight.detach().numpy(), model.outputs.weight.detach().numpy()
    expected = 0.0
    for row, t, negs in zip(context.tolist(), target.tolist(), negatives.tolist()):
        h = np.mean([W_in[i] for i in row if i != 10], axis=0)
        expected -= np.log(1 / (1 + np.exp(-h @ W_out[t])))
        expected -= sum(np.log(1 / (1 + np.exp(h @ W_out[n]))) for n in negs)
    assert float(model(context, target, negatives).detach()) == pytest.approx(expected, rel=1e-5)


def _read_binary_like_gensim(path):
    """An independent reader of word2vec binary: header, then ``word<space><dim float32>`` per word."""
    data = path.read_bytes()
    header, rest = data.split(b"\n", 1)
    count, dim = map(int, header.split())
    words, vectors, position = [], [], 0
    for _ in range(count):
        end = rest.index(b" ", position)
        words.append(rest[position:end].decode("utf-8").lstrip("\n"))
        vectors.append(np.frombuffer(rest[end + 1 : end + 1 + 4 * dim], dtype="<f4"))
        position = end + 1 + 4 * dim
    return words, np.vstack(vectors)


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["skipgram", "cbow"])
def test_pretrain_static_writes_vectors_that_load_back(tmp_path, architecture):
    corpus = write_corpus(tmp_path / "c.txt", make_documents(60, 10, seed=3))
    config = StaticConfig(architecture=architecture, dim=16, epochs=4, min_count=2, batch_size=256, window=3,
                          device="cpu", show_progress=False, sample=0)
    summary = pretrain_static(corpus, tmp_path / "out", config)
    binary, text = load_encoder(summary["binary"]), load_encoder(summary["text"])
    assert binary.words == text.words and binary.width == 16 and binary.vocab_size == summary["vocab_size"]
    np.testing.assert_allclose(binary.table, text.table, rtol=1e-5, atol=1e-6)
    words, vectors = _read_binary_like_gensim(tmp_path / "out" / "vectors.bin")
    assert words == binary.words
    np.testing.assert_array_equal(vectors, binary.table[:-1])
    # verbs fill the same slot of every sentence: the nearest word to a verb is a verb
    neighbour, _ = most_similar(words, vectors, "saw", k=1)[0]
    assert neighbour in VERBS
    (features,) = binary.encode([["Peter", "saw", "unknownword"]])
    assert features.shape == (1, 3, 16) and not features[0, 2].any()


def test_gensim_reads_the_files_when_installed(tmp_path):
    gensim_models = pytest.importorskip("gensim.models")
    corpus = write_corpus(tmp_path / "c.txt", make_documents(10, 10))
    summary = pretrain_static(corpus, tmp_path / "out", StaticConfig(dim=8, epochs=1, min_count=1, show_progress=False))
    for path, binary in ((summary["binary"], True), (summary["text"], False)):
        vectors = gensim_models.KeyedVectors.load_word2vec_format(path, binary=binary)
        assert len(vectors.index_to_key) == summary["vocab_size"]


def test_every_architecture_has_a_learning_rate_and_examples():
    from typing import get_args

    from contextembed.pretraining._static import DEFAULT_LEARNING_RATES, EXAMPLES, Architecture

    assert set(DEFAULT_LEARNING_RATES) == set(EXAMPLES) == set(get_args(Architecture))
    assert StaticConfig(architecture="cbow").lr == 0.05 and StaticConfig(learning_rate=0.1).lr == 0.1


def test_static_errors(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", make_documents(2, 3))
    with pytest.raises(ValueError, match="min_count=1000"):
        pretrain_static(corpus, tmp_path / "a", StaticConfig(min_count=1000, show_progress=False))
    lonely = tmp_path / "lonely.txt"
    lonely.write_text("one\n\ntwo\n\none\n")
    with pytest.raises(ValueError, match="no \\(word, context\\) pair"):
        pretrain_static(lonely, tmp_path / "b", StaticConfig(min_count=1, show_progress=False))
    with pytest.raises(ValueError, match="architecture='glove'"):
        StaticConfig(architecture="glove")
    (tmp_path / "a" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        pretrain_static(corpus, tmp_path / "a", StaticConfig(min_count=1, show_progress=False))
    assert Vocabulary.build([["a", "b", "a"]], 1, 1).words == ["a"]
