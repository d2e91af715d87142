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
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Optional

import numpy as np

from .._runtime import json_io as _json, terminal
from .. import settings
from .._runtime.files import atomic_directory
from .._inputs.bounds import CONNECT_TIMEOUT as CONNECT_TIMEOUT_BOUND
from .._inputs.bounds import check_setting
from ..errors import ClusterConnectionError, missing_extra
from ..io._jobs import Job, check_complete
from ..io._settings import EmbedSettings
from ._carry import carried_errors, raise_carried
from ._arrow import column_arrays, feature_width
from ._batch import FEATURES, BatchEmbedder, pinned_backend

#: environment for a Ray instance started on this machine: no usage report, loopback addresses only
LOCAL_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray():
    """``ray`` (with ``ray.data``), or the error that gives the install line."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise missing_extra("ray", "ray", "contextembed.engines.ray") from None
    return ray


#: seconds a cluster address has to answer (``connect_timeout``), by default and at most
CONNECT_TIMEOUT, MAX_CONNECT_TIMEOUT = 30.0, CONNECT_TIMEOUT_BOUND.high
#: what a gRPC server (Ray's GCS, Ray Client's server) is sent to answer: the HTTP/2 client preface
#: and an empty SETTINGS frame; it answers with a SETTINGS frame (type 4 on stream 0)
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: what to check when an address does not answer
_ADVICE = (
    "check that the cluster runs (`ray start --head` on the head node prints its address) and that the host "
    "and port are right: the GCS port, 6379 unless `ray start --port` set another, or Ray Client's port "
    "(10001) for a ray:// address; that no firewall blocks the port from here; or allow more time with "
    "connect_timeout (--connect-timeout)"
)


def init(address: Optional[str] = None, *, connect_timeout: float = CONNECT_TIMEOUT, **options):
    """Connect to the Ray cluster at ``address``, or start one on this machine (``address=None``).

    A local instance is started with :data:`LOCAL_ENVIRONMENT` (set only where not already set, and
    only if Ray was not imported yet: Ray reads it at import), so its processes talk over loopback
    and send no usage report, and without the dashboard. Other ``options`` go to ``ray.init``.

    The address Ray would connect to (``address``, or for ``None`` and ``"auto"`` the one Ray finds:
    ``RAY_ADDRESS``, the cluster last started on this machine) must answer within
    ``connect_timeout`` seconds (:func:`check_address`).

    Raises
    ------
    ClusterConnectionError
        When that address does not answer in time; the message names it and what to check.
    ValueError
        For a ``connect_timeout`` that is not a number of seconds in (0, :data:`MAX_CONNECT_TIMEOUT`],
        or an address that is not ``HOST:PORT``.
    """
    ray = _ready_to_init(address, check_connect_timeout(connect_timeout), options)
    return ray.init(address=address, **options)


def _ready_to_init(address: Optional[str], connect_timeout: float, options: dict):
    """Everything :func:`init` does before ``ray.init``: the address checked, the environment of a
    local instance set, Ray imported, ``include_dashboard=False`` added to ``options`` for a new
    local instance; returns ``ray``."""
    found_by_ray = address in (None, "auto", "local")
    if not found_by_ray:
        check_address(address, connect_timeout)  # before importing Ray, which takes seconds
    if address is None:
        for name, value in LOCAL_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if found_by_ray:
        found = _bootstrap_address(address, options.get("_temp_dir"))
        if found is None:  # Ray starts a new instance here
            options.setdefault("include_dashboard", False)
        else:
            check_address(found, connect_timeout)
    return ray


def check_connect_timeout(value: float, name: str = "connect_timeout") -> float:
    """``value`` as a float if it is a number of seconds in (0, :data:`MAX_CONNECT_TIMEOUT`]; else a
    ``ValueError`` (``TypeError`` for a non-number) naming ``name`` (:data:`contextembed._inputs.bounds.CONNECT_TIMEOUT`)."""
    return float(check_setting(name, value, CONNECT_TIMEOUT_BOUND))


def check_address(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail within ``timeout`` seconds unless a gRPC server answers at ``address``.

    ``address`` is ``HOST:PORT`` (``[IPv6]:PORT``), optionally ``ray://HOST:PORT`` (Ray Client);
    other ``scheme://`` addresses (Ray's client plugins) are left to Ray. The host is resolved, a
    TCP connection opened and the HTTP/2 preface sent, all within ``timeout``; Ray's GCS (and Ray
    Client's server) answer it at once. With ``RAY_USE_TLS`` set only the TCP connection is checked.
    Each step waits in Python, so a signal (Ctrl-C, SIGTERM) ends the wait at once.

    Raises
    ------
    ClusterConnectionError
        Naming the address, what went wrong (refused, no answer in time, not a gRPC server) and what
        to check.
    ValueError
        For an address that is not ``HOST:PORT``.
    """
    timeout = check_connect_timeout(timeout, "timeout")
    parsed = _host_port(address)
    if parsed is None:
        return
    deadline = time.monotonic() + timeout
    try:
        _answers(_resolve(*parsed, deadline), deadline, tls=os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"))
    except TimeoutError as error:
        raise ClusterConnectionError(
            f"the Ray cluster at {address} did not answer within {timeout:g} s ({error}); {_ADVICE}"
        ) from None
    except OSError as error:
        raise ClusterConnectionError(f"cannot connect to the Ray cluster at {address}: {error}; {_ADVICE}") from None


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """``(host, port)`` of ``[ray://]HOST:PORT``; ``None`` for other ``scheme://`` addresses."""
    if not isinstance(address, str):
        raise TypeError(f"address={address!r} must be a str (HOST:PORT), got {type(address).__name__}")
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    if "://" in rest:
        return None
    host, _, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"address={address!r} is not HOST:PORT (e.g. 'head-node:6379', or "
                         "'ray://head-node:10001' for Ray Client); pass the address `ray start --head` printed")
    return host, int(port)


def _resolve(host: str, port: int, deadline: float) -> list:
    """``socket.getaddrinfo`` of ``host``, in a thread so that a slow resolver cannot outlast ``deadline``."""
    found: dict = {}

    def lookup() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            found["error"] = OSError(f"the host name {host!r} does not resolve ({error})")

    thread = threading.Thread(target=lookup, name="contextembed-resolve", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise TimeoutError(f"resolving the host name {host!r} took longer")
    if "error" in found:
        raise found["error"]
    return found["addresses"]


def _answers(addresses: list, deadline: float, tls: bool) -> None:
    """Connect to the first of ``addresses`` that accepts, and check that it answers as HTTP/2."""
    error: OSError = OSError("no address")
    for family, kind, protocol, _, sockaddr in addresses:
        with socket.socket(family, kind, protocol) as connection:
            try:
                connection.settimeout(_left(deadline, "connecting"))
                connection.connect(sockaddr)
            except socket.timeout:
                raise TimeoutError("no answer to the TCP connection: a firewall may drop it") from None
            except OSError as refused:
                error = OSError(f"{refused.strerror or refused} (nothing listens on port {sockaddr[1]}?)")
                continue
            if not tls:
                _check_http2(connection, deadline)
            return
    raise error


def _check_http2(connection: socket.socket, deadline: float) -> None:
    """The server's first frame after the HTTP/2 preface is SETTINGS, as a gRPC server sends it."""
    try:
        connection.settimeout(_left(deadline, "waiting for its first answer"))
        connection.sendall(_HTTP2_HELLO)
        header = b""
        while len(header) < 9:
            connection.settimeout(_left(deadline, "the port accepted the connection but sent no answer"))
            chunk = connection.recv(9 - len(header))
            if not chunk:
                raise OSError("the port accepted the connection, then closed it without answering")
            header += chunk
    except socket.timeout:
        raise TimeoutError("the port accepted the connection but sent no answer") from None
    if header[3] != 4 or header[5:9] != bytes(4):
        raise OSError(f"the port answered, but not as a Ray cluster (gRPC) does; its first bytes are {header!r}")


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(what)
    return left


def _bootstrap_address(address: Optional[str], temp_dir: Optional[str]) -> Optional[str]:
    """The address ``ray.init(address)`` finds for ``None``, ``"auto"`` or ``"local"``, or ``None`` where
    it starts a new instance."""
    if address == "local":
        return None
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:  # Ray moved it: the documented variable only
        return os.environ.get("RAY_ADDRESS") or None
    try:
        found = get_ray_address_from_environment(address, temp_dir)
    except ConnectionError as error:  # "auto" and no cluster found
        raise ClusterConnectionError(f"address={address!r}: {error}") from None
    return None if found in (None, "local") else found


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
def signal_handlers_kept() -> Iterator[None]:
    """SIGINT's and SIGTERM's Python handlers are the same after the block as before it.

    ``ray.init`` sets SIGTERM to ``sys.exit(15)`` in the main thread and never puts the previous
    handler back: a command that turns SIGTERM into a clean interrupt (the CLI's
    :func:`~contextembed.cli.signals_interrupt`: temporaries removed, status 143, one line saying
    what was kept) would exit with status 15 instead, and the handler would outlive the instance.
    Handlers set outside Python (``getsignal`` gives ``None``) are left as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)


#: the environment variable that lets Ray's own lines through to the terminal: ``show`` or ``hide``
RAY_LOGS_ENV = "CONTEXTEMBED_RAY_LOGS"
#: ``ray.init`` options while Ray's lines are kept aside: the workers' output stays in Ray's logs
#: (the driver would print it to its stdout)
QUIET_INIT = {"log_to_driver": False}


def ray_logs_shown() -> bool:
    """Whether ``CONTEXTEMBED_RAY_LOGS`` is ``show`` (``hide``, or unset: no).

    Raises
    ------
    SettingError
        For any other value, naming the variable.
    """
    return settings.choice(RAY_LOGS_ENV, ("show", "hide")) == "show"


@contextmanager
def ray_lines_aside() -> Iterator[None]:
    """For the block, what this process writes to stderr and ``sys.stdout`` goes to ``os.devnull``,
    except contextembed's own lines (:func:`contextembed._runtime.terminal.stderr`: the progress bar), which still
    reach the terminal.

    Ray writes to this process's output four ways, and keeps what matters in its own log files: its
    C++ core writes its error lines to file descriptor 2 whatever its log level
    (ray-project/ray#18577); its threads print the errors the cluster reports (a task that failed
    and will be retried) to ``sys.stdout``; its Python loggers (``ray``, ``ray.data``) have console
    handlers; Ray Data draws progress bars. So descriptor 2, ``sys.stderr`` and ``sys.stdout``
    (contextembed prints nothing there while Ray runs) lead to ``os.devnull``, the console handlers of Ray's
    loggers drop every record (their file handlers still write), and Ray Data's bars are off;
    :func:`contextembed._runtime.terminal.stderr` is the previous ``sys.stderr``, or a stream on a copy of
    descriptor 2 where that is what it wrote to. Everything is put back after the block.
    """
    import_ray()
    with _ray_data_bars_off(), _dropping(_console_handlers("ray")), _output_to_devnull():
        yield


@contextmanager
def _ray_data_bars_off() -> Iterator[None]:
    context = sys.modules["ray.data"].DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, False
    try:
        yield
    finally:
        context.enable_progress_bars = bars


@contextmanager
def _dropping(handlers: list[logging.Handler]) -> Iterator[None]:
    """``handlers`` let no record through for the block."""
    for handler in handlers:
        handler.addFilter(_drop)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_drop)


@contextmanager
def _output_to_devnull() -> Iterator[None]:
    """Descriptor 2, ``sys.stderr`` and ``sys.stdout`` to ``os.devnull`` for the block, and
    :func:`contextembed._runtime.terminal.stderr` to where ``sys.stderr`` wrote (through a copy of descriptor
    2 where that is what it wrote to)."""
    stderr, stdout = sys.stderr, sys.stdout
    stderr.flush()
    copy = os.dup(2)
    ours = open(copy, "w", encoding=stderr.encoding, errors=stderr.errors, buffering=1, closefd=False) \
        if _writes_to_descriptor(stderr, 2) else stderr
    nowhere = open(os.devnull, "w", encoding="utf-8")
    try:
        _point_descriptor(2, os.devnull)
        sys.stderr = sys.stdout = nowhere
        with terminal.stderr_to(ours):
            yield
    finally:
        sys.stderr, sys.stdout = stderr, stdout
        nowhere.close()
        if ours is not stderr:
            ours.close()
        os.dup2(copy, 2)
        os.close(copy)


def _console_handlers(name: str) -> list[logging.Handler]:
    """The handlers of the logger ``name`` and of those below it that write to a stream, not a file."""
    loggers = [logging.getLogger(name)] + [logger for key, logger in sorted(logging.root.manager.loggerDict.items())
                                           if key.startswith(name + ".") and isinstance(logger, logging.Logger)]
    return [handler for logger in loggers for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)]


def _drop(record: logging.LogRecord) -> bool:
    """A logging filter that lets nothing through."""
    return False


def _point_descriptor(descriptor: int, path: str) -> None:
    opened = os.open(path, os.O_WRONLY)
    try:
        os.dup2(opened, descriptor)
    finally:
        os.close(opened)


def _writes_to_descriptor(stream, descriptor: int) -> bool:
    try:
        return stream.fileno() == descriptor
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a captured or notebook stream
        return False


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
