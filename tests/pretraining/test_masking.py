from __future__ import annotations

import numpy as np
import pytest
import torch

from contextembed.pretraining._masking import IGNORE_INDEX, MaskingOptions, mask_tokens

MASK = 4
RANDOM_IDS = torch.arange(10, 1010)


def _batch(rows=200, cols=600, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(10, 1010, (rows, cols), generator=generator)
    maskable = torch.rand(rows, cols, generator=generator) > 0.1
    ids[~maskable] = 2  # special / padding positions
    return ids, maskable


def test_masking_statistics_over_100k_tokens():
    ids, maskable = _batch()
    assert int(maskable.sum()) >= 100_000
    inputs, labels = mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS,
                                 generator=torch.Generator().manual_seed(1))
    ids, maskable, inputs, labels = (t.numpy() for t in (ids, maskable, inputs, labels))
    selected = labels != IGNORE_INDEX
    # plain-NumPy bookkeeping of what happened to every selected token
    as_mask = selected & (inputs == MASK)
    kept = selected & (inputs == ids)
    replaced = selected & ~as_mask & ~kept
    n = selected.sum()
    assert abs(n / maskable.sum() - 0.15) < 0.005
    assert abs(as_mask.sum() / n - 0.80) < 0.01
    # a random replacement equals the original with probability 1/1000; it then counts as kept
    assert abs(replaced.sum() / n - 0.10) < 0.01
    assert abs(kept.sum() / n - 0.10) < 0.01
    # never at special positions, labels are the originals, untouched tokens unchanged
    assert not (selected & ~maskable).any()
    np.testing.assert_array_equal(labels[selected], ids[selected])
    np.testing.assert_array_equal(inputs[~selected], ids[~selected])
    assert np.isin(inputs[replaced], RANDOM_IDS.numpy()).all()


def test_masking_is_reproducible_and_dynamic():
    ids, maskable = _batch(20, 50)
    first = mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS, generator=torch.Generator().manual_seed(3))
    again = mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS, generator=torch.Generator().manual_seed(3))
    other = mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS, generator=torch.Generator().manual_seed(4))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[1], other[1])


def test_custom_probabilities_and_bad_options():
    ids, maskable = _batch(100, 500)
    options = MaskingOptions(mask_probability=0.3, replace_with_mask=1.0, replace_with_random=0.0)
    inputs, labels = mask_tokens(ids, maskable, mask_id=MASK, random_ids=RANDOM_IDS,
                                 generator=torch.Generator().manual_seed(0), options=options)
    selected = labels != IGNORE_INDEX
    assert abs(float(selected.sum() / maskable.sum()) - 0.3) < 0.01
    assert bool((inputs[selected] == MASK).all())
    with pytest.raises(ValueError, match="mask_probability"):
        MaskingOptions(mask_probability=0.0)
    with pytest.raises(ValueError, match="sum to at most 1"):
        MaskingOptions(replace_with_mask=0.9, replace_with_random=0.2)
    with pytest.raises(ValueError, match="differ in shape"):
        mask_tokens(ids, maskable[:, :3], mask_id=MASK, random_ids=RANDOM_IDS)
    with pytest.raises(ValueError, match="random_ids is empty"):
        mask_tokens(ids, maskable, mask_id=MASK, random_ids=torch.tensor([], dtype=torch.long))
