"""``nlp.pipe(n_process=2)`` in any order: cold, after ``nlp(text)``, after an ``n_process=1`` pass.

Forked workers used to hang at 0% CPU once the pipeline had run in the parent (torch's OpenMP
pool does not survive ``fork``; see :mod:`contextembed._runtime.forking`). Each order runs in one
subprocess with a time limit (``tests/_scenario.py``), so that a hang fails the tests instead of
blocking the suite; it runs both pipelines (the component alone, and a NER listening to it) and
compares the workers' docs with the ``n_process=1`` docs of the same process.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy_helpers import encoder_config, ner_config, ner_examples
from thinc.api import Adam

from _scenario import run_scenario

SCENARIO = Path(__file__).with_name("multiprocessing_scenario.py")
ORDERS = ["cold", "call", "pipe1"]
#: each order is a scenario in a process of its own, after a NER is trained: seconds each
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipelines(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    """Saved pipelines: the component alone at default precision, and a trained NER listening to
    the component in fp32."""
    root = tmp_path_factory.mktemp("mp_pipelines")
    alone = spacy.blank("en")
    alone.add_pipe("contextembed", config=encoder_config(tiny_bert_dir, precision="auto"))
    alone.initialize()
    alone.to_disk(root / "encoder")
    ner = spacy.blank("en")
    ner.add_pipe("contextembed", config=encoder_config(tiny_bert_dir))
    ner.add_pipe("ner", config=ner_config())
    ner.initialize(lambda: ner_examples(ner))
    optimizer = Adam(0.01)
    for _ in range(40):  # enough for the parser to predict entities on the scenario's texts
        ner.update(ner_examples(ner), sgd=optimizer)
    ner.to_disk(root / "ner")
    return {"encoder": root / "encoder", "ner": root / "ner"}


@pytest.fixture(scope="module")
def run_order(pipelines, tmp_path_factory):
    """``run_order(order)`` -> ``{pipeline: (multi tensors, single tensors, meta)}`` (run once)."""
    results = {}

    def run(order: str) -> dict:
        if order not in results:
            out = tmp_path_factory.mktemp(f"mp_{order}")
            run_scenario(SCENARIO, order, out, *(f"{name}={path}" for name, path in pipelines.items()), timeout=120)
            results[order] = {name: _load(out / f"{name}.npz") for name in pipelines}
        return results[order]

    return run


def _load(path: Path):
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        n = len(meta["multi"]["pids"])
        return [data[f"multi_{i}"] for i in range(n)], [data[f"single_{i}"] for i in range(n)], meta


def _check_workers(meta: dict) -> None:
    """Two workers each did some of the work, with one torch thread each."""
    parent = meta["parent"]["pid"]
    assert set(meta["single"]["pids"]) == {parent}
    workers = set(meta["multi"]["pids"])
    assert parent not in workers and len(workers) == 2, workers
    assert set(meta["multi"]["threads"]) == {1}


@pytest.mark.parametrize("order", ORDERS)
def test_component_alone_any_order(run_order, order):
    """Default precision (bf16 on CPUs with native bf16 units, fp32 elsewhere): identical tensors."""
    multi, single, meta = run_order(order)["encoder"]
    _check_workers(meta)
    assert len(multi) == len(single) == 30
    for i, (a, b) in enumerate(zip(multi, single)):
        assert a.shape == b.shape and a.shape[0] > 0
        np.testing.assert_array_equal(a, b, err_msg=f"doc {i}")


@pytest.mark.parametrize("order", ORDERS)
def test_listener_fed_ner_any_order(run_order, order):
    """fp32 encoder and a NER listening to it: the same tensors (1e-5) and the same entities."""
    multi, single, meta = run_order(order)["ner"]
    _check_workers(meta)
    for i, (a, b) in enumerate(zip(multi, single)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5, err_msg=f"doc {i}")
    assert meta["multi"]["ents"] == meta["single"]["ents"]
    assert sum(map(len, meta["single"]["ents"])) > 0, "the NER predicts no entity: the comparison says little"
