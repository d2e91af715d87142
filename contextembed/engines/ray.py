"""Ray Data: embed a ``ray.data.Dataset`` of texts or token lists with a pool of actors.

``pip install "contextembed[ray]"``. Each actor of the pool (:class:`EmbedActor`) loads the encoder
once, when it starts, and maps batches with a :class:`~contextembed.engines.BatchEmbedder`::

    import ray
    from contextembed.engines.ray import embed_dataset, write_parquet

    ds = ray.data.read_parquet("corpus/")                  # a "text" or "tokens" column
    features = embed_dataset(ds, "minilm-l6", level="text", concurrency=4, num_gpus=1)
    write_parquet(features, "features/")                   # appears only when complete

Rows keep their input order (the returned dataset preserves order). A dead actor is restarted and
its batches retried (Ray Data's actor pools default to ``max_restarts=-1``,
``max_task_retries=-1``). An error raised by the embedder (a model that cannot be loaded, a
malformed row) is raised by :func:`write_parquet`, :func:`write_array` and :func:`embed_files` as
its own class with its own message (see :mod:`contextembed.engines._carry`); when you execute the
dataset yourself, wrap the call in :func:`worker_errors` for the same.

A cluster address is checked before it is handed to Ray (:func:`check_address`): an address that
does not answer within ``connect_timeout`` seconds (:data:`CONNECT_TIMEOUT` by default) is a
:class:`~contextembed.errors.ClusterConnectionError` naming it, instead of Ray's own retries, which
last many minutes and cannot be interrupted.

Ray's own lines (its start-up and progress messages, its core's error lines, the workers' output)
stay off this process's stderr while :func:`connected` runs a Ray instance it started or joined
(``contextembed embed --engine ray``); Ray keeps them in its own logs
(``/tmp/ray/session_latest/logs``). ``CONTEXTEMBED_RAY_LOGS=show`` (:data:`RAY_LOGS_ENV`) lets them
through. Errors of the workers are raised as their own class either way.

This module maps datasets and files on the actors, and puts a connection together
(:func:`connected`); checking an address and starting Ray are in
:mod:`contextembed.engines._ray_cluster`, keeping Ray's lines aside in
:mod:`contextembed.engines._ray_lines`, and their public names are imported here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Optional

import numpy as np

from .._runtime import json_io as _json
from .._runtime.files import atomic_directory
from ..io._jobs import Job, check_complete
from ..io._settings import EmbedSettings
from ._carry import carried_errors, raise_carried
from ._arrow import column_arrays, feature_width
from ._batch import FEATURES, BatchEmbedder, pinned_backend
from ._ray_cluster import (CONNECT_TIMEOUT, LOCAL_ENVIRONMENT, MAX_CONNECT_TIMEOUT, _ready_to_init, check_address,
                           check_connect_timeout, import_ray, init, signal_handlers_kept)
from ._ray_lines import QUIET_INIT, RAY_LOGS_ENV, ray_lines_aside, ray_logs_shown


@contextmanager
def connected(address: Optional[str] = None, connect_timeout: float = CONNECT_TIMEOUT, *,
              show_logs: Optional[bool] = None) -> Iterator[object]:
    """The ``ray`` module, connected: to the instance this process already uses, else to
    ``address`` (or a new local instance, see :func:`init`; an address must answer within
    ``connect_timeout`` seconds) for the block, shut down after it.

    Ray's own lines are kept off this process's stderr for the block (:func:`ray_lines_aside`),
    unless ``show_logs`` (default: :func:`ray_logs_shown`, ``CONTEXTEMBED_RAY_LOGS=show``). An
    instance this process already uses is left as it was set up.
    """
    connect_timeout = check_connect_timeout(connect_timeout)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        yield ray
        return
    show = ray_logs_shown() if show_logs is None else show_logs
    options = {} if show else dict(QUIET_INIT)
    # the address checked before Ray is imported here, and a local instance gets LOCAL_ENVIRONMENT
    ray = _ready_to_init(address, connect_timeout, options)
    with ExitStack() as stack:
        if not show:
            stack.enter_context(ray_lines_aside())
        with signal_handlers_kept():
            ray.init(address=address, **options)
        stack.callback(ray.shutdown)
        yield ray


@contextmanager
def worker_errors() -> Iterator[None]:
    """Raise the embedder's own error (``ModelNotFoundError``, a row's ``TypeError``...) instead
    of Ray's wrapper (``ActorDiedError``, ``RayTaskError``) when a dataset runs inside the block."""
    with raise_carried("Ray"):
        yield


class EmbedActor:
    """The stateful callable of ``map_batches``: loads the encoder once, then embeds Arrow batches.

    A load failure (missing model, bad files) fails the actor's start with the loader's error,
    carried through Ray's wrapper (see :func:`worker_errors`).
    """

    def __init__(self, embedder: BatchEmbedder) -> None:
        with carried_errors():
            self.embedder = embedder.load()

    def __call__(self, batch):
        with carried_errors():
            return self.embedder(batch)


def embed_dataset(
    dataset,
    source,
    *,
    batch_size: int = 256,
    concurrency: int = 1,
    num_cpus: float = 1,
    num_gpus: Optional[float] = None,
    **options,
):
    """A lazy dataset: ``dataset`` with a ``features`` column, in input order.

    Parameters
    ----------
    dataset : ray.data.Dataset
        With a ``tokens`` (list of str) or ``text`` (str) column; other columns are kept.
    source : str, path, fitted TokenEmbedder/TextEmbedder, or BatchEmbedder
        What :class:`~contextembed.engines.BatchEmbedder` is built from (a fitted estimator is
        shipped to each actor once, as a constructor argument).
    batch_size : int
        Rows per batch given to an actor.
    concurrency : int
        Actors in the pool (each loads the encoder once).
    num_cpus, num_gpus : float
        Resources per actor. With ``num_gpus=1`` each actor gets its own GPU (Ray sets
        ``CUDA_VISIBLE_DEVICES``) and ``device="auto"`` picks it; fractions share a GPU.
    **options
        ``layers``, ``combine``, ``subword_pooling``, ``level``, ``text_pooling``, ``tokenizer``,
        ``device``, ``precision``, ``backend``, ``batch_tokens``, ``column``, ``id_column``: as in
        :class:`~contextembed.engines.BatchEmbedder`.

    Returns
    -------
    ray.data.Dataset
        Word level: ``features`` holds a ``(tokens, dim)`` float32 matrix per row; text level a
        ``(dim,)`` vector (Arrow lists of float32: a fixed-size list per token or text).
    """
    ray = import_ray()
    embedder = _embedder(source, options)
    _check_positive(batch_size=batch_size, concurrency=concurrency)
    mapped = dataset.map_batches(
        EmbedActor,
        fn_constructor_args=(embedder,),
        batch_format="pyarrow",
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )
    mapped.context.execution_options.preserve_order = True
    return mapped


def write_parquet(dataset, directory, *, overwrite: bool = False) -> str:
    """Run ``dataset`` and write it as Parquet shards into ``directory``, which appears only when complete.

    The shards are written into a temporary directory beside ``directory`` (``.<name>.<random>.partial``)
    that is renamed when every shard is written; an existing non-empty ``directory`` is refused
    unless ``overwrite``. Shard names sort in input order
    (:func:`contextembed.engines.read_parquet_features` reads them back as one array).
    """
    with atomic_directory(directory, overwrite=overwrite, what="output directory") as temporary, worker_errors():
        dataset.write_parquet(temporary)
    return os.fspath(directory)


def write_array(dataset, path, source, *, dtype: str = "float32", overwrite: bool = False, **options) -> dict:
    """Embed ``dataset`` into one ``.npy`` / ``.npz`` file laid out as ``contextembed embed`` writes it.

    Features stream from the workers to this process in input order and into
    :class:`contextembed.io.ArrayWriter` (temporary name, renamed when complete). The tokens per
    row come first, from one cheap pass over ``dataset`` (no encoder): the row count of the header
    and the ``lengths`` of a ``.npz`` (omitted at text level for an estimator source, which
    tokenizes texts its own way). ``options`` are those of :func:`embed_dataset`.

    Returns
    -------
    dict
        ``rows``, ``dim``, ``output``, like :func:`contextembed.io.embed_file`.
    """
    from ..io._records import check_output
    from ..io.writer import ArrayWriter

    check_output(path, overwrite=overwrite)
    engine = {k: options.pop(k) for k in ("batch_size", "concurrency", "num_cpus", "num_gpus") if k in options}
    embedder = _embedder(source, options)
    with worker_errors(), ExitStack() as stack:
        lengths = _row_lengths(dataset, embedder)
        n_rows = int(lengths.sum()) if embedder.level == "word" else len(lengths)
        writer = None
        for batch in embed_dataset(dataset, embedder, **engine).iter_batches(batch_format="pyarrow", batch_size=None):
            column = batch.column(FEATURES)
            if writer is None:
                writer = stack.enter_context(ArrayWriter(path, n_rows, feature_width(column.type), dtype,
                                                         overwrite=overwrite))
            block, _ = column_arrays(column)
            if len(block):
                writer.write(block)
        if writer is None:  # an empty dataset: the width comes from a worker, where the model is
            writer = stack.enter_context(ArrayWriter(path, 0, _remote_dim(embedder), dtype, overwrite=overwrite))
        keep_lengths = os.fspath(path).endswith(".npz") and (embedder.level == "word" or embedder.estimator is None)
        writer.close(**({"lengths": lengths} if keep_lengths else {}))
    return {"rows": n_rows, "dim": writer.shape[1], "output": os.fspath(path)}


def _row_lengths(dataset, embedder: BatchEmbedder) -> np.ndarray:
    """Tokens per row of ``dataset``, in order (the rows are read and tokenized, not encoded)."""

    def lengths(batch):
        column = embedder.input_column(batch.column_names)
        return {"n": np.array(embedder.row_lengths(batch.column(column).to_pylist()), dtype=np.int64)}

    counted = dataset.map_batches(_carrying(lengths), batch_format="pyarrow", batch_size=4096)
    counted.context.execution_options.preserve_order = True
    parts = [batch["n"] for batch in counted.iter_batches(batch_format="numpy", batch_size=None)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _carrying(function):
    def run(batch):
        with carried_errors():
            return function(batch)

    return run


def _remote_dim(embedder: BatchEmbedder) -> int:
    """The feature width, computed where the model is (a worker), not on the driver."""
    ray = import_ray()

    @ray.remote(num_cpus=0)
    def dim(embedder):
        with carried_errors():
            return embedder.dim

    return int(ray.get(dim.remote(embedder)))


# -- files as units of work (contextembed embed --engine ray) -----------------------------------


class FileActor:
    """Embeds whole files with :func:`contextembed.io.embed_file`, loading the encoder once.

    A job is a dict: ``spec``, ``input``, ``output``, ``overwrite`` and :func:`embed_file`'s
    keywords (:meth:`EmbedSettings.keywords`), built into one
    :class:`~contextembed.io._settings.EmbedSettings` when the actor takes it; the check of an
    existing output and the embedding both get that object.
    """

    def __init__(self, spec: str, device: str, precision: str, backend: str = "torch") -> None:
        from ..encoders import load_encoder

        with carried_errors():
            self.encoder = load_encoder(spec, device=device, precision=precision, backend=backend)

    def __call__(self, batch: dict) -> dict:
        summaries = []
        for job in batch["job"]:
            with carried_errors():
                summaries.append(json.dumps(self._embed(_json.loads(job))))
        return {"summary": np.array(summaries, dtype=object)}

    def _embed(self, job: dict) -> dict:
        from ..io._pipeline import embed_with

        spec, target = job.pop("spec"), Job(job.pop("input"), job.pop("output"))
        overwrite = bool(job.pop("overwrite", False))
        made_with = EmbedSettings.from_keywords(spec, **job)
        if os.path.exists(target.output) and not overwrite:
            # an output of an earlier run, or a retry after the rename: kept only if it records what this
            # actor's encoder would write now (contextembed.io._jobs)
            check_complete(target, encoder=self.encoder, settings=made_with)
            return {"output": target.output, "skipped": True}
        return embed_with(made_with, target.input, target.output, encoder=self.encoder, overwrite=overwrite,
                          show_progress=False)


def embed_files(jobs: list[dict], *, concurrency: int = 1, num_cpus: float = 1, num_gpus: Optional[float] = None,
                done: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """Run :func:`contextembed.io.embed_file` for each job (its keyword arguments) on Ray actors.

    Every job names the same ``spec``, ``device``, ``precision`` and ``backend`` (never ``"auto"``:
    :func:`run_corpus_jobs` pins it); each actor loads that encoder
    once and embeds one file per call, so a retried call (a dead actor) redoes one file, whose
    output is written under a temporary name and renamed when complete. Returns the summaries in
    the order of ``jobs``; ``done(summary)`` is called for each as it arrives (in that order).
    """
    ray = import_ray()
    if not jobs:
        return []
    _check_positive(concurrency=concurrency)
    first = jobs[0]
    items = [{"job": json.dumps(job)} for job in jobs]
    dataset = ray.data.from_items(items, override_num_blocks=len(items))
    embedded = dataset.map_batches(
        FileActor,
        fn_constructor_args=(first["spec"], first.get("device", "auto"), first.get("precision", "auto"),
                             first.get("backend", "torch")),
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=min(concurrency, len(jobs))),
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )
    embedded.context.execution_options.preserve_order = True
    summaries = []
    with worker_errors():
        for row in embedded.iter_rows():
            summaries.append(_json.loads(row["summary"]))
            if done is not None:
                done(summaries[-1])
    return summaries


def run_corpus_jobs(spec: str, jobs: list[Job], existing: set, *, overwrite: bool, done: Callable[[dict], None],
                    address: Optional[str] = None, connect_timeout: Optional[float] = None,
                    concurrency: Optional[int] = None, num_gpus: Optional[float] = None, **options) -> int:
    """The ``"ray"`` engine of :func:`contextembed.corpus.embed_corpus`: every job goes to the actors
    (:func:`embed_files`), which check and keep an existing output or embed it (so ``existing`` is
    not used here); the number of outputs kept.

    Connects with :func:`connected` (``address``, ``connect_timeout``; Ray's own lines kept off the
    terminal); ``concurrency`` actors (default: the cluster's CPUs), ``num_gpus`` each.
    ``backend="auto"`` is resolved here, once, and every actor runs the backend (and, on the engine,
    the precision) chosen (:func:`contextembed.engines._batch.pinned_backend`).
    """
    spec = os.path.abspath(spec) if os.path.exists(spec) else spec  # workers may start elsewhere
    made_with = EmbedSettings.from_keywords(spec, **options)  # checked here, once, before the cluster
    made_with = made_with.running(pinned_backend(made_with.encoder_ref))
    timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    with connected(address, timeout) as ray:
        workers = concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
        payload = [{"spec": spec, "input": os.path.abspath(job.input), "output": os.path.abspath(job.output),
                    "overwrite": overwrite, **made_with.keywords()} for job in jobs]
        summaries = embed_files(payload, concurrency=workers, num_gpus=num_gpus, done=done)
    return sum(1 for summary in summaries if summary.get("skipped"))


def _embedder(source, options: dict) -> BatchEmbedder:
    if isinstance(source, BatchEmbedder):
        if options:
            raise ValueError(f"{', '.join(options)} cannot be given with a BatchEmbedder: set them when building it")
        return source
    return BatchEmbedder(source, **options)


def _check_positive(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")


__all__ = ["CONNECT_TIMEOUT", "EmbedActor", "FileActor", "LOCAL_ENVIRONMENT", "MAX_CONNECT_TIMEOUT", "QUIET_INIT",
           "RAY_LOGS_ENV", "check_address", "check_connect_timeout", "connected", "embed_dataset", "embed_files", "init",
           "ray_lines_aside", "ray_logs_shown", "run_corpus_jobs", "worker_errors", "write_array", "write_parquet"]
