"""Texts and pair sides pooled where the model ran (``iter_encode_text_layers``,
``iter_encode_pair_layers``) against the host's pooling of the same pieces (``Encoder``'s plain
path: :meth:`PieceEncoding.text_layers` of ``iter_encode_pieces`` / ``iter_encode_pair_pieces``):
equal bit for bit in fp32 on the CPU, for every subword and text pooling, windows and long pairs;
the batched pooling a GPU runs against the text-by-text one."""

import warnings

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.encoders.transformer import _jobs, _pooled
from contextembed.encoders._base import Encoder
from contextembed.pooling import SUBWORD_POOLINGS, pool_pieces_to_text

SENTENCES = [
    ["the", "quick", "unaffable", "fox"],
    [],
    ["New", "York", "unaffable", "pretrained"] * 12,  # longer than the tiny models' 40 positions: windows
    ["ça", "coûte", "3,5", "€", "naïve", "東京"],
    ["Peter", "Blackburn"],
]
#: short pairs in one input each, an empty side, and long pairs cut into windows by the pair policy
PAIRS = [
    (SENTENCES[0], SENTENCES[4]),
    (SENTENCES[1], SENTENCES[3]),
    (SENTENCES[3], []),
    (SENTENCES[2], SENTENCES[0]),
    (SENTENCES[2], SENTENCES[2]),
]
TEXT_POOLINGS = ["mean", "max"]


@pytest.fixture(scope="module")
def static_vectors_path(tmp_path_factory):
    from contextembed.encoders import write_word2vec

    words = ["the", "fox", "quick"]
    path = tmp_path_factory.mktemp("static") / "vectors.txt"
    write_word2vec(path, words, np.random.default_rng(0).normal(size=(len(words), 6)).astype(np.float32))
    return path


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request, tiny_bert_dir, tiny_roberta_dir):
    path = tiny_bert_dir if request.param == "bert" else tiny_roberta_dir
    return load_encoder(str(path), device="cpu", precision="fp32")


def _assert_identical(got: list, expected: list, shape: tuple) -> None:
    assert len(got) == len(expected)
    for vectors, reference in zip(got, expected):
        assert vectors.shape == reference.shape == shape and vectors.dtype == np.float32
        assert np.array_equal(vectors, reference)


@pytest.mark.parametrize("text_pooling", TEXT_POOLINGS)
@pytest.mark.parametrize("method", SUBWORD_POOLINGS)
def test_texts_pooled_on_the_device_equal_the_pieces_pooled_on_the_host(tiny, method, text_pooling):
    layers = [-1, 0, 1]  # reordered
    got = list(tiny.iter_encode_text_layers(SENTENCES, layers, method, text_pooling))
    expected = [encoding.text_layers(method, text_pooling) for encoding in tiny.iter_encode_pieces(SENTENCES, layers)]
    width = tiny.width * (2 if method == "first_last" else 1)
    _assert_identical(got, expected, (3, width))
    assert not got[1].any() and np.abs(got[0]).max() > 0  # the empty text: zeros; the others filled


def test_the_cls_vector_of_a_text_is_its_first_piece_and_zeros_when_empty(tiny):
    got = list(tiny.iter_encode_text_layers(SENTENCES, "all", "first", "cls"))
    expected = [encoding.cls for encoding in tiny.iter_encode_pieces(SENTENCES)]
    expected[1] = np.zeros_like(expected[1])
    _assert_identical(got, expected, (tiny.n_layers, tiny.width))


@pytest.mark.parametrize("text_pooling", TEXT_POOLINGS + ["cls"])
@pytest.mark.parametrize("method", ["first", "mean", "max", "first_last"])
def test_pair_sides_pooled_on_the_device_equal_the_pieces_pooled_on_the_host(tiny, method, text_pooling):
    if text_pooling == "cls" and method == "first_last":
        pytest.skip("cls takes no subword pooling (refused with first_last: see test_bad_options_are_refused)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long pairs' LongPairWarning
        got = list(tiny.iter_encode_pair_layers(PAIRS, "all", method, text_pooling))
        pieces = list(tiny.iter_encode_pair_pieces(PAIRS))
    if text_pooling == "cls":
        _assert_identical(got, [pair.cls[None] for pair in pieces], (1, tiny.n_layers, tiny.width))
        return
    expected = [np.stack([side.text_layers(method, text_pooling) for side in (pair.first, pair.second)])
                for pair in pieces]
    width = tiny.width * (2 if method == "first_last" else 1)
    _assert_identical(got, expected, (2, tiny.n_layers, width))
    assert not got[1][0].any() and not got[2][1].any()  # empty sides: zeros


def test_long_pairs_warn_once_as_their_pieces_do(tiny):
    with pytest.warns(UserWarning, match="sentence pairs hold more than") as caught:
        list(tiny.iter_encode_pair_layers(PAIRS, "all", "first", "mean"))
    assert len(caught) == 1


def test_only_texts_in_several_windows_come_back_to_the_host(tiny, monkeypatch):
    back = []
    original = _pooled._TextPooled.pool_on_host

    def counted(self, pieces, offsets):
        back.append(pieces.shape[1])
        return original(self, pieces, offsets)

    monkeypatch.setattr(_pooled._TextPooled, "pool_on_host", counted)
    list(tiny.iter_encode_text_layers(SENTENCES, "all", "mean", "mean"))
    assert len(back) == 1 and back[0] > tiny.window  # the one long sentence
    back.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(tiny.iter_encode_pair_layers(PAIRS[:3], "all", "mean", "mean"))
    assert back == []  # pairs that fit: both sides pooled where they ran


def test_the_host_path_of_static_vectors_pools_the_same_way(static_vectors_path):
    encoder = load_encoder(str(static_vectors_path))
    sentences = [["the", "fox"], [], ["fox"]]
    got = list(encoder.iter_encode_text_layers(sentences, "all", "first", "max"))
    expected = [encoding.text_layers("first", "max") for encoding in encoder.iter_encode_pieces(sentences)]
    _assert_identical(got, expected, (1, encoder.width))
    pairs = list(encoder.iter_encode_pair_layers([(sentences[0], sentences[2])], "all", "first", "max"))
    assert len(pairs) == 1
    np.testing.assert_array_equal(pairs[0], np.stack([expected[0], expected[2]]))  # each side on its own


def test_bad_options_are_refused_at_the_call(tiny, static_vectors_path):
    with pytest.raises(ValueError, match="encode_piece_means"):
        tiny.iter_encode_text_layers(SENTENCES, "all", "mean", "piece_mean")
    with pytest.raises(ValueError, match="text_pooling"):
        tiny.iter_encode_pair_layers(PAIRS, "all", "first", "median")
    with pytest.raises(ValueError, match="subword_pooling"):
        tiny.iter_encode_text_layers(SENTENCES, "all", "middle", "mean")
    with pytest.raises(ValueError, match="first_last"):
        tiny.iter_encode_text_layers(SENTENCES, "all", "first_last", "cls")
    with pytest.raises(ValueError, match="leading special piece"):
        load_encoder(str(static_vectors_path)).iter_encode_text_layers([["fox"]], "all", "first", "cls")


@pytest.mark.parametrize("text_pooling", TEXT_POOLINGS)
@pytest.mark.parametrize("method", SUBWORD_POOLINGS)
def test_the_batched_pooling_of_a_gpu_equals_text_by_text(method, text_pooling):
    """``_pool_texts`` (every text of a batch at once, what a GPU runs) on the CPU, against
    :func:`pool_pieces_to_text` text by text: equal up to the order of the sums."""
    rng = np.random.default_rng(7)
    offsets = []
    for n_words in [0, 1, 5, 12, 3, 0, 40]:
        counts = rng.integers(1, 4, size=n_words)
        offsets.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    pieces = rng.standard_normal((3, sum(int(o[-1]) for o in offsets), 8)).astype(np.float32)
    got = _jobs.pool_texts(torch.from_numpy(pieces), offsets, method, text_pooling).numpy()
    starts = np.cumsum([0] + [int(o[-1]) for o in offsets])
    expected = np.stack([pool_pieces_to_text(pieces[:, start : start + o[-1]], o, method, text_pooling)
                         for start, o in zip(starts, offsets)])
    assert got.shape == expected.shape == (7, 3, 16 if method == "first_last" else 8)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert not got[0].any() and not got[5].any()


def test_the_batched_pooling_takes_a_batch_without_words():
    empty = [np.zeros(1, dtype=np.int64)] * 2
    got = _jobs.pool_texts(torch.zeros(3, 0, 4), empty, "mean", "max")
    assert got.shape == (2, 3, 4) and not got.any()


def test_pool_pieces_to_text_against_a_plain_loop():
    rng = np.random.default_rng(3)
    pieces = rng.standard_normal((2, 6, 5)).astype(np.float32)
    offsets = np.array([0, 1, 4, 6])  # words of 1, 3 and 2 pieces
    words = {"first": [pieces[:, 0], pieces[:, 1], pieces[:, 4]],
             "last": [pieces[:, 0], pieces[:, 3], pieces[:, 5]],
             "mean": [pieces[:, 0], pieces[:, 1:4].mean(axis=1), pieces[:, 4:6].mean(axis=1)],
             "max": [pieces[:, 0], pieces[:, 1:4].max(axis=1), pieces[:, 4:6].max(axis=1)]}
    for method, rows in words.items():
        np.testing.assert_allclose(pool_pieces_to_text(pieces, offsets, method, "mean"), np.mean(rows, axis=0), rtol=1e-6)
        np.testing.assert_array_equal(pool_pieces_to_text(pieces, offsets, method, "max"), np.max(rows, axis=0))
    with pytest.raises(ValueError, match="'mean' or 'max'"):
        pool_pieces_to_text(pieces, offsets, "first", "cls")


def test_pairs_over_several_chunks_come_in_input_order(tiny_bert_dir):
    """Chunks of pairs tokenized a chunk ahead on a producer: every pair in input order, as its pieces."""
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=2)
    pairs = [([f"w{i}", "fox"], ["the", "quick"] * (i % 3)) for i in range(7)]
    got = list(encoder.iter_encode_pair_layers(pairs, "all", "mean", "mean"))
    expected = [np.stack([side.text_layers("mean", "mean") for side in (pair.first, pair.second)])
                for pair in encoder.iter_encode_pair_pieces(pairs)]
    _assert_identical(got, expected, (2, encoder.n_layers, encoder.width))
    for pair, vectors in zip(pairs, got):  # in input order: each pair encoded alone, up to its batch neighbours
        np.testing.assert_allclose(vectors, next(encoder.iter_encode_pair_layers([pair], "all", "mean", "mean")), atol=1e-5)
