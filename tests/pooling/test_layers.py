import numpy as np
import pytest
import torch

from contextembed.pooling import LayerPooling, ScalarMix, resolve_layers


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("all", (0, 1, 2, 3, 4, 5, 6)),
        ("hidden", (1, 2, 3, 4, 5, 6)),
        (0, (0,)),
        (-1, (6,)),
        (-2, (5,)),
        ([-4, -3, -2, -1], (3, 4, 5, 6)),
        ((1, 3), (1, 3)),
        (np.int64(2), (2,)),
        (np.array([-1, 0]), (6, 0)),  # a 1-D integer array is a sequence (it failed on NumPy's truth value)
        (np.array([3, 1], dtype=np.int32), (3, 1)),
        (range(2, 4), (2, 3)),
    ],
)
def test_resolve_layers(spec, expected):
    assert resolve_layers(spec, 7) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        (7, "out of range.*-7..6"),
        (-8, "out of range"),
        ([], "no layer"),
        ([1, -6], "twice"),
        ("last", "not understood"),
        (1.5, "not understood|not an int"),
        (True, "not a layer index"),
        (["a"], "not an int"),
        (np.array([[1, 2]]), r"layers is an array of shape \(1, 2\); expected a 1-D array"),
        (np.array([1.0, 2.0]), "not an int"),
        (np.array([True]), "not an int"),
    ],
)
def test_resolve_layers_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        resolve_layers(spec, 7)


@pytest.mark.parametrize("spec, kind", [({1, 2}, "set"), (frozenset([1]), "frozenset"), ((i for i in [1, 2]), "generator"),
                                        (iter([1, 2]), "list_iterator"), ({1: 0}, "dict")])
def test_layers_that_are_not_a_sequence_are_a_type_error(spec, kind):
    """One-pass iterables would be used up by the check, sets and dicts give no order."""
    with pytest.raises(TypeError, match=rf"^layers is a {kind} .*expected an int, a sequence of ints"):
        resolve_layers(spec, 7)


def test_hidden_needs_hidden_layers():
    with pytest.raises(ValueError, match="hidden"):
        resolve_layers("hidden", 1)


def _numpy_scalar_mix(hidden, weights, gamma, layer_norm=False, mask=None):
    """Plain reference: gamma * sum_k softmax(w)_k * h_k, optional per-layer whole-tensor norm."""
    w = np.exp(weights - weights.max())
    w = w / w.sum()
    out = np.zeros(hidden.shape[1:])
    for k in range(hidden.shape[0]):
        h = hidden[k]
        if layer_norm:
            m = np.ones(h.shape[:-1], dtype=bool) if mask is None else mask
            values = h[m]
            h = (h - values.mean()) / np.sqrt(values.var() + 1e-12)
        out += w[k] * h
    return gamma * out


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_matches_numpy(layer_norm):
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 3, 5, 8)) * rng.uniform(0.5, 3, size=(4, 1, 1, 1))
    mask = rng.uniform(size=(3, 5)) > 0.3
    mix = ScalarMix(4, layer_norm=layer_norm).double()
    assert np.allclose(mix.normalized_weights().detach().numpy(), 0.25)
    assert float(mix.gamma.detach()) == 1.0
    with torch.no_grad():
        mix.weights.copy_(torch.tensor([0.3, -1.0, 2.0, 0.1]))
        mix.gamma.fill_(1.7)
    got = mix(torch.from_numpy(hidden), torch.from_numpy(mask)).detach().numpy()
    want = _numpy_scalar_mix(hidden, mix.weights.detach().numpy(), 1.7, layer_norm, mask)
    assert np.abs(got - want).max() < 1e-10


def test_scalar_mix_is_trainable():
    mix = ScalarMix(3)
    hidden = torch.randn(3, 4, 6)
    target = hidden[2] * 2.0
    optimizer = torch.optim.SGD(mix.parameters(), lr=0.5)
    for _ in range(200):
        optimizer.zero_grad()
        loss = ((mix(hidden) - target) ** 2).mean()
        loss.backward()
        optimizer.step()
    weights = mix.normalized_weights().detach()
    assert weights.argmax().item() == 2 and weights[2] > 0.8
    assert float(mix.gamma.detach()) > 1.5


def test_scalar_mix_layer_dropout_only_in_training():
    torch.manual_seed(0)
    mix = ScalarMix(4, layer_dropout=0.5)
    hidden = torch.randn(4, 2, 3)
    mix.eval()
    assert torch.allclose(mix(hidden), hidden.mean(0))
    mix.train()
    outputs = {tuple(mix(hidden).flatten().tolist()) for _ in range(20)}
    assert len(outputs) > 1
    assert all(np.isfinite(o).all() for o in outputs)


def test_scalar_mix_wrong_layer_count():
    with pytest.raises(ValueError, match="built for 3 layers but received 2"):
        ScalarMix(3)(torch.zeros(2, 4, 5))


@pytest.mark.parametrize(
    "layers, combine, reference, width",
    [
        (0, "concat", lambda h: h[0], 8),
        (-1, "concat", lambda h: h[-1], 8),
        (-2, "sum", lambda h: h[-2], 8),
        ([-4, -3, -2, -1], "concat", lambda h: np.concatenate(list(h[-4:]), axis=-1), 32),
        ([-4, -3, -2, -1], "sum", lambda h: h[-4:].sum(0), 8),
        ("hidden", "mean", lambda h: h[1:].mean(0), 8),
        ("all", "scalar_mix", lambda h: h.mean(0), 8),
        ([-4, -3, -2, -1], "scalar_mix", lambda h: h[-4:].mean(0), 8),
    ],
)
def test_layer_pooling_matches_numpy(layers, combine, reference, width):
    hidden = np.random.default_rng(1).normal(size=(7, 5, 8)).astype(np.float32)
    pooling = LayerPooling(7, layers, combine)
    got = pooling(torch.from_numpy(hidden)).detach().numpy()
    assert got.shape == (5, width) and pooling.output_width(8) == width
    assert np.abs(got - reference(hidden)).max() < 1e-5
    selected = hidden[list(pooling.layer_indexes)]
    assert np.abs(pooling(torch.from_numpy(selected)).detach().numpy() - got).max() < 1e-6


def test_layer_pooling_errors():
    with pytest.raises(ValueError, match="combine='average' is not one of 'concat', 'sum', 'mean', 'scalar_mix'"):
        LayerPooling(7, "all", "average")
    with pytest.raises(ValueError, match="scalar_mix' only"):
        LayerPooling(7, "all", "sum", layer_norm=True)
    with pytest.raises(ValueError, match="expected hidden states with 7 layers"):
        LayerPooling(7, [-1, -2], "sum")(torch.zeros(3, 2, 4))
