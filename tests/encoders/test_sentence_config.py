"""A sentence-transformers directory's own sentence vector: read from its files, checked field by
field, and reproduced by ``TextEmbedder(text_pooling="model")`` against a plain reference."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from contextembed.encoders.transformer._sentence_config import SentencePooling, read_sentence_pooling
from contextembed.errors import FileFormatError
from contextembed.sklearn import TextEmbedder

TEXTS = ["the quick brown fox", "Peter Blackburn met EU officials in Brussels .", "", "naïve café 3,5 €"]
MODULES = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
           {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
POOLING = {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
           "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}


def _write_sentence_files(path, modules=MODULES, pooling=POOLING, config=None):
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if config is not None:
        (path / "sentence_bert_config.json").write_text(json.dumps(config))


@pytest.fixture
def sentence_dir(tiny_bert_dir, tmp_path):
    """The tiny BERT as a sentence-transformers directory (mean pooling, normalised, 12 pieces)."""
    path = tmp_path / "sentence"
    shutil.copytree(tiny_bert_dir, path)
    _write_sentence_files(path, config={"max_seq_length": 12, "do_lower_case": False})
    return path


def test_the_directory_says_how_its_sentence_vector_is_made(sentence_dir):
    assert read_sentence_pooling(str(sentence_dir), 32, 40) == SentencePooling("mean", True, 12, False)


def test_a_plain_model_directory_has_none(tiny_bert_dir):
    assert read_sentence_pooling(str(tiny_bert_dir), 32, 40) is None


@pytest.mark.parametrize("modules, pooling, config, match", [
    ("[[[", POOLING, None, r"modules\.json: is not JSON"),
    ({"0": 1}, POOLING, None, r"modules\.json: expected a non-empty JSON list"),
    ([{"type": 3, "path": ""}], POOLING, None, r"module 0 must be an object with a string 'type'"),
    (MODULES[1:], POOLING, None, r"module 0 must be the sentence_transformers\.models\.Transformer"),
    (MODULES[:2] + [{"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"}], POOLING, None,
     r"modules \['Pooling', 'Dense'\] after the Transformer"),
    ([MODULES[0], {**MODULES[1], "path": "../elsewhere"}], POOLING, None, r"path '\.\./elsewhere', outside"),
    (MODULES, {**POOLING, "word_embedding_dimension": 64}, None, r"word_embedding_dimension is 64, but .* 32"),
    (MODULES, {**POOLING, "pooling_mode_cls_token": True}, None, r"2 pooling modes are true"),
    (MODULES, {**POOLING, "pooling_mode_mean_tokens": False}, None, r"0 pooling modes are true \(none\)"),
    (MODULES, {**POOLING, "pooling_mode_mean_sqrt_len_tokens": True}, None, r"pooling_mode_mean_sqrt_len_tokens is true"),
    (MODULES, {**POOLING, "pooling_mode_mean_tokens": "yes"}, None, r"pooling_mode_mean_tokens is 'yes'"),
    (MODULES, POOLING, {"max_seq_length": 4000}, r"sentence_bert_config\.json: max_seq_length is 4000"),
    (MODULES, POOLING, {"max_seq_length": 12.0}, r"max_seq_length is 12\.0"),
    (MODULES, POOLING, {"max_seq_length": True}, r"max_seq_length is True"),
    (MODULES, POOLING, {"do_lower_case": 1}, r"do_lower_case is 1"),
], ids=["not json", "not a list", "no type", "no transformer first", "dense", "outside", "other width",
        "two modes", "no mode", "sqrt mode", "mode not bool", "too long", "float length", "bool length",
        "lowercase not bool"])
def test_a_damaged_or_contradictory_file_is_an_error_naming_it(tiny_bert_dir, tmp_path, modules, pooling, config, match):
    path = tmp_path / "sentence"
    shutil.copytree(tiny_bert_dir, path)
    _write_sentence_files(path, [] if isinstance(modules, str) else modules, pooling, config)
    if isinstance(modules, str):
        (path / "modules.json").write_text(modules)
    with pytest.raises(FileFormatError, match=match):
        read_sentence_pooling(str(path), 32, 40)


def _reference(model_dir, texts, max_length=None):
    """The last layer's mean over every position of each text's input, special tokens included,
    then unit length: what sentence-transformers computes, with the model and tokenizer alone."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    with torch.inference_mode():
        for text in texts:
            inputs = tokenizer(text, return_tensors="pt", truncation=max_length is not None, max_length=max_length)
            hidden = model(**inputs).last_hidden_state[0]
            vector = hidden.mean(dim=0)
            out.append((vector / vector.norm()).numpy())
    return np.stack(out)


@pytest.mark.parametrize("text_pooling", ["model", "model_truncated"])
def test_the_models_own_vector_is_reproduced(sentence_dir, text_pooling):
    embedder = TextEmbedder(str(sentence_dir), layers=-1, combine="mean", text_pooling=text_pooling,
                            precision="fp32", cache=None).fit(TEXTS)
    limit = 12 if text_pooling == "model_truncated" else None  # the directory's max_seq_length
    np.testing.assert_allclose(embedder.transform(TEXTS), _reference(sentence_dir, TEXTS, limit), atol=1e-5)


def test_a_long_text_is_truncated_as_the_model_does_or_read_in_windows(sentence_dir):
    long = " ".join(["unaffable"] * 20 + ["quick", "brown"] * 10)
    truncated = TextEmbedder(str(sentence_dir), layers=-1, combine="mean", text_pooling="model_truncated",
                             precision="fp32").fit([long])
    np.testing.assert_allclose(truncated.transform([long]), _reference(sentence_dir, [long], max_length=12), atol=1e-5)
    windows = TextEmbedder(str(sentence_dir), layers=-1, combine="mean", text_pooling="model", precision="fp32").fit([long])
    assert not np.allclose(windows.transform([long]), truncated.transform([long]), atol=1e-3)  # nothing dropped


def test_lowercasing_is_taken_from_the_directory(sentence_dir):
    _write_sentence_files(sentence_dir, config={"max_seq_length": 12, "do_lower_case": True})
    embedder = TextEmbedder(str(sentence_dir), layers=-1, text_pooling="model", precision="fp32").fit(TEXTS)
    lower = TextEmbedder(str(sentence_dir), layers=-1, text_pooling="piece_mean", precision="fp32").fit(TEXTS)
    assert embedder.sentence_pooling_["lowercase"]
    np.testing.assert_array_equal(embedder.transform(["EU"]), embedder.transform(["eu"]))
    assert not np.array_equal(lower.transform(["EU"]), lower.transform(["eu"]))  # the cased tiny BERT


def test_the_models_own_pooling_needs_a_sentence_directory(tiny_bert_dir, tiny_elmo_dir):
    with pytest.raises(ValueError, match=r"text_pooling='model' reproduces .* has none \(no modules\.json"):
        TextEmbedder(str(tiny_bert_dir), text_pooling="model").fit(TEXTS)
    with pytest.raises(ValueError, match=r"has none"):
        TextEmbedder(str(tiny_elmo_dir), text_pooling="model_truncated").fit(TEXTS)


def test_a_cls_pooling_directory_is_pointed_to_cls(sentence_dir):
    _write_sentence_files(sentence_dir, pooling={**POOLING, "pooling_mode_mean_tokens": False,
                                                 "pooling_mode_cls_token": True})
    with pytest.raises(ValueError, match=r"pools its sentence vector by 'cls', .* text_pooling='cls'"):
        TextEmbedder(str(sentence_dir), text_pooling="model").fit(TEXTS)


def test_a_damaged_directory_is_an_error_at_fit(sentence_dir):
    (sentence_dir / "modules.json").write_text("{")
    with pytest.raises(FileFormatError, match=r"modules\.json: is not JSON"):
        TextEmbedder(str(sentence_dir), text_pooling="model").fit(TEXTS)
