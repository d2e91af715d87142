"""Text-data versions of the scikit-learn checks that can only run on numeric arrays upstream."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from contextembed.sklearn import SequenceTagger, TextEmbedder, TokenEmbedder


@pytest.fixture(params=["text", "token", "tagger"])
def case(request, bert, sentences, tags):
    texts = [" ".join(s) for s in sentences]
    labels = [0, 1, 0, 1, 0, 1]
    cases = {
        "text": (TextEmbedder(bert, max_epochs=2), texts, labels, "transform"),
        "token": (TokenEmbedder(bert, max_epochs=2), sentences, tags, "transform"),
        "tagger": (SequenceTagger(TokenEmbedder(bert, max_epochs=2)), sentences, tags, "predict"),
    }
    return cases[request.param]


def _out(estimator, method, X):
    result = getattr(estimator, method)(X)
    return [list(r) for r in result] if method == "predict" else np.asarray(result)


def _assert_same(a, b):
    if isinstance(a, list):
        assert a == b
    else:
        np.testing.assert_array_equal(a, b)


def test_fit_returns_self_and_keeps_params(case):
    estimator, X, y, _ = case
    params = copy.deepcopy(estimator.get_params(deep=False))
    assert estimator.fit(X, y) is estimator
    for name, value in params.items():
        if name != "embedder":
            assert estimator.get_params(deep=False)[name] == value


def test_init_sets_no_fitted_state_and_methods_need_fit(case):
    estimator, X, y, method = case
    assert not [k for k in vars(estimator) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        getattr(estimator, method)(X)


def test_fit_is_idempotent_and_clone_matches(case):
    estimator, X, y, method = case
    first = _out(clone(estimator).fit(X, y), method, X)
    second = _out(estimator.fit(X, y).fit(X, y), method, X)
    _assert_same(first, second)


def test_subset_and_order_invariance(case):
    estimator, X, y, method = case
    estimator.fit(X, y)
    whole = _out(estimator, method, X)
    order = [3, 0, 5, 1, 4, 2]
    shuffled = _out(estimator, method, [X[i] for i in order])
    if method == "transform" and isinstance(X[0], list):  # token rows: compare per sentence
        parts = estimator.transform_sentences(X)
        for i, part in zip(order, estimator.transform_sentences([X[i] for i in order])):
            np.testing.assert_array_equal(part, parts[i])
    else:
        _assert_same([whole[i] for i in order] if isinstance(whole, list) else whole[order], shuffled)
    subset = _out(estimator, method, X[:2])
    if not (method == "transform" and isinstance(X[0], list)):
        _assert_same(whole[:2], subset)


def test_transform_does_not_change_the_estimator(case):
    estimator, X, y, method = case
    estimator.fit(X, y)
    before = {k: copy.deepcopy(v) for k, v in vars(estimator).items() if isinstance(v, (np.ndarray, float, int, str, tuple))}
    _out(estimator, method, X)
    after = {k: v for k, v in vars(estimator).items() if k in before}
    for key in before:
        _assert_same(before[key], after[key]) if isinstance(before[key], np.ndarray) else None
        assert type(before[key]) is type(after[key])
        if not isinstance(before[key], np.ndarray):
            assert before[key] == after[key]


def test_outputs_are_finite(case):
    estimator, X, y, method = case
    estimator.fit(X, y)
    if method == "transform":
        assert np.isfinite(estimator.transform(X)).all()
    else:
        assert np.isfinite(estimator.transform_features(X)).all()


def test_set_params_and_clone_round_trip(bert):
    tagger = SequenceTagger(TokenEmbedder(bert))
    tagger.set_params(embedder__layers=[-2, -1], embedder__combine="concat", window=2)
    cloned = clone(tagger)
    assert cloned.get_params()["embedder__layers"] == [-2, -1]
    assert cloned.window == 2 and cloned.embedder is not tagger.embedder
