import numpy as np
import pytest
import torch

from contextembed.pooling import pool_text, pool_text_numpy


def test_masked_mean_and_max_match_numpy():
    rng = np.random.default_rng(0)
    lengths = [3, 0, 5, 1]
    words = rng.normal(size=(4, 5, 6)).astype(np.float32)
    mask = np.arange(5)[None, :] < np.array(lengths)[:, None]
    words[~mask] = 1e6  # padding must never leak
    for method in ("mean", "max"):
        got = pool_text(torch.from_numpy(words), torch.from_numpy(mask), method).numpy()
        for i, n in enumerate(lengths):
            want = pool_text_numpy(words[i, :n], method)
            assert np.abs(got[i] - want).max() < 1e-5
        assert np.all(got[1] == 0) and np.isfinite(got).all()


def test_cls_and_errors():
    cls = torch.randn(2, 4)
    assert torch.equal(pool_text(torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool), "cls", cls), cls)
    with pytest.raises(ValueError, match="needs the \\[CLS\\]"):
        pool_text_numpy(np.zeros((2, 4)), "cls")
    with pytest.raises(ValueError, match="text_pooling='sum' is not one of"):
        pool_text_numpy(np.zeros((2, 4)), "sum")


def test_piece_mean_weighs_each_word_by_its_pieces():
    rng = np.random.default_rng(1)
    words = rng.normal(size=(2, 4, 3)).astype(np.float32)
    mask = torch.tensor([[True, True, True, False], [False, False, False, False]])
    pieces = torch.tensor([[1, 3, 2, 7], [1, 1, 1, 1]])
    got = pool_text(torch.from_numpy(words), mask, "piece_mean", pieces=pieces).numpy()
    want = (words[0, :3] * np.array([1, 3, 2])[:, None]).sum(0) / 6
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    assert np.array_equal(got[1], np.zeros(3))  # no word: zeros
    np.testing.assert_allclose(pool_text_numpy(words[0, :3], "piece_mean", pieces=np.array([1, 3, 2])), want, rtol=1e-6)
    with pytest.raises(ValueError, match="needs each word's number of pieces"):
        pool_text_numpy(words[0], "piece_mean")


@pytest.mark.parametrize("method", ["mean", "max", "piece_mean", "cls"])
def test_numpy_pools_several_rows_in_one_call_as_one_by_one(method):
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(3, 5, 4)).astype(np.float32)
    cls = rng.normal(size=(3, 4)).astype(np.float32)
    pieces = np.array([1, 2, 1, 3, 1])
    together = pool_text_numpy(layers, method, cls=cls, pieces=pieces)
    assert together.shape == (3, 4)
    for row in range(3):
        np.testing.assert_allclose(together[row], pool_text_numpy(layers[row], method, cls=cls[row], pieces=pieces),
                                   rtol=1e-6)
    np.testing.assert_array_equal(pool_text_numpy(np.zeros((3, 0, 4), np.float32), method, cls=cls,
                                                  pieces=np.zeros(0, np.int64)), np.zeros((3, 4)))


def test_the_default_text_vector_is_text_embedders_defaults():
    """TEXT_DEFAULTS, which the CLI, FeatureExtractor(level="text") and spaCy's doc.vector use, are
    TextEmbedder()'s parameters: one default text vector everywhere."""
    from dataclasses import asdict

    from contextembed.pooling import TEXT_DEFAULTS
    from contextembed.sklearn import TextEmbedder

    params = TextEmbedder().get_params()
    assert {name: params[name] for name in asdict(TEXT_DEFAULTS)} == asdict(TEXT_DEFAULTS)
    assert asdict(TEXT_DEFAULTS) == {"layers": "all", "combine": "scalar_mix", "subword_pooling": "mean",
                                     "text_pooling": "piece_mean", "normalize": True, "tokenizer": "auto"}
