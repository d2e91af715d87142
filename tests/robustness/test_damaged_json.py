"""Every reader of a JSON record, config or options file, given one nested 1,500 deep, holding NaN or
of the wrong shape: an error of the reader's own type naming the file, never ``RecursionError``,
``AttributeError`` or a silently different reading (issue 53, item 4)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from contextembed.errors import ModelFormatError, ProvenanceError

DEEP_OBJECT = '{"a": ' * 1500 + "1" + "}" * 1500
DEEP_ARRAY = "[" * 1500 + "]" * 1500
DAMAGES = {"deep-object": (DEEP_OBJECT, "nested 1500 levels deep"), "deep-array": (DEEP_ARRAY, "nested 1500 levels deep"),
           "nan": ('{"a": NaN}', "holds NaN")}


@pytest.fixture(params=sorted(DAMAGES))
def damage(request):
    return DAMAGES[request.param]


@pytest.mark.parametrize("text", [DEEP_OBJECT, DEEP_ARRAY], ids=["deep-object", "deep-array"])
def test_a_model_config(tiny_bert_dir, tmp_path, text):
    from contextembed import load_encoder

    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    (model / "config.json").write_text(text)
    with pytest.raises(ModelFormatError, match=r"config\.json: nested 1500 levels deep"):
        load_encoder(str(model), device="cpu")


def test_a_model_config_may_hold_nan_as_transformers_writes_it(tiny_bert_dir, tmp_path):
    from contextembed.encoders._hf_files import read_config

    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "custom_threshold": float("nan")}))
    assert read_config(str(model))["custom_threshold"] != read_config(str(model))["custom_threshold"]  # NaN


@pytest.mark.parametrize("config, found", [([1, 2], "holds a JSON list, expected an object"),
                                           ("bert", "holds a JSON str, expected an object")])
def test_a_model_config_that_is_not_an_object(tiny_bert_dir, tmp_path, config, found):
    from contextembed import load_encoder

    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFormatError, match=rf"config\.json: {found}"):
        load_encoder(str(model), device="cpu")


@pytest.mark.parametrize("weight_map", [[1, 2], {"a": ["x"]}, "model.safetensors"])
def test_a_shard_index_of_the_wrong_shape(tiny_bert_dir, tmp_path, weight_map):
    from contextembed.encoders._hf_files import check_directory

    model = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, model)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelFormatError, match=r"index\.json: has no 'weight_map' naming its shards"):
        check_directory(str(model))


def test_elmo_options(tiny_elmo_dir, tmp_path, damage):
    from contextembed.encoders._elmo.options import ElmoFormatError, read_options

    text, reason = damage
    (tmp_path / "options.json").write_text(text)
    with pytest.raises(ElmoFormatError, match=rf"options\.json: {reason}"):
        read_options(tmp_path / "options.json")


def test_a_saved_static_tables_options(tmp_path, damage):
    import numpy as np

    from contextembed.encoders import StaticVectors, load_encoder

    text, reason = damage
    StaticVectors(["a", "b"], np.eye(2, dtype=np.float32)).save(tmp_path / "table")
    (tmp_path / "table" / "contextembed_static.json").write_text(text)
    with pytest.raises(ModelFormatError, match=rf"contextembed_static\.json: cannot read the saved options: {reason}"):
        load_encoder(str(tmp_path / "table"))


def test_a_saved_static_tables_words(tmp_path, damage):
    """(The provenance record of a table saved since format 4 refuses an edited words.json first:
    this is the reader of the older formats, which have none.)"""
    from contextembed.encoders._static.directory import _read_saved_words

    text, reason = damage
    (tmp_path / "words.json").write_text(text)
    with pytest.raises(ModelFormatError, match=rf"words\.json: cannot read the saved words: {reason}"):
        _read_saved_words(str(tmp_path / "words.json"))


def test_a_pipelines_embedded_encoder_meta(tmp_path, damage):
    from contextembed.spacy._loader import _read_meta

    text, reason = damage
    (tmp_path / "contextembed_encoder.json").write_text(text)
    with pytest.raises(ModelFormatError, match=rf"contextembed_encoder\.json: {reason}"):
        _read_meta(tmp_path / "contextembed_encoder.json")


@pytest.mark.parametrize("text, reason", [
    (DEEP_OBJECT, "nested 1500 levels deep"),
    ('{"earlier": "ab", "files": []}', "is not a list of model files"),  # once taken apart into 'a' and 'b'
    ('{"earlier": [], "files": {"a": 1}}', "is not a list of model files"),
], ids=["deep", "string", "object"])
def test_a_pretraining_runs_moving_in_record(tmp_path, text, reason):
    from contextembed._runtime.files import MOVING_IN
    from contextembed.pretraining._run_files import model_files

    (tmp_path / MOVING_IN).write_text(text)
    with pytest.raises(ProvenanceError, match=reason):
        model_files(tmp_path)


@pytest.mark.parametrize("recorded, reason", [
    (DEEP_ARRAY, "nested 1500 levels deep"),
    ('"2000"', "must be a list of integers"),
    ("[3000, 2000]", "strictly increasing"),
    ("[NaN]", "holds NaN"),
], ids=["deep", "string", "decreasing", "nan"])
def test_the_cutoffs_recorded_in_a_bilm_head(tmp_path, recorded, reason):
    import torch
    from safetensors.torch import save_file

    from contextembed.pretraining._bilm import _saved_cutoffs

    head = tmp_path / "softmax.safetensors"
    save_file({"w": torch.zeros(1)}, str(head), metadata={"cutoffs": recorded})
    with pytest.raises(ModelFormatError, match=rf"softmax\.safetensors: the recorded cutoffs .*{reason}"):
        _saved_cutoffs(head)
    save_file({"w": torch.zeros(1)}, str(head), metadata={"cutoffs": "[2, 5]"})
    assert _saved_cutoffs(head) == [2, 5]


@pytest.mark.parametrize("payload", [DEEP_ARRAY, '["builtins", "ValueError"]', '[1, 2, 3, {}]',
                                     '["builtins", "ValueError", "m", []]'],
                         ids=["deep", "short", "numbers", "attributes-not-an-object"])
def test_a_worker_error_that_only_looks_carried_is_left_as_raised(payload):
    from contextembed.engines._carry import _MARKER, carried

    assert carried(RuntimeError(f"{_MARKER} {payload} {_MARKER}")) is None
    rebuilt = carried(RuntimeError(f'{_MARKER} ["builtins", "ValueError", "m", {{}}] {_MARKER}'))
    assert type(rebuilt) is ValueError and str(rebuilt) == "m"


@pytest.mark.parametrize("text", [DEEP_OBJECT, DEEP_ARRAY, "[1]"], ids=["deep-object", "deep-array", "array"])
def test_a_bert_directory_for_continued_pretraining(tmp_path, text):
    from contextembed.pretraining._mlm import check_bert_directory

    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ModelFormatError, match=r"config\.json: (nested 1500 levels deep|holds a JSON list)"):
        check_bert_directory(Path(tmp_path))
