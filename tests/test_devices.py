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


@pytest.mark.parametrize(("native", "bf16", "int8", "expected"), [
    (True, 3.0, 1.0, "bf16"), (True, 0.7, 1.0, "fp32"), (True, 1.1, 1.0, "fp32"), (False, 3.0, 1.0, "fp32"),
    (True, 0.7, 1.6, "int8"), (False, 3.0, 1.6, "int8"),  # without native bf16 units, bf16's speed is moot
    (True, 3.0, 3.3, "bf16"),  # int8 must beat bf16 by 1.25x as well
    (True, 3.0, 4.0, "int8"),
])
def test_auto_cpu_precision_follows_the_measured_speed(monkeypatch, native, bf16, int8, expected):
    monkeypatch.delenv(devices.AUTO_CPU_PRECISION_ENV, raising=False)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: native)
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: bf16)
    monkeypatch.setattr(devices, "cpu_int8_speedup", lambda: int8)
    assert resolve_precision("auto", torch.device("cpu"), int8_allowed=True) == expected
    # encoders that do not check int8's quality (ELMo) never get it from auto
    without_int8 = "bf16" if native and bf16 >= devices.BF16_MIN_SPEEDUP else "fp32"
    assert resolve_precision("auto", torch.device("cpu")) == without_int8


def test_auto_cpu_precision_can_be_fixed(monkeypatch):
    monkeypatch.setattr(devices, "cpu_bf16_speedup", lambda: pytest.fail("measured despite the override"))
    monkeypatch.setattr(devices, "cpu_int8_speedup", lambda: pytest.fail("measured despite the override"))
    for value in ("bf16", "fp32", "int8"):
        monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, value)
        assert resolve_precision("auto", torch.device("cpu"), int8_allowed=True) == value
    monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, "fp16")
    with pytest.raises(ValueError, match="CONTEXTEMBED_AUTO_CPU_PRECISION='fp16': expected 'bf16', 'fp32' or 'int8'"):
        resolve_precision("auto", torch.device("cpu"))


def test_auto_keeps_int8_only_where_it_keeps_the_features(monkeypatch, tiny_bert_dir):
    from contextembed import quantization

    monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, "int8")
    encoder = load_encoder(tiny_bert_dir, device="cpu")
    assert encoder.precision == "int8"
    assert any(type(m).__name__ == "Int8Linear" for m in encoder.model.modules())
    monkeypatch.setattr(quantization, "INT8_MIN_COSINE", 1.01)  # a bar nothing reaches
    monkeypatch.setattr("contextembed.encoders.transformer.INT8_MIN_COSINE", 1.01)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: False)
    fallback = load_encoder(tiny_bert_dir, device="cpu")
    assert fallback.precision == "fp32" and fallback.dtype == torch.float32
    assert not any(type(m).__name__ == "Int8Linear" for m in fallback.model.modules())
    explicit = load_encoder(tiny_bert_dir, device="cpu", precision="int8")  # asked for: no check
    assert explicit.precision == "int8"


def test_int8_fidelity_is_the_lowest_layer_cosine(tiny_bert_dir):
    import copy

    from transformers import AutoTokenizer

    from contextembed.quantization import int8_fidelity, quantize_int8

    model = load_encoder(tiny_bert_dir, device="cpu", precision="fp32").model
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    assert int8_fidelity(model, copy.deepcopy(model), tokenizer, 32) == pytest.approx(1.0, abs=1e-6)
    fidelity = int8_fidelity(model, quantize_int8(copy.deepcopy(model)), tokenizer, 32)
    assert 0.99 <= fidelity <= 1.0
    broken = quantize_int8(copy.deepcopy(model))
    broken.encoder.layer[-1].output.dense.weight_scale.mul_(-1000)  # the last layer: a wrong product dominates
    assert int8_fidelity(model, broken, tokenizer, 32) < 0.9


def test_bf16_speedup_is_measured_once():
    first = devices.cpu_bf16_speedup()
    assert first > 0 and devices.cpu_bf16_speedup() == first


def test_workers_adopt_the_dispatching_process_measurements(monkeypatch):
    monkeypatch.setattr(devices, "_SPEEDUPS", {"bf16": 0.6})
    monkeypatch.setattr(devices, "_measure_int8_speedup", lambda: pytest.fail("measured despite the adopted value"))
    devices.adopt_speedups({"bf16": 3.0, "int8": 1.6})
    assert devices.cpu_bf16_speedup() == 0.6  # a process's own measurement stays
    assert devices.cpu_int8_speedup() == 1.6
    assert devices.measured_speedups() == {"bf16": 0.6, "int8": 1.6}
