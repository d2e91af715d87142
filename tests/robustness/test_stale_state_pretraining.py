"""Pretraining reruns after the corpus, the settings or the model changed: nothing stale is reused.

- A checkpoint records its provenance (corpus content hash, every setting a resumed run must keep,
  the model's shape and vocabulary, format version): ``--resume`` after any of them changed is
  refused naming the field, and leaves OUT as it was. Before, only the architecture and vocabulary
  were compared: a changed corpus or batch size resumed silently.
- A setting a resumed run may change does change: a lower ``--lr`` after a divergence takes effect
  (before, the checkpoint's schedule silently kept the old peak).
- ``--overwrite`` replaces the earlier model as a whole: nothing of an earlier model of another
  family survives beside the new one (before, an earlier ELMo's ``options.json`` + ``weights.hdf5``
  stayed, and ``load_encoder(OUT)`` loaded the old ELMo instead of the new BERT).
"""

from __future__ import annotations

import json
import shutil

import pytest

from contextembed import load_encoder
from contextembed.cli import main
from contextembed.errors import ProvenanceError
from contextembed.pretraining import MLMConfig, pretrain_mlm
from contextembed.pretraining._run_files import RUN_FILES
from contextembed._runtime.provenance import PROVENANCE_FILE as MODEL_RECORD
from pretraining.conftest import TINY_FIELDS, make_documents, tiny_training, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", make_documents(12, 6))


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("size") / "tiny.json"
    path.write_text(json.dumps(TINY_FIELDS), encoding="utf-8")
    return MLMConfig(size=str(path), vocab_size=120, max_length=32, min_frequency=1)


@pytest.fixture(scope="module")
def finished(tmp_path_factory, corpus, config):
    """OUT of a 2-step MLM run with a checkpoint at step 2."""
    out = tmp_path_factory.mktemp("run") / "out"
    pretrain_mlm(corpus, out, config, tiny_training(max_steps=2, checkpoint_every=2, held_out_fraction=0.0))
    return out


def _copy(finished, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


def _snapshot(out):
    return {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def test_resume_after_the_corpus_changed_is_refused(finished, corpus, config, tmp_path):
    out = _copy(finished, tmp_path)
    before = _snapshot(out)
    changed = tmp_path / "changed.txt"
    changed.write_text(corpus.read_text(encoding="utf-8").replace("the cat", "a cat", 1), encoding="utf-8")
    with pytest.raises(ProvenanceError, match=r"checkpoint .*step-00000002\.pt was made with corpus='[0-9a-f]+', "
                       r"but this run has corpus='[0-9a-f]+'; resume with the corpus and settings") as caught:
        pretrain_mlm(changed, out, config, tiny_training(max_steps=4, held_out_fraction=0.0), resume=True)
    assert caught.value.field == "corpus"
    assert _snapshot(out) == before


def test_the_same_corpus_elsewhere_resumes(finished, corpus, config, tmp_path):
    out = _copy(finished, tmp_path)
    moved = tmp_path / "moved" / "corpus.txt"
    moved.parent.mkdir()
    shutil.copy(corpus, moved)
    summary = pretrain_mlm(moved, out, config, tiny_training(max_steps=3, held_out_fraction=0.0), resume=True)
    assert summary["steps"] == 3


def test_resume_in_a_corpus_directory_with_a_new_file_is_refused(tmp_path, config):
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(folder / "a.txt", make_documents(12, 6))
    out = tmp_path / "out"
    pretrain_mlm(folder, out, config, tiny_training(max_steps=2, checkpoint_every=2, held_out_fraction=0.0))
    write_corpus(folder / "b.txt", make_documents(1, 2, seed=3))
    with pytest.raises(ProvenanceError, match="was made with corpus="):
        pretrain_mlm(folder, out, config, tiny_training(max_steps=4, held_out_fraction=0.0), resume=True)


@pytest.mark.parametrize(("change", "field"), [
    ({"batch_size": 4}, "training.batch_size=8, but this run has training.batch_size=4"),
    ({"seed": 1}, "training.seed=0, but this run has training.seed=1"),
    ({"held_out_fraction": 0.2}, "training.held_out_fraction=0.0, but this run has training.held_out_fraction=0.2"),
])
def test_resume_after_a_training_setting_changed_is_refused(finished, corpus, config, tmp_path, change, field):
    out = _copy(finished, tmp_path)
    before = _snapshot(out)
    options = {"max_steps": 4, "held_out_fraction": 0.0, **change}
    with pytest.raises(ProvenanceError, match=f"was made with {field}"):
        pretrain_mlm(corpus, out, config, tiny_training(**options), resume=True)
    assert _snapshot(out) == before


def test_resume_after_the_masking_changed_is_refused_by_the_cli(finished, corpus, config, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    config_file = (out / "pretrain_config.json").read_bytes() if (out / "pretrain_config.json").exists() else None
    argv = ["pretrain", "mlm", str(corpus), str(out), "--size", config.size, "--vocab-size", "120",
            "--min-frequency", "1", "--max-length", "32", "--max-steps", "4", "--batch-size", "8",
            "--held-out-fraction", "0", "--device", "cpu", "--quiet", "--lr", "1e-3", "--mask-probability", "0.3",
            "--resume"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "mlm.masking.mask_probability=0.15, but this run has mlm.masking.mask_probability=0.3" in err
    assert "--overwrite" in err
    now = (out / "pretrain_config.json").read_bytes() if (out / "pretrain_config.json").exists() else None
    assert now == config_file


def test_a_lower_learning_rate_takes_effect_on_resume(finished, corpus, config, tmp_path):
    out = _copy(finished, tmp_path)
    pretrain_mlm(corpus, out, config, tiny_training(max_steps=6, log_every=1, learning_rate=1e-5,
                                                    held_out_fraction=0.0), resume=True)
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    resumed = [record for record in records if record["step"] > 2 and "lr" in record]
    # linear decay from the new peak 1e-5 (warmup 1 step) to 0 at step 6; the old peak was 1e-3
    assert [record["lr"] for record in resumed] == pytest.approx([1e-5 * (6 - s) / 5 for s in (3, 4, 5, 6)])


def _bilm(corpus, out, *extra):
    return ["pretrain", "bilm", str(corpus), str(out), "--n-layers", "1", "--min-count", "1", "--max-steps", "1",
            "--batch-size", "4", "--held-out-fraction", "0", "--device", "cpu", "--quiet", *extra]


def _mlm(corpus, out, size, *extra):
    return ["pretrain", "mlm", str(corpus), str(out), "--size", size, "--vocab-size", "120", "--min-frequency", "1",
            "--max-length", "32", "--max-steps", "1", "--batch-size", "4", "--held-out-fraction", "0",
            "--device", "cpu", "--quiet", *extra]


def _model_files(out) -> list[str]:
    return json.loads((out / MODEL_RECORD).read_text())["files"]


def test_overwrite_with_another_family_leaves_only_the_new_model(corpus, config, tmp_path):
    out = tmp_path / "out"
    elmo_files = {"options.json", "weights.hdf5", "softmax.safetensors", "vocab.txt"}
    assert main(_bilm(corpus, out)) == 0
    assert elmo_files <= {p.name for p in out.iterdir()}
    assert main(_mlm(corpus, out, config.size, "--overwrite")) == 0
    assert not elmo_files & {p.name for p in out.iterdir()}
    assert load_encoder(str(out), device="cpu").family == "transformer"
    bert_files = _model_files(out)
    assert "model.safetensors" in bert_files and "config.json" in bert_files
    assert sorted(p.name for p in out.iterdir()) == sorted({*bert_files, *RUN_FILES, MODEL_RECORD, "pretrain_config.json"})
    # and on to word2vec: nothing of the BERT stays
    assert main(["pretrain", "static", str(corpus), str(out), "--min-count", "1", "--dim", "8", "--epochs", "1",
                 "--quiet", "--device", "cpu", "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["contextembed_provenance.json", "log.jsonl", "pretrain_config.json", "vectors.bin", "vectors.txt"])
    assert load_encoder(str(out / "vectors.bin")).width == 8


def test_overwrite_never_removes_files_no_run_recorded(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_bilm(corpus, out)) == 0
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    assert main(_bilm(corpus, out, "--overwrite")) == 2
    err = capsys.readouterr().err
    assert "holds files that no earlier `contextembed pretrain` run recorded writing (notes.txt)" in err
    assert _snapshot(out) == before


def test_a_damaged_model_record_is_refused_not_followed(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_bilm(corpus, out)) == 0
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    record = json.loads((out / MODEL_RECORD).read_text())
    record["files"].append("../precious.txt")
    (out / MODEL_RECORD).write_text(json.dumps(record))
    assert main(_bilm(corpus, out, "--overwrite")) == 2
    assert "is not the record of a model written by `contextembed pretrain`" in capsys.readouterr().err
    assert outside.read_text() == "keep me" and (out / "weights.hdf5").exists()


def test_a_resumed_run_replaces_its_model_as_a_set(finished, corpus, config, tmp_path):
    out = _copy(finished, tmp_path)
    (out / "stale.bin").write_bytes(b"x")  # a file the record does not list stays (never removed unasked)
    old = (out / "model.safetensors").read_bytes()
    record = json.loads((out / MODEL_RECORD).read_text())
    pretrain_mlm(corpus, out, config, tiny_training(max_steps=3, held_out_fraction=0.0), resume=True)
    assert (out / "model.safetensors").read_bytes() != old
    assert _model_files(out) == record["files"] and (out / "stale.bin").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".partial")]


def _stop_moving_in_at(monkeypatch, name: str) -> None:
    """A run stopped (as by a kill) when :func:`publish_model` comes to move ``name`` into OUT."""
    import os

    replace = os.replace

    def stopping(source, target, *args, **kwargs):
        staged = [os.path.basename(os.path.dirname(path)).startswith(".model.") for path in (source, target)]
        if os.path.basename(target) == name and staged == [True, False]:  # out of the staging folder into OUT
            raise KeyboardInterrupt
        return replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", stopping)


@pytest.mark.slow
def test_a_run_stopped_while_it_moves_the_model_in_leaves_no_model_to_load(corpus, config, tmp_path, monkeypatch):
    """Part of the earlier ELMo gone, the new BERT's config moved in, its weights not: OUT is refused
    by the loader, and the next run replaces every file of both as a set."""
    from contextembed._runtime.files import MOVING_IN
    from contextembed.errors import ModelFormatError

    out = tmp_path / "out"
    assert main(_bilm(corpus, out)) == 0
    with monkeypatch.context() as patch:
        _stop_moving_in_at(patch, "model.safetensors")
        assert main(_mlm(corpus, out, config.size, "--overwrite")) == 130  # as by SIGINT
    assert (out / MOVING_IN).exists() and (out / "config.json").exists() and not (out / "model.safetensors").exists()
    with pytest.raises(ModelFormatError, match=rf"{MOVING_IN}: a `contextembed pretrain` run was stopped while it "
                                               "moved a new model's files into this directory"):
        load_encoder(str(out), device="cpu")
    # the next run, of another family: the ELMo's files (the record's) and the BERT's that came in
    # (MOVING_IN's) all go, although no record lists the latter
    static = ["pretrain", "static", str(corpus), str(out), "--min-count", "1", "--dim", "8", "--epochs", "1",
              "--quiet", "--device", "cpu", "--overwrite"]
    assert main(static) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["contextembed_provenance.json", "log.jsonl", "pretrain_config.json", "vectors.bin", "vectors.txt"])
    # stopped again, then resumed by a whole run of the same kind
    with monkeypatch.context() as patch:
        _stop_moving_in_at(patch, "vectors.txt")
        assert main(static) == 130
    assert (out / MOVING_IN).exists()
    with pytest.raises(ModelFormatError, match=MOVING_IN):
        load_encoder(str(out))
    assert main(static) == 0 and not (out / MOVING_IN).exists()
    assert load_encoder(str(out / "vectors.bin")).width == 8


def test_a_damaged_list_of_files_moving_in_is_refused_not_followed(corpus, tmp_path, capsys):
    from contextembed._runtime.files import MOVING_IN

    out = tmp_path / "out"
    assert main(_bilm(corpus, out)) == 0
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (out / MOVING_IN).write_text(json.dumps({"earlier": ["weights.hdf5"], "files": ["../precious.txt"]}))
    assert main(_bilm(corpus, out, "--overwrite")) == 2
    assert f"{MOVING_IN} is not a list of model files written by `contextembed pretrain`" in capsys.readouterr().err
    assert outside.read_text() == "keep me" and (out / "weights.hdf5").exists()
    (out / MOVING_IN).write_text("{not json")
    assert main(_bilm(corpus, out, "--overwrite")) == 2
    assert f"{MOVING_IN} cannot be read" in capsys.readouterr().err
