"""Words/s of one process vs Ray Data with 2 actors vs Dask with 2 worker processes, in one run.

    python benchmarks/scale.py [--spec minilm-l6] [--words 200000] [--precision auto]

The same corpus (CoNLL-2003 train sentences from ../shared/data up to ``--words`` words, synthetic
newswire-like sentences when absent) is embedded at word level (the encoder's default layers,
first piece) three ways, each timed end to end from a cold start of the engine's workers: model
load, sending the sentences, encoding, and bringing every feature row back to this process.

- 1 process: ``FeatureExtractor.iter_words``, torch with all of this machine's threads;
- Ray: ``ray.init(num_cpus=2)``, ``embed_dataset(concurrency=2)``, one thread per actor;
- Dask: ``LocalCluster(n_workers=2, threads_per_worker=1)``, ``embed_bag``, one thread per worker.

Prints words/s, the ratio to one process, peak resident memory per worker, the largest difference
of the features from the one-process ones, and the load average around each path (the machine may
be shared: other processes take cores from every path, and most from the one that needs both). Needs ``pip install ".[ray,dask,models]"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import conll_sentences, peak_rss_mb, synthetic_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKER_PATH = os.pathsep.join([str(ROOT), str(Path(__file__).resolve().parent)])


def corpus(n_words: int) -> list[list[str]]:
    sentences = conll_sentences("train") or synthetic_sentences(n_words // 10 + 10, seed=3)
    chosen, total = [], 0
    for sentence in sentences:
        if total >= n_words:
            break
        chosen.append(sentence)
        total += len(sentence)
    return chosen


def one_process(spec: str, precision: str, sentences) -> tuple[float, list, dict]:
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor

    start = time.perf_counter()
    extractor = FeatureExtractor(load_encoder(spec, precision=precision))
    rows = list(extractor.iter_words(sentences))
    return time.perf_counter() - start, rows, {"this process": peak_rss_mb()}


class MeasuredActor:
    """The Ray actor of ``embed_dataset``, reporting its process's peak memory with each batch."""

    def __init__(self, embedder) -> None:
        from contextembed.engines.ray import EmbedActor

        self.actor = EmbedActor(embedder)

    def __call__(self, batch):
        import pyarrow as pa

        out = self.actor(batch)
        memory = pa.array([f"{os.getpid()}:{peak_rss_mb():.0f}"] * out.num_rows)
        return out.append_column("memory", memory)


def with_ray(spec: str, precision: str, sentences) -> tuple[float, list, dict]:
    from contextembed.engines import BatchEmbedder
    from contextembed.engines._arrow import column_arrays
    from contextembed.engines.ray import LOCAL_ENVIRONMENT

    os.environ.update(LOCAL_ENVIRONMENT)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": WORKER_PATH}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        start = time.perf_counter()
        dataset = ray.data.from_items([{"tokens": s} for s in sentences], override_num_blocks=16)
        features = dataset.map_batches(
            MeasuredActor, fn_constructor_args=(BatchEmbedder(spec, precision=precision),), batch_format="pyarrow",
            batch_size=256, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1)
        features.context.execution_options.preserve_order = True
        rows, memory = [], {}
        for batch in features.iter_batches(batch_format="pyarrow", batch_size=None):
            block, lengths = column_arrays(batch.column("features"))
            rows.extend(np.split(block, np.cumsum(lengths)[:-1]))
            for entry in set(batch.column("memory").to_pylist()):
                pid, mb = entry.split(":")
                memory[f"actor {pid}"] = max(memory.get(f"actor {pid}", 0.0), float(mb))
        return time.perf_counter() - start, rows, memory
    finally:
        ray.shutdown()


def with_dask(spec: str, precision: str, sentences) -> tuple[float, list, dict]:
    import dask.bag as db
    from distributed import Client, LocalCluster

    from contextembed.engines.dask import embed_bag

    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [WORKER_PATH, os.environ.get("PYTHONPATH")]))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2)
        start = time.perf_counter()
        bag = db.from_sequence(sentences, npartitions=16)
        rows = embed_bag(bag, spec, precision=precision).compute()
        elapsed = time.perf_counter() - start
        memory = {f"worker {address.rsplit(':', 1)[-1]}": mb for address, mb in client.run(peak_rss_mb).items()}
    return elapsed, rows, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="minilm-l6")
    parser.add_argument("--words", type=int, default=200_000)
    parser.add_argument("--precision", default="auto")
    args = parser.parse_args()
    sentences = corpus(args.words)
    words = sum(len(s) for s in sentences)
    import torch

    print(f"{args.spec}, precision={args.precision}, {len(sentences):,} sentences, {words:,} words, "
          f"{os.cpu_count()} CPUs, torch threads in this process: {torch.get_num_threads()}")
    results = {}
    for name, run in (("1 process", one_process), ("Ray Data, 2 actors", with_ray), ("Dask, 2 workers", with_dask)):
        load = os.getloadavg()[0]
        seconds, rows, memory = run(args.spec, args.precision, sentences)
        results[name] = (seconds, rows, memory)
        print(f"{name}: {seconds:.1f} s; load average (1 min) {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    base_seconds, base_rows, _ = results["1 process"]
    print("| path | words/s | × 1 process | peak RSS per process (MiB) | max abs diff to 1 process |")
    print("|---|---|---|---|---|")
    for name, (seconds, rows, memory) in results.items():
        assert len(rows) == len(base_rows) and all(len(a) == len(b) for a, b in zip(rows, base_rows)), name
        diff = max(float(np.abs(a - b).max()) for a, b in zip(rows, base_rows) if len(a))
        per_process = ", ".join(f"{mb:,.0f}" for mb in memory.values())
        print(f"| {name} | {words / seconds:,.0f} | {base_seconds / seconds:.2f} | {per_process} | {diff:.2g} |")


if __name__ == "__main__":
    main()
