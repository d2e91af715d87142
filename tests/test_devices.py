import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed import devices
from contextembed.devices import cpu_has_fast_bf16, resolve_device, resolve_precision


def test_auto_precision_per_device():
    cpu = torch.device("cpu")
    fast = cpu_has_fast_bf16() and devices.cpu_bf16_speedup() >= devices.BF16_MIN_SPEEDUP
    assert resolve_precision("auto", cpu) == ("bf16" if fast else "fp32")
    assert resolve_precision("fp16", cpu) == "fp16"
    with pytest.raises(ValueError, match="int8' runs on the CPU only"):
        resolve_precision("int8", torch.device("cuda"))
    assert resolve_device("cpu") == cpu


@pytest.mark.parametrize("precision, min_cosine", [("bf16", 0.99), ("int8", 0.99)])
def test_reduced_precision_tracks_fp32(tiny_bert_dir, precision, min_cosine):
    sentences = [["the", "quick", "brown", "fox"], ["New", "York", "Times"]]
    exact = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32").encode(sentences)
    reduced_encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision=precision)
    reduced = reduced_encoder.encode(sentences)
    for a, b in zip(exact, reduced):
        assert b.dtype == np.float32 and a.shape == b.shape
        a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cosine.min() > min_cosine


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(tiny_bert_dir):
    sentences = [["the", "quick", "brown", "fox"], [], ["New", "York"] * 40]
    cpu = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32").encode(sentences)
    gpu = load_encoder(str(tiny_bert_dir), device="cuda", precision="fp32").encode(sentences)
    for a, b in zip(cpu, gpu):
        assert a.shape == b.shape and np.abs(a - b).max(initial=0) < 1e-4


@pytest.mark.parametrize(("native", "speedup", "expected"), [(True, 3.0, "bf16"), (True, 0.7, "fp32"),
                                                             (True, 1.1, "fp32"), (False, 3.0, "fp32")])
def test_auto_cpu_precision_follows_the_measured_speed(monkeypatch, native, speedup, expected):
    monkeypatch.delenv(devices.AUTO_CPU_PRECISION_ENV, raising=False)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: native)
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: speedup)
    assert resolve_precision("auto", torch.device("cpu")) == expected


def test_auto_cpu_precision_can_be_fixed(monkeypatch):
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: pytest.fail("measured despite the override"))
    for value in ("bf16", "fp32"):
        monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, value)
        assert resolve_precision("auto", torch.device("cpu")) == value
    monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, "int8")
    with pytest.raises(ValueError, match="CONTEXTEMBED_AUTO_CPU_PRECISION='int8'"):
        resolve_precision("auto", torch.device("cpu"))


def test_bf16_speedup_is_measured_once():
    first = devices.cpu_bf16_speedup()
    assert first > 0 and devices.cpu_bf16_speedup() == first
