import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed._runtime import devices
from contextembed._runtime.devices import cpu_has_fast_bf16, resolve_device, resolve_precision


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
    (True, 3.0, 3.3, "bf16"),  # int8 must beat bf16 by 1.15x as well
    (True, 3.0, 3.5, "int8"),
    (True, 0.7, 1.1, "fp32"),  # and fp32 by as much
])
def test_auto_cpu_precision_follows_the_measured_speed(untuned, monkeypatch, native, bf16, int8, expected):
    monkeypatch.delenv(devices.AUTO_CPU_PRECISION_ENV, raising=False)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: native)
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    runs = []

    def measure(names):
        runs.append(names)
        return {name: {"bf16": bf16, "int8": int8}[name] for name in names}

    monkeypatch.setattr(devices, "_measure_speedups", measure)
    assert resolve_precision("auto", torch.device("cpu"), int8_allowed=True) == expected
    # what auto compares is measured once, in one run
    assert runs == [("bf16", "int8") if native else ("int8",)]
    # encoders that do not check int8's quality (ELMo) never get it from auto
    without_int8 = "bf16" if native and bf16 >= devices.BF16_MIN_SPEEDUP else "fp32"
    assert resolve_precision("auto", torch.device("cpu")) == without_int8
    assert len(runs) == 1


def test_auto_cpu_precision_can_be_fixed(untuned, monkeypatch):
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: pytest.fail("measured despite the override"))
    for value in ("bf16", "fp32", "int8"):
        monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, value)
        assert resolve_precision("auto", torch.device("cpu"), int8_allowed=True) == value
    monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, "fp16")
    with pytest.raises(ValueError, match="CONTEXTEMBED_AUTO_CPU_PRECISION='fp16': expected 'bf16', 'fp32' or 'int8'"):
        resolve_precision("auto", torch.device("cpu"))


def test_auto_keeps_int8_only_where_it_keeps_the_features(untuned, monkeypatch, tiny_bert_dir):
    from contextembed._runtime import quantization

    monkeypatch.setenv(devices.AUTO_CPU_PRECISION_ENV, "int8")
    encoder = load_encoder(tiny_bert_dir, device="cpu")
    assert encoder.precision == "int8"
    assert any(type(m).__name__ == "Int8Linear" for m in encoder.model.modules())
    monkeypatch.setattr(quantization, "INT8_MIN_COSINE", 1.01)  # a bar nothing reaches
    monkeypatch.setattr("contextembed.encoders.transformer._runtime_choice.INT8_MIN_COSINE", 1.01)
    monkeypatch.setattr(devices, "cpu_has_fast_bf16", lambda: False)
    fallback = load_encoder(tiny_bert_dir, device="cpu")
    assert fallback.precision == "fp32" and fallback.dtype == torch.float32
    assert not any(type(m).__name__ == "Int8Linear" for m in fallback.model.modules())
    explicit = load_encoder(tiny_bert_dir, device="cpu", precision="int8")  # asked for: no check
    assert explicit.precision == "int8"


def test_int8_fidelity_is_the_lowest_layer_cosine(tiny_bert_dir):
    import copy

    from transformers import AutoTokenizer

    from contextembed._runtime.quantization import int8_fidelity, quantize_int8

    model = load_encoder(tiny_bert_dir, device="cpu", precision="fp32").model
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    assert int8_fidelity(model, copy.deepcopy(model), tokenizer, 32) == pytest.approx(1.0, abs=1e-6)
    fidelity = int8_fidelity(model, quantize_int8(copy.deepcopy(model)), tokenizer, 32)
    assert 0.99 <= fidelity <= 1.0
    broken = quantize_int8(copy.deepcopy(model))
    broken.encoder.layer[-1].output.dense.weight_scale.mul_(-1000)  # the last layer: a wrong product dominates
    assert int8_fidelity(model, broken, tokenizer, 32) < 0.9


def test_speedups_are_measured_once_per_process(untuned, monkeypatch):
    monkeypatch.setattr(devices, "_SPEEDUPS", {})
    state = torch.random.get_rng_state()
    first = devices.cpu_speedups(int8_allowed=True)
    assert set(first) == ({"bf16", "int8"} if cpu_has_fast_bf16() else {"int8"})
    assert all(value > 0 for value in first.values())
    assert torch.equal(torch.random.get_rng_state(), state)  # the user's random stream is left alone
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: pytest.fail("measured again"))
    assert devices.cpu_speedups(int8_allowed=True) == first
    assert devices.cpu_int8_speedup() == first["int8"]


def test_the_measured_blocks_compute_what_each_precision_computes():
    """The three stacks the measurement times compute the same blocks: bf16 and int8 within their
    precision of fp32 (a block that computed something else would time something else)."""
    generator = torch.Generator().manual_seed(0)
    block = devices._FeedForward(64, generator).eval()
    x = torch.randn(16, 64, generator=generator)
    with torch.inference_mode():
        expected = block.norm(x + block.down(torch.nn.functional.gelu(block.up(x))))
        assert torch.equal(block(x), expected)
        import copy

        from contextembed._runtime.quantization import Int8Linear

        quantized = copy.deepcopy(block)
        quantized.up, quantized.down = Int8Linear.from_linear(block.up), Int8Linear.from_linear(block.down)
        assert torch.nn.functional.cosine_similarity(quantized(x), expected).min() > 0.99
        halved = copy.deepcopy(block).to(torch.bfloat16)(x.bfloat16()).float()
        assert torch.nn.functional.cosine_similarity(halved, expected).min() > 0.99


def test_workers_adopt_the_dispatching_process_measurements(untuned, monkeypatch):
    monkeypatch.setattr(devices, "_SPEEDUPS", {"bf16": 0.6})
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: pytest.fail("measured despite the adopted value"))
    devices.adopt_speedups({"bf16": 3.0, "int8": 1.6})
    assert devices.cpu_bf16_speedup() == 0.6  # a process's own measurement stays
    assert devices.cpu_int8_speedup() == 1.6
    assert devices.measured_speedups() == {"bf16": 0.6, "int8": 1.6}
