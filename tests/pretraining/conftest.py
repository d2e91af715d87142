"""Small corpora and a tiny pretrained BERT shared by the pretraining tests."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the committee", "Peter", "the bank", "Maria"]
VERBS = ["saw", "liked", "bought", "visited", "praised", "ignored", "met", "followed"]
OBJECTS = ["the house", "a red car", "the river", "Brussels", "the market", "a small boat", "London", "the garden"]
ENDINGS = ["yesterday", "on Tuesday", "in the morning", "again", "quickly", "with care", "twice", "at night"]


def make_documents(n_documents: int, sentences: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join([rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(ENDINGS), "."])
         for _ in range(sentences)]
        for _ in range(n_documents)
    ]


def write_corpus(path: Path, documents: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    return path


#: a one-layer, 32-wide BERT (config file for --size)
TINY_FIELDS = {"preset": "tiny", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
               "intermediate_size": 64}


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", make_documents(24, 8))


@pytest.fixture(scope="session")
def tiny_size(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("size") / "tiny.json"
    path.write_text(json.dumps(TINY_FIELDS), encoding="utf-8")
    return str(path)


def tiny_training(**overrides):
    from contextembed.pretraining import TrainingOptions

    options = dict(max_steps=4, batch_size=8, learning_rate=1e-3, log_every=2, checkpoint_every=2,
                   device="cpu", show_progress=False, held_out_fraction=0.2)
    options.update(overrides)
    return TrainingOptions(**options)


@pytest.fixture(scope="session")
def pretrained_mlm(tmp_path_factory, corpus_file, tiny_size):
    """``(out_dir, summary)`` of a 4-step MLM+NSP run on the small corpus."""
    from contextembed.pretraining import MLMConfig, pretrain_mlm

    out = tmp_path_factory.mktemp("mlm_out")
    config = MLMConfig(size=tiny_size, vocab_size=120, max_length=32, nsp=True, min_frequency=1)
    summary = pretrain_mlm(corpus_file, out, config, tiny_training())
    return out, summary
