"""The mix-learning probe finds the informative layer and uses its window correctly."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed.sklearn._probe import ProbeSettings, learn_mix
from contextembed.sklearn._tagger_features import window_index


def _layers(n_rows: int, informative: int, signal: np.ndarray, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(3, n_rows, 4)).astype(np.float32)
    hidden[informative, :, 0] = 3.0 * signal  # only this layer carries the label
    return hidden


@pytest.mark.slow
def test_probe_puts_most_weight_on_the_informative_layer():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, size=1200)
    hidden = _layers(1200, informative=2, signal=np.where(labels == 1, 1.0, -1.0))
    groups = np.arange(1200) // 10
    result = learn_mix(hidden, labels, groups, settings=ProbeSettings(max_epochs=15))
    weights = np.exp(result.weights) / np.exp(result.weights).sum()
    assert int(np.argmax(weights)) == 2
    assert weights[2] > 0.5
    assert 1 <= result.epochs <= 15


@pytest.mark.slow
def test_window_lets_the_probe_read_the_previous_word():
    # the label of a token is the sign of its left neighbour's feature: learnable only with a window
    rng = np.random.default_rng(2)
    lengths = [8] * 150
    n = sum(lengths)
    signal = rng.choice([-1.0, 1.0], size=n)
    index = window_index(lengths, 1)
    left = index[:, 0]
    labels = np.where(left >= 0, (signal[np.maximum(left, 0)] > 0).astype(int), 2)
    hidden = _layers(n, informative=0, signal=signal)
    groups = np.repeat(np.arange(len(lengths)), lengths)
    settings = ProbeSettings(max_epochs=15)
    alone = learn_mix(hidden, labels, groups, settings=settings)
    windowed = learn_mix(hidden, labels, groups, window=index, settings=settings)
    assert windowed.best_loss < 0.5 * alone.best_loss


@pytest.mark.slow
def test_extra_features_are_used():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, size=600)
    hidden = rng.normal(size=(2, 600, 4)).astype(np.float32)  # no signal in the layers
    extra = labels[:, None].astype(np.float32)
    groups = np.arange(600)
    settings = ProbeSettings(max_epochs=15)
    without = learn_mix(hidden, labels, groups, settings=settings)
    with_extra = learn_mix(hidden, labels, groups, extra=extra, settings=settings)
    assert with_extra.best_loss < 0.5 * without.best_loss


def test_probe_is_deterministic():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, size=300)
    hidden = rng.normal(size=(2, 300, 4)).astype(np.float32)
    groups = np.arange(300)
    first = learn_mix(hidden, labels, groups, settings=ProbeSettings(max_epochs=3))
    second = learn_mix(hidden, labels, groups, settings=ProbeSettings(max_epochs=3))
    np.testing.assert_array_equal(first.weights, second.weights)
    assert first.gamma == second.gamma
