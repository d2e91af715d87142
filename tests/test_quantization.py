"""int8 linear layers (contextembed._runtime.quantization) against a plain NumPy reference, and on models."""

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed._runtime.quantization import Int8Linear, quantize_int8, quantize_rows


def _reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Symmetric int8: one scale per input row and per weight row, exact integer products."""
    def quantize(rows):
        scale = np.maximum(np.abs(rows).max(axis=1, keepdims=True), 1e-30) / 127
        return np.round(rows / scale).astype(np.int64), scale

    qx, sx = quantize(x.astype(np.float64))
    qw, sw = quantize(weight.astype(np.float64))
    return (qx @ qw.T) * sx * sw.T + bias


def test_int8_linear_matches_the_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(37, 24)) * rng.lognormal(0, 2, size=(37, 1))  # rows of very different size
    weight, bias = rng.normal(size=(11, 24)), rng.normal(size=11)
    layer = Int8Linear(torch.tensor(weight, dtype=torch.float32), torch.tensor(bias, dtype=torch.float32))
    out = layer(torch.tensor(x, dtype=torch.float32).reshape(37, 1, 24)).numpy()
    assert out.shape == (37, 1, 11) and out.dtype == np.float32
    expected = _reference(x.astype(np.float32), weight.astype(np.float32), bias.astype(np.float32))
    np.testing.assert_allclose(out[:, 0], expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    exact = x @ weight.T + bias  # and int8 stays close to the float product
    assert np.abs(out[:, 0] - exact).max() < 0.03 * np.abs(exact).max()


def test_a_row_depends_only_on_itself():
    rng = torch.Generator().manual_seed(1)
    layer = Int8Linear(torch.randn(8, 16, generator=rng), None)
    x = torch.randn(5, 16, generator=rng)
    together = layer(x)
    for i in range(5):
        assert torch.equal(layer(x[i : i + 1])[0], together[i])
    x[2] *= 1000  # a loud neighbour does not change the others
    assert torch.equal(layer(x)[[0, 1, 3, 4]], together[[0, 1, 3, 4]])


def test_non_finite_rows_stay_non_finite_and_zero_rows_stay_zero():
    layer = Int8Linear(torch.ones(3, 4), None)
    x = torch.tensor([[1.0, 2, 3, 4], [float("nan"), 0, 0, 0], [0, float("inf"), 0, 0], [0.0, 0, 0, 0]])
    out = layer(x)
    assert torch.isfinite(out[0]).all() and not torch.isfinite(out[1]).any() and not torch.isfinite(out[2]).any()
    assert torch.equal(out[3], torch.zeros(3))
    quantized, scales = quantize_rows(torch.tensor([[1e-35, 0.0]]))
    assert torch.equal(quantized, torch.zeros(1, 2, dtype=torch.int8)) and torch.isfinite(scales).all()


def test_width_mismatch_names_both_widths():
    with pytest.raises(ValueError, match="width 4, got shape \\(2, 3\\)"):
        Int8Linear(torch.ones(3, 4), None)(torch.ones(2, 3))


def test_conv1d_is_quantized_like_the_linear_it_transposes():
    from transformers.pytorch_utils import Conv1D

    conv = Conv1D(6, 10)  # nx=10 -> nf=6, weight (10, 6)
    torch.nn.init.normal_(conv.weight)
    linear = torch.nn.Linear(10, 6)
    linear.weight.data, linear.bias.data = conv.weight.data.t().clone(), conv.bias.data.clone()
    x = torch.randn(4, 10)
    assert torch.equal(Int8Linear.from_linear(conv)(x), Int8Linear.from_linear(linear)(x))


def test_quantize_int8_replaces_every_linear_layer_in_place():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Sequential(torch.nn.Linear(8, 2)))
    x = torch.randn(3, 4)
    expected = model(x)
    assert quantize_int8(model) is model
    assert [type(m).__name__ for m in model.modules()].count("Int8Linear") == 2
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert torch.allclose(model(x), expected, atol=0.05 * expected.abs().max().item())


def test_int8_refuses_a_model_without_linear_layers():
    model = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 3), torch.nn.ReLU())
    with pytest.raises(ValueError, match="the 'conv' model has none; use one of 'auto', 'fp32', 'bf16', 'fp16'"):
        quantize_int8(model, "'conv'")


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean())


def test_gpt2_style_models_quantize_their_conv1d_layers(tiny_roberta_dir, tmp_path):
    import shutil

    from transformers import GPT2Config, GPT2Model

    path = tmp_path / "tiny_gpt2"  # GPT-2 layers behind the tiny byte-level BPE tokenizer
    shutil.copytree(tiny_roberta_dir, path)
    for weights in path.glob("*.safetensors"):
        weights.unlink()
    torch.manual_seed(0)
    GPT2Model(GPT2Config(vocab_size=500, n_positions=64, n_embd=32, n_layer=2, n_head=2)).save_pretrained(path)
    sentences = [["the", "quick", "brown", "fox"], ["New", "York"]]
    exact = load_encoder(path, device="cpu", precision="fp32").encode(sentences)
    quantized = load_encoder(path, device="cpu", precision="int8")
    assert [type(m).__name__ for m in quantized.model.modules()].count("Int8Linear") == 8  # 4 Conv1D per block
    assert _mean_cosine(np.concatenate(quantized.encode(sentences), 1), np.concatenate(exact, 1)) > 0.99
    quantized.save(tmp_path / "saved")  # the weights it was quantized from, Conv1D layout kept
    reloaded = load_encoder(tmp_path / "saved", device="cpu", precision="fp32").encode(sentences)
    assert all(np.array_equal(a, b) for a, b in zip(reloaded, exact))


@pytest.mark.slow
@pytest.mark.pretrained
def test_minilm_int8_keeps_fp32_quality(minilm):
    """The issue's bar: mean cosine >= 0.99 to fp32 on the concatenated last four layers."""
    from contextembed.extraction import FeatureExtractor

    sentences = [s.split() for s in (
        "EU rejects German call to boycott British lamb .", "Peter Blackburn", "BRUSSELS 1996-08-22",
        "The European Commission said on Thursday it disagreed with German advice to consumers .")]
    quantized = load_encoder("minilm-l6", device="cpu", precision="int8")
    features = [FeatureExtractor(e, layers=[-4, -3, -2, -1], combine="concat").words(sentences)
                for e in (minilm, quantized)]
    exact, reduced = (np.concatenate(f).reshape(-1, 384) for f in features)
    assert _mean_cosine(reduced, exact) >= 0.99


def test_stacked_layers_compute_each_layer_bit_for_bit():
    torch.manual_seed(2)
    layers = [Int8Linear(torch.randn(n, 16), torch.randn(n)) for n in (8, 8, 5)]
    x = torch.randn(7, 16) * torch.logspace(-2, 2, 7)[:, None]
    stacked = Int8Linear.stacked(layers)
    assert (stacked.in_features, stacked.out_features) == (16, 21)
    assert torch.equal(stacked(x), torch.cat([layer(x) for layer in layers], dim=-1))
    assert not list(stacked.parameters()) and stacked.source_weight is None


def test_stacking_layers_with_and_without_bias_keeps_every_bias():
    torch.manual_seed(3)
    layers = [Int8Linear(torch.randn(4, 6), torch.randn(4)), Int8Linear(torch.randn(3, 6), None)]
    x = torch.randn(5, 6)
    assert torch.equal(Int8Linear.stacked(layers)(x), torch.cat([layer(x) for layer in layers], dim=-1))
