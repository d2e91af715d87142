"""``n_jobs=2`` after the encoder ran in the parent: joblib's ``multiprocessing`` backend forks
workers that inherit torch's thread state (they hung before :mod:`contextembed._runtime.forking`). The
scenario runs in a time-limited subprocess (``tests/_scenario.py``), so a hang fails the test
instead of blocking the suite. The default ``loky`` backend starts fresh interpreters, which
inherit nothing: ``test_encoding_cache.py::test_n_jobs_gives_identical_results`` runs it after
``n_jobs=1`` in the test process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _scenario import run_scenario

SCENARIO = Path(__file__).with_name("joblib_scenario.py")


@pytest.mark.slow
def test_forked_n_jobs_after_the_parent_encoded(tiny_bert_dir, tmp_path):
    """Default precision: the forked workers' features equal the parent's exactly."""
    run_scenario(SCENARIO, tiny_bert_dir, tmp_path / "features.npz", timeout=120)
    with np.load(tmp_path / "features.npz") as features:
        assert features["serial"].shape[0] == 87  # tokens
        np.testing.assert_array_equal(features["multiprocessing"], features["serial"])
