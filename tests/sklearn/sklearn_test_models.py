"""A tiny random BERT built at import time, for tests that need an encoder path before fixtures run
(``parametrize_with_checks`` collects estimator instances at import)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "EU rejects German call to boycott British lamb",
    "Peter Blackburn met EU officials in Brussels on Tuesday",
    "contextual embeddings turn pretrained encoders into features",
]


def tiny_bert_path() -> str:
    """Build (once per process) a 2-layer 32-wide BERT and return its directory."""
    path = Path(tempfile.gettempdir()) / f"contextembed-sklearn-tests-{os.getpid()}" / "tiny_bert"
    if (path / "config.json").exists():
        return str(path)
    import torch
    from tokenizers import BertWordPieceTokenizer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    atexit.register(shutil.rmtree, path.parent, ignore_errors=True)
    wordpiece = BertWordPieceTokenizer(lowercase=False)
    wordpiece.train_from_iterator(CORPUS * 3, vocab_size=150, min_frequency=1)
    wordpiece.save_model(str(path))
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=False, model_max_length=40)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=40,
    )
    BertModel(config).eval().save_pretrained(path)
    return str(path)
