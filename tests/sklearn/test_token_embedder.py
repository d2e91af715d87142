"""TokenEmbedder against a NumPy reference built from the core encoder."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.sklearn import TokenEmbedder
from contextembed.sklearn._checks import token_labels


def _reference(encoder_path, sentences, layers, combine, subword_pooling):
    encoder = load_encoder(encoder_path, device="cpu", precision="fp32")
    per_sentence = encoder.encode(sentences, layers=layers, subword_pooling=subword_pooling)
    # (layers, words, width)
    hidden = np.concatenate(per_sentence, axis=1)
    combines = {
        "concat": lambda h: np.concatenate(list(h), axis=-1),
        "sum": lambda h: h.sum(axis=0),
        "mean": lambda h: h.mean(axis=0),
        "scalar_mix": lambda h: h.mean(axis=0),  # unfitted mix: equal weights, gamma 1
    }
    return combines[combine](hidden)


@pytest.mark.parametrize("combine", ["concat", "sum", "mean", "scalar_mix"])
@pytest.mark.parametrize("subword_pooling", ["first", "mean", "first_last"])
def test_matches_numpy_reference(bert, sentences, combine, subword_pooling):
    layers = [0, -1]
    embedder = TokenEmbedder(
        bert, layers=layers, combine=combine, subword_pooling=subword_pooling, device="cpu", precision="fp32"
    )
    got = embedder.fit(sentences).transform(sentences)
    expected = _reference(bert, sentences, layers, combine, subword_pooling)
    assert got.dtype == np.float32
    assert got.shape == (sum(map(len, sentences)), embedder.get_feature_names_out().shape[0])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layers", [[0, -1], (0, -1), range(0, 3, 2), np.array([0, -1]), np.array([0, 2], dtype=np.int8)],
                         ids=["list", "tuple", "range", "array", "int8-array"])
def test_every_sequence_of_layer_indexes_gives_the_reference(bert, sentences, layers):
    got = TokenEmbedder(bert, layers=layers, combine="concat", device="cpu", precision="fp32").fit_transform(sentences)
    np.testing.assert_allclose(got, _reference(bert, sentences, [0, -1], "concat", "first"), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layers", [(i for i in (0, 1)), {0, 1}, {0: "a", 1: "b"}, iter([0, 1])],
                         ids=["generator", "set", "dict", "iterator"])
def test_one_pass_or_unordered_layers_are_a_type_error_naming_layers(bert, sentences, layers):
    with pytest.raises(TypeError, match=r"layers is a (generator|set|dict|list_iterator) .*expected an int, a sequence"):
        TokenEmbedder(bert, layers=layers).fit(sentences)


def test_a_layer_array_of_another_shape_or_dtype_is_named(bert, sentences):
    with pytest.raises(ValueError, match=r"layers is an array of shape \(1, 2\); expected a 1-D array"):
        TokenEmbedder(bert, layers=np.array([[0, 1]])).fit(sentences)
    with pytest.raises(ValueError, match="layer index 0.0 is not an int"):
        TokenEmbedder(bert, layers=np.array([0.0, 1.0])).fit(sentences)


def test_rows_follow_input_order_and_split_per_sentence(bert, sentences):
    embedder = TokenEmbedder(bert, layers=-1, combine="concat").fit(sentences)
    whole = embedder.transform(sentences)
    parts = embedder.transform_sentences(sentences)
    assert [len(p) for p in parts] == [len(s) for s in sentences]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    # reversing the sentences reverses the blocks, token rows are unchanged
    reversed_parts = embedder.transform_sentences(sentences[::-1])
    for a, b in zip(parts, reversed_parts[::-1]):
        np.testing.assert_array_equal(a, b)


def test_empty_input_gives_empty_array_of_the_right_width(bert, sentences):
    embedder = TokenEmbedder(bert, layers=[-2, -1], combine="concat").fit(sentences)
    width = len(embedder.get_feature_names_out())
    assert embedder.transform([]).shape == (0, width)
    assert embedder.transform([[]]).shape == (0, width)
    mixed = embedder.transform([["EU"], [], ["call"]])
    assert mixed.shape == (2, width)
    assert embedder.transform_sentences([["EU"], []])[1].shape == (0, width)


def test_static_vectors_work_as_encoder(static_path, sentences):
    embedder = TokenEmbedder(static_path).fit(sentences)
    out = embedder.transform(sentences)
    encoder = load_encoder(static_path)
    np.testing.assert_array_equal(out, np.concatenate(encoder.encode(sentences), axis=1)[0])


@pytest.mark.slow
def test_scalar_mix_learns_from_token_labels(bert, sentences, tags):
    fitted = TokenEmbedder(bert, max_epochs=5).fit(sentences, tags)
    assert fitted.mix_weights_.shape == (fitted.n_layers_,)
    assert fitted.mix_weights_.sum() == pytest.approx(1.0, abs=1e-6)
    assert not np.allclose(fitted.mix_weights_, 1 / fitted.n_layers_)
    plain = TokenEmbedder(bert).fit(sentences)
    np.testing.assert_allclose(plain.mix_weights_, 1 / plain.n_layers_)
    assert plain.gamma_ == 1.0
    assert np.isfinite(fitted.transform(sentences)).all()
    # a flat array of one label per token is accepted too
    flat = [t for ts in tags for t in ts]
    np.testing.assert_array_equal(
        TokenEmbedder(bert, max_epochs=5).fit(sentences, flat).mix_weights_, fitted.mix_weights_
    )


def test_no_mix_attributes_without_scalar_mix(bert, sentences):
    fitted = TokenEmbedder(bert, layers=-1, combine="concat").fit(sentences)
    assert not hasattr(fitted, "mix_weights_")


def test_pandas_output(bert, sentences):
    pd = pytest.importorskip("pandas")
    embedder = TokenEmbedder(bert, layers=-1, combine="concat").set_output(transform="pandas")
    frame = embedder.fit(sentences).transform(sentences)
    assert isinstance(frame, pd.DataFrame)
    top = embedder.n_layers_ - 1  # the columns say which layer they come from (issue 54)
    assert list(frame.columns) == [f"tokenembedder_layer{top}_{i}" for i in range(frame.shape[1])]


@pytest.mark.parametrize(
    "bad, error, message",
    [
        ("EU rejects German call", TypeError, "single string"),
        (["EU rejects", "German call"], TypeError, "sentence 0 is a plain string"),
        ([["EU", 3]], TypeError, "sentence 0, word 1 is int"),
        (np.zeros((3, 2)), TypeError, "numeric array"),
        (np.array([["EU", "rejects"], ["Peter", "said"]]), TypeError,
         r"got an array of str of shape \(2, 2\) and dtype <U7; .* \(X.tolist\(\) for a 2-D array of tokens\)"),
    ],
)
def test_bad_input_is_named(bert, bad, error, message):
    embedder = TokenEmbedder(bert)
    with pytest.raises(error, match=message):
        embedder.fit(bad)


def test_fit_on_nothing_is_an_error(bert):
    with pytest.raises(ValueError, match="at least one sentence"):
        TokenEmbedder(bert).fit([])


def test_bad_parameters_are_named_in_fit(bert, sentences):
    with pytest.raises(ValueError, match="combine='median'"):
        TokenEmbedder(bert, combine="median").fit(sentences)
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        TokenEmbedder(bert, layers=7).fit(sentences)
    with pytest.raises(TypeError, match="encoder must be a name or a path"):
        TokenEmbedder(encoder=object()).fit(sentences)


@pytest.mark.parametrize("combine", ["concat", "mean"])
def test_y_is_checked_with_fixed_weights_too(static_path, sentences, tags, combine):
    """y of the wrong length, or with a NaN tag, was accepted when the mix was not learned."""
    embedder = TokenEmbedder(static_path, combine=combine)
    with pytest.raises(ValueError, match="y has 2 entries but X has 6 sentences"):
        embedder.fit(sentences, tags[:2])
    bad = [list(t) for t in tags]
    bad[1][1] = float("nan")
    with pytest.raises(TypeError, match=r"sentence 1, token 1: the label is float \(nan\)"):
        embedder.fit(sentences, bad)
    with pytest.raises(ValueError, match="sentence 3 has 9 tokens but 8 tags"):
        embedder.fit_transform(sentences, tags[:3] + [tags[3][:-1]] + tags[4:])
    assert embedder.fit(sentences, tags).transform(sentences).shape[0] == sum(map(len, sentences))


def test_token_labels_checks_lengths(sentences, tags):
    assert len(token_labels(sentences, tags)) == sum(map(len, sentences))
    bad = [list(t) for t in tags]
    bad[3] = bad[3][:-1]
    with pytest.raises(ValueError, match="sentence 3 has 9 tokens but 8 tags"):
        token_labels(sentences, bad)
    with pytest.raises(ValueError, match="y has 5 entries but X has 6 sentences"):
        token_labels(sentences, tags[:5])


def test_fit_mix_is_the_public_hook_for_mix_learning_with_context(bert, sentences, tags):
    from sklearn.exceptions import NotFittedError

    from contextembed.sklearn._tagger_features import shape_features, window_index

    embedder = TokenEmbedder(bert, max_epochs=2)
    with pytest.raises(NotFittedError):
        embedder.fit_mix(sentences, np.zeros(sum(map(len, sentences)), dtype=int))
    with pytest.raises(NotFittedError):
        embedder.encoder_
    embedder.fit(sentences)  # loads the encoder; without y the weights stay equal
    assert embedder.encoder_.n_layers == embedder.n_layers_
    np.testing.assert_allclose(embedder.mix_weights_, np.full(embedder.n_layers_, 1 / embedder.n_layers_))
    _, codes = np.unique([t for s in tags for t in s], return_inverse=True)
    with pytest.raises(ValueError, match="one class per token"):
        embedder.fit_mix(sentences, codes[:-1])
    lengths = [len(s) for s in sentences]
    embedder.fit_mix(sentences, codes, window=window_index(lengths, 1), extra=shape_features(sentences))
    assert not np.allclose(embedder.mix_weights_, 1 / embedder.n_layers_) and embedder.n_mix_epochs_ >= 1


def test_feature_names_say_which_layer_and_piece_each_column_comes_from(bert, sentences):
    """A column named ``layerK_last_i`` is column i of layer K's last-piece vector (issue 54)."""
    concat = TokenEmbedder(bert, layers=[0, -1], combine="concat", subword_pooling="first_last", device="cpu",
                           precision="fp32")
    got = concat.fit_transform(sentences)
    names = concat.get_feature_names_out()
    top = concat.n_layers_ - 1
    assert len(names) == got.shape[1] == len(set(names))
    for layer, piece in ((0, "first"), (top, "first"), (0, "last"), (top, "last")):
        columns = [i for i, name in enumerate(names) if name.startswith(f"tokenembedder_layer{layer}_{piece}_")]
        alone = TokenEmbedder(bert, layers=layer, subword_pooling=piece, device="cpu", precision="fp32")
        assert [names[i].rsplit("_", 1)[1] for i in columns] == [str(i) for i in range(alone.fit(sentences).width_)]
        np.testing.assert_array_equal(got[:, columns], alone.transform(sentences))
    mixed = TokenEmbedder(bert, layers="all", combine="scalar_mix", device="cpu", precision="fp32").fit(sentences)
    assert mixed.get_feature_names_out()[0] == f"tokenembedder_scalar_mix_layers0-{top}_0"
    summed = TokenEmbedder(bert, layers=[0, top], combine="sum", device="cpu", precision="fp32").fit(sentences)
    assert summed.get_feature_names_out()[-1] == f"tokenembedder_sum_layers0+{top}_{summed.width_ - 1}"
