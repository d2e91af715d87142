"""A saved spaCy pipeline's embedded encoder loads only its own files.

``spacy.load`` refuses, before any encoder loads, an embedded directory whose meta file points
elsewhere (``"subdir": "../../elsewhere"`` or an absolute path), and any link inside it (a link
can point anywhere on disk, and a copied pipeline would silently use whatever it points to).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import spacy

import contextembed.spacy  # noqa: F401  (registers the factory)
from contextembed.encoders import write_word2vec
from contextembed.encoders._identity import fingerprint
from contextembed.errors import ModelFormatError

TEXT = "Peter met EU officials in Brussels"
WORDS = ["Peter", "met", "EU", "officials", "in", "Brussels"]


def _embedded_pipeline(tmp_path, name: str, seed: int):
    """A pipeline saved with embedded static vectors at ``tmp_path / name``; returns its encoder dir."""
    source = tmp_path / f"{name}.txt"
    write_word2vec(source, WORDS, np.random.default_rng(seed).normal(size=(len(WORDS), 8)).astype("f"))
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(source), "device": "cpu", "precision": "fp32"},
                                         "embed_weights": True})
    nlp.to_disk(tmp_path / name)
    source.unlink()
    return tmp_path / name / "contextembed" / "encoder"


def _without_record(pipeline):
    """Make the pipeline look saved by a contextembed without provenance records (legacy cfg)."""
    cfg_path = pipeline / "contextembed" / "cfg"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("provenance", None)
    cfg_path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "legacy-cfg"])
@pytest.mark.parametrize("subdir", ["../../../elsewhere", "ABSOLUTE", "model/../../../elsewhere"])
def test_a_forged_meta_subdir_is_refused(tmp_path, subdir, legacy):
    encoder_dir = _embedded_pipeline(tmp_path, "pipeline", seed=0)
    other = _embedded_pipeline(tmp_path, "other", seed=1)
    shutil.copytree(other / "model", tmp_path / "elsewhere")  # the directory the forged meta points to
    if legacy:
        _without_record(tmp_path / "pipeline")
    meta_path = encoder_dir / "contextembed_encoder.json"
    meta = json.loads(meta_path.read_text())
    meta["subdir"] = str(tmp_path / "elsewhere") if subdir == "ABSOLUTE" else subdir
    meta["fingerprint"] = fingerprint(str(tmp_path / "elsewhere"))  # a consistent forgery
    meta_path.write_text(json.dumps(meta))

    with pytest.raises(ModelFormatError, match="'subdir'") as raised:
        spacy.load(tmp_path / "pipeline")
    message = str(raised.value)
    assert str(meta_path) in message and "'model'" in message and "save the pipeline again" in message


@pytest.mark.parametrize("legacy", [False, True], ids=["recorded", "legacy-cfg"])
def test_a_link_to_an_identical_file_outside_is_refused(tmp_path, legacy):
    encoder_dir = _embedded_pipeline(tmp_path, "pipeline", seed=0)
    if legacy:
        _without_record(tmp_path / "pipeline")
    weights = encoder_dir / "model" / "vectors.safetensors"
    outside = tmp_path / "outside.safetensors"
    shutil.copyfile(weights, outside)
    weights.unlink()
    os.symlink(outside, weights)  # same bytes: only the link itself is wrong

    with pytest.raises(ModelFormatError, match="link") as raised:
        spacy.load(tmp_path / "pipeline")
    assert str(weights) in str(raised.value)


def test_an_encoder_directory_that_is_a_link_is_refused(tmp_path):
    encoder_dir = _embedded_pipeline(tmp_path, "pipeline", seed=0)
    shutil.move(encoder_dir, tmp_path / "moved")
    os.symlink(tmp_path / "moved", encoder_dir)

    with pytest.raises(ModelFormatError, match="link"):
        spacy.load(tmp_path / "pipeline")


def test_a_link_to_a_directory_inside_the_model_is_refused(tmp_path):
    encoder_dir = _embedded_pipeline(tmp_path, "pipeline", seed=0)
    (tmp_path / "anywhere").mkdir()
    os.symlink(tmp_path / "anywhere", encoder_dir / "model" / "extra")

    with pytest.raises(ModelFormatError, match="link"):
        spacy.load(tmp_path / "pipeline")


def test_loading_writes_nothing(tmp_path):
    _embedded_pipeline(tmp_path, "pipeline", seed=0)
    before = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    spacy.load(tmp_path / "pipeline")(TEXT)
    assert sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before
