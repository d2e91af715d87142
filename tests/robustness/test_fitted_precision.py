"""A fitted estimator runs at transform the precision it ran at fit (issue 53 item 5): whatever
``precision="auto"`` would choose later, in another process, on another machine or after
``CONTEXTEMBED_TUNING=refresh``, so a classifier downstream always sees features of one numeric path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from contextembed._runtime import devices as _devices
from contextembed.sklearn import TextEmbedder, TokenEmbedder, clear_cache, clear_encoders
from contextembed.encoders._registry import get_encoder

TEXTS = ["the quick brown fox", "Peter Blackburn met EU officials in Brussels", "a dull mess"]


@pytest.fixture
def auto_chooses(monkeypatch):
    """Make ``precision="auto"`` choose ``precision`` on this CPU (as a measurement would)."""
    def choose(precision: str) -> None:
        monkeypatch.setenv(_devices.AUTO_CPU_PRECISION_ENV, precision)
        clear_encoders()
        clear_cache()

    yield choose
    clear_encoders()
    clear_cache()


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [TextEmbedder, TokenEmbedder])
def test_transform_runs_the_precision_fit_chose(tiny_bert_dir, auto_chooses, estimator):
    X = TEXTS if estimator is TextEmbedder else [t.split() for t in TEXTS]
    auto_chooses("bf16")
    fitted = estimator(str(tiny_bert_dir), device="cpu").fit(X)
    assert fitted.precision_ == "bf16" and fitted.encoder_ref_.precision == "bf16"
    expected = fitted.transform(X)
    auto_chooses("fp32")  # another machine, or the records refreshed: auto would choose fp32 now
    assert get_encoder(fitted.encoder_ref_).precision == "bf16"
    np.testing.assert_array_equal(fitted.transform(X), expected)
    restored = pickle.loads(pickle.dumps(fitted))  # an estimator saved and loaded elsewhere
    clear_encoders()
    assert restored.precision_ == "bf16"
    np.testing.assert_array_equal(restored.transform(X), expected)
    assert estimator(str(tiny_bert_dir), device="cpu").fit(X).precision_ == "fp32"  # a new fit chooses anew


def test_a_precision_that_cannot_run_here_runs_autos_with_a_warning(tiny_bert_dir, auto_chooses, monkeypatch):
    auto_chooses("bf16")
    fitted = TextEmbedder(str(tiny_bert_dir), device="cpu").fit(TEXTS)
    auto_chooses("fp32")
    monkeypatch.setattr(_devices, "unrunnable", lambda precision, device: "this test says so")
    with pytest.warns(_devices.PrecisionChangedWarning, match=r"fitted at precision='bf16', which cannot run here "
                                                             r"\(this test says so\).*precision 'auto' chooses"):
        features = fitted.transform(TEXTS)
    assert features.shape[0] == 3 and get_encoder(fitted.encoder_ref_).precision == "fp32"


def test_int8_cannot_run_on_a_gpu_and_bf16_needs_one_that_has_it():
    import torch

    assert _devices.unrunnable("int8", torch.device("cuda")) == "int8 runs on the CPU only"
    assert _devices.unrunnable("int8", torch.device("cpu")) is None
    assert _devices.unrunnable("fp32", torch.device("cpu")) is None


def test_an_estimator_pickled_before_precision_was_recorded_keeps_its_reference(tiny_bert_dir, auto_chooses):
    auto_chooses("fp32")
    fitted = TextEmbedder(str(tiny_bert_dir), device="cpu", precision="fp32").fit(TEXTS)
    state = fitted.__getstate__()
    del state["precision_"]
    old = TextEmbedder.__new__(TextEmbedder)
    old.__setstate__(state)
    assert old.precision_ == "fp32"
