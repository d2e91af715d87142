"""The outline alone (``run_objective``), run with a toy recipe: a linear regression on sentence lengths."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
import torch

from contextembed.errors import ProvenanceError
from contextembed.pretraining._outline import NeuralRecipe, Run, run_objective
from contextembed.pretraining._training import Objective, TrainingOptions

from .conftest import tiny_training


@dataclass
class ToyConfig:
    width: int = 4
    encoding_errors: str = "skip"


class ToyObjective(Objective):
    """Predict ``3 * words + 1`` (plus noise drawn from the micro-batch's generator) from ``words``."""

    def __init__(self, train: list[float], held: list[float], width: int) -> None:
        self.train, self.held, self.width = torch.tensor(train), torch.tensor(held), width

    def n_examples(self) -> int:
        return len(self.train)

    def make_batch(self, epoch, indexes, generator):
        x = self.train[list(indexes)]
        return {"x": x, "y": 3 * x + 1 + 0.1 * torch.rand(len(x), generator=generator)}

    def held_out_batches(self, batch_size):
        return [{"x": self.held[i : i + batch_size], "y": 3 * self.held[i : i + batch_size] + 1}
                for i in range(0, len(self.held), batch_size)]

    def loss(self, model, batch):
        # (batch,)
        squared = (model(batch["x"][:, None]).squeeze(-1) - batch["y"]) ** 2
        stats = {"mse_sum": float(squared.detach().sum()), "mse_count": len(squared), "tokens": float(len(squared))}
        return squared.mean(), stats

    def fingerprint(self) -> dict:
        return {"objective": "toy", "width": self.width}


class ToyRecipe(NeuralRecipe):
    name = "toy"

    def __init__(self, config: ToyConfig, training: TrainingOptions) -> None:
        super().__init__(config, training)
        self.calls: list[str] = []

    def start(self):
        self.calls.append("start")
        return super().start()

    def prepare(self, documents, run: Run) -> None:
        self.calls.append("prepare")
        self.n_documents = len(documents)

    def encode(self, documents):
        self.calls.append("encode")
        return [float(len(sentence.split())) for document in documents for sentence in document]

    def build(self, train, held) -> None:
        self.calls.append("build")
        self.seeded_with = torch.initial_seed()
        width = self.config.width
        self.module = torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
        self.objective = ToyObjective(train, held, width)

    def fit(self, run: Run) -> dict:
        self.calls.append("fit")
        return super().fit(run)

    def save(self, out: Path) -> None:
        self.calls.append("save")
        torch.save(self.module.state_dict(), out / "toy.pt")

    def summary(self, result: dict) -> dict:
        self.calls.append("summary")
        return {**result, "documents": self.n_documents}


def _recipe(width=4, **training) -> ToyRecipe:
    return ToyRecipe(ToyConfig(width=width), tiny_training(**{"seed": 3, **training}))


def test_the_outline_runs_the_steps_in_order_and_writes_the_run_files(tmp_path, corpus_file):
    recipe, out = _recipe(), tmp_path / "out"
    summary = run_objective(recipe, corpus_file, out, save_config=True)
    assert recipe.calls == ["start", "prepare", "encode", "encode", "build", "fit", "save", "summary"]
    assert recipe.seeded_with == 3  # initialisation seeded with the run's seed, just before build
    assert summary["steps"] == 4 and summary["documents"] == 24 and summary["held_out_before"]["mse"] > 0
    config = json.loads((out / "pretrain_config.json").read_text())
    assert config == {"objective": "toy", "corpus": str(Path(corpus_file).resolve()),
                      "toy": {"width": 4, "encoding_errors": "skip"},
                      "training": asdict(recipe.training)}
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [(r["step"], "held_out" in r) for r in records] == [(0, True), (2, False), (4, False), (4, True)]
    assert {"loss", "mse", "tokens", "lr", "tokens_per_s"} <= set(records[1])
    assert not any(key.startswith("_") for record in records for key in record)
    held_out = json.loads((out / "held_out.json").read_text())
    assert held_out == {key: summary[key] for key in ("steps", "held_out_before", "held_out", "running_loss")}
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002.pt", "step-00000004.pt"]
    saved = torch.load(out / "toy.pt", weights_only=True)
    final = torch.load(out / "checkpoints" / "step-00000004.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[name], final[name]) for name in saved)


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, corpus_file):
    import shutil

    run_objective(_recipe(max_steps=4, grad_accumulation=2), corpus_file, tmp_path / "whole")
    shutil.copytree(tmp_path / "whole", tmp_path / "parts")
    for name in ("checkpoints/step-00000004.pt", "toy.pt"):
        (tmp_path / "parts" / name).unlink()
    summary = run_objective(_recipe(max_steps=4, grad_accumulation=2), corpus_file, tmp_path / "parts", resume=True)
    assert summary["steps"] == 4 and summary["held_out_before"] is None
    whole, parts = (torch.load(tmp_path / name / "toy.pt", weights_only=True) for name in ("whole", "parts"))
    assert all(torch.equal(whole[name], parts[name]) for name in whole)


def test_corpus_and_out_are_checked_before_anything_is_built(tmp_path, corpus_file):
    recipe = _recipe()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_objective(recipe, tmp_path / "missing.txt", tmp_path / "out", save_config=True)
    assert not (tmp_path / "out").exists() and recipe.calls == []
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="already holds files"):
        run_objective(recipe, corpus_file, full, save_config=True)
    assert sorted(p.name for p in full.iterdir()) == ["keep.txt"] and "build" not in recipe.calls


def test_a_refused_resume_keeps_the_configuration_of_the_checkpoints(tmp_path, corpus_file):
    out = tmp_path / "out"
    run_objective(_recipe(max_steps=2), corpus_file, out, save_config=True)
    before = (out / "pretrain_config.json").read_bytes()
    with pytest.raises(ProvenanceError, match="was made with toy.width=4, but this run has toy.width=8"):
        run_objective(_recipe(width=8, max_steps=4), corpus_file, out, resume=True, save_config=True)
    assert (out / "pretrain_config.json").read_bytes() == before
    run_objective(_recipe(max_steps=4), corpus_file, out, resume=True, save_config=True)
    assert json.loads((out / "pretrain_config.json").read_text())["training"]["max_steps"] == 4


def test_out_must_stay_apart_from_the_corpus(tmp_path, corpus_file):
    import shutil

    folder = tmp_path / "corpus"
    folder.mkdir()
    shutil.copy(corpus_file, folder / "a.txt")
    recipe = _recipe()
    # inside the corpus directory, the run's logs and checkpoints would become corpus on the next read
    with pytest.raises(ValueError, match=r"OUT .*corpus/out \(.*\) lies inside CORPUS .*corpus \("):
        run_objective(recipe, folder, folder / "out", save_config=True)
    with pytest.raises(ValueError, match=r"OUT .* contains CORPUS"):
        run_objective(recipe, folder / "a.txt", tmp_path, overwrite=True)
    with pytest.raises(ValueError, match=r"OUT .* is CORPUS"):
        run_objective(recipe, folder, folder, overwrite=True)
    assert recipe.calls == [] and sorted(p.name for p in folder.iterdir()) == ["a.txt"]


def test_the_model_is_written_with_its_provenance_and_replaced_as_a_set(tmp_path, corpus_file):
    from contextembed._runtime import provenance
    from contextembed.pretraining._corpus import corpus_hash

    out = tmp_path / "out"
    run_objective(_recipe(), corpus_file, out)
    record = provenance.read(out / provenance.PROVENANCE_FILE)
    assert record["artifact"] == "pretrained model" and record["files"] == ["toy.pt"]
    assert record["corpus"] == corpus_hash(corpus_file) and record["training.seed"] == 3 and record["toy.width"] == 4
    state = torch.load(sorted((out / "checkpoints").glob("step-*.pt"))[-1], weights_only=True)
    assert state["provenance"]["artifact"] == "pretraining checkpoint"
    assert state["provenance"]["corpus"] == record["corpus"] and state["provenance"]["model.width"] == 4
    assert "training.max_steps" not in state["provenance"]  # may change on resume
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
