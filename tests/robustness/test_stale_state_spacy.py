"""A saved spaCy pipeline is the last save, whole: nothing from an earlier save into the same
directory survives it, and an interrupted save leaves the previous one loading as it was.

The ``contextembed`` component writes its directory fresh and swaps it in (``nlp.to_disk`` calls
``component.to_disk(path / name)``); its cfg records whether weights are embedded, their
fingerprint, the model and the options that shape the features, and ``spacy.load`` checks them.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import spacy

import contextembed.spacy  # noqa: F401  (registers the factory)
from contextembed.encoders import write_word2vec
from contextembed.errors import ProvenanceError

TEXT = "Peter met EU officials in Brussels"
WORDS = ["Peter", "met", "EU", "officials", "in", "Brussels"]


def _vectors(path, seed: int, width: int = 8):
    """A small static-vectors file (different seed or width: another model)."""
    write_word2vec(path, WORDS, np.random.default_rng(seed).normal(size=(len(WORDS), width)).astype("f"))
    return path


def _pipeline(spec, **options):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(spec), "device": "cpu", "precision": "fp32"},
                                         **options})
    return nlp


def _saved(nlp, path):
    """``nlp.to_disk(path)``; returns the features of the pipeline as it was saved."""
    tensor = nlp(TEXT).tensor
    nlp.to_disk(path)
    return tensor


def test_a_save_without_embedded_weights_over_an_embedded_one_loads_the_new_model(tmp_path, tiny_bert_dir):
    model_a = tmp_path / "bert"
    shutil.copytree(tiny_bert_dir, model_a)
    _saved(_pipeline(model_a, embed_weights=True), tmp_path / "pipeline")
    expected = _saved(_pipeline(_vectors(tmp_path / "b.txt", 1)), tmp_path / "pipeline")

    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXT).tensor, expected)
    assert not (tmp_path / "pipeline" / "contextembed" / "encoder").exists()


def test_an_embedded_save_of_another_model_over_an_embedded_one_loads_the_new_model(tmp_path):
    _saved(_pipeline(_vectors(tmp_path / "a.txt", 0, width=8), embed_weights=True), tmp_path / "pipeline")
    expected = _saved(_pipeline(_vectors(tmp_path / "b.txt", 1, width=6), embed_weights=True), tmp_path / "pipeline")
    (tmp_path / "a.txt").unlink(), (tmp_path / "b.txt").unlink()  # only the embedded copy is left

    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXT).tensor, expected)


def test_an_interrupted_save_leaves_the_previous_save_loading_as_it_was(tmp_path, monkeypatch):
    expected = _saved(_pipeline(_vectors(tmp_path / "a.txt", 0), embed_weights=True), tmp_path / "pipeline")
    second = _pipeline(_vectors(tmp_path / "b.txt", 1), embed_weights=True)
    encoder_class = type(second.get_pipe("contextembed").encoder)
    original_save = encoder_class.save

    def save_then_fail(self, directory, **kwargs):
        original_save(self, directory, **kwargs)  # the new weights are written ...
        raise OSError("No space left on device")  # ... and the save fails before it is complete

    monkeypatch.setattr(encoder_class, "save", save_then_fail)
    with pytest.raises(OSError, match="No space left"):
        second.to_disk(tmp_path / "pipeline")
    monkeypatch.undo()

    component_dir = tmp_path / "pipeline" / "contextembed"
    assert not [p.name for p in component_dir.parent.iterdir() if p.name.endswith(".partial")]
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXT).tensor, expected)


def test_a_component_saved_with_the_encoder_excluded_drops_the_earlier_copy(tmp_path):
    source = _vectors(tmp_path / "a.txt", 0)
    nlp = _pipeline(source, embed_weights=True)
    expected = nlp(TEXT).tensor
    component = nlp.get_pipe("contextembed")
    component.to_disk(tmp_path / "component")
    assert (tmp_path / "component" / "encoder").is_dir()
    component.to_disk(tmp_path / "component", exclude=["encoder"])  # refers to the model by path now

    assert sorted(p.name for p in (tmp_path / "component").iterdir()) == ["cfg"]
    loaded = _pipeline(source, embed_weights=True)
    loaded.get_pipe("contextembed").from_disk(tmp_path / "component")
    np.testing.assert_array_equal(loaded(TEXT).tensor, expected)


def test_a_changed_feature_option_is_refused_on_load(tmp_path, tiny_bert_dir):
    _saved(_pipeline(tiny_bert_dir, subword_pooling="first"), tmp_path / "pipeline")
    with pytest.raises(ProvenanceError, match="subword_pooling='first'.*subword_pooling='mean'") as raised:
        spacy.load(tmp_path / "pipeline", config={"components": {"contextembed": {"subword_pooling": "mean"}}})
    assert raised.value.field == "subword_pooling"
    assert "config.cfg" in str(raised.value)


def test_a_save_into_the_directory_its_embedded_encoder_was_loaded_from_keeps_working(tmp_path):
    expected = _saved(_pipeline(_vectors(tmp_path / "a.txt", 0), embed_weights=True), tmp_path / "pipeline")
    (tmp_path / "a.txt").unlink()
    loaded = spacy.load(tmp_path / "pipeline")
    loaded.to_disk(tmp_path / "pipeline")  # spacy train saves model-last over itself like this
    np.testing.assert_array_equal(loaded(TEXT).tensor, expected)
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")(TEXT).tensor, expected)


def test_a_save_without_weights_over_the_only_copy_of_its_encoder_is_refused(tmp_path):
    _saved(_pipeline(_vectors(tmp_path / "a.txt", 0), embed_weights=True), tmp_path / "pipeline")
    (tmp_path / "a.txt").unlink()
    loaded = spacy.load(tmp_path / "pipeline")
    with pytest.raises(ValueError, match="embed_weights"):
        loaded.get_pipe("contextembed").to_disk(tmp_path / "pipeline" / "contextembed", exclude=["encoder"])
    assert (tmp_path / "pipeline" / "contextembed" / "encoder").is_dir()  # nothing was replaced
