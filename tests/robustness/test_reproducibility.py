"""The same input gives the same output whatever else is in the batch and whatever ran before.

Tolerances (docs/reliability.md): bf16, the default on CPUs with native bf16 and on CUDA, is
bit-identical across batch compositions (transformers pad every forward pass to a multiple of 16
positions, so attention never reads a partial block of keys), and so is int8 (integer products are
exact and its activation scales are per token); fp32 agrees within 1e-5.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import spacy

from contextembed import load_encoder
from contextembed.sklearn import TextEmbedder, TokenEmbedder, clear_cache

WORDS = ("Peter Blackburn met EU officials in Brussels on Tuesday the quick brown fox jumps over lazy dog "
         "contextual embeddings turn pretrained encoders into features unbelievably long words").split()


def _sentences(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(0, 30))] for _ in range(n)]


TOLERANCE = {"bf16": 0.0, "int8": 0.0, "fp32": 1e-5}


def _assert_batch_invariant(encoder, sentences, tolerance):
    batched = encoder.encode(sentences)
    for order_seed in (1, 2):
        shuffled = list(range(len(sentences)))
        random.Random(order_seed).shuffle(shuffled)
        other = encoder.encode([sentences[i] for i in shuffled])
        for position, i in enumerate(shuffled):
            assert np.abs(other[position] - batched[i]).max(initial=0.0) <= tolerance
    for i, sentence in enumerate(sentences):
        alone = encoder.encode([sentence])[0]
        assert np.abs(alone - batched[i]).max(initial=0.0) <= tolerance, f"sentence {i} alone vs in a batch"


@pytest.mark.parametrize("precision", ["bf16", "int8", "fp32"])
def test_transformer_vectors_do_not_depend_on_the_batch(tiny_bert_dir, precision):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision=precision)
    _assert_batch_invariant(encoder, _sentences(40, seed=0), TOLERANCE[precision])


@pytest.mark.slow
@pytest.mark.pretrained
@pytest.mark.parametrize("precision", ["bf16", "int8", "fp32"])
def test_minilm_vectors_do_not_depend_on_the_batch(minilm, precision):
    encoder = minilm if precision == "fp32" else load_encoder("minilm-l6", device="cpu", precision=precision)
    _assert_batch_invariant(encoder, _sentences(30, seed=1), TOLERANCE[precision])


@pytest.mark.parametrize("precision", ["bf16", "int8", "fp32"])
def test_elmo_vectors_do_not_depend_on_the_batch(tiny_elmo_dir, precision):
    encoder = load_encoder(tiny_elmo_dir, device="cpu", precision=precision)
    tolerance = TOLERANCE["fp32" if precision == "int8" else precision]  # int8 keeps the biLSTM in fp32
    _assert_batch_invariant(encoder, _sentences(30, seed=2), tolerance)


def test_cache_history_does_not_change_token_features(tiny_bert_dir):
    """transform(B) gives the same rows whether or not earlier transforms, which encoded some of B's
    sentences in other batches, filled the cache first (default precision: bf16 where the CPU has it)."""
    b = _sentences(20, seed=4)
    embedder = TokenEmbedder(str(tiny_bert_dir), layers="all", combine="concat", device="cpu").fit(b)
    clear_cache()
    cold = embedder.transform(b)
    clear_cache()
    for i in (16, 18, 19):  # each alone first: without padding to a multiple of 16 these differ in bf16
        embedder.transform([b[i]])
    warm = embedder.transform(b)
    assert np.abs(cold - warm).max() <= TOLERANCE.get(_precision(embedder), 1e-5)


def _precision(embedder) -> str:
    from contextembed._runtime.devices import resolve_device, resolve_precision

    return resolve_precision(embedder.precision, resolve_device(embedder.device))


def test_text_features_do_not_depend_on_the_other_texts(tiny_bert_dir):
    texts = [" ".join(s) for s in _sentences(25, seed=5)]
    embedder = TextEmbedder(str(tiny_bert_dir), layers="all", combine="mean", device="cpu").fit(texts)
    together = embedder.transform(texts)
    clear_cache()
    one_by_one = np.vstack([embedder.transform([text]) for text in texts])
    assert np.abs(together - one_by_one).max() <= TOLERANCE.get(_precision(embedder), 1e-5)


def test_spacy_tensors_do_not_depend_on_batch_size(tiny_bert_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(tiny_bert_dir), "device": "cpu"},
                                         "tensor_layers": "all"})
    texts = [" ".join(s) for s in _sentences(24, seed=6)]
    precision = nlp.get_pipe("contextembed").encoder.precision
    reference = [doc.tensor for doc in nlp.pipe(texts, batch_size=1)]
    for batch_size in (5, 64):
        for doc, expected in zip(nlp.pipe(texts, batch_size=batch_size), reference):
            assert np.abs(doc.tensor - expected).max(initial=0.0) <= TOLERANCE.get(precision, 1e-5)


def test_caching_adapters_accept_int8_and_history_does_not_matter(tiny_bert_dir):
    b = _sentences(20, seed=7)
    embedder = TokenEmbedder(str(tiny_bert_dir), layers="all", combine="concat", device="cpu", precision="int8").fit(b)
    clear_cache()
    cold = embedder.transform(b)
    clear_cache()
    for i in (16, 18, 19):
        embedder.transform([b[i]])
    assert np.array_equal(embedder.transform(b), cold)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(tiny_bert_dir), "device": "cpu", "precision": "int8"},
                                         "tensor_layers": "all"})
    texts = [" ".join(s) for s in b]
    together = [doc.tensor for doc in nlp.pipe(texts, batch_size=8)]
    assert all(np.array_equal(nlp(text).tensor, tensor) for text, tensor in zip(texts, together))
