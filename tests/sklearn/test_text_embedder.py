"""TextEmbedder against a NumPy reference built from the core encoder."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.sklearn import TextEmbedder
from contextembed.sklearn._checks import check_texts
from contextembed.tokenizers import regex_tokenize

TEXTS = [
    "EU rejects German call to boycott British lamb.",
    "Peter Blackburn",
    "The European Commission said on Thursday it disagreed with German advice.",
]


def _per_layer_reference(path, texts, layers, text_pooling, subword_pooling):
    encoder = load_encoder(path, device="cpu", precision="fp32")
    tokens = [regex_tokenize(t) for t in texts]
    if text_pooling == "cls":
        return np.transpose(encoder.encode_cls(tokens, layers=layers), (1, 0, 2))
    if text_pooling == "piece_mean":  # straight from the pieces, not through words
        return np.stack([e.hidden.mean(axis=1) for e in encoder.iter_encode_pieces(tokens, layers)], axis=1)
    pool = {"mean": lambda w: w.mean(axis=1), "max": lambda w: w.max(axis=1)}[text_pooling]
    # (layers, texts, width)
    words = encoder.encode(tokens, layers=layers, subword_pooling=subword_pooling)
    return np.stack([pool(w) for w in words], axis=1)


POOLINGS = [("mean", "first"), ("mean", "mean"), ("max", "first"), ("cls", "first"), ("piece_mean", "mean")]


@pytest.mark.parametrize("text_pooling, subword_pooling", POOLINGS)
@pytest.mark.parametrize("combine", ["concat", "mean"])
@pytest.mark.parametrize("normalize", [False, True])
def test_matches_numpy_reference(bert, text_pooling, subword_pooling, combine, normalize):
    layers = [0, 1, 2]
    embedder = TextEmbedder(bert, layers=layers, combine=combine, text_pooling=text_pooling,
                            subword_pooling=subword_pooling, normalize=normalize, precision="fp32")
    got = embedder.fit(TEXTS).transform(TEXTS)
    per_layer = _per_layer_reference(bert, TEXTS, layers, text_pooling, subword_pooling)
    expected = np.concatenate(list(per_layer), axis=-1) if combine == "concat" else per_layer.mean(axis=0)
    if normalize:
        expected = expected / np.sqrt((expected**2).sum(axis=1, keepdims=True))
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_piece_mean_weighs_words_by_their_pieces(bert):
    """A word of k pieces counts k times: the text vector differs from the plain word mean exactly
    when some word has more than one piece."""
    encoder = load_encoder(bert, device="cpu", precision="fp32")
    words = regex_tokenize(TEXTS[2])
    (encoding,) = encoder.iter_encode_pieces([words], [2])
    counts = np.diff(encoding.word_offsets)
    assert counts.max() > 1  # the test needs a word split into pieces
    options = {"layers": 2, "combine": "concat", "normalize": False, "precision": "fp32"}
    by_pieces = TextEmbedder(bert, text_pooling="piece_mean", **options).fit(TEXTS).transform([words])[0]
    by_words = TextEmbedder(bert, text_pooling="mean", **options).fit(TEXTS).transform([words])[0]
    word_vectors = encoding.words("mean")[0]
    np.testing.assert_allclose(by_pieces, (word_vectors * counts[:, None]).sum(0) / counts.sum(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(by_words, word_vectors.mean(0), rtol=1e-5, atol=1e-6)
    assert np.abs(by_pieces - by_words).max() > 1e-3


def test_piece_mean_needs_mean_subword_pooling(bert):
    with pytest.raises(ValueError, match="text_pooling='piece_mean' .* needs subword_pooling='mean', got 'first'"):
        TextEmbedder(bert, text_pooling="piece_mean", subword_pooling="first").fit(TEXTS)


def test_normalize_must_be_a_bool(bert):
    with pytest.raises(TypeError, match="normalize must be True or False, got 'yes'"):
        TextEmbedder(bert, normalize="yes").fit(TEXTS)


def test_raw_text_token_lists_and_columns_agree(bert):
    pd = pytest.importorskip("pandas")
    embedder = TextEmbedder(bert, layers=-1, combine="concat").fit(TEXTS)
    from_text = embedder.transform(TEXTS)
    np.testing.assert_array_equal(embedder.transform([regex_tokenize(t) for t in TEXTS]), from_text)
    np.testing.assert_array_equal(embedder.transform(np.array(TEXTS, dtype=object)[:, None]), from_text)
    np.testing.assert_array_equal(embedder.transform(pd.DataFrame({"text": TEXTS})), from_text)
    np.testing.assert_array_equal(embedder.transform(pd.Series(TEXTS)), from_text)


def test_tokenizer_options(bert):
    calls = []

    def split(text):
        calls.append(text)
        return text.split()

    TextEmbedder(bert, tokenizer=split, layers=-1, combine="concat").fit(TEXTS)
    assert calls == TEXTS
    with pytest.raises(ValueError, match="tokenizer='nltk' is not one of 'auto', 'regex', 'whitespace', 'spacy'"):
        TextEmbedder(bert, tokenizer="nltk").fit(TEXTS)
    spacy_split = TextEmbedder(bert, tokenizer="spacy", layers=-1, combine="concat").fit(["EU-wide, isn't it?"])
    assert check_texts(["isn't it?"], spacy_split.tokenizer) == [["is", "n't", "it", "?"]]
    assert regex_tokenize("EU-wide, isn't it?") == ["EU-wide", ",", "isn't", "it", "?"]


@pytest.mark.parametrize("split, message", [
    (lambda text: [1], r"the tokenizer returned a list for text 0 whose token 0 is int \(1\); a tokenizer must return"),
    (lambda text: ("EU", b"x"), r"the tokenizer returned a tuple for text 0 whose token 1 is bytes \(b'x'\)"),
    (lambda text: text, r"the tokenizer returned str for text 0; a tokenizer must return a list of str tokens"),
])
def test_what_a_tokenizer_returned_wrong_is_named(static_path, split, message):
    """A tokenizer returning [1] was reported as having "returned list"."""
    with pytest.raises(TypeError, match=message):
        TextEmbedder(static_path, tokenizer=split).fit(["eu call"])


def test_empty_texts_and_empty_input(bert):
    embedder = TextEmbedder(bert, layers=[-2, -1], combine="concat").fit(TEXTS)
    width = len(embedder.get_feature_names_out())
    assert embedder.transform([]).shape == (0, width)
    out = embedder.transform(["", "   ", "EU"])
    assert out.shape == (3, width) and np.isfinite(out).all()
    np.testing.assert_array_equal(out[0], 0.0)
    with pytest.raises(ValueError, match="at least one text"):
        TextEmbedder(bert).fit([])


def test_scalar_mix_learns_from_class_labels(bert):
    texts = TEXTS * 10
    labels = [0, 1, 0] * 10
    fitted = TextEmbedder(bert, max_epochs=3).fit(texts, labels)
    assert fitted.mix_weights_.sum() == pytest.approx(1.0, abs=1e-6)
    assert isinstance(fitted.gamma_, float)
    with pytest.raises(ValueError, match="y is continuous"):
        TextEmbedder(bert).fit(texts, np.linspace(0, 1, len(texts)))
    with pytest.raises(ValueError, match="one class label per text"):
        TextEmbedder(bert).fit(texts, labels[:-1])


def test_cls_needs_an_encoder_with_one(static_path):
    with pytest.raises(ValueError, match="text_pooling='cls' needs an encoder"):
        TextEmbedder(static_path, text_pooling="cls").fit(["eu call"])


@pytest.mark.parametrize(
    "bad, message",
    [("EU rejects", "single string"), ([1.5, 2.5], "text 0 is float"), (np.zeros((4, 3)), "array of shape")],
)
def test_bad_input_is_named(bert, bad, message):
    with pytest.raises(TypeError, match=message):
        TextEmbedder(bert).fit(bad)


def _labels_with(missing, kind="str"):
    base = ["pos", "neg"] if kind == "str" else [1, 0]
    return base * 2 + [missing]


MISSING_LABELS = {
    "list NaN": (lambda: _labels_with(float("nan")), "y\\[4\\] is nan, a missing class label"),
    "list None": (lambda: _labels_with(None), "y\\[4\\] is None, a missing class label"),
    "numpy object NaN": (lambda: np.array(_labels_with(np.nan), dtype=object), "y\\[4\\] is nan"),
    "numpy float NaN": (lambda: np.array([1.0, 0.0, 1.0, 0.0, np.nan]), "y\\[4\\] is nan"),
    "numpy NaT": (lambda: np.array(_labels_with(np.datetime64("NaT")), dtype=object), "y\\[4\\] is .*NaT.*, a missing class label"),
    "Series NaN": (lambda: __import__("pandas").Series(_labels_with(np.nan)), "y\\[4\\] is nan"),
    "Series None": (lambda: __import__("pandas").Series(_labels_with(None)), "y\\[4\\] is (None|nan), a missing"),  # pandas may make it NaN
    "Series NA": (lambda: __import__("pandas").array(_labels_with(None, "int"), dtype="Int64"), "y\\[4\\] is <NA>"),
    "Series NaT": (lambda: __import__("pandas").Series(_labels_with(__import__("pandas").NaT)), "y\\[4\\] is NaT"),
}


@pytest.mark.parametrize("case", list(MISSING_LABELS))
def test_missing_class_labels_name_their_index(static_path, case):
    """A missing label was a class 'nan' (lists) or a "'<' not supported" error (None, pandas NaN)."""
    make, message = MISSING_LABELS[case]
    with pytest.raises(ValueError, match=message):
        TextEmbedder(static_path, combine="scalar_mix").fit(["eu call"] * 5, make())


@pytest.mark.parametrize("labels, error, message", [
    (["pos", "neg", 1, "pos", "neg"], TypeError, "y mixes kinds of class labels: y\\[0\\] is str \\('pos'\\) but y\\[2\\] is int"),
    ([1, 0, True, 1, 0], TypeError, "y\\[2\\] is bool"),
    ([1, 0, float("inf"), 1, 0], ValueError, "y\\[2\\] is inf; class labels are finite"),
    ([1, 0, b"x", 1, 0], TypeError, "y\\[2\\] is bytes"),
    ([1, 0, (1, 2), 1, 0], TypeError, "y\\[2\\] is tuple"),
])
def test_class_labels_of_another_kind_name_their_index(static_path, labels, error, message):
    with pytest.raises(error, match=message):
        TextEmbedder(static_path, combine="scalar_mix").fit(["eu call"] * 5, labels)


def test_valid_class_labels_still_learn(bert):
    import pandas as pd

    texts = TEXTS * 4
    for labels in (["a", "b", "a"] * 4, pd.Series([1.0, 0.0, 1.0] * 4), np.array([True, False, True] * 4)):
        fitted = TextEmbedder(bert, max_epochs=2, device="cpu", precision="fp32").fit(texts, labels)
        assert fitted.mix_weights_.sum() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("combine", ["mean", "concat"])
@pytest.mark.parametrize("y, error, message", [
    ([1, 0], ValueError, r"y must hold one class label per text: 5 texts, got y of shape \(2,\)"),
    ([1.0, 0.0, float("nan"), 1.0, 0.0], ValueError, r"y\[2\] is nan, a missing class label"),
    ([1, 0, None, 1, 0], ValueError, r"y\[2\] is None, a missing class label"),
    ([1, 0, "a", 1, 0], TypeError, r"y mixes kinds of class labels: y\[0\] is int \(1\) but y\[2\] is str"),
    ([[1.0], [0.0], [np.inf], [1.0], [0.0]], ValueError, r"y\[2, 0\] is inf; class labels are finite"),
])
def test_y_is_checked_with_fixed_weights_too(static_path, combine, y, error, message):
    """With a fixed combine y is not learned from, but it goes on to a pipeline's model: a y of the
    wrong length or with a missing value was accepted."""
    with pytest.raises(error, match=message):
        TextEmbedder(static_path, combine=combine).fit(["eu call"] * 5, y)


def test_continuous_and_multi_output_targets_pass_a_fixed_combine(static_path):
    texts = ["eu call", "peter", "german call"]
    for y in ([0.5, 1.25, 3.0], [[0.5, 1.0], [1.25, 2.0], [3.0, 0.0]], None):
        assert TextEmbedder(static_path, combine="mean").fit_transform(texts, y).shape == (3, 8)
    with pytest.raises(ValueError, match="combine='scalar_mix' learns its weights from class labels, but y is continuous"):
        TextEmbedder(static_path).fit(texts, [0.5, 1.25, 3.0])


@pytest.mark.parametrize("bad", [None, 3, 2.5, object()])
def test_x_that_is_not_iterable_is_named(static_path, bad):
    fitted = TextEmbedder(static_path).fit(["eu call"])
    for call in (TextEmbedder(static_path).fit, fitted.transform, fitted.fit_transform):
        with pytest.raises(TypeError, match=f"X is {'None' if bad is None else type(bad).__name__}.*; expected an "
                                            "iterable of texts"):
            call(bad)


def test_dataframes_of_texts(static_path):
    import pandas as pd

    fitted = TextEmbedder(static_path, combine="mean").fit(["eu call"])
    texts = ["eu call", "peter blackburn"]
    np.testing.assert_array_equal(fitted.transform(pd.DataFrame({"text": texts})), fitted.transform(texts))
    with pytest.raises(TypeError, match=r"X is a DataFrame with 2 columns \('text', 'id'\); expected one column of "
                                        r"texts: .* X=df\['text'\]\.tolist\(\)"):
        fitted.transform(pd.DataFrame({"text": texts, "id": [1, 2]}))


@pytest.mark.parametrize("text_pooling, subword_pooling", [("mean", "first"), ("max", "mean"), ("mean", "first_last"), ("cls", "first")])
def test_texts_pooled_where_the_encoder_ran_are_their_stored_vectors(bert, monkeypatch, text_pooling, subword_pooling):
    """The same features bit for bit (fp32, CPU) whether a text is pooled for one call (nothing
    kept) or read from the feature store, which a second fit then does: the encoder pools nothing
    again."""
    from contextembed.sklearn import clear_cache
    from contextembed.encoders._registry import EncoderRef, get_encoder

    tokens = [regex_tokenize(t) for t in TEXTS] + [["unaffable"] * 30]  # longer than the tiny model: windows
    options = dict(layers=[-1, 0], combine="concat", normalize=False, device="cpu", precision="fp32",
                   text_pooling=text_pooling, subword_pooling=subword_pooling)
    clear_cache()
    pooled = TextEmbedder(bert, cache=None, **options).fit(tokens).transform(tokens)
    TextEmbedder(bert, **options).fit(tokens).transform(tokens)  # kept in the store
    encoder = get_encoder(EncoderRef.fitted(bert, "cpu", "fp32", None))
    monkeypatch.setattr(encoder, "iter_encode_text_layers", lambda *args, **kwargs: pytest.fail("encoded again"))
    from_pieces = TextEmbedder(bert, **options).fit(tokens).transform(tokens)
    assert pooled.shape == from_pieces.shape and np.abs(pooled).max() > 0
    np.testing.assert_array_equal(pooled, from_pieces)
    clear_cache()


@pytest.mark.parametrize("combine", ["scalar_mix", "concat", "mean", "sum"])
@pytest.mark.parametrize("layers", ["all", [2, 0]])
def test_uncached_piece_means_pooled_by_the_encoder_are_the_cached_paths_bit_for_bit(bert, combine, layers):
    """Uncached, the encoder combines each text's layers where it ran and only one vector per text
    comes back; the cached path keeps every layer and combines them here: the same bits, for repeated
    and empty texts too, normalised or not."""
    texts = TEXTS + [TEXTS[0], "", " ".join(["unaffable"] * 40), TEXTS[1]]
    for normalize in (False, True):
        options = dict(layers=layers, combine=combine, normalize=normalize, precision="fp32")
        uncached = TextEmbedder(bert, cache=None, **options).fit(texts)
        cached = TextEmbedder(bert, cache="memory", **options).fit(texts)
        assert uncached._pools_on_encoder() and not cached._pools_on_encoder()
        got = uncached.transform(texts)
        assert got.dtype == np.float32 and got.shape == (len(texts), uncached._n_features_out)
        np.testing.assert_array_equal(got, cached.transform(texts))
        np.testing.assert_array_equal(got[0], got[3])
        assert not got[4].any()  # the empty text


def test_the_encoder_pools_only_uncached_piece_means_in_this_process(bert, monkeypatch):
    """Another text pooling, a cache, or n_jobs beyond one take encode_all's per-layer vectors; the
    float16 output of the encoder's pooling is the float32 one rounded."""
    from contextembed.sklearn import _encoding

    calls = []
    original = _encoding.pooled_piece_means
    monkeypatch.setattr(_encoding, "pooled_piece_means", lambda *args: calls.append(1) or original(*args))
    import contextembed.sklearn._text as text_module

    monkeypatch.setattr(text_module, "pooled_piece_means", _encoding.pooled_piece_means)
    for options, pools in [({}, True), ({"text_pooling": "mean", "subword_pooling": "first"}, False),
                           ({"cache": "memory"}, False), ({"n_jobs": 2}, False)]:
        embedder = TextEmbedder(bert, **{"cache": None, **options}).fit(TEXTS)
        calls.clear()
        embedder.transform(TEXTS)
        assert bool(calls) == pools == embedder._pools_on_encoder(), options
    embedder = TextEmbedder(bert, cache=None, precision="fp32").fit(TEXTS)
    half = embedder.set_params(dtype="float16").transform(TEXTS)
    np.testing.assert_array_equal(half, embedder.set_params(dtype="float32").transform(TEXTS).astype(np.float16))
