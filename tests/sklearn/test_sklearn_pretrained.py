"""The adapters on the real installed models (MiniLM-L6, GloVe 6B 50d)."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed.sklearn import SequenceTagger, TextEmbedder, TokenEmbedder
from contextembed.sklearn.feature_extraction import is_cased

pytestmark = pytest.mark.pretrained


def test_shipped_models_are_uncased_so_shape_features_turn_on(minilm, glove, sentences, tags):
    assert not is_cased(minilm) and not is_cased(glove)
    tagger = SequenceTagger(TokenEmbedder("glove-6b-50d")).fit(sentences, tags)
    assert tagger.uses_shape_


def test_minilm_text_vectors_separate_topics(minilm):
    texts = ["the striker scored a late goal", "the midfielder scored twice in the match",
             "the central bank raised interest rates", "inflation pushed the bank to raise rates"]
    vectors = TextEmbedder("minilm-l6", layers=-1, combine="concat", device="cpu", precision="fp32").fit(texts).transform(texts)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = unit @ unit.T
    assert similarity[0, 1] > similarity[0, 2] and similarity[2, 3] > similarity[1, 3]


def test_minilm_token_rows_match_the_encoder(minilm, sentences):
    embedder = TokenEmbedder("minilm-l6", layers=[-2, -1], combine="concat", device="cpu", precision="fp32")
    got = embedder.fit(sentences).transform(sentences)
    expected = np.concatenate(minilm.encode(sentences, layers=[-2, -1]), axis=1)
    np.testing.assert_allclose(got, np.concatenate(list(expected), axis=-1), rtol=1e-5, atol=1e-5)
