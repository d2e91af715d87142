"""Layers a feature does not use are never run: a checked view of a transformer's first layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.encoders.transformer._pruning import LayerPruner


def _probe(model) -> dict:
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def test_the_first_layers_alone_give_their_bits_and_the_model_stays_whole(tiny_bert_dir):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    pruner = LayerPruner(model, 3, _probe(model))
    assert pruner.layers is model.encoder.layer
    ran = []
    for k, layer in enumerate(model.encoder.layer):
        layer.register_forward_hook(lambda module, args, out, k=k: ran.append(k))
    assert not pruner.runs_whole(1)  # checked once, on the probe
    with torch.inference_mode():
        whole = model(**_probe(model), output_hidden_states=True).hidden_states
        ran.clear()
        cut = pruner.hidden_states(_probe(model), 1)
    assert ran == [0]  # the second layer never ran
    assert len(cut) == 2 and all(torch.equal(a, b) for a, b in zip(whole, cut))
    assert not pruner.runs_whole(0) and not pruner.runs_whole(1) and pruner.runs_whole(2)
    with torch.inference_mode():
        again = model(**_probe(model), output_hidden_states=True).hidden_states  # other calls are whole
    assert len(again) == 3 and all(torch.equal(a, b) for a, b in zip(whole, again))


def test_gpt2s_states_below_its_last_are_cut_exactly():
    """GPT-2 returns its last hidden state after a final layer norm, but every state below it is a
    layer's input: those are cut exactly; the last one always runs whole."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=16,
                                 bos_token_id=0, eos_token_id=0)).eval()
    pruner = LayerPruner(model, 3, _probe(model))
    assert pruner.layers is model.h
    assert not pruner.runs_whole(0) and not pruner.runs_whole(1) and pruner.runs_whole(2)


def test_a_model_whose_states_are_not_its_layers_inputs_runs_whole():
    """A model that returns something else than each layer's input as its hidden states: the check
    on the probe finds the difference, and every layer runs."""
    from types import SimpleNamespace

    class Doubling(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))

        def forward(self, input_ids, attention_mask=None, output_hidden_states=False):
            x = input_ids.float()[..., None].expand(*input_ids.shape, 4)
            states = [2 * x]
            for layer in self.layers:
                x = layer(x)
                states.append(2 * x)
            return SimpleNamespace(hidden_states=tuple(states))

    pruner = LayerPruner(Doubling(), 3, _probe(None))
    assert pruner.runs_whole(0) and pruner.runs_whole(1)
    got = pruner.hidden_states(_probe(None), 0)
    assert len(got) == 3  # the whole model's


def test_a_model_without_a_known_list_of_layers_runs_whole():
    class Odd(torch.nn.Module):
        pass

    pruner = LayerPruner(Odd(), 3, {})
    assert pruner.layers is None and pruner.runs_whole(0)


@pytest.mark.parametrize("layers", [[0], [1], [0, 1], [-1]])
def test_the_encoder_runs_only_the_layers_it_needs(tiny_bert_dir, layers):
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]] * 3
    full = encoder.encode(sentences, layers="all")
    run = []
    original = encoder._pruner.hidden_states
    encoder._pruner.hidden_states = lambda inputs, depth: run.append(depth) or original(inputs, depth)
    got = encoder.encode(sentences, layers=layers)
    depth = max(i % encoder.n_layers for i in layers)
    assert set(run) == {depth} and encoder._pruner.runs_whole(depth) == (depth == encoder.n_layers - 1)
    for a, b in zip(got, full):
        np.testing.assert_array_equal(a, b[layers])
