import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.extraction import FeatureExtractor


@pytest.fixture(scope="module")
def bert(tiny_bert_dir):
    return load_encoder(str(tiny_bert_dir), device="cpu")


SENTENCES = [["the", "quick", "fox"], [], ["New", "York", "Times", "unaffable"]]


def test_default_is_concat_last_four_clipped_to_available(bert):
    default = FeatureExtractor(bert)  # tiny BERT has 3 layers: "the last four" is all three
    assert default.pooling.layer_indexes == (0, 1, 2) and default.pooling.combine == "concat"
    assert default.dim == 3 * 32 and default.words(SENTENCES)[0].shape == (3, 96)
    extractor = FeatureExtractor(bert, layers=[-2, -1], combine="concat")
    full = bert.encode(SENTENCES)
    for words, hidden in zip(extractor.words(SENTENCES), full):
        assert words.shape == (hidden.shape[1], 64)
        assert np.array_equal(words, np.concatenate([hidden[-2], hidden[-1]], axis=-1))


@pytest.mark.parametrize("combine, reference", [
    ("sum", lambda h: h.sum(0)), ("mean", lambda h: h.mean(0)), ("scalar_mix", lambda h: h.mean(0)),
])
def test_combines(bert, combine, reference):
    extractor = FeatureExtractor(bert, layers="all", combine=combine, subword_pooling="mean")
    for words, hidden in zip(extractor.words(SENTENCES), bert.encode(SENTENCES, subword_pooling="mean")):
        assert np.abs(words - reference(hidden)).max(initial=0) < 1e-5


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_texts(bert, pooling):
    extractor = FeatureExtractor(bert, layers=-1, text_pooling=pooling)
    texts = extractor.texts(SENTENCES)
    assert texts.shape == (3, 32) and np.isfinite(texts).all()
    words = bert.encode(SENTENCES, layers=-1)
    if pooling == "cls":
        cls = bert.encode_cls(SENTENCES, layers=-1)[:, 0]
        assert np.abs(texts[[0, 2]] - cls[[0, 2]]).max() < 1e-6
        assert np.array_equal(texts[1], np.zeros(32))  # an empty text pools to zeros, cls too
    else:
        assert np.allclose(texts[0], getattr(np, pooling)(words[0][0], axis=0), atol=1e-6)
        assert np.array_equal(texts[1], np.zeros(32))


def test_piece_mean_texts_average_every_piece(bert):
    """Layers mixed, then the text's pieces averaged: the same as averaging each layer's pieces."""
    extractor = FeatureExtractor(bert, layers=[-2, -1], combine="concat", subword_pooling="mean",
                                 text_pooling="piece_mean")
    texts = extractor.texts(SENTENCES)
    for text, encoding in zip(texts, bert.iter_encode_pieces(SENTENCES, [-2, -1])):
        if encoding.n_words == 0:
            assert np.array_equal(text, np.zeros(64))
            continue
        assert np.abs(text - np.concatenate(list(encoding.hidden.mean(axis=1)))).max() < 1e-5
    with pytest.raises(ValueError, match="needs subword_pooling='mean', got 'first'"):
        FeatureExtractor(bert, layers=-1, text_pooling="piece_mean")


def test_cls_needs_a_transformer(tmp_path):
    from contextembed.encoders._static.vectors import write_word2vec

    write_word2vec(tmp_path / "v.vec", ["a"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="cls"):
        FeatureExtractor(load_encoder(str(tmp_path / "v.vec")), text_pooling="cls")


def test_cls_with_first_last_is_rejected_at_construction(bert):
    with pytest.raises(ValueError, match="subword_pooling='first_last' would double the announced width"):
        FeatureExtractor(bert, layers=-1, subword_pooling="first_last", text_pooling="cls")
    words = FeatureExtractor(bert, layers=-1, subword_pooling="first_last")
    assert words.dim == 64 and words.words(SENTENCES)[0].shape == (3, 64)
    assert words.texts(SENTENCES).shape == (3, words.dim)


# -- the one default text vector ----------------------------------------------------------------

TEXTS = ["the quick fox", "", "New York Times unaffable", "the fox"]


@pytest.fixture(scope="module")
def encoders(tiny_bert_dir, tiny_elmo_dir, tmp_path_factory):
    from contextembed.encoders import write_word2vec

    words = sorted(set(" ".join(TEXTS).split()))
    path = tmp_path_factory.mktemp("vectors") / "v.txt"
    write_word2vec(path, words, np.random.default_rng(0).normal(size=(len(words), 5)).astype(np.float32))
    return {"bert": load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32"), "elmo": load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32"),
            "vectors": load_encoder(str(path))}


@pytest.mark.parametrize("family", ["bert", "elmo", "vectors"])
def test_text_level_defaults_are_text_embedders_vector(encoders, family):
    """FeatureExtractor(level="text") is TextEmbedder()'s vector: piece mean of every layer, equal
    mix, unit length (fp32, the same arithmetic: equal to the bit)."""
    from contextembed.sklearn import TextEmbedder

    encoder = encoders[family]
    tokens = [text.split() for text in TEXTS]
    expected = TextEmbedder(encoder.spec, precision="fp32", device="cpu").fit_transform(tokens)
    extractor = FeatureExtractor(encoder, level="text")
    assert (extractor.text_pooling, extractor.subword_pooling, extractor.normalize) == ("piece_mean", "mean", True)
    assert extractor.pooling.layer_indexes == tuple(range(encoder.n_layers))
    texts = extractor.texts(tokens)
    np.testing.assert_array_equal(texts, expected)
    np.testing.assert_allclose(np.linalg.norm(texts[[0, 2, 3]], axis=1), 1.0, rtol=1e-6)
    assert not texts[1].any()  # an empty text stays zeros


def test_text_vector_of_one_encoding_is_the_streamed_one(bert):
    extractor = FeatureExtractor(bert, level="text")
    tokens = [text.split() for text in TEXTS]
    one_by_one = [extractor.text_vector(e) for e in bert.iter_encode_pieces(tokens, extractor.pooling.layer_indexes)]
    np.testing.assert_allclose(np.stack(one_by_one), extractor.texts(tokens), rtol=1e-5, atol=1e-6)


def test_word_level_defaults_are_unchanged(bert):
    extractor = FeatureExtractor(bert)
    assert (extractor.subword_pooling, extractor.text_pooling, extractor.normalize) == ("first", "mean", False)
    assert extractor.pooling.combine == bert.default_combine


@pytest.mark.parametrize("pooling", ["mean", "max", "cls", "piece_mean"])
def test_normalize_scales_each_text_to_unit_length(bert, pooling):
    options = {"layers": [-2, -1], "subword_pooling": "mean", "text_pooling": pooling}
    plain = FeatureExtractor(bert, **options, normalize=False).texts([t.split() for t in TEXTS])
    unit = FeatureExtractor(bert, **options, normalize=True).texts([t.split() for t in TEXTS])
    norms = np.linalg.norm(plain, axis=1)
    np.testing.assert_allclose(unit[norms > 0], plain[norms > 0] / norms[norms > 0, None], rtol=1e-6)
    assert not unit[1].any()


def test_bad_level_and_normalize_are_refused(bert):
    with pytest.raises(ValueError, match="level='sentence' is not one of 'word', 'text'"):
        FeatureExtractor(bert, level="sentence")
    with pytest.raises(TypeError, match="normalize must be True or False, got 'yes'"):
        FeatureExtractor(bert, normalize="yes")


def test_normalize_rows_is_sklearns():
    from sklearn.preprocessing import normalize

    from contextembed.pooling import normalize_rows

    rows = np.random.default_rng(0).normal(size=(50, 7)).astype(np.float32)
    rows[3] = 0.0
    rows[4] = 1e-9
    np.testing.assert_array_equal(normalize_rows(rows), normalize(rows))


@pytest.mark.parametrize("pooling", ["piece_mean", "mean", "cls"])
def test_float16_features_are_the_float32_ones_rounded(bert, pooling):
    options = {"subword_pooling": "mean" if pooling == "piece_mean" else "first", "text_pooling": pooling}
    full, half = FeatureExtractor(bert, **options), FeatureExtractor(bert, dtype="float16", **options)
    for rows, expected in zip(half.words(SENTENCES), full.words(SENTENCES)):
        assert rows.dtype == np.float16 and np.array_equal(rows, expected.astype(np.float16))
    texts = half.texts(SENTENCES)
    assert texts.dtype == np.float16 and np.array_equal(texts, full.texts(SENTENCES).astype(np.float16))
    assert half.texts([]).dtype == np.float16


@pytest.mark.parametrize("level, message", [
    ("word", r"^sentence 1, word 0 exceeds the float16 range \(largest magnitude 1\.4e\+05\); use dtype='float32'"),
    ("text", r"^text 1 exceeds the float16 range \(largest magnitude 7e\+04\); use dtype='float32'"),
])
def test_a_static_feature_beyond_float16_is_an_error_naming_its_row(level, message, recwarn):
    """It became an infinity with only NumPy's overflow warning; the CLI refused it, naming the row."""
    from contextembed import StaticVectors

    vectors = StaticVectors(["small", "big"], np.array([[1.0, 2.0], [1.4e5, -1.0]], dtype=np.float32))
    sentences = [["small"], ["big", "small"], ["small"]]
    extractor = FeatureExtractor(vectors, level=level, dtype="float16", normalize=False)
    with pytest.raises(ValueError, match=message):
        list(extractor.iter_words(sentences) if level == "word" else extractor.iter_texts(sentences))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # checked, not warned
    full = FeatureExtractor(vectors, level=level, normalize=False)
    got = full.words(sentences)[1] if level == "word" else full.texts(sentences)[1]
    assert got.dtype == np.float32 and np.isfinite(got).all() and np.abs(got).max() >= 7e4
    assert [len(r) for r in extractor.words([["small"], []])] == [1, 0]  # in range: rows as before


def test_a_transformer_feature_rounded_to_float16_where_pooled_is_checked_too(tiny_bert_dir):
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
    with torch.no_grad():  # layer 0 (the embeddings' LayerNorm) beyond float16's range
        encoder.model.embeddings.LayerNorm.weight.mul_(1e6)
    half = FeatureExtractor(encoder, layers=0, dtype="float16")
    with pytest.raises(ValueError, match=r"^sentence 0, word 0 is infinite in float16: beyond its range \(largest "
                                         r"magnitude 6\.55e\+04\) where it was rounded; use dtype='float32'"):
        half.words(SENTENCES)
    assert np.isfinite(np.concatenate(FeatureExtractor(encoder, layers=0).words(SENTENCES))).all()


def test_a_nan_feature_is_an_error_in_float16_and_handed_on_as_computed_in_float32(monkeypatch):
    """Rounding to float16 is checked; float32 rows are the model's values, unchecked (a check would
    cost a pass over every row of the hot path)."""
    from contextembed import StaticVectors
    from contextembed.pooling import _layers

    vectors = StaticVectors(["a"], np.ones((1, 2), dtype=np.float32))
    real = _layers.pool_layers_numpy
    monkeypatch.setattr("contextembed.encoders._base.pool_layers_numpy",
                        lambda pooling, hidden: real(pooling, hidden) * np.float32("nan"))
    with pytest.raises(ValueError, match=r"^sentence 0, word 0 holds NaN or infinite values$"):
        FeatureExtractor(vectors, dtype="float16").words([["a"]])
    [rows] = FeatureExtractor(vectors).words([["a"]])
    assert rows.dtype == np.float32 and rows.shape == (1, 2) and np.isnan(rows).all()


def test_an_unknown_dtype_is_refused(bert):
    with pytest.raises(ValueError, match="dtype='float64' is not one of 'float32', 'float16'"):
        FeatureExtractor(bert, dtype="float64")


# -- doc_ids of iter_words: checked as they are read -------------------------------------------------

DOCUMENT = [["the", "quick"], ["brown", "fox", "jumps"], [], ["over"]]


@pytest.mark.parametrize("context", [0, 5])
@pytest.mark.parametrize("stream", [False, True], ids=["lists", "iterators"])
def test_doc_ids_that_end_before_the_sentences_are_an_error_naming_the_sentence(bert, context, stream):
    """It was "generator raised StopIteration" (with context) or nothing at all (without)."""
    extractor = FeatureExtractor(bert, context=context)
    sentences, ids = (iter(DOCUMENT), iter([0, 0])) if stream else (DOCUMENT, [0, 0])
    with pytest.raises(ValueError, match=r"^doc_ids holds 2 ids but there are more sentences: sentence 2 has no "
                                         r"document id"):
        list(extractor.iter_words(sentences, doc_ids=ids))


@pytest.mark.parametrize("context", [0, 5])
@pytest.mark.parametrize("stream", [False, True], ids=["lists", "iterators"])
def test_doc_ids_that_go_on_after_the_sentences_are_an_error_naming_the_id(bert, context, stream):
    """Extra ids were ignored."""
    extractor = FeatureExtractor(bert, context=context)
    sentences, ids = (iter(DOCUMENT), iter([0, 0, 1, 1, 2, 2])) if stream else (DOCUMENT, [0, 0, 1, 1, 2, 2])
    with pytest.raises(ValueError, match=r"^doc_ids holds more ids than the 4 sentences: doc_ids\[4\] has no sentence"):
        list(extractor.iter_words(sentences, doc_ids=ids))


@pytest.mark.parametrize("context", [0, 5])
@pytest.mark.parametrize("ids, error, message", [
    ([0, 1, 0, 1], ValueError, r"doc_ids\[2\] is 0, a document that already ended at sentence 0: the sentences of "
                               r"one document must be consecutive in sentences"),
    ([0, None, 0, 0], ValueError, r"doc_ids\[1\] is None, a missing document id"),
    ([float("nan")] * 4, ValueError, r"doc_ids\[0\] is nan, a missing document id"),
    ([0, True, True, 1], TypeError, r"doc_ids\[1\] is bool"),
    ([[0], [0], [1], [1]], TypeError, r"doc_ids\[0\] is list .* not hashable"),
    ("abcd", TypeError, r"doc_ids is a single string"),
    (7, TypeError, r"doc_ids is int"),
])
def test_doc_ids_follow_the_estimators_rules(bert, context, ids, error, message):
    """A document that came back after another was taken as two documents; NaN ids as all different."""
    with pytest.raises(error, match=message):
        list(FeatureExtractor(bert, context=context).iter_words(DOCUMENT, doc_ids=ids))


def test_checked_doc_ids_give_the_rows_of_unchecked_ones(bert):
    extractor = FeatureExtractor(bert, context=5)
    by_document = list(extractor.iter_words(iter(DOCUMENT), doc_ids=iter(["a", "a", "b", "b"])))
    assert [len(rows) for rows in by_document] == [len(s) for s in DOCUMENT]
    alone = list(extractor.iter_words(DOCUMENT, doc_ids=[0, 1, 2, 3]))
    assert not np.array_equal(by_document[0], alone[0])  # the document's context counts
    plain = FeatureExtractor(bert)
    assert all(np.array_equal(a, b) for a, b in zip(plain.words(DOCUMENT), plain.iter_words(DOCUMENT, doc_ids=[0, 0, 1, 1])))


@pytest.mark.parametrize("combine", ["scalar_mix", "concat", "mean", "sum"])
def test_piece_mean_texts_are_the_layers_of_the_per_layer_means_combined_bit_for_bit(tiny_bert_dir, combine):
    """``texts`` with ``text_pooling="piece_mean"`` has the encoder combine each text's layers where it
    ran; the same bits as combining the layers of its per-layer means here, chunk after chunk."""
    from contextembed import load_encoder

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=2, window=7, stride=3)
    sentences = [t.split() for t in TEXTS] + [[], ["unaffable"] * 30]
    extractor = FeatureExtractor(encoder, layers=[-1, 0, 1], combine=combine, level="text", normalize=False)
    assert extractor.text_pooling == "piece_mean"
    means = encoder.encode_piece_means(sentences, [-1, 0, 1])
    expected = extractor.pool_layers(np.ascontiguousarray(means.transpose(1, 0, 2)))
    np.testing.assert_array_equal(extractor.texts(sentences), expected)
