"""A fitted estimator or a saved pipeline is bound to the model it was fitted with.

It records the model's resolved location and a fingerprint of its files; loading or transforming
with another model found at that path (or under that relative name in another working directory)
raises ModelMismatchError instead of silently producing features of another model.
"""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pytest
import spacy

from contextembed.errors import ModelFormatError, ModelMismatchError, ModelNotFoundError
from contextembed.sklearn import TextEmbedder, TokenEmbedder, clear_cache, clear_encoders

SENTENCES = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["the", "quick", "brown", "fox"]]
TAGS = [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"], ["O", "O", "O", "O"]]


def _perturbed_copy(source, target):
    """The same model with one weight changed by 1e-3 (all other files identical)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    state = load_file(target / "model.safetensors")
    name = sorted(k for k in state if k.endswith("query.weight"))[0]
    state[name][0, 0] += 1e-3
    save_file(state, target / "model.safetensors", metadata={"format": "pt"})


def _fresh_process_state():
    clear_cache()
    clear_encoders()


@pytest.fixture(autouse=True)
def _start_fresh():
    """These tests compare outputs bit for bit; fp32 encodings cached by earlier tests hold their own
    batch's (documented, below 1e-5) batch effect, so start from an empty cache."""
    _fresh_process_state()
    yield


def _fit(spec):
    return TokenEmbedder(str(spec), layers="all", combine="mean", device="cpu", precision="fp32").fit(SENTENCES)


def test_relative_path_is_bound_to_the_model_seen_at_fit(tmp_path, monkeypatch, tiny_bert_dir, tiny_roberta_dir):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    shutil.copytree(tiny_bert_dir, first / "model")
    shutil.copytree(tiny_roberta_dir, second / "model")  # another model under the same relative name
    monkeypatch.chdir(first)
    embedder = _fit("model")
    before = embedder.transform(SENTENCES)
    assert embedder.get_params()["encoder"] == "model"  # the parameter is kept as given
    data = pickle.dumps(embedder)

    monkeypatch.chdir(second)
    _fresh_process_state()
    np.testing.assert_array_equal(pickle.loads(data).transform(SENTENCES), before)  # the fitted model, by its absolute path

    shutil.rmtree(first / "model")
    _fresh_process_state()
    with pytest.raises(ModelMismatchError, match=r"fitted with the model at .*first/model .*now at .*second/model has other files"):
        pickle.loads(data)

    shutil.rmtree(second / "model")
    shutil.copytree(tiny_bert_dir, second / "model")  # the project moved: the same files elsewhere
    _fresh_process_state()
    np.testing.assert_array_equal(pickle.loads(data).transform(SENTENCES), before)

    shutil.rmtree(second / "model")
    _fresh_process_state()
    with pytest.raises(ModelNotFoundError, match="does not exist any more"):
        pickle.loads(data)


def test_other_weights_at_the_same_path_are_refused_at_load(tmp_path, tiny_bert_dir):
    path = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, path)
    data = pickle.dumps(_fit(path))
    shutil.rmtree(path)
    _perturbed_copy(tiny_bert_dir, path)
    _fresh_process_state()
    with pytest.raises(ModelMismatchError, match=f"the model now at {path} has other files"):
        pickle.loads(data)


def test_other_weights_are_refused_at_transform(tmp_path, tiny_bert_dir):
    """The model changes on disk after fit; a process that loads it anew refuses it."""
    path = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, path)
    embedder = TextEmbedder(str(path), layers=-1, device="cpu", precision="fp32").fit(["a text", "another"])
    shutil.rmtree(path)
    _perturbed_copy(tiny_bert_dir, path)
    _fresh_process_state()
    with pytest.raises(ModelMismatchError, match="weights, config or tokenizer changed"):
        embedder.transform(["a text"])


def test_a_damaged_embedded_copy_is_refused(tmp_path, tiny_bert_dir):
    embedder = TokenEmbedder(str(tiny_bert_dir), layers=-1, combine="concat", embed_weights=True,
                             device="cpu", precision="fp32").fit(SENTENCES)
    data = pickle.dumps(embedder)
    restored = pickle.loads(data)  # unpacks into the temporary directory
    weights = next(p for p in __import__("pathlib").Path(restored.encoder_ref_.spec).iterdir() if p.suffix == ".safetensors")
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF  # same size, other content
    weights.write_bytes(bytes(raw))
    _fresh_process_state()
    try:
        with pytest.raises(ModelFormatError, match="does not match the fingerprint recorded when it was saved"):
            pickle.loads(data)
    finally:
        shutil.rmtree(weights.parent)


def _pipeline(name):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": name, "device": "cpu", "precision": "fp32"},
                                         "tensor_layers": -1})
    return nlp


def test_saved_spacy_pipeline_is_bound_to_its_model(tmp_path, monkeypatch, tiny_bert_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    monkeypatch.chdir(tmp_path)
    nlp = _pipeline("model")  # relative, as users write configs
    before = nlp("EU rejects German call").tensor
    nlp.to_disk(tmp_path / "pipeline")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # 'model' does not resolve here, the recorded absolute path does
    np.testing.assert_array_equal(spacy.load(tmp_path / "pipeline")("EU rejects German call").tensor, before)

    shutil.rmtree(model)
    _perturbed_copy(tiny_bert_dir, model)
    reloaded = spacy.load(tmp_path / "pipeline")
    with pytest.raises(ModelMismatchError, match="has other files"):
        reloaded("EU rejects German call")


def test_pipeline_saved_before_its_encoder_ran_still_records_it(tmp_path, tiny_bert_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    _pipeline(str(model)).to_disk(tmp_path / "pipeline")  # never run: the encoder was never loaded
    shutil.rmtree(model)
    _perturbed_copy(tiny_bert_dir, model)
    with pytest.raises(ModelMismatchError):
        spacy.load(tmp_path / "pipeline")("text")
