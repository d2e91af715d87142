"""Fork safety (:mod:`contextembed._runtime.forking`): workers forked after the parent encoded do not hang.

The scenario runs in a time-limited subprocess (``tests/_scenario.py``), so that a hang fails the
test instead of blocking the suite. spaCy's ``n_process`` and joblib's backends are tested in
``tests/spacy/test_multiprocessing.py`` and ``tests/sklearn/test_joblib_workers.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _scenario import run_scenario
from contextembed._runtime import forking

SCENARIO = Path(__file__).with_name("fork_scenario.py")
WORKERS = ["dataloader", "pool", "pool_parent_threads"]


@pytest.fixture(scope="module")
def forked(tiny_bert_dir, tmp_path_factory) -> dict[str, np.ndarray]:
    out = tmp_path_factory.mktemp("fork") / "vectors.npz"
    run_scenario(SCENARIO, tiny_bert_dir, out, timeout=90)
    with np.load(out) as data:
        return {name: data[name] for name in data.files}


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_forked_workers_encode_like_the_parent(forked, workers):
    """DataLoader workers, a fork Pool, and a fork Pool keeping the parent's threads: no hang (with
    the tokenizer's thread pool forced on), and the parent's vectors exactly."""
    n = sum(1 for name in forked if name.startswith("parent_") and name != "parent_threads")
    assert n == 8
    for i in range(n):
        np.testing.assert_array_equal(forked[f"{workers}_{i}"], forked[f"parent_{i}"], err_msg=f"sentence {i}")


@pytest.mark.slow
def test_thread_counts_in_forked_workers(forked):
    """One torch thread per forked worker by default; ``set_child_threads(None)`` keeps the parent's."""
    assert set(forked["pool_threads"]) == {1}
    assert set(forked["dataloader_threads"]) == {1}  # PyTorch's own choice for DataLoader workers
    assert set(forked["pool_parent_threads_threads"]) == set(forked["parent_threads"])


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_child_threads_must_be_positive_int_or_none(threads):
    with pytest.raises(ValueError, match="positive int or None"):
        forking.set_child_threads(threads)
    assert forking.child_threads() == 1
