"""Text-data versions of the scikit-learn checks that can only run on numeric arrays upstream."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from contextembed.sklearn import SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder


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


@pytest.mark.parametrize("make, X, change", [
    (lambda bert: TokenEmbedder(bert, combine="concat"), "sentences", {"subword_pooling": "first_last"}),
    (lambda bert: TextEmbedder(bert, combine="concat", subword_pooling="mean", text_pooling="mean"), "texts",
     {"subword_pooling": "first_last"}),
    (lambda bert: TextEmbedder(bert, combine="concat"), "texts", {"text_pooling": "cls", "subword_pooling": "first"}),
    (lambda bert: TextEmbedder(bert, combine="concat"), "texts", {"normalize": False}),
    (lambda bert: TextPairEmbedder(bert, combine="concat"), "pairs", {"pair_features": "cls"}),
    (lambda bert: TextPairEmbedder(bert, combine="concat"), "pairs", {"subword_pooling": "first_last",
                                                                       "text_pooling": "max"}),
], ids=["token-subword", "text-subword", "text-pooling", "text-normalize", "pair-features", "pair-pooling"])
def test_set_params_after_fit_takes_effect_at_the_next_fit(bert, sentences, make, X, change):
    """transform read the new parameters: 64 columns against 32 feature names (TokenEmbedder), "Output
    array is the wrong shape" (TextEmbedder)."""
    inputs = {"sentences": sentences, "texts": [" ".join(s) for s in sentences],
              "pairs": [(" ".join(a[:4]), " ".join(b[:4])) for a, b in zip(sentences, sentences[1:])]}[X]
    estimator = make(bert).fit(inputs)
    before = estimator.transform(inputs)
    estimator.set_params(**change)
    after = estimator.transform(inputs)
    np.testing.assert_array_equal(after, before)
    assert after.shape[1] == len(estimator.get_feature_names_out())
    refitted = estimator.fit(inputs).transform(inputs)  # the next fit uses them
    assert refitted.shape[1] == len(estimator.get_feature_names_out()) and not np.array_equal(refitted, before)


def test_a_tagger_window_set_after_fit_takes_effect_at_the_next_fit(static_path, sentences, tags):
    tagger = SequenceTagger(TokenEmbedder(static_path), window=1).fit(sentences, tags)
    before, width = tagger.predict(sentences), tagger.transform_features(sentences).shape[1]
    tagger.set_params(window=2)
    assert tagger.predict(sentences) == before
    assert tagger.transform_features(sentences).shape[1] == width == len(tagger.feature_names())
    assert tagger.fit(sentences, tags).transform_features(sentences).shape[1] == width // 3 * 5
