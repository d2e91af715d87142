"""The ``contextembed`` component on a blank English pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
import torch

from contextembed import load_encoder

from spacy_helpers import encoder_config, ner_config

TEXT = "Peter Blackburn met EU officials in Brussels on Tuesday ."


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32")


def reference_tensor(encoder, doc, layers, combine="mean"):
    """Plain NumPy reference: encode the token texts, then combine the chosen layers."""
    [hidden] = encoder.encode([[t.text for t in doc]], layers=layers)
    return {"mean": hidden.mean(axis=0), "sum": hidden.sum(axis=0), "concat": np.concatenate(list(hidden), axis=-1)}[combine]


@pytest.mark.parametrize(
    ("layers", "combine"), [(-1, "mean"), ([-2, -1], "concat"), ("all", "mean"), ([0, 2], "sum")]
)
def test_doc_tensor_is_the_default_pooling(make_nlp, encoder, layers, combine):
    nlp = make_nlp(tensor_layers=layers, tensor_combine=combine)
    doc = nlp(TEXT)
    expected = reference_tensor(encoder, doc, layers, combine)
    assert doc.tensor.shape == (len(doc), expected.shape[1])
    np.testing.assert_allclose(doc.tensor, expected, rtol=1e-5, atol=1e-6)


def test_vector_hooks_use_doc_tensor(make_nlp):
    nlp = make_nlp()
    doc = nlp(TEXT)
    tensor = doc.tensor
    np.testing.assert_allclose(doc[3].vector, tensor[3])
    np.testing.assert_allclose(doc[1:4].vector, tensor[1:4].mean(axis=0), rtol=1e-6)
    a, b = tensor[0], tensor[6]
    cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    assert doc[0].similarity(doc[6]) == pytest.approx(float(cosine), rel=1e-5)
    other = nlp("EU officials met in Brussels")
    assert doc.similarity(other) == pytest.approx(float(doc.vector @ other.vector), rel=1e-5)  # unit vectors
    assert doc.has_vector and doc[0].has_vector
    assert doc[0].vector_norm == pytest.approx(float(np.linalg.norm(tensor[0])), rel=1e-6)
    assert doc.vector_norm == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("options", [{}, {"subword_pooling": "first_last", "tensor_layers": [-2, -1],
                                          "tensor_combine": "concat"}])
def test_doc_vector_is_text_embedders_default_vector(make_nlp, tiny_bert_dir, options):
    """doc.vector is TextEmbedder()'s vector of the doc's tokens, whatever doc.tensor holds."""
    from contextembed.sklearn import TextEmbedder

    nlp = make_nlp(**options)
    docs = list(nlp.pipe([TEXT, "EU officials met in Brussels", ""]))
    embedder = TextEmbedder(str(tiny_bert_dir), device="cpu", precision="fp32")
    expected = embedder.fit_transform([[t.text for t in doc] for doc in docs])
    np.testing.assert_allclose(np.stack([doc.vector for doc in docs]), expected, rtol=1e-5, atol=1e-6)
    assert docs[2].vector.shape == (32,) and not docs[2].vector.any()


@pytest.mark.slow
def test_doc_vector_of_static_vectors(tmp_path):
    from contextembed.encoders import write_word2vec
    from contextembed.sklearn import TextEmbedder

    words = ["a", "cat", "sat", "mat"]
    write_word2vec(tmp_path / "v.txt", words, np.arange(20, dtype=np.float32).reshape(4, 5) - 7)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tmp_path / "v.txt"))
    doc = nlp("a cat sat on a mat")
    expected = TextEmbedder(str(tmp_path / "v.txt")).fit_transform([[t.text for t in doc]])[0]
    np.testing.assert_array_equal(doc.vector, expected)


def test_doc_vector_survives_serialization_and_as_doc_falls_back_to_rows(make_nlp):
    import pickle

    from spacy.tokens import Doc

    doc = make_nlp()(TEXT)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(doc)).vector, doc.vector)
    with pytest.warns(UserWarning, match="W109"):  # spaCy keeps user_data, not the hooks
        restored = Doc(doc.vocab).from_bytes(doc.to_bytes())
    np.testing.assert_array_equal(restored.user_data["contextembed.doc_vector"], doc.vector)
    part = doc[1:4].as_doc()  # copies the hooks and the rows, not the stored vector
    np.testing.assert_allclose(part.vector, doc[1:4].vector, rtol=1e-6)


def test_training_updates_compute_no_doc_vectors(make_nlp, monkeypatch):
    from spacy.training import Example

    nlp = make_nlp(ner={})
    component = nlp.get_pipe("contextembed")
    nlp.initialize(lambda: [Example.from_dict(nlp.make_doc(TEXT), {"entities": [(0, 15, "PER")]})])
    monkeypatch.setattr(type(component.model), "_encode_with_text", lambda *args: pytest.fail("a doc vector in training"))
    nlp.update([Example.from_dict(nlp.make_doc(TEXT), {"entities": [(0, 15, "PER")]})])


def test_pipe_does_not_depend_on_batch_size(make_nlp):
    nlp = make_nlp(tensor_layers="all")
    texts = [TEXT, "short", "", "a much longer text " * 12, "EU officials met in Brussels ."] * 2
    one = [d.tensor for d in nlp.pipe(texts, batch_size=1)]
    for batch_size in (3, 8, 100):
        other = [d.tensor for d in nlp.pipe(texts, batch_size=batch_size)]
        for x, y in zip(one, other):
            assert x.shape == y.shape
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)


def test_long_doc_has_one_row_per_token(make_nlp, encoder):
    nlp = make_nlp()
    words = ("The quick brown fox jumps over the lazy dog in Brussels , unbelievably . " * 400).split()[:5000]
    doc = spacy.tokens.Doc(nlp.vocab, words=words)
    doc = nlp(doc)
    assert len(doc) == 5000
    assert doc.tensor.shape == (5000, encoder.width)
    assert np.isfinite(doc.tensor).all()
    # the long doc is windowed, not truncated: the last tokens match a direct encoding
    np.testing.assert_allclose(doc.tensor, reference_tensor(encoder, doc, -1), rtol=1e-5, atol=1e-6)


def test_empty_doc(make_nlp, encoder):
    nlp = make_nlp(ner={})
    nlp.initialize()
    doc = nlp("")
    assert len(doc) == 0
    assert doc.tensor.shape == (0, encoder.width)
    assert doc.vector.shape == (encoder.width,) and not doc.vector.any()
    assert doc.ents == ()


@pytest.mark.parametrize("text", ["   \n\n  \t ", "... !!! ?? -- ,,,", " \n . \n\n ! "])
def test_whitespace_and_punctuation_docs(make_nlp, encoder, text):
    nlp = make_nlp(ner={})
    nlp.initialize()
    doc = nlp(text)
    assert len(doc) > 0
    assert doc.tensor.shape == (len(doc), encoder.width)
    assert np.isfinite(doc.tensor).all()
    np.testing.assert_allclose(doc.tensor, reference_tensor(encoder, doc, -1), rtol=1e-5, atol=1e-6)


def test_whitespace_tokens_keep_their_rows(make_nlp, encoder):
    words = ["Peter", "\n\n", "met", " ", "EU", "\u200b", "officials"]
    nlp = make_nlp()
    doc = nlp(spacy.tokens.Doc(nlp.vocab, words=words, spaces=[False] * len(words)))
    assert doc.tensor.shape == (7, encoder.width)
    np.testing.assert_allclose(doc.tensor, reference_tensor(encoder, doc, -1), rtol=1e-5, atol=1e-6)


def test_layers_are_not_kept_unless_asked(make_nlp, encoder):
    doc = make_nlp()(TEXT)
    assert doc._.contextembed is None
    doc = make_nlp(store_layers=True)(TEXT)
    stored = doc._.contextembed["contextembed"]
    assert stored.shape == (encoder.n_layers, len(doc), encoder.width)
    [expected] = encoder.encode([[t.text for t in doc]])
    np.testing.assert_allclose(stored, expected, rtol=1e-5, atol=1e-6)


def test_encoder_is_loaded_lazily_and_never_downloads(tmp_path):
    nlp = spacy.blank("en")
    component = nlp.add_pipe("contextembed", config=encoder_config(tmp_path / "no-such-model"))
    assert not component.model.loader.loaded
    from contextembed import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        nlp("text")


def test_static_vectors_encoder(tmp_path):
    from contextembed.encoders import write_word2vec

    words = ["peter", "met", "officials", "."]
    vectors = np.arange(16, dtype=np.float32).reshape(4, 4)
    write_word2vec(tmp_path / "vectors.txt", words, vectors)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config=encoder_config(tmp_path / "vectors.txt"))
    doc = nlp("Peter met unknown officials .")
    expected = np.stack([vectors[0], vectors[1], np.zeros(4), vectors[2], vectors[3]])
    np.testing.assert_allclose(doc.tensor, expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_after_require_gpu(tiny_bert_dir):
    spacy.require_gpu()
    try:
        nlp = spacy.blank("en")
        nlp.add_pipe("contextembed", config={"encoder": {"name": str(tiny_bert_dir)}})
        nlp.add_pipe("ner", config=ner_config())
        nlp.initialize()
        doc = nlp(TEXT)
        assert nlp.get_pipe("contextembed").encoder.device.type == "cuda"
        assert doc.tensor.shape[0] == len(doc)
    finally:
        spacy.require_cpu()


@pytest.mark.slow
@pytest.mark.pretrained
def test_minilm_component(minilm):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": "minilm-l6", "device": "cpu", "precision": "fp32"}})
    cat, dog, tax = nlp("a cat sat on the mat"), nlp("a dog sat on the rug"), nlp("quarterly tax revenue fell")
    assert cat.tensor.shape == (len(cat), 384)
    assert cat.similarity(dog) > cat.similarity(tax)


def test_feature_cache_skips_the_encoder_for_seen_docs(make_nlp, monkeypatch):
    nlp = make_nlp(cache_mb=1)
    component = nlp.get_pipe("contextembed")
    first = nlp(TEXT).tensor
    calls = []
    original = component.encoder.iter_encode_pieces
    monkeypatch.setattr(component.encoder, "iter_encode_pieces",
                        lambda words, *args, **kw: calls.append(list(words)) or original(words, *args, **kw))
    np.testing.assert_array_equal(nlp(TEXT).tensor, first)
    assert not any(calls)  # nothing left to encode
    nlp("something new here")
    assert calls[-1] == [("something", "new", "here")]


def test_feature_cache_serves_no_features_of_a_model_loaded_before(make_nlp, tiny_bert_dir, tmp_path):
    """``from_bytes`` (or ``from_disk``) of a pipeline with another model of the same shape: the
    cache used to keep serving the first model's features for the docs it had seen."""
    import shutil

    from transformers import BertConfig, BertModel

    shutil.copytree(tiny_bert_dir, tmp_path / "other")
    torch.manual_seed(1)
    BertModel(BertConfig.from_pretrained(tmp_path / "other")).eval().save_pretrained(tmp_path / "other")
    other = spacy.blank("en")
    other.add_pipe("contextembed", config=encoder_config(tmp_path / "other"))
    nlp = make_nlp(cache_mb=1)
    first = nlp(TEXT).tensor
    nlp.from_bytes(other.to_bytes())
    assert not np.allclose(other(TEXT).tensor, first)
    np.testing.assert_array_equal(nlp(TEXT).tensor, other(TEXT).tensor)


def test_feature_cache_stays_within_the_memory_budget(monkeypatch):
    """The component's features are the feature store's: resident within the one memory budget,
    read back from disk beyond it, served only for the layers they hold."""
    from contextembed._runtime import store as _store
    from contextembed._runtime import store_memory as _memory
    from contextembed.spacy._doc_features import DocFeatures, StoredDocFeatures

    monkeypatch.setattr(_memory, "_budget", _memory.MIN_BUDGET)
    cache = StoredDocFeatures(True)
    blocks = [np.random.default_rng(i).normal(size=(2, 20000, 64)).astype(np.float32) for i in range(5)]  # 10 MB each
    for i, block in enumerate(blocks):
        cache.put("k" * 32, [(str(i),)], [DocFeatures(block, (0, 1))], 64, "first")
    assert _store.resident_bytes() <= _memory.MIN_BUDGET
    for i in (0, 4):
        [found] = cache.get("k" * 32, [(str(i),)], (0, 1), 64, "first")
        np.testing.assert_array_equal(found.data, blocks[i])
    assert cache.get("k" * 32, [("4",)], (2,), 64, "first") == [None]  # a layer it does not hold
    assert cache.get("k" * 32, [("4",)], (0, 1), 64, "first", text_width=32) == [None]  # no text vector stored
    _store.clear()


@pytest.mark.slow
def test_similarity_with_other_features_is_a_clear_error(make_nlp):
    doc = make_nlp()(TEXT)
    other = make_nlp(tensor_layers=[-2, -1], tensor_combine="concat")("EU officials")
    with pytest.raises(ValueError, match="width 32 and 64"):
        doc[0:2].similarity(other[0:2])
    assert doc.similarity(other) == pytest.approx(float(doc.vector @ other.vector), rel=1e-5)  # one doc vector


@pytest.mark.parametrize("combine", ["mean", "sum", "concat"])
def test_empty_doc_gives_an_empty_tensor_of_the_right_width(make_nlp, combine):
    nlp = make_nlp(tensor_layers=[-2, -1], tensor_combine=combine)
    width = 64 if combine == "concat" else 32
    for text in ("", "   "):
        doc = nlp(text)
        assert doc.tensor.shape == (len(doc), width)
    assert nlp("a b").tensor.shape == (2, width)


def test_component_refuses_what_is_not_a_doc(make_nlp):
    nlp = make_nlp()
    component = nlp.get_pipe("contextembed")
    for bad in (None, "raw text", 3):
        with pytest.raises(TypeError, match="the doc is .*takes spacy.tokens.Doc objects"):
            component(bad)
    docs = [nlp.make_doc("fine"), None]
    with pytest.raises(TypeError, match=r"item 1 of the stream is NoneType"):
        list(component.pipe(docs))


@pytest.mark.parametrize("backend, message", [("onnx", "backend"), ("openvino", "static vectors are a table")])
def test_a_backend_the_encoder_cannot_use_is_refused(tmp_path, backend, message):
    from contextembed.encoders import write_word2vec

    write_word2vec(tmp_path / "vectors.txt", ["peter", "met"], np.ones((2, 4), np.float32))
    nlp = spacy.blank("en")
    with pytest.raises(Exception, match=message):
        nlp.add_pipe("contextembed", config={"encoder": {"name": str(tmp_path / "vectors.txt"), "backend": backend}})
        nlp("Peter met")


def test_the_frozen_encoder_reports_no_loss_and_spacy_train_shows_no_column_for_it(make_nlp):
    """Issue 38 item 12: ``spacy train`` printed a "LOSS CONTEXTEMBED" column that was always 0.00.
    The component is not trainable (as spaCy's frozen components are not in the table), yet its
    update still feeds the listeners, whose loss and mix train."""
    import io

    from spacy.training.loggers import console_logger

    from spacy_helpers import listeners_of, ner_examples

    nlp = make_nlp(ner={"layers": "all", "combine": "scalar_mix"})
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    assert nlp.get_pipe("contextembed").is_trainable is False
    [listener] = listeners_of(nlp.get_pipe("ner"))
    for _ in range(2):
        losses = nlp.update(ner_examples(nlp), sgd=optimizer)
    assert set(losses) == {"ner"} and losses["ner"] > 0
    assert np.all(listener.layers[0].get_param("weights") != 0)  # the listener got batches and trained
    stdout = io.StringIO()
    log_step, finalize = console_logger(progress_bar=False)(nlp, stdout, io.StringIO())
    log_step({"epoch": 0, "step": 2, "losses": losses, "other_scores": {}, "score": 0.5, "checkpoints": []})
    finalize()
    header = stdout.getvalue().splitlines()[0].upper()
    assert "LOSS NER" in header and "CONTEXTEMBED" not in header
