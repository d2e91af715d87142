"""Word-shape flags and context windows against plain-loop references."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed.sklearn._tagger_features import SHAPE_NAMES, context_window, shape_features, window_index, window_names


def test_shape_flags_of_known_words():
    rows = shape_features([["Paris", "NATO", "iPhone", "1996", "-", "well-known", "U.S.", "dog"]])
    flags = {name: rows[:, i].tolist() for i, name in enumerate(SHAPE_NAMES)}
    assert flags["init_cap"] == [1, 1, 0, 0, 0, 0, 1, 0]
    assert flags["all_caps"] == [0, 1, 0, 0, 0, 0, 1, 0]
    assert flags["all_lower"] == [0, 0, 0, 0, 0, 1, 0, 1]
    assert flags["mixed_case"] == [0, 0, 1, 0, 0, 0, 0, 0]
    assert flags["all_digits"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert flags["is_punct"] == [0, 0, 0, 0, 1, 0, 0, 0]
    assert flags["has_hyphen"] == [0, 0, 0, 0, 1, 1, 0, 0]
    assert flags["has_period"] == [0, 0, 0, 0, 0, 0, 1, 0]
    assert flags["first_word"] == [1, 0, 0, 0, 0, 0, 0, 0]
    assert rows.dtype == np.float32


def test_shape_features_of_nothing_has_the_right_width():
    assert shape_features([]).shape == (0, len(SHAPE_NAMES))
    assert shape_features([[]]).shape == (0, len(SHAPE_NAMES))


def _loop_window(features, lengths, window):
    rows = []
    start = 0
    for length in lengths:
        for i in range(length):
            row = []
            for shift in range(-window, window + 1):
                j = i + shift
                row.append(features[start + j] if 0 <= j < length else np.zeros(features.shape[1]))
            rows.append(np.concatenate(row))
        start += length
    return np.asarray(rows, dtype=features.dtype).reshape(sum(lengths), -1)


@pytest.mark.parametrize("window", [0, 1, 2])
@pytest.mark.parametrize("lengths", [[3, 1, 4], [1], [2, 0, 5]])
def test_context_window_matches_loop(window, lengths):
    features = np.random.default_rng(1).normal(size=(sum(lengths), 3)).astype(np.float32)
    got = context_window(features, lengths, window)
    np.testing.assert_array_equal(got, _loop_window(features, lengths, window))


def test_window_index_marks_edges():
    index = window_index([2, 1], 1)
    np.testing.assert_array_equal(index, [[-1, 0, 1], [0, 1, -1], [-1, 2, -1]])


def test_context_window_rejects_wrong_lengths():
    with pytest.raises(ValueError, match="lengths sum to 3 words but features have 4 rows"):
        context_window(np.zeros((4, 2)), [1, 2], 1)
    with pytest.raises(ValueError, match="window must be >= 0"):
        context_window(np.zeros((3, 2)), [1, 2], -1)


def test_window_names():
    assert window_names(["a", "b"], 1) == ["w-1:a", "w-1:b", "w0:a", "w0:b", "w+1:a", "w+1:b"]
    assert window_names(["a"], 0) == ["a"]
