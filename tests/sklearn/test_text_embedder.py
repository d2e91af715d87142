"""TextEmbedder against a NumPy reference built from the core encoder."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.sklearn import TextEmbedder
from contextembed.tokenizers import regex_tokenize

TEXTS = [
    "EU rejects German call to boycott British lamb.",
    "Peter Blackburn",
    "The European Commission said on Thursday it disagreed with German advice.",
]


def _per_layer_reference(path, texts, layers, text_pooling):
    encoder = load_encoder(path, device="cpu", precision="fp32")
    tokens = [regex_tokenize(t) for t in texts]
    if text_pooling == "cls":
        return np.transpose(encoder.encode_cls(tokens, layers=layers), (1, 0, 2))
    pool = {"mean": lambda w: w.mean(axis=1), "max": lambda w: w.max(axis=1)}[text_pooling]
    # (layers, texts, width)
    return np.stack([pool(words) for words in encoder.encode(tokens, layers=layers)], axis=1)


@pytest.mark.parametrize("text_pooling", ["mean", "max", "cls"])
@pytest.mark.parametrize("combine", ["concat", "mean"])
def test_matches_numpy_reference(bert, text_pooling, combine):
    layers = [0, 1, 2]
    embedder = TextEmbedder(bert, layers=layers, combine=combine, text_pooling=text_pooling, precision="fp32")
    got = embedder.fit(TEXTS).transform(TEXTS)
    per_layer = _per_layer_reference(bert, TEXTS, layers, text_pooling)
    expected = np.concatenate(list(per_layer), axis=-1) if combine == "concat" else per_layer.mean(axis=0)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


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
    assert spacy_split._tokenize(["isn't it?"]) == [["is", "n't", "it", "?"]]
    assert regex_tokenize("EU-wide, isn't it?") == ["EU-wide", ",", "isn't", "it", "?"]


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
