"""``n_jobs=2`` after the encoder ran in the parent: joblib's ``multiprocessing`` backend forks
workers that inherit torch's thread state (they hung before :mod:`contextembed.forking`), ``loky``
starts fresh ones. The scenario runs in a time-limited subprocess (``tests/_scenario.py``), so a
hang fails the test instead of blocking the suite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _scenario import run_scenario

SCENARIO = Path(__file__).with_name("joblib_scenario.py")


@pytest.fixture(scope="module")
def features(tiny_bert_dir, tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("joblib") / "features.npz"
    run_scenario(SCENARIO, tiny_bert_dir, out, timeout=120)
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


@pytest.mark.parametrize("backend", ["multiprocessing", "loky"])
def test_n_jobs_after_the_parent_encoded(features, backend):
    """Default precision: the workers' features equal the parent's exactly."""
    assert features["serial"].shape[0] == 87  # tokens
    np.testing.assert_array_equal(features[backend], features["serial"])
