"""TextPairEmbedder: pair features from one joint pass, with TextEmbedder's layer options."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline

from contextembed import load_encoder
from contextembed.sklearn import TextPairEmbedder, clear_cache, clear_encoders

PAIRS = [
    ("EU rejects German call", "Germany disagrees with the EU"),
    ("Peter Blackburn met officials", "the quick brown fox"),
    ("New York Times reported behaviour in Washington", "Washington reported"),
    ("contextual embeddings turn encoders into features", "piece by piece"),
] * 3
LABELS = [1, 0, 1, 0] * 3


def _reference(bert, pairs, features, layers):
    """Plain NumPy: the encoder's joint pair encoding, mean over each side's words, mean of layers."""
    from contextembed.tokenizers import regex_tokenize

    encoder = load_encoder(bert, device="cpu", precision="fp32")
    tokenized = [(regex_tokenize(a), regex_tokenize(b)) for a, b in pairs]
    rows = []
    for first, second, cls in encoder.encode_pairs(tokenized, layers=layers):
        if features == "cls":
            rows.append(cls.mean(axis=0))
            continue
        u, v = (side.mean(axis=1).mean(axis=0) if side.shape[1] else np.zeros(side.shape[-1]) for side in (first, second))
        rows.append(np.concatenate([u, v] if features == "segments" else [u, v, np.abs(u - v), u * v]))
    return np.stack(rows)


@pytest.mark.parametrize("features, factor", [("cls", 1), ("segments", 2), ("interactions", 4)])
def test_features_match_a_plain_reference(bert, features, factor):
    embedder = TextPairEmbedder(bert, layers=[-2, -1], combine="mean", pair_features=features,
                                device="cpu", precision="fp32").fit(PAIRS)
    got = embedder.transform(PAIRS)
    assert got.shape == (len(PAIRS), factor * 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(bert, PAIRS, features, [-2, -1]), rtol=1e-5, atol=1e-5)
    assert len(embedder.get_feature_names_out()) == got.shape[1]


def test_inputs_may_be_token_lists_arrays_or_dataframes(bert):
    pandas = pytest.importorskip("pandas")
    embedder = TextPairEmbedder(bert, layers=-1, combine="concat", device="cpu", precision="fp32").fit(PAIRS)
    expected = embedder.transform(PAIRS)
    tokens = [(a.split(), b.split()) for a, b in PAIRS]
    np.testing.assert_allclose(embedder.transform(tokens), expected, atol=1e-6)
    np.testing.assert_allclose(embedder.transform(np.array(PAIRS, dtype=object)), expected, atol=1e-6)
    frame = pandas.DataFrame(PAIRS, columns=["premise", "hypothesis"])
    np.testing.assert_allclose(embedder.transform(frame), expected, atol=1e-6)


def test_scalar_mix_is_learned_through_the_pair_features(bert):
    embedder = TextPairEmbedder(bert, max_epochs=3, device="cpu", precision="fp32").fit(PAIRS, LABELS)
    assert embedder.mix_weights_.shape == (3,) and abs(embedder.mix_weights_.sum() - 1) < 1e-5
    assert not np.allclose(embedder.mix_weights_, 1 / 3)
    unlabelled = TextPairEmbedder(bert, device="cpu", precision="fp32").fit(PAIRS)
    np.testing.assert_allclose(unlabelled.mix_weights_, 1 / 3)


def test_bad_pairs_name_their_index(bert):
    embedder = TextPairEmbedder(bert, layers=-1, device="cpu", precision="fp32").fit(PAIRS)
    for bad, message in [(None, "pair 1 is NoneType"), ("just a text", "pair 1 is str"),
                         (("only one",), "pair 1 is tuple"), (("a", None), "pair 1, side 1 is NoneType"),
                         (("a", 3.5), "pair 1, side 1 is float"), (("a", ["b", 2]), "pair 1, side 1, token 1 is int")]:
        with pytest.raises(TypeError, match=message):
            embedder.transform([PAIRS[0], bad])
    with pytest.raises(ValueError, match="pair 0, side 0 holds '\\\\ud800'"):
        embedder.transform([("a \ud800", "b")])
    with pytest.raises(TypeError, match="two-column array"):
        embedder.transform(np.zeros((3, 3)))


def test_an_empty_side_pools_to_zeros_and_keeps_the_cls_row(bert):
    segments = TextPairEmbedder(bert, layers=-1, combine="concat", pair_features="segments",
                                device="cpu", precision="fp32").fit(PAIRS)
    features = segments.transform([("EU rejects", ""), ("", "")])
    assert np.array_equal(features[0, 32:], np.zeros(32)) and np.abs(features[0, :32]).sum() > 0
    assert np.array_equal(features[1], np.zeros(64))
    cls = TextPairEmbedder(bert, layers=-1, combine="concat", pair_features="cls", device="cpu", precision="fp32").fit(PAIRS)
    assert np.abs(cls.transform([("", "")])).sum() > 0  # the pair's [CLS] row exists even then


def test_options_are_checked(bert, static_path):
    with pytest.raises(ValueError, match="pair_features='both' is not one of 'cls', 'segments', 'interactions'"):
        TextPairEmbedder(bert, pair_features="both").fit(PAIRS)
    with pytest.raises(ValueError, match="text_pooling='cls' does not apply to one side"):
        TextPairEmbedder(bert, text_pooling="cls").fit(PAIRS)
    with pytest.raises(ValueError, match="pair_features='cls' needs an encoder with a leading special piece"):
        TextPairEmbedder(static_path, pair_features="cls").fit(PAIRS)
    static = TextPairEmbedder(static_path, pair_features="segments", layers="all", combine="concat").fit(PAIRS)
    assert static.transform(PAIRS[:2]).shape == (2, 2 * load_encoder(static_path).width)


def test_sklearn_contract_on_pair_data(bert):
    embedder = TextPairEmbedder(bert, max_epochs=2, device="cpu", precision="fp32")
    assert clone(embedder).get_params() == embedder.get_params()
    fitted = clone(embedder).fit(PAIRS, LABELS)
    before = fitted.transform(PAIRS)
    restored = pickle.loads(pickle.dumps(fitted))
    clear_cache(), clear_encoders()
    np.testing.assert_array_equal(restored.transform(PAIRS), before)
    grid = {"textpairembedder__pair_features": ["segments", "interactions"], "textpairembedder__layers": [-1, "all"]}
    search = GridSearchCV(make_pipeline(embedder, LogisticRegression(max_iter=500)), grid, cv=KFold(2)).fit(PAIRS, LABELS)
    assert len(search.cv_results_["params"]) == 4 and 0.0 <= search.score(PAIRS, LABELS) <= 1.0


@pytest.mark.slow
def test_each_pair_is_encoded_once_per_pooling_across_a_grid_search(bert, monkeypatch):
    from contextembed.encoders._registry import EncoderRef, get_encoder

    clear_cache()
    encoder = get_encoder(EncoderRef.fitted(bert, "cpu", "fp32", None))
    seen = []
    original = encoder.iter_encode_pair_layers

    def counted(pairs, layers, subword_pooling, text_pooling, **kwargs):
        seen.extend((pair, text_pooling) for pair in pairs)
        return original(pairs, layers, subword_pooling, text_pooling, **kwargs)

    monkeypatch.setattr(encoder, "iter_encode_pair_layers", counted)
    grid = {"textpairembedder__pair_features": ["cls", "segments", "interactions"], "textpairembedder__combine": ["mean", "concat"]}
    pipeline = make_pipeline(TextPairEmbedder(bert, device="cpu", precision="fp32"), LogisticRegression(max_iter=500))
    GridSearchCV(pipeline, grid, cv=KFold(2)).fit(PAIRS, LABELS)
    # the pair's first piece ("cls") once, its sides once for "segments" and "interactions" together
    keys = [(tuple(map(tuple, pair)), pooling) for pair, pooling in seen]
    assert len(keys) == len(set(keys)) == 2 * len(set(PAIRS))
    assert sorted(pooling for _, pooling in keys) == ["cls"] * len(set(PAIRS)) + ["mean"] * len(set(PAIRS))


def test_piece_mean_is_refused_for_pair_sides(bert):
    with pytest.raises(ValueError, match="text_pooling='piece_mean' is not available for the sides of a pair"):
        TextPairEmbedder(bert, text_pooling="piece_mean").fit([("a b", "c")])


@pytest.mark.parametrize("labels, error, message", [
    ([1, 0, None, 0] * 3, ValueError, "y\\[2\\] is None, a missing class label"),
    ([1.0, 0.0, float("nan"), 0.0] * 3, ValueError, "y\\[2\\] is nan, a missing class label"),
    (["a", "b", 1, "b"] * 3, TypeError, "y mixes kinds of class labels"),
])
def test_class_labels_are_checked_with_their_index(bert, labels, error, message):
    import pandas as pd

    for y in (labels, pd.Series(labels, dtype=object)):
        with pytest.raises(error, match=message):
            TextPairEmbedder(bert, device="cpu", precision="fp32").fit(PAIRS, y)


def test_y_is_checked_with_fixed_weights_too(bert):
    pairs = [("EU rejects", "German call"), ("Peter", "Blackburn")]
    embedder = TextPairEmbedder(bert, combine="mean", device="cpu")
    with pytest.raises(ValueError, match=r"y must hold one class label per pair: 2 pairs, got y of shape \(3,\)"):
        embedder.fit(pairs, [0, 1, 0])
    with pytest.raises(ValueError, match=r"y\[1\] is nan, a missing class label; give every pair a label"):
        embedder.fit(pairs, [0.0, float("nan")])


def test_x_that_is_not_pairs_is_named(bert):
    import pandas as pd

    fitted = TextPairEmbedder(bert, layers=-1, device="cpu", precision="fp32").fit(PAIRS)
    for bad, message in [(None, "X is None; expected a sequence of"), (3, "X is int \\('3'\\); expected a sequence of"),
                         (pd.DataFrame({"a": ["x"], "b": ["y"], "c": ["z"]}), r"X is a DataFrame with 3 columns \('a', 'b', 'c'\)")]:
        for call in (fitted.transform, TextPairEmbedder(bert, device="cpu", precision="fp32").fit):
            with pytest.raises(TypeError, match=message):
                call(bad)


@pytest.mark.parametrize("pair_features, text_pooling, subword_pooling",
                         [("interactions", "mean", "first"), ("segments", "max", "mean"), ("cls", "mean", "first")])
def test_pair_features_are_the_pair_pieces_pooled_on_the_host_bit_for_bit(bert, pair_features, text_pooling, subword_pooling):
    """Sides pooled where the encoder ran against today's host pooling of every layer's pieces of
    the joint pass (long pairs included: their pieces come back to be pooled)."""
    import warnings

    from contextembed.pooling import pool_subwords_numpy, pool_text_numpy
    from contextembed.tokenizers import regex_tokenize

    pairs = [(regex_tokenize(a), regex_tokenize(b)) for a, b in PAIRS] + [(["unaffable"] * 30, ["EU", "lamb"] * 9)]
    layers = [-1, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long pair's LongPairWarning
        got = TextPairEmbedder(bert, layers=layers, combine="concat", pair_features=pair_features, text_pooling=text_pooling,
                               subword_pooling=subword_pooling, device="cpu", precision="fp32", cache=None).fit(pairs).transform(pairs)
        encoded = list(load_encoder(bert, device="cpu", precision="fp32").iter_encode_pair_pieces(pairs))
    index = [len(encoded[0].cls) - 1, 0]
    rows = []
    for pair in encoded:
        if pair_features == "cls":
            rows.append(pair.cls[index].reshape(-1))
            continue
        u, v = (pool_text_numpy(pool_subwords_numpy(side.hidden[index], side.word_offsets, subword_pooling), text_pooling).reshape(-1)
                for side in (pair.first, pair.second))
        rows.append(np.concatenate([u, v] if pair_features == "segments" else [u, v, np.abs(u - v), u * v]))
    np.testing.assert_array_equal(got, np.stack(rows))


def test_feature_names_say_which_side_and_layer_each_column_comes_from(bert):
    embedder = TextPairEmbedder(bert, layers=[0, -1], combine="concat", pair_features="interactions",
                                device="cpu", precision="fp32")
    got = embedder.fit_transform(PAIRS)
    names = list(embedder.get_feature_names_out())
    assert len(names) == got.shape[1] == len(set(names))

    def part(name: str) -> np.ndarray:
        return got[:, [i for i, n in enumerate(names) if n.startswith(f"textpairembedder_{name}_layer")]]

    a, b = part("a"), part("b")
    assert a.shape[1] == b.shape[1] == got.shape[1] // 4
    np.testing.assert_array_equal(part("abs_diff"), np.abs(a - b))
    np.testing.assert_array_equal(part("product"), a * b)
    assert names[0] == "textpairembedder_a_layer0_0"
    cls = TextPairEmbedder(bert, layers=-1, pair_features="cls", device="cpu", precision="fp32").fit(PAIRS)
    assert cls.get_feature_names_out()[0] == f"textpairembedder_layer{cls.n_layers_ - 1}_0"
