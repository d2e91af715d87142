"""Local Ray and Dask clusters for the engine tests: small, loopback only, shut down after use.

Ray reads its environment at import: :data:`contextembed.engines.ray.LOCAL_ENVIRONMENT` (no usage
report, loopback node address) is set before any test imports it. The clusters are module-scoped
(starting Ray costs seconds); tests that use them are marked ``loopback``. Not session-scoped: each
serves one module (``test_ray.py``, ``test_dask.py``), and ``test_ray_terminal.py`` needs Ray not
running in this process when it starts its own.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from contextembed.engines.ray import LOCAL_ENVIRONMENT

for _name, _value in LOCAL_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: workers import this checkout, and this folder's helpers (``engine_helpers``)
WORKER_PATH = os.pathsep.join([REPO_ROOT, os.path.dirname(os.path.abspath(__file__))])

SENTENCES = [
    ["the", "quick", "brown", "fox"],
    [],
    ["New", "York", "Times", "reported", "unaffable", "behaviour", "in", "Washington"],
    ["contextual", "embeddings"],
    ["Peter", "Blackburn", "met", "EU", "officials"],
    ["ça", "coûte", "3,5", "€", "naïve", "café", "東京", "😀"],
] * 7


@pytest.fixture(scope="session")
def tiny_vectors(tmp_path_factory) -> str:
    """Static vectors covering part of the test words (the rest are out of vocabulary)."""
    from contextembed.encoders import write_word2vec

    words = sorted({w for s in SENTENCES for w in s})[::2]
    path = tmp_path_factory.mktemp("engine_vectors") / "vectors.txt"
    write_word2vec(path, words, np.random.RandomState(0).randn(len(words), 6).astype(np.float32))
    return str(path)


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray.init(num_cpus=2)`` in this process, workers importing this checkout."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from socket_guard import allow_loopback

    with allow_loopback():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}})
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.fixture(scope="module")
def dask_client():
    """A ``LocalCluster`` of 2 worker processes (1 thread each) and a client."""
    pytest.importorskip("dask.bag")
    distributed = pytest.importorskip("distributed")
    from socket_guard import allow_loopback

    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [WORKER_PATH, previous]))
    try:
        with allow_loopback():
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               host="127.0.0.1", dashboard_address=None)
            client = distributed.Client(cluster)
            try:
                yield client
            finally:
                client.close()
                cluster.close()
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


@pytest.fixture
def shipped_jobs(monkeypatch) -> list:
    """What ``run_corpus_jobs`` hands the Ray actors, collected instead of run: a cluster of one CPU
    that is never contacted, and ``embed_files`` replaced by a list of its payloads."""
    import contextlib

    from contextembed.engines import ray as ray_engine

    class Cluster:
        def cluster_resources(self):
            return {"CPU": 1}

    shipped: list = []
    monkeypatch.setattr(ray_engine, "connected", lambda address, timeout: contextlib.nullcontext(Cluster()))
    monkeypatch.setattr(ray_engine, "embed_files", lambda payload, **kwargs: shipped.extend(payload) or [])
    return shipped
