from __future__ import annotations

import json

import pytest

from contextembed.cli import main


def _mlm_args(corpus, out, size, *extra):
    return ["pretrain", "mlm", str(corpus), str(out), "--size", size, "--vocab-size", "120", "--min-frequency",
            "1", "--max-length", "32", "--max-steps", "2", "--batch-size", "4", "--log-every", "1",
            "--device", "cpu", "--quiet", "--held-out-fraction", "0.2", *extra]


@pytest.mark.slow
def test_mlm_command_saves_the_resolved_config_and_the_model(tmp_path, corpus_file, tiny_size, capsys):
    out = tmp_path / "out"
    assert main(_mlm_args(corpus_file, out, tiny_size, "--nsp")) == 0
    config = json.loads((out / "pretrain_config.json").read_text())
    assert config["objective"] == "mlm"
    assert config["mlm"]["nsp"] is True and config["mlm"]["masking"]["mask_probability"] == 0.15
    assert config["training"]["learning_rate"] == 1e-4  # resolved default for a config file
    assert config["training"]["max_steps"] == 2
    assert (out / "model.safetensors").is_file()
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["steps"] == 2 and "mlm_loss" in printed["held_out"]


def test_mlm_command_errors(tmp_path, corpus_file, tiny_size, tiny_roberta_dir, capsys):
    out = tmp_path / "full"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(_mlm_args(corpus_file, out, tiny_size)) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (out / "keep.txt").exists() and not (out / "pretrain_config.json").exists()
    assert main(_mlm_args(corpus_file, tmp_path / "o", tiny_size, "--init", str(tiny_roberta_dir))) == 2
    assert "needs a BERT model" in capsys.readouterr().err
    assert main(_mlm_args(tmp_path / "missing.txt", tmp_path / "o", tiny_size)) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(_mlm_args(corpus_file, tmp_path / "o", "huge")) == 2
    assert "neither a preset" in capsys.readouterr().err


def test_static_command(tmp_path, corpus_file, capsys):
    from contextembed import load_encoder

    out = tmp_path / "vectors"
    argv = ["pretrain", "static", str(corpus_file), str(out), "--architecture", "cbow", "--dim", "8",
            "--epochs", "1", "--min-count", "1", "--sample", "0", "--quiet", "--device", "cpu"]
    assert main(argv) == 0
    config = json.loads((out / "pretrain_config.json").read_text())
    assert config["static"]["architecture"] == "cbow" and config["static"]["learning_rate"] == 0.05
    assert load_encoder(str(out / "vectors.bin")).width == 8
    assert main(argv) == 2
    assert "already holds files" in capsys.readouterr().err
    assert main(argv + ["--overwrite"]) == 0


@pytest.mark.slow
def test_bilm_command(tmp_path, corpus_file, capsys):
    from contextembed import load_encoder

    out = tmp_path / "elmo"
    argv = ["pretrain", "bilm", str(corpus_file), str(out), "--n-layers", "1", "--min-count", "1",
            "--max-steps", "2", "--batch-size", "4", "--device", "cpu", "--quiet", "--held-out-fraction", "0.2"]
    assert main(argv) == 0
    config = json.loads((out / "pretrain_config.json").read_text())
    assert config["bilm"]["options"]["lstm"]["n_layers"] == 1 and config["training"]["learning_rate"] == 1e-3
    assert load_encoder(str(out), device="cpu").n_layers == 2
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["steps"] == 2 and "forward_loss" in printed["held_out"]


@pytest.mark.slow
def test_mlm_command_resume(tmp_path, corpus_file, tiny_size, capsys):
    out = tmp_path / "out"
    assert main(_mlm_args(corpus_file, out, tiny_size, "--checkpoint-every", "2")) == 0
    argv = _mlm_args(corpus_file, out, tiny_size) + ["--max-steps", "3", "--resume"]
    assert main(argv) == 0
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2, 3, 3]  # held-out at 0, steps 1-2, held-out at 2, step 3, held-out at 3
    assert json.loads((out / "pretrain_config.json").read_text())["training"]["max_steps"] == 3
    capsys.readouterr()
    other = _mlm_args(corpus_file, out, tiny_size, "--nsp") + ["--max-steps", "4", "--resume"]
    assert main(other) == 2
    assert "was made with mlm.nsp=false, but this run has mlm.nsp=true" in capsys.readouterr().err
    # the refused run leaves the configuration the checkpoints were made with
    kept = json.loads((out / "pretrain_config.json").read_text())
    assert kept["mlm"]["nsp"] is False and kept["training"]["max_steps"] == 3
