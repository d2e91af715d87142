"""TokenEmbedder(context=N), doc_ids through the taggers, the cache keys of sentences in context.

The context encodings themselves are checked against a raw transformers model in
tests/test_documents.py; here the adapters must give exactly those rows, route ``doc_ids`` and key
their cache by the neighbours.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV

from contextembed._inputs.documents import InContext, in_context
from contextembed.encoders import load_encoder
from contextembed.sklearn import BiLSTMCRFTagger, SequenceTagger, TokenEmbedder
from contextembed.sklearn import _encoding
from contextembed.sklearn._checks import check_doc_ids

DOCS = ["a", "a", "a", "b", "b", "b"]


def _core_rows(bert, sentences, doc_ids, size):
    """``(tokens, layers * width)``: the core's context encodings, every layer concatenated."""
    encoder = load_encoder(bert, device="cpu", precision="fp32")
    hidden = [e.words("first") for e in encoder.iter_encode_pieces_in_context(in_context(sentences, doc_ids, size))]
    return np.concatenate([np.concatenate(list(h), axis=-1) for h in hidden if h.shape[1]])


def _embedder(bert, **options):
    return TokenEmbedder(bert, layers="all", combine="concat", device="cpu", precision="fp32", **options)


def test_context_rows_are_the_core_encodings(bert, sentences):
    rows = _embedder(bert, context=6, cache=None).fit(sentences).transform(sentences, doc_ids=DOCS)
    np.testing.assert_array_equal(rows, _core_rows(bert, sentences, DOCS, 6))
    alone = _embedder(bert, cache=None).fit(sentences).transform(sentences)
    assert rows.shape == alone.shape and not np.allclose(rows, alone, atol=1e-4)


def test_zero_context_is_todays_output(bert, sentences):
    encoder = load_encoder(bert, device="cpu", precision="fp32")
    today = np.concatenate([np.concatenate(list(h), axis=-1) for h in encoder.encode(sentences)])
    for doc_ids in (None, DOCS):
        rows = _embedder(bert, context=0, cache=None).fit(sentences, doc_ids=doc_ids).transform(sentences, doc_ids=doc_ids)
        assert np.array_equal(rows, today)


def test_without_doc_ids_x_is_one_document(bert, sentences):
    embedder = _embedder(bert, context=6, cache=None).fit(sentences)
    np.testing.assert_array_equal(embedder.transform(sentences), _core_rows(bert, sentences, None, 6))
    np.testing.assert_array_equal(embedder.transform(sentences, doc_ids=[0] * 6), embedder.transform(sentences))


def test_empty_sentences_give_no_rows_and_do_not_shift_the_context(bert, sentences):
    embedder = _embedder(bert, context=6, cache=None).fit(sentences)
    with_empty = sentences[:2] + [[]] + sentences[2:]
    rows = embedder.transform(with_empty, doc_ids=DOCS[:2] + ["a"] + DOCS[2:])
    np.testing.assert_array_equal(rows, embedder.transform(sentences, doc_ids=DOCS))
    parts = embedder.transform_sentences(with_empty, doc_ids=DOCS[:2] + ["a"] + DOCS[2:])
    assert [len(p) for p in parts] == [len(s) for s in with_empty]


def test_the_same_sentence_among_other_neighbours_is_another_cache_entry(bert, sentences):
    _encoding.clear_cache()
    embedder = _embedder(bert, context=6).fit(sentences)
    target = sentences[1]
    first = embedder.transform_sentences([sentences[0], target, sentences[2]])[1]
    second = embedder.transform_sentences([sentences[3], target, sentences[4]])[1]
    assert not np.allclose(first, second, atol=1e-4)
    encoder = embedder.encoder_
    calls = []
    original = encoder.iter_encode_pooled
    encoder.iter_encode_pooled = lambda items, *args, **kwargs: calls.append(len(items)) or original(items, *args, **kwargs)
    try:
        again = embedder.transform_sentences([sentences[0], target, sentences[2]])[1]
    finally:
        del encoder.iter_encode_pooled
    assert calls == [] and np.array_equal(again, first)  # reused, not encoded again


def test_context_keys_name_the_size_and_the_neighbours():
    item = InContext(["b"], ("a",), ("c",), 4)
    key = _encoding.context_key("enc", item)
    assert key != _encoding.sentence_key("enc", ["b"])
    assert key != _encoding.context_key("enc", InContext(["b"], ("a",), ("c",), 8))
    assert key != _encoding.context_key("enc", InContext(["b"], ("x",), ("c",), 4))
    assert key != _encoding.context_key("enc", InContext(["b"], (), ("a", "c"), 4))
    assert key == _encoding.context_key("enc", InContext(["b"], ("a",), ("c",), 4))


def test_sequence_tagger_routes_doc_ids(bert, sentences, tags):
    tagger = SequenceTagger(_embedder(bert, context=5), window=0, shape_features=False)
    tagger.fit(sentences, tags, doc_ids=DOCS)
    features = tagger.transform_features(sentences, doc_ids=DOCS)
    np.testing.assert_array_equal(features, tagger.embedder_.transform(sentences, doc_ids=DOCS))
    assert not np.allclose(features, tagger.transform_features(sentences), atol=1e-4)
    expected = tagger.classifier_.predict(features)
    assert [t for s in tagger.predict(sentences, doc_ids=DOCS) for t in s] == list(expected)
    assert 0.0 <= tagger.score(sentences, tags, doc_ids=DOCS) <= 1.0


@pytest.mark.slow
def test_bilstm_tagger_routes_doc_ids_to_every_embedder(bert, sentences, tags, monkeypatch):
    received = []
    original = TokenEmbedder.layer_rows

    def spy(self, X, doc_ids=None):
        received.append((self.context, None if doc_ids is None else list(doc_ids)))
        return original(self, X, doc_ids=doc_ids)

    monkeypatch.setattr(TokenEmbedder, "layer_rows", spy)
    with_empty = sentences[:2] + [[]] + sentences[2:]
    docs = DOCS[:2] + ["a"] + DOCS[2:]
    tagger = BiLSTMCRFTagger([_embedder(bert, context=3), _embedder(bert, context=0)], hidden_size=8,
                             max_epochs=1, shape_features=False, device="cpu")
    tagger.fit(with_empty, tags[:2] + [[]] + tags[2:], doc_ids=docs)
    assert received == [(3, DOCS), (0, DOCS)]  # the empty sentence and its id left out together
    received.clear()
    predicted = tagger.predict(with_empty, doc_ids=docs)
    assert received == [(3, DOCS), (0, DOCS)] and [len(p) for p in predicted] == [len(s) for s in with_empty]
    received.clear()
    tagger.score(sentences, tags, doc_ids=DOCS)
    assert received == [(3, DOCS), (0, DOCS)]


@pytest.mark.parametrize("context, error, match", [
    (-1, ValueError, "expected a number of pieces >= 0"), (True, TypeError, "bool"), (1.5, TypeError, "float"),
    (39, ValueError, "more than the model takes.*use context <= 38"),
])
def test_bad_context_is_refused_at_fit(bert, sentences, context, error, match):
    with pytest.raises(error, match=match):
        _embedder(bert, context=context).fit(sentences)


def test_static_vectors_refuse_context(static_path, sentences):
    with pytest.raises(ValueError, match="static vector is the same whatever the words around it"):
        TokenEmbedder(static_path, context=4).fit(sentences)
    TokenEmbedder(static_path, context=0).fit(sentences)


@pytest.mark.parametrize("doc_ids, error, match", [
    (["a"] * 5, ValueError, "doc_ids has 5 ids but X has 6 sentences"),
    (["a", "a", "b", "b", "a", "a"], ValueError, r"doc_ids\[4\] is 'a', a document that already ended at sentence 1"),
    (["a", None, "a", "b", "b", "b"], ValueError, r"doc_ids\[1\] is None, a missing document id"),
    (["a", "a", float("nan"), "b", "b", "b"], ValueError, r"doc_ids\[2\] is nan"),
    (["a", "a", "a", {"b": 1}, "b", "b"], TypeError, r"doc_ids\[3\] is dict .* not hashable"),
])
def test_bad_doc_ids_name_the_index_in_every_method(bert, sentences, tags, doc_ids, error, match):
    embedder = _embedder(bert, context=4)
    with pytest.raises(error, match=match):
        embedder.fit(sentences, doc_ids=doc_ids)
    embedder.fit(sentences)
    for call in (embedder.transform, embedder.transform_layers, embedder.transform_sentences):
        with pytest.raises(error, match=match):
            call(sentences, doc_ids=doc_ids)
    tagger = SequenceTagger(_embedder(bert, context=4), window=0, shape_features=False)
    with pytest.raises(error, match=match):
        tagger.fit(sentences, tags, doc_ids=doc_ids)
    tagger.fit(sentences, tags)
    for call in (tagger.predict, tagger.transform_features):
        with pytest.raises(error, match=match):
            call(sentences, doc_ids=doc_ids)
    with pytest.raises(error, match=match):
        tagger.score(sentences, tags, doc_ids=doc_ids)
    neural = BiLSTMCRFTagger(_embedder(bert, context=4), hidden_size=8, max_epochs=1, device="cpu")
    with pytest.raises(error, match=match):
        neural.fit(sentences, tags, doc_ids=doc_ids)


def test_doc_ids_of_any_hashable_kind():
    assert check_doc_ids([("d", 1), ("d", 1), 2.5], 3) == [("d", 1), ("d", 1), 2.5]
    checked = check_doc_ids(["a", "b"], 2)
    assert check_doc_ids(checked, 2) is checked  # checked once, handed on as it is


@pytest.mark.slow
def test_grid_search_over_context_reuses_the_encodings(bert, sentences, tags, monkeypatch):
    _encoding.clear_cache()
    search = GridSearchCV(SequenceTagger(_embedder(bert), window=0, shape_features=False),
                          {"embedder__context": [0, 4]}, cv=2)
    search.fit(sentences, tags, doc_ids=DOCS)
    assert search.best_params_["embedder__context"] in (0, 4)
    assert search.best_estimator_.embedder_.context_ == search.best_params_["embedder__context"]
    encoded = []
    original = _encoding._encode_missing
    monkeypatch.setattr(_encoding, "_encode_missing",
                        lambda ref, items, *args, **kwargs: encoded.extend(items) or original(ref, items, *args, **kwargs))
    search.fit(sentences, tags, doc_ids=DOCS)
    assert encoded == []  # every fold's sentences, alone and in their documents, came from the cache


def test_grid_search_routes_doc_ids_to_score_with_metadata_routing(bert, sentences, tags):
    from sklearn import config_context

    with config_context(enable_metadata_routing=True):
        tagger = SequenceTagger(_embedder(bert), window=0, shape_features=False)
        tagger.set_fit_request(doc_ids=True).set_score_request(doc_ids=True)
        search = GridSearchCV(tagger, {"embedder__context": [0, 4]}, cv=2).fit(sentences, tags, doc_ids=DOCS)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
