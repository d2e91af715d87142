"""Encoder.save for every family: load_encoder(directory) reads back an identical encoder."""

from __future__ import annotations

import numpy as np
import pytest


from contextembed import load_encoder
from contextembed.encoders._static.vectors import write_word2vec

SENTENCES = [["Paris", "is", "lovely"], ["naïve", "unknownword", "paris"], []]


def _assert_same(a, b, sentences=SENTENCES):
    for x, y in zip(a.encode(sentences), b.encode(sentences)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_transformer_round_trip(tiny_bert_dir, tmp_path, precision):
    original = load_encoder(tiny_bert_dir, device="cpu", precision=precision)
    original.save(tmp_path / "copy")
    copy = load_encoder(tmp_path / "copy", device="cpu", precision=precision)
    assert copy.family == "transformer" and copy.n_layers == original.n_layers
    assert copy.tokenizer.tokenize("Paris naïve") == original.tokenizer.tokenize("Paris naïve")
    _assert_same(original, copy)


def test_transformer_fp32_copy_holds_the_original_weights(tiny_bert_dir, tmp_path):
    load_encoder(tiny_bert_dir, device="cpu", precision="fp32").save(tmp_path / "copy")
    _assert_same(load_encoder(tiny_bert_dir, device="cpu", precision="fp32"),
                 load_encoder(tmp_path / "copy", device="cpu", precision="fp32"))


def test_int8_encoders_save_the_weights_they_were_quantized_from(tiny_bert_dir, tmp_path):
    quantized = load_encoder(tiny_bert_dir, device="cpu", precision="int8")
    quantized.save(tmp_path / "int8")
    _assert_same(load_encoder(tiny_bert_dir, device="cpu", precision="fp32"),
                 load_encoder(tmp_path / "int8", device="cpu", precision="fp32"))


def test_static_round_trip_keeps_lookup_options(tmp_path):
    words = ["paris", "is", "lovely", "naïve"]
    vectors = np.random.default_rng(0).normal(size=(len(words), 6)).astype(np.float32)
    write_word2vec(str(tmp_path / "vectors.txt"), words, vectors)
    original = load_encoder(str(tmp_path / "vectors.txt"), oov="mean", lowercase=True)
    original.save(tmp_path / "copy")
    copy = load_encoder(tmp_path / "copy")
    assert (copy.family, copy.lowercase, copy.oov) == ("static", True, "mean")
    _assert_same(original, copy)
    np.testing.assert_allclose(copy.encode([["unknownword"]])[0][0, 0], vectors.mean(axis=0), atol=1e-5)
    # options given at load time override the saved ones
    assert not load_encoder(tmp_path / "copy", oov="zeros").encode([["unknownword"]])[0].any()


def test_elmo_saved_in_bf16_loads_in_fp32(tiny_elmo_dir, tmp_path):
    bf16 = load_encoder(tiny_elmo_dir, device="cpu", precision="bf16")
    bf16.save(tmp_path / "copy")
    _assert_same(bf16, load_encoder(tmp_path / "copy", device="cpu", precision="bf16"))
    assert load_encoder(tmp_path / "copy", device="cpu", precision="fp32").encode(SENTENCES)[0].dtype == np.float32


def test_elmo_maps_batch_tokens_to_words_and_rejects_windows(tiny_elmo_dir):
    assert load_encoder(tiny_elmo_dir, device="cpu", batch_tokens=64).batch_words == 64
    assert load_encoder(tiny_elmo_dir, device="cpu", batch_words=32, window=None).batch_words == 32  # None: unset
    with pytest.raises(ValueError, match="batch_tokens=64 and batch_words=32 both set"):  # neither silently wins
        load_encoder(tiny_elmo_dir, device="cpu", batch_tokens=64, batch_words=32)
    with pytest.raises(ValueError, match="batch_tokens=0 is out of range"):  # named as given
        load_encoder(tiny_elmo_dir, device="cpu", batch_tokens=0)
    with pytest.raises(ValueError, match="window=128 applies to transformer encoders.*ELMo"):
        load_encoder(tiny_elmo_dir, device="cpu", window=128)
    with pytest.raises(ValueError, match="window=128 and pad_multiple=16 apply to transformer encoders"):
        load_encoder(tiny_elmo_dir, device="cpu", window=128, pad_multiple=16)
