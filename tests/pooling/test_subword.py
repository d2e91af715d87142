import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from contextembed.pooling import SUBWORD_POOLINGS, pool_subwords, pool_subwords_numpy, subword_output_width


def _reference(pieces, counts, method):
    """Plain loops over words."""
    out, start = [], 0
    for count in counts:
        own = pieces[:, start : start + count]
        start += count
        out.append(
            {
                "first": own[:, 0],
                "last": own[:, -1],
                "mean": own.mean(axis=1),
                "max": own.max(axis=1),
                "first_last": np.concatenate([own[:, 0], own[:, -1]], axis=-1),
            }[method]
        )
    width = subword_output_width(pieces.shape[2], method)
    return np.stack(out, axis=1) if out else np.zeros((pieces.shape[0], 0, width))


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(1, 5), max_size=12), method=st.sampled_from(SUBWORD_POOLINGS))
def test_pooling_matches_loops(counts, method):
    rng = np.random.default_rng(len(counts))
    pieces = rng.normal(size=(3, sum(counts), 4)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    want = _reference(pieces, counts, method)
    got_np = pool_subwords_numpy(pieces, offsets, method)
    got_torch = pool_subwords(torch.from_numpy(pieces), torch.from_numpy(offsets), method).numpy()
    assert got_np.shape == want.shape == got_torch.shape == (3, len(counts), subword_output_width(4, method))
    assert np.abs(got_np - want).max(initial=0) < 1e-6
    assert np.abs(got_torch - want).max(initial=0) < 1e-6


def test_unknown_pooling():
    with pytest.raises(ValueError, match="subword_pooling='avg' is not one of"):
        pool_subwords_numpy(np.zeros((1, 1, 1)), np.array([0, 1]), "avg")
