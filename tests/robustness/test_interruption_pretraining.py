"""Pretraining that stops part-way, by divergence or interruption, never leaves a broken model.

- Training stops on divergence: a loss that is not finite, or weights that are not finite after an
  update (word2vec: after a batch or an epoch), stop the run with a ``TrainingDivergedError`` (CLI:
  status 2 and one line naming the step and ``--lr``); no model and no checkpoint of the diverged
  state is written, the last good checkpoint is kept and continues. Before, ``pretrain mlm`` with a
  diverging learning rate exited 0 and wrote NaN weights.
- A model is written as a set (staged, then moved in): an interruption while it is written leaves
  the previous model whole and nothing partial in OUT.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed.cli import main
from contextembed.pretraining import BiLMConfig, StaticConfig, pretrain_bilm, pretrain_static, _training as training
from contextembed.pretraining._static import StaticRecipe
from pretraining.conftest import TINY_FIELDS, make_documents, tiny_training, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", make_documents(12, 6))


@pytest.fixture(scope="module")
def size(tmp_path_factory):
    path = tmp_path_factory.mktemp("size") / "tiny.json"
    path.write_text(json.dumps(TINY_FIELDS), encoding="utf-8")
    return str(path)


def _mlm(corpus, out, size, *extra):
    return ["pretrain", "mlm", str(corpus), str(out), "--size", size, "--vocab-size", "120", "--min-frequency", "1",
            "--max-length", "32", "--batch-size", "4", "--log-every", "1", "--held-out-fraction", "0",
            "--device", "cpu", "--quiet", *extra]


def _finite_checkpoints(out) -> list[str]:
    """The step-*.pt files in OUT, each checked to hold finite weights only."""
    names = []
    for path in sorted((out / "checkpoints").glob("step-*.pt")):
        state = torch.load(path, weights_only=True)
        assert all(torch.isfinite(value).all() for value in state["model"].values()), path.name
        names.append(path.name)
    return names


@pytest.mark.slow
def test_a_diverging_learning_rate_stops_mlm_and_writes_no_nan_model(corpus, size, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_mlm(corpus, out, size, "--lr", "1e6", "--max-steps", "4", "--checkpoint-every", "1")) == 2
    err = capsys.readouterr().err
    found = re.search(r"training diverged at step ([2-4]) of 4: the (training loss|update made weights) .*/"
                      r"checkpoints/step-0000000(\d)\.pt, is kept\. Lower the learning rate \(--lr", err)
    assert found and int(found[3]) == int(found[1]) - 1, err
    assert not {"model.safetensors", "config.json", "contextembed_provenance.json"} & {p.name for p in out.iterdir()}
    assert _finite_checkpoints(out) == [f"step-0000000{step}.pt" for step in range(1, int(found[1]))]
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == int(found[1]) and "diverged" in records[-1]


@pytest.mark.slow
def test_after_a_divergence_the_last_good_checkpoint_continues(corpus, size, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_mlm(corpus, out, size, "--max-steps", "2", "--checkpoint-every", "2", "--lr", "1e-3")) == 0
    model = (out / "model.safetensors").read_bytes()
    # the resumed run diverges after step 2, before its next checkpoint (the final one)
    assert main(_mlm(corpus, out, size, "--max-steps", "6", "--checkpoint-every", "100", "--lr", "1e6",
                     "--resume")) == 2
    err = capsys.readouterr().err
    assert re.search(r"training diverged at step [3-6] of 6: .*/checkpoints/step-00000002\.pt, is kept", err)
    assert (out / "model.safetensors").read_bytes() == model  # the previous model is untouched
    assert _finite_checkpoints(out) == ["step-00000002.pt"]
    assert main(_mlm(corpus, out, size, "--max-steps", "6", "--checkpoint-every", "100", "--lr", "1e-4",
                     "--resume")) == 0
    assert json.loads((out / "held_out.json").read_text())["steps"] == 6
    encoder = load_encoder(str(out), device="cpu", precision="fp32")
    (features,) = encoder.encode([["the", "cat"]])
    assert np.isfinite(features).all()


def test_weights_that_stop_being_finite_stop_bilm_before_any_checkpoint_of_them(corpus, tmp_path, monkeypatch):
    real = training.Optimisation.step
    updates = []

    def poisoned(self, parameters, max_grad_norm):
        parameters = list(parameters)
        real(self, parameters, max_grad_norm)
        updates.append(1)
        if len(updates) == 3:
            with torch.no_grad():
                parameters[-1].fill_(float("inf"))

    monkeypatch.setattr(training.Optimisation, "step", poisoned)
    out = tmp_path / "out"
    config = BiLMConfig(n_layers=1, min_count=1)
    with pytest.raises(training.TrainingDivergedError, match=r"diverged at step 3 of 4: the update made weights "
                       r"that are not finite numbers \(.*softmax.*\)") as caught:
        pretrain_bilm(corpus, out, config, tiny_training(max_steps=4, checkpoint_every=1, batch_size=4))
    assert caught.value.step == 3
    assert _finite_checkpoints(out) == ["step-00000001.pt", "step-00000002.pt"]
    assert not (out / "weights.hdf5").exists() and not (out / "options.json").exists()


@pytest.mark.parametrize("poison", ["loss", "vectors"])
def test_word2vec_stops_on_divergence_and_writes_no_vectors(corpus, tmp_path, monkeypatch, poison):
    real, calls = StaticRecipe._step, []

    def step(self, context, target, lr, sgd):
        value = real(self, context, target, lr, sgd)
        calls.append(1)
        if len(calls) == 2 and poison == "loss":
            return float("nan")
        if len(calls) == 2:
            with torch.no_grad():
                self.model.inputs.weight[0, 0] = float("nan")
        return value

    monkeypatch.setattr(StaticRecipe, "_step", step)
    out = tmp_path / "out"
    expected = "batch 2 of" if poison == "loss" else r"its end: the vectors hold non-finite numbers \(inputs.weight\)"
    with pytest.raises(training.TrainingDivergedError, match=f"diverged in epoch 1 of 2, at {expected}"):
        pretrain_static(corpus, out, StaticConfig(dim=8, min_count=1, epochs=2, batch_size=64, device="cpu",
                                                  show_progress=False))
    assert not list(out.glob("vectors.*")) and not (out / "contextembed_provenance.json").exists()


def test_an_interrupted_model_write_keeps_the_previous_model_whole(corpus, tmp_path, monkeypatch):
    out = tmp_path / "out"
    config = StaticConfig(dim=8, min_count=1, epochs=1, device="cpu", show_progress=False)
    pretrain_static(corpus, out, config)
    before = {name: (out / name).read_bytes() for name in ("vectors.txt", "vectors.bin")}
    real = StaticRecipe.save

    def interrupted(self, folder):
        real(self, folder)
        (folder / "vectors.bin").unlink()  # as if stopped between the two files
        raise KeyboardInterrupt

    monkeypatch.setattr(StaticRecipe, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pretrain_static(corpus, out, StaticConfig(dim=8, min_count=1, epochs=1, seed=5, device="cpu",
                                                  show_progress=False), overwrite=True)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    shutil.rmtree(out)
