"""``device`` and ``precision`` for every encoder family (static vectors, ELMo, transformers), from
the library and the command line: one check, before anything is loaded, that refuses what no
family runs on (with the argument, the value and the accepted values) and the precisions a family
does not have. Static vectors used to accept and ignore anything ("fp8", None, "gpu", "mps");
transformers failed with an AssertionError for "xpu" and a meta-tensor error for "meta"."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
import torch

from contextembed import cli, load_encoder
from contextembed._runtime.devices import FAMILY_PRECISIONS, PRECISION_NAMES, check_device, check_precision
from contextembed.encoders import write_word2vec
from contextembed.encoders._elmo import ElmoEncoder
from contextembed.encoders.transformer import TransformerEncoder

BAD_DEVICES = ["gpu", "mps", "xpu", "meta", None, "", "CPU", " cpu", "cuda:", "cuda:-1", "cuda:²", "cuda:٣",
               "cuda:0x1", 0, torch.device("meta")]
ACCEPTED = "expected one of 'auto', 'cpu', 'cuda', 'cuda:N'"


@pytest.fixture(scope="module")
def static_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("vectors") / "vectors.txt"
    write_word2vec(path, ["the", "cat"], np.eye(2, dtype=np.float32))
    return str(path)


@pytest.fixture(scope="module", params=["static", "elmo", "transformer"])
def family(request, static_path, tiny_elmo_dir, tiny_bert_dir):
    return request.param, {"static": static_path, "elmo": str(tiny_elmo_dir), "transformer": str(tiny_bert_dir)}[
        request.param]


@pytest.fixture
def nothing_loads(monkeypatch):
    """Every family's loader fails the test: the checks must come first."""
    def loaded(*args, **kwargs):
        pytest.fail("a model was loaded before its device and precision were checked")

    monkeypatch.setattr("contextembed.encoders._static.vectors.StaticVectors.load", loaded)
    monkeypatch.setattr("contextembed.encoders._elmo.encoder.load_bilm", loaded)
    monkeypatch.setattr("contextembed.encoders.transformer._encoder.load_model", loaded)


@pytest.mark.parametrize("device", BAD_DEVICES, ids=repr)
def test_a_device_no_family_runs_on_is_refused_before_loading(family, nothing_loads, device):
    with pytest.raises(ValueError) as error:
        load_encoder(family[1], device=device)
    message = str(error.value)
    assert message.startswith(f"device={device!r} is not a device contextembed runs on") and ACCEPTED in message


@pytest.mark.parametrize("device", ["xpu", "meta"])
def test_transformer_and_elmo_loaders_refuse_them_too(tiny_bert_dir, tiny_elmo_dir, nothing_loads, device):
    for loader, path in ((TransformerEncoder.load, tiny_bert_dir), (ElmoEncoder.load, tiny_elmo_dir)):
        with pytest.raises(ValueError, match=f"device='{device}' is not a device contextembed runs on"):
            loader(path, device=device)


@pytest.mark.parametrize("precision", ["fp8", None, "FP32", "", "int4", 16])
def test_a_precision_no_family_has_is_refused(family, nothing_loads, precision):
    with pytest.raises(ValueError, match=rf"precision={precision!r} is not one of 'auto', 'fp32'"):
        load_encoder(family[1], device="cpu", precision=precision)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "int8"])
def test_static_vectors_refuse_the_precisions_of_torch_encoders(static_path, precision):
    with pytest.raises(ValueError) as error:
        load_encoder(static_path, precision=precision)
    message = str(error.value)
    assert message.startswith(f"precision={precision!r} is not one of 'auto', 'fp32' (static vectors")
    assert "apply to transformer and ELMo encoders only" in message


@pytest.mark.parametrize("device", ["auto", "cpu", torch.device("cpu")], ids=str)
@pytest.mark.parametrize("precision", ["auto", "fp32"])
def test_what_every_family_accepts_loads(family, device, precision, monkeypatch):
    monkeypatch.setenv("CONTEXTEMBED_AUTO_CPU_PRECISION", "fp32")  # "auto" without measuring the CPU's speeds
    encoder = load_encoder(family[1], device=device, precision=precision)
    assert encoder.family == family[0]
    if family[0] != "static":
        assert encoder.device == torch.device("cpu")


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)], ids=str)
def test_cuda_without_cuda_is_a_clear_error_for_every_family(family, nothing_loads, monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"was asked for but CUDA is not available here; use device='cpu' or 'auto'"):
        load_encoder(family[1], device=device)


def test_a_gpu_index_beyond_those_present_is_refused(static_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"device='cuda:1': this machine has 1 CUDA device \(cuda:0 to cuda:0\)"):
        load_encoder(static_path, device="cuda:1")
    with pytest.raises(ValueError, match=r"device='cuda:99999999999999999999': this machine has 1 CUDA device"):
        load_encoder(static_path, device="cuda:99999999999999999999")  # torch itself fails to parse it
    assert load_encoder(static_path, device="cuda:0").family == "static"  # static vectors run on the CPU


def test_one_definition_of_the_names():
    assert PRECISION_NAMES == get_args(FAMILY_PRECISIONS["transformer"]) == get_args(FAMILY_PRECISIONS["elmo"])
    assert set(get_args(FAMILY_PRECISIONS["static"])) == {"auto", "fp32"} < set(PRECISION_NAMES)
    assert check_device("cuda:12") == "cuda:12" and check_precision("int8", "elmo") == "int8"


@pytest.mark.parametrize("args, message", [
    (["--device", "gpu"], "argument --device: device='gpu' is not a device contextembed runs on; " + ACCEPTED),
    (["--device", "cuda:²"], "argument --device: device='cuda:²' is not a device contextembed runs on"),
    (["--precision", "fp8"], "argument --precision: precision='fp8' is not one of 'auto', 'fp32', 'bf16', 'fp16', "
                             "'int8'"),
])
def test_the_command_line_refuses_them_while_parsing(static_path, capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        cli.main(["info", static_path, *args])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_command_line_refuses_a_precision_the_family_lacks(static_path, capsys):
    assert cli.main(["info", static_path, "--precision", "bf16"]) == 2
    assert "error: precision='bf16' is not one of 'auto', 'fp32' (static vectors" in capsys.readouterr().err
