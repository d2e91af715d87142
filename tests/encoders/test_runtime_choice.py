"""The runtime is chosen in one place (choose_runtime); the encoder's constructor never measures,
exports or writes (issue 54, item 2)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from contextembed import load_encoder, tuning
from contextembed.encoders import Runtime, choose_runtime
from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice, _runtime_choice as runtime_choice
from contextembed.encoders.transformer import TransformerEncoder

SENTENCES = [["The", "quick", "brown", "fox"], ["jumps"], [], ["over", "the", "lazy", "dog", "again"] * 9]
CPU = torch.device("cpu")


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv(tuning.TUNING_DIR_ENV, str(tmp_path / "tuning"))
    monkeypatch.delenv(tuning.TUNING_ENV, raising=False)
    monkeypatch.delenv("CONTEXTEMBED_AUTO_CPU_PRECISION", raising=False)
    tuning.forget()
    yield tmp_path / "tuning"
    tuning.forget()


@pytest.fixture
def model_and_tokenizer(tiny_bert_dir):
    return AutoModel.from_pretrained(str(tiny_bert_dir)), AutoTokenizer.from_pretrained(str(tiny_bert_dir))


def _never(*args, **kwargs):
    raise AssertionError("the constructor measured, exported or wrote")


@pytest.fixture
def nothing_measured(monkeypatch):
    """Any measurement, tuning record, quantization check or export fails the test."""
    monkeypatch.setattr(tuning, "remembered", _never)
    monkeypatch.setattr(tuning, "recorded", _never)
    monkeypatch.setattr(runtime_choice, "int8_fidelity", _never)
    monkeypatch.setattr(engine_choice, "auto_precision", _never)
    monkeypatch.setattr(engine.OpenVinoForward, "compiled", _never)


def test_a_runtime_is_frozen_hashable_and_compares_without_what_it_prepared():
    a = Runtime(CPU, "torch", "fp32")
    b = Runtime(CPU, "torch", "fp32", prepared=object())
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Runtime(CPU, "torch", "bf16") != a and Runtime(CPU, "openvino", "fp32") != a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.precision = "bf16"
    assert "prepared" not in repr(b)


def test_settings_named_are_chosen_without_measuring(model_and_tokenizer, nothing_measured):
    model, tokenizer = model_and_tokenizer
    for precision in ("fp32", "bf16", "int8"):
        runtime = choose_runtime(model, tokenizer, device="cpu", precision=precision)
        assert (runtime.device, runtime.backend, runtime.precision) == (CPU, "torch", precision)


@pytest.mark.parametrize("runtime", [Runtime(CPU, "torch", "fp32"), Runtime(CPU, "torch", "int8"),
                                     Runtime(CPU, "torch", "bf16")])
def test_the_constructor_runs_what_it_is_given_and_measures_nothing(model_and_tokenizer, nothing_measured, records,
                                                                     runtime):
    model, tokenizer = model_and_tokenizer
    encoder = TransformerEncoder(model, tokenizer, runtime)
    assert (encoder.backend, encoder.precision, encoder.runtime) == (runtime.backend, runtime.precision, runtime)
    assert [a.shape for a in encoder.encode(SENTENCES)] == [(3, len(s), 32) for s in SENTENCES]
    assert not records.exists()  # no tuning record written


def test_the_engine_s_constructor_exports_nothing(model_and_tokenizer, nothing_measured, records):
    pytest.importorskip("openvino")
    model, tokenizer = model_and_tokenizer
    cache = os.environ["CONTEXTEMBED_ENGINE_CACHE"]
    before = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
    encoder = TransformerEncoder(model, tokenizer, Runtime(CPU, "openvino", "fp32"))
    assert (encoder.backend, encoder.precision) == ("openvino", "fp32")
    assert (sorted(os.listdir(cache)) if os.path.isdir(cache) else []) == before and not records.exists()


def test_a_constructed_encoder_gives_the_loaded_encoder_s_features_bit_for_bit(tiny_bert_dir, model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    loaded = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
    built = TransformerEncoder(model, tokenizer, choose_runtime(model, tokenizer, device="cpu", precision="fp32"))
    for a, b in zip(loaded.encode(SENTENCES), built.encode(SENTENCES)):
        np.testing.assert_array_equal(a, b)


def test_load_takes_a_runtime_and_refuses_a_runtime_with_settings(tiny_bert_dir, nothing_measured):
    encoder = load_encoder(str(tiny_bert_dir), runtime=Runtime(CPU, "torch", "bf16"))
    assert (encoder.precision, encoder.runtime) == ("bf16", Runtime(CPU, "torch", "bf16"))
    with pytest.raises(TypeError, match="pass runtime= or precision=, not both"):
        load_encoder(str(tiny_bert_dir), runtime=Runtime(CPU, "torch", "bf16"), precision="fp32")


def test_the_constructor_refuses_anything_but_a_runtime(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(TypeError, match="runtime='auto' is not a Runtime: pass what choose_runtime"):
        TransformerEncoder(model, tokenizer, "auto")


def test_a_measured_choice_is_read_back_the_same_and_measured_once(model_and_tokenizer, records, monkeypatch):
    pytest.importorskip("openvino")
    model, tokenizer = model_and_tokenizer
    first = choose_runtime(model, tokenizer, device="cpu", precision="fp32", backend="auto")
    assert first.prepared is not None  # the forward it timed, not built again
    tuning.forget()  # a new process
    monkeypatch.setattr(runtime_choice, "engine_speedup", _never)
    again = choose_runtime(model, tokenizer, device="cpu", precision="fp32", backend="auto")
    assert again == first
    encoder = TransformerEncoder(model, tokenizer, again)
    assert (encoder.backend, encoder.precision) == (first.backend, first.precision)


def test_settings_are_checked_before_anything_runs(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="precision='int4'"):
        choose_runtime(model, tokenizer, device="cpu", precision="int4")
    with pytest.raises(ValueError, match="backend='onnx'"):
        choose_runtime(model, tokenizer, device="cpu", backend="onnx")
    with pytest.raises(ValueError, match="device='gpu'"):
        choose_runtime(model, tokenizer, device="gpu")


def test_tune_chooses_a_transformer_s_runtime_without_building_an_encoder(tiny_bert_dir, records, monkeypatch):
    from contextembed.encoders import tune

    with monkeypatch.context() as patched:
        patched.setattr(TransformerEncoder, "__init__", _never)
        result = tune(str(tiny_bert_dir), device="cpu", precision="auto", backend="torch")
    chosen = result["chosen"]["backend=torch"]
    assert chosen["backend"] == "torch" and chosen["precision"] in ("fp32", "bf16", "int8")
    assert result["records"]  # what it measured is recorded
    tuning.forget()  # a later process reads what tune recorded and runs it
    assert load_encoder(str(tiny_bert_dir), device="cpu", precision="auto").precision == chosen["precision"]


def test_a_forward_prepared_for_another_model_is_not_run(tiny_bert_dir, tiny_roberta_dir, records):
    """A choice's prepared forward belongs to the model it was chosen on: a runtime passed on to
    another model's encoder builds that model's own forward, never runs the first model."""
    bert = AutoModel.from_pretrained(str(tiny_bert_dir)), AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    roberta_dir = str(tiny_roberta_dir)
    other = AutoModel.from_pretrained(roberta_dir), AutoTokenizer.from_pretrained(roberta_dir, add_prefix_space=True)
    chosen = choose_runtime(*bert, device="cpu", precision="fp32", backend="torch")
    foreign = dataclasses.replace(chosen, prepared=runtime_choice.TorchForward(
        bert[0], "fp32", runtime_choice.ModelInputs(*bert), 3, CPU), prepared_for=bert[0])
    encoder = TransformerEncoder(*other, foreign)
    assert encoder.model is other[0] and encoder._torch is not foreign.prepared
    reference = load_encoder(roberta_dir, device="cpu", precision="fp32")
    for a, b in zip(encoder.encode(SENTENCES), reference.encode(SENTENCES)):
        np.testing.assert_array_equal(a, b)
    same = TransformerEncoder(*bert, foreign)  # the model it was built from: used, not built again
    assert same._torch is foreign.prepared
