"""The estimators' ``dtype``: float32 features exactly as before, float16 the same features rounded
once; a bad value is an error naming ``dtype``; the option survives clone and pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone

from contextembed.sklearn import TextEmbedder, TextPairEmbedder, TokenEmbedder

TEXTS = ["EU rejects German call", "Peter Blackburn", "", "The European Commission said on Thursday"]
PAIRS = [("EU rejects German call", "Peter Blackburn"), ("", "The European Commission said")]


def _fitted(kind: str, bert: str, sentences, **options):
    """A fitted estimator of ``kind`` and the input it transforms."""
    if kind == "token":
        return TokenEmbedder(bert, cache=None, **options).fit(sentences), sentences
    if kind == "text":
        return TextEmbedder(bert, cache=None, **options).fit(TEXTS), TEXTS
    return TextPairEmbedder(bert, cache=None, **options).fit(PAIRS), PAIRS


@pytest.mark.parametrize("kind", ["token", "text", "pair"])
def test_float16_features_are_the_float32_features_rounded(bert, sentences, kind):
    full, X = _fitted(kind, bert, sentences)
    default = full.transform(X)
    explicit = _fitted(kind, bert, sentences, dtype="float32")[0].transform(X)
    half_estimator = _fitted(kind, bert, sentences, dtype="float16")[0]
    half = half_estimator.transform(X)
    assert default.dtype == explicit.dtype == np.float32 and np.array_equal(default, explicit)
    assert half.dtype == np.float16 and half.shape == default.shape
    assert np.array_equal(half, default.astype(np.float16))
    np.testing.assert_allclose(half.astype(np.float32), default, rtol=1e-3, atol=1e-4)
    assert half_estimator.fit_transform(X).dtype == np.float16
    assert half_estimator.transform(X[:0]).dtype == np.float16  # no rows: the dtype still holds


def test_token_rows_per_sentence_take_the_dtype(bert, sentences):
    embedder = TokenEmbedder(bert, cache=None, dtype="float16").fit(sentences)
    rows = embedder.transform_sentences(sentences)
    assert all(r.dtype == np.float16 for r in rows)
    assert embedder.transform_layers(sentences).dtype == np.float32  # the layers a tagger mixes itself


@pytest.mark.parametrize("cls", [TextEmbedder, TokenEmbedder, TextPairEmbedder], ids=lambda c: c.__name__)
@pytest.mark.parametrize("bad", ["float64", "half", np.float16, None, 16])
def test_a_bad_dtype_is_refused_naming_it(bert, sentences, cls, bad):
    X = {TokenEmbedder: sentences, TextEmbedder: TEXTS, TextPairEmbedder: PAIRS}[cls]
    with pytest.raises(ValueError, match=r"dtype=.* is not one of 'float32', 'float16'"):
        cls(bert, dtype=bad).fit(X)
    fitted = cls(bert).fit(X).set_params(dtype=bad)  # changed after fit: refused where features are returned
    with pytest.raises(ValueError, match=r"dtype=.* is not one of 'float32', 'float16'"):
        fitted.transform(X)


def test_a_feature_beyond_the_float16_range_is_an_error_not_an_infinity(bert, sentences, monkeypatch):
    embedder = TokenEmbedder(bert, cache=None, dtype="float16").fit(sentences)
    combine = type(embedder)._combine_rows

    def huge_second_row(self, hidden):
        features = combine(self, hidden)
        features[1, 3] = 1e6  # finite in float32, beyond float16's 65504
        return features

    monkeypatch.setattr(type(embedder), "_combine_rows", huge_second_row)
    with pytest.raises(ValueError, match=r"row 1 of the features exceeds the float16 range .*1e\+06.*dtype='float32'"):
        embedder.transform(sentences)
    assert embedder.set_params(dtype="float32").transform(sentences)[1, 3] == np.float32(1e6)


def test_dtype_survives_clone_and_pickling(bert):
    embedder = TextEmbedder(bert, dtype="float16").fit(TEXTS)
    assert embedder.get_params()["dtype"] == "float16" and clone(embedder).dtype == "float16"
    restored = pickle.loads(pickle.dumps(embedder))
    assert restored.dtype == "float16" and np.array_equal(restored.transform(TEXTS), embedder.transform(TEXTS))
    state = embedder.__getstate__()
    del state["dtype"]  # pickled before dtype existed
    old = TextEmbedder.__new__(TextEmbedder)
    old.__setstate__(state)
    assert old.dtype == "float32" and old.transform(TEXTS).dtype == np.float32
