"""Fixtures for the scikit-learn adapter tests: toy NER data and a tiny static-vectors file."""

from __future__ import annotations

import numpy as np
import pytest

from contextembed.encoders._static.vectors import write_word2vec

SENTENCES = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Peter", "Blackburn"],
    ["BRUSSELS", "1996-08-22"],
    ["The", "European", "Commission", "said", "on", "Thursday", "it", "disagreed", "."],
    ["Germany", "'s", "representative", "to", "the", "EU", "said", "."],
    ["Fischler", "proposed", "EU-wide", "measures", "after", "reports", "from", "Britain", "."],
]
TAGS_IOB2 = [
    ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"],
    ["B-PER", "I-PER"],
    ["B-LOC", "O"],
    ["O", "B-ORG", "I-ORG", "O", "O", "O", "O", "O", "O"],
    ["B-LOC", "O", "O", "O", "O", "B-ORG", "O", "O"],
    ["B-PER", "O", "B-MISC", "O", "O", "O", "O", "B-LOC", "O"],
]


@pytest.fixture
def sentences():
    return [list(s) for s in SENTENCES]


@pytest.fixture
def tags():
    return [list(t) for t in TAGS_IOB2]


@pytest.fixture(scope="session")
def bert(tiny_bert_dir) -> str:
    """The tiny BERT's directory as the ``encoder=`` string."""
    return str(tiny_bert_dir)


@pytest.fixture(scope="session")
def static_path(tmp_path_factory) -> str:
    """A word2vec text file: a lowercase vocabulary of the toy sentences, 8 dimensions."""
    words = sorted({w.lower() for s in SENTENCES for w in s} | {"the", "a"})
    vectors = np.random.default_rng(0).normal(size=(len(words), 8)).astype(np.float32)
    path = tmp_path_factory.mktemp("static") / "vectors.txt"
    write_word2vec(path, words, vectors)
    return str(path)
