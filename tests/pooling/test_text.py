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
