"""``nlp.to_disk`` -> ``spacy.load``: identical tensors and entities; the encoder by name or embedded."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import spacy

from spacy_helpers import encoder_config, ner_config, ner_examples

TEXTS = ["Peter Blackburn met EU officials in Brussels", "New York Times reported behaviour in Washington", ""]


def trained_pipeline(model_dir, **component_options):
    """A contextembed + NER pipeline trained until it finds entities in ``TEXTS[0]`` (something to
    compare). 30 updates found none in about one session in ten while the tiny BERT's vocabulary
    was trained anew in each session (now a fixture file); the loop keeps the test from resting on
    how far a fixed number of updates gets."""
    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(model_dir), **component_options})
    nlp.add_pipe("ner", config=ner_config(layers="all"))
    optimizer = nlp.initialize(lambda: ner_examples(nlp))
    optimizer.learn_rate = 0.01
    for update in range(200):
        nlp.update(ner_examples(nlp), sgd=optimizer)
        if update >= 29 and any(nlp(TEXTS[0]).ents):
            break
    return nlp


def assert_same_output(nlp, loaded):
    for a, b in zip(nlp.pipe(TEXTS), loaded.pipe(TEXTS)):
        np.testing.assert_array_equal(a.tensor, b.tensor)
        assert [(e.start, e.end, e.label_) for e in a.ents] == [(e.start, e.end, e.label_) for e in b.ents]
    [listener] = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "contextembed_listener"]
    [loaded_listener] = [n for n in loaded.get_pipe("ner").model.walk() if n.name == "contextembed_listener"]
    np.testing.assert_array_equal(listener.layers[0].get_param("weights"), loaded_listener.layers[0].get_param("weights"))


def test_roundtrip_refers_to_the_encoder_by_path(tiny_bert_dir, tmp_path):
    nlp = trained_pipeline(tiny_bert_dir)
    assert any(nlp(TEXTS[0]).ents)  # something to compare
    nlp.to_disk(tmp_path / "pipeline")
    assert not (tmp_path / "pipeline" / "contextembed" / "encoder").exists()
    assert nlp.config["components"]["contextembed"]["encoder"]["name"] == str(tiny_bert_dir)
    loaded = spacy.load(tmp_path / "pipeline")
    assert_same_output(nlp, loaded)


def test_roundtrip_with_embedded_weights(tiny_bert_dir, tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model_dir)
    nlp = trained_pipeline(model_dir, embed_weights=True)
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(model_dir)  # the original is gone: the pipeline must use its own copy
    loaded = spacy.load(tmp_path / "pipeline")
    assert_same_output(nlp, loaded)
    assert str(tmp_path / "pipeline") in loaded.get_pipe("contextembed").encoder.spec


def test_embedded_static_vectors(tmp_path):
    from contextembed.encoders import write_word2vec

    rng = np.random.default_rng(0)
    words = ["peter", "met", "eu", "officials", "in", "brussels"]
    write_word2vec(tmp_path / "vectors.txt", words, rng.normal(size=(6, 8)).astype("f"))
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(tmp_path / "vectors.txt"), "embed_weights": True})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    nlp.to_disk(tmp_path / "pipeline")  # saved again to the same place, as spacy train does each epoch
    (tmp_path / "vectors.txt").unlink()
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)


def test_embedded_elmo(tiny_elmo_dir, tmp_path):
    source = tmp_path / "elmo"
    shutil.copytree(tiny_elmo_dir, source)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={**encoder_config(source), "embed_weights": True})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    shutil.rmtree(source)
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)


def test_to_bytes_roundtrip(tiny_bert_dir):
    nlp = trained_pipeline(tiny_bert_dir)
    loaded = spacy.blank("en")
    loaded.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    loaded.add_pipe("ner", config=ner_config(layers="all"))
    loaded.from_bytes(nlp.to_bytes())
    assert_same_output(nlp, loaded)


def test_pickled_doc_keeps_vectors(make_nlp):
    import pickle

    doc = make_nlp()(TEXTS[0])
    restored = pickle.loads(pickle.dumps(doc))
    np.testing.assert_array_equal(restored.vector, doc.vector)
    assert restored[0].similarity(restored[1]) == pytest.approx(doc[0].similarity(doc[1]))


@pytest.mark.pretrained
def test_named_model_is_saved_by_name(minilm, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": "minilm-l6", "device": "cpu", "precision": "fp32"}})
    before = nlp(TEXTS[0]).tensor
    nlp.to_disk(tmp_path / "pipeline")
    saved = spacy.util.load_config(tmp_path / "pipeline" / "config.cfg")
    assert saved["components"]["contextembed"]["encoder"]["name"] == "minilm-l6"
    assert sum(f.stat().st_size for f in (tmp_path / "pipeline").rglob("*") if f.is_file()) < 200_000
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXTS[0]).tensor, before)
