"""A pretraining run replaces its checkpoints and JSON files atomically: an interrupted write leaves
the previous version and no temporary file (the checkpoint's ``step-N.partial`` used to remain)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from contextembed.pretraining import _run_files as run_files, _training as training
from contextembed.pretraining._run_files import latest_checkpoint, save_checkpoint, write_json


def test_interrupted_checkpoint_keeps_the_previous_ones_and_leaves_nothing(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 2, {"step": 2}, keep=2)

    def interrupted(state, path, *args, **kwargs):
        with open(path, "wb") as handle:
            handle.write(b"half a checkpoint")
        raise KeyboardInterrupt  # what SIGINT or (in the CLI) SIGTERM raises

    monkeypatch.setattr(run_files.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 4, {"step": 4}, keep=2)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-00000002.pt"]
    assert latest_checkpoint(tmp_path).name == "step-00000002.pt"
    monkeypatch.undo()
    assert torch.load(latest_checkpoint(tmp_path), weights_only=True) == {"step": 2}


def test_write_json_interrupted_midway_keeps_the_previous_file(tmp_path):
    path = tmp_path / "held_out.json"
    write_json(path, {"steps": 2})

    def interrupt(value):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # json.dump has written '{"steps": 4, ' by then
        write_json(path, {"steps": 4, "held_out": object()}, default=interrupt)
    assert json.loads(path.read_text()) == {"steps": 2}
    assert os.listdir(tmp_path) == ["held_out.json"]


@pytest.mark.slow
def test_sigterm_stops_pretraining_cleanly_and_resume_continues(tmp_path, corpus_file, tiny_size, monkeypatch, capsys):
    import signal

    from contextembed.cli import main

    from .test_cli import _mlm_args

    real, updates = training._update, []

    def update(*args, **kwargs):
        updates.append(1)
        if len(updates) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(training, "_update", update)
    out = tmp_path / "out"
    argv = _mlm_args(corpus_file, out, tiny_size, "--checkpoint-every", "2", "--max-steps", "4")
    assert main(argv) == 143
    assert capsys.readouterr().err.strip().endswith("contextembed pretrain: interrupted by SIGTERM")
    assert sorted(path.name for path in (out / "checkpoints").glob("step-*.pt")) == ["step-00000002.pt"]
    assert not (out / "held_out.json").exists()
    monkeypatch.undo()
    assert main(argv + ["--resume"]) == 0
    assert json.loads((out / "held_out.json").read_text())["steps"] == 4


def test_pruning_keeps_the_newest_and_never_the_one_just_written(tmp_path):
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-00000004.pt", "step-00000006.pt"]
    save_checkpoint(tmp_path, 5, {"step": 5}, keep=2)  # a step below the newest: it is kept
    assert "step-00000005.pt" in os.listdir(tmp_path / "checkpoints")


def test_resuming_behind_later_checkpoints_is_refused(tmp_path):
    from contextembed.pretraining._run_files import check_no_newer_checkpoints

    for step in (2, 4):
        save_checkpoint(tmp_path, step, {"step": step}, keep=3)
    first = tmp_path / "checkpoints" / "step-00000002.pt"
    with pytest.raises(FileExistsError, match=r"later checkpoints \(step-00000004\.pt\) of the run being abandoned"):
        check_no_newer_checkpoints(tmp_path, 2, first)
    check_no_newer_checkpoints(tmp_path, 4, tmp_path / "checkpoints" / "step-00000004.pt")  # the latest: fine
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["step-00000002.pt", "step-00000004.pt"]
