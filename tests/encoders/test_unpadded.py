"""The flat forward (padding computed only inside attention) against the stock forward, bit for bit."""

import random
import shutil

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.encoders.transformer import _unpadded as unpadded

WORDS = "the quick brown fox jumps over lazy dog New York Times reported unaffable behaviour".split()


def _sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    # up to 60 words: longer than the tiny models' 40 positions, so windows are stitched too
    return [[rng.choice(WORDS) for _ in range(rng.randint(0, 60))] for _ in range(n)]


def _assert_same_as_stock(encoder, sentences, **options):
    assert encoder._unpadded, "the flat forward should be in use"
    flat = encoder.encode(sentences, **options)
    encoder._unpadded = False
    try:
        stock = encoder.encode(sentences, **options)
    finally:
        encoder._unpadded = True
    for i, (a, b) in enumerate(zip(flat, stock)):
        assert a.shape == b.shape and np.array_equal(a, b), f"sentence {i}: max diff {np.abs(a - b).max()}"


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_roberta_dir"])
@pytest.mark.parametrize("precision", ["bf16", "int8", "fp32"])
def test_flat_forward_is_the_stock_forward(request, fixture, precision):
    path = request.getfixturevalue(fixture)
    encoder = load_encoder(path, device="cpu", precision=precision, pad_multiple=16)
    _assert_same_as_stock(encoder, _sentences(30, seed=0))
    _assert_same_as_stock(encoder, _sentences(10, seed=1), layers=[0])  # embeddings only: no layer runs
    _assert_same_as_stock(encoder, [["fox"] * 6] * 3)  # nothing padded: no mask, like the stock forward


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_piece_sums_and_first_pieces_come_from_the_flat_states(tiny_bert_dir, precision):
    """The text path's per-window piece sums and the first-piece (CLS) vectors, bit for bit."""
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision=precision, pad_multiple=16)
    sentences = _sentences(25, seed=2)
    assert encoder._unpadded
    flat = encoder.encode_piece_means(sentences), encoder.encode_cls(sentences)
    encoder._unpadded = False
    try:
        stock = encoder.encode_piece_means(sentences), encoder.encode_cls(sentences)
    finally:
        encoder._unpadded = True
    for a, b in zip(flat, stock):
        assert a.shape == b.shape and np.array_equal(a, b), f"max diff {np.abs(a - b).max()}"


def test_sentence_pairs_keep_their_token_types(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="bf16")
    pairs = [(a[:6], b[:6]) for a, b in zip(_sentences(12, seed=2), _sentences(12, seed=3)) if a and b]
    flat = encoder.encode_pairs(pairs)
    encoder._unpadded = False
    stock = encoder.encode_pairs(pairs)
    for x, y in zip(flat, stock):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))


def test_electra_projects_its_narrower_embeddings(tiny_bert_dir, tmp_path):
    from transformers import ElectraConfig, ElectraModel

    path = tmp_path / "tiny_electra"
    shutil.copytree(tiny_bert_dir, path)
    torch.manual_seed(0)
    config = ElectraConfig(vocab_size=300, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=40)
    ElectraModel(config).save_pretrained(path)
    encoder = load_encoder(path, device="cpu", precision="bf16")
    assert encoder.model.embeddings_project is not None
    _assert_same_as_stock(encoder, _sentences(20, seed=4))


def test_fp32_and_other_models_run_the_stock_forward(tiny_bert_dir, tiny_roberta_dir):
    assert not load_encoder(tiny_bert_dir, device="cpu", precision="fp32")._unpadded  # little padding to save
    assert load_encoder(tiny_bert_dir, device="cpu", precision="fp32", pad_multiple=16)._unpadded
    model = load_encoder(tiny_bert_dir, device="cpu", precision="bf16").model
    assert unpadded.supports(model)
    for attribute, value in [("position_embedding_type", "relative_key"), ("_attn_implementation", "eager"),
                             ("is_decoder", True), ("model_type", "gpt2")]:
        had, original = hasattr(model.config, attribute), getattr(model.config, attribute, None)
        setattr(model.config, attribute, value)
        try:
            assert not unpadded.supports(model), attribute
        finally:
            setattr(model.config, attribute, original) if had else delattr(model.config, attribute)
    model.encoder.layer[1].chunk_size_feed_forward = 8
    assert not unpadded.supports(model)
    assert not unpadded.supports(torch.nn.Linear(2, 2))
