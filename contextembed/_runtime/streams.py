"""Forward passes on a CPU: several batches at once, each on its own share of the cores.

A transformer forward pass on a CPU is a chain of a few hundred kernels per batch. The matrix
products split well over threads; the rest (layer norms, activations, quantizing, attention over
short sequences, gathers) are short kernels that pay OpenMP's fork and join on every call and keep
the second core waiting. Running independent batches at the same time, each single-threaded,
keeps every core on its own batch instead. On the 2-core AMD EPYC, MiniLM-L6 ran 1.07x to 1.24x
(fp32), 1.05x to 1.19x (bf16) and 1.19x to 1.37x (int8) the words/s of one batch at a time on both
threads over CoNLL-2003 sentences, 0.97x to 1.18x over long documents, its text path 0.99x to 1.25x,
and an ELMo of the "small" size 1.2x (two runs of ``benchmarks/streams.py``).

Every batch is computed alone, on a stream's share of the threads (a call with a single batch too),
so its features are the same whatever runs beside it (tested bit for bit). Transformers' CPU kernels
split their work over independent outputs, so with MiniLM 1 and 2 threads per batch give the same
bits as well (as :mod:`contextembed._runtime.forking` relies on); ELMo's LSTMs round differently on two
threads than on one (by an ulp), so ``CONTEXTEMBED_CPU_STREAMS`` can move its vectors by that much.

How many: :func:`cpu_streams`. torch's intra-op thread count (``torch.set_num_threads``) stays the
one control of how many cores an encoder uses; by default each of its threads runs a stream of its
own. ``CONTEXTEMBED_CPU_STREAMS=N`` sets the number of streams, each with an equal share of the
threads (``1`` runs one batch at a time on all of them, as before); above
:data:`~contextembed.settings.STREAMS_PER_CORE` streams per usable core it is capped there with a
:class:`StreamsCappedWarning` (more threads than that only wait for each other, and thousands would
exhaust the process). The variable is read and checked by :mod:`contextembed.settings`.

Calls made while the interpreter shuts down (from an ``atexit`` handler), when the pools' threads
have been joined and no executor takes new work, run their items in the caller's thread instead,
each on a stream's share of the threads as always, so their results are the same bits.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Optional, TypeVar

import torch

from .. import settings

#: environment variable that sets how many batches run at once on a CPU
STREAMS_ENV = "CONTEXTEMBED_CPU_STREAMS"

Item = TypeVar("Item")
#: how :class:`concurrent.futures.ThreadPoolExecutor` refuses work once the interpreter shuts down
_REFUSALS = ("cannot schedule new futures", "interpreter shutdown")

#: one pool per (streams, threads per stream), started on first use; forgotten in a forked child
_POOLS: dict[tuple[int, int], concurrent.futures.ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
#: ``worker.stream`` is set in the pools' own threads, which run what they are given alone
_WORKER = threading.local()


class StreamsCappedWarning(UserWarning):
    """``CONTEXTEMBED_CPU_STREAMS`` asked for more streams than the cores can run; fewer are used."""


def cpu_streams() -> tuple[int, int]:
    """``(streams, threads per stream)`` for forward passes on the CPU.

    Default: as many streams as torch has intra-op threads, one thread each.
    ``CONTEXTEMBED_CPU_STREAMS=N`` runs ``N`` streams with ``threads // N`` threads each (at least 1);
    ``N`` above :func:`max_streams` is capped there with a :class:`StreamsCappedWarning`.

    Raises
    ------
    contextembed.errors.SettingError
        If ``CONTEXTEMBED_CPU_STREAMS`` is not a positive whole number in ASCII digits.
    """
    threads = torch.get_num_threads()
    streams = settings.whole_number(STREAMS_ENV, 0, minimum=1, hint="the number of batches run at once, 1: one at a time")
    if not streams:
        return threads, 1
    cap = max_streams()
    if streams > cap:
        warnings.warn(
            f"{STREAMS_ENV}={streams} asks for more streams than {settings.STREAMS_PER_CORE} per usable core "
            f"({settings.usable_cores()} cores here); running {cap}. Set it to {cap} or less to silence this",
            StreamsCappedWarning,
            stacklevel=3,
        )
        streams = cap
    return streams, max(1, threads // streams)


def max_streams() -> int:
    """The most streams ``CONTEXTEMBED_CPU_STREAMS`` starts: :data:`~contextembed.settings.STREAMS_PER_CORE`
    per core this process may run on (:func:`contextembed.settings.usable_cores`)."""
    return settings.STREAMS_PER_CORE * settings.usable_cores()


def run_all(function: Callable[[Item], object], items: Sequence[Item], device: Optional[torch.device] = None) -> None:
    """Call ``function`` on every item, up to :func:`cpu_streams` of them at once where ``device``
    (default: the CPU) is a CPU; one after the other on any other device.

    ``function`` must leave its results where the caller finds them whatever order the items run in
    (the encoders file each batch's vectors under the windows it holds). Every item runs on a
    stream's share of the threads, a single item too: some kernels (ELMo's LSTMs) round differently
    on another thread count, and a sentence's vectors must not depend on how many batches its call
    had. With one stream, or called from a stream itself, everything runs here, on the caller's
    threads; items the pool refuses (the interpreter is shutting down: a call from an ``atexit``
    handler) run here too, on a stream's share of the threads. The first exception is raised once
    every item already running has finished; items not yet started are dropped.
    """
    on_cpu = device is None or torch.device(device).type == "cpu"
    streams, threads = cpu_streams() if on_cpu else (1, 0)
    if streams == 1 or getattr(_WORKER, "stream", False):
        for item in items:
            function(item)
        return
    futures, refused = _submit(function, items, streams, threads)
    try:
        with intra_op_threads(threads if refused else None):
            for item in refused:
                function(item)
        for future in futures:
            future.result()
    finally:  # on an error or Ctrl-C: start nothing more, let what runs finish
        for future in futures:
            future.cancel()
        concurrent.futures.wait(futures)


def _submit(
    function: Callable[[Item], object], items: Sequence[Item], streams: int, threads: int
) -> tuple[list[concurrent.futures.Future], Sequence[Item]]:
    """Futures of the items the streams took, and the items they refused: once the interpreter
    shuts down (``atexit`` handlers run after the pools' threads were joined) no pool takes work,
    or starts, and those items are left to the caller."""
    futures: list[concurrent.futures.Future] = []
    try:
        pool = _pool(streams, threads)
        for item in items:
            futures.append(pool.submit(function, item))
    except RuntimeError as error:
        if not any(refusal in str(error) for refusal in _REFUSALS):
            raise
        return futures, items[len(futures):]
    return futures, ()


def _pool(streams: int, threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """The started pool of ``streams`` workers with ``threads`` intra-op threads each."""
    with _POOLS_LOCK:
        pool = _POOLS.get((streams, threads))
        if pool is None:
            pool = _POOLS[(streams, threads)] = _start_pool(streams, threads)
        return pool


def _start_pool(streams: int, threads: int) -> concurrent.futures.ThreadPoolExecutor:
    """A pool whose workers all run now, each with ``threads`` intra-op threads.

    ``torch.set_num_threads`` sets the calling thread's count and also the default of threads that
    start later; the caller's own call afterwards gives that default back, so threads started by
    anyone else keep the caller's count.

    If a worker cannot start (the OS refuses a thread, the interpreter shuts down), the workers
    already started are released and the pool shut down before the error propagates: none is left
    waiting, which would keep the process from exiting.
    """
    caller = torch.get_num_threads()
    started = threading.Barrier(streams + 1)
    pool = concurrent.futures.ThreadPoolExecutor(
        streams, thread_name_prefix="contextembed-stream", initializer=_start_worker, initargs=(threads,))
    try:
        # each worker blocks on the barrier, so every submit starts a new worker until all run
        for _ in range(streams):
            pool.submit(started.wait)
        started.wait()
    except BaseException:
        started.abort()  # the workers waiting on the barrier return, and take the pool's shutdown
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        torch.set_num_threads(caller)
    return pool


def _start_worker(threads: int) -> None:
    _WORKER.stream = True
    # torch gives each thread, on its first parallel kernel, the default count: asking for the count
    # gets that done now, or it would replace the count set here
    torch.get_num_threads()
    torch.set_num_threads(threads)


@contextlib.contextmanager
def intra_op_threads(threads: Optional[int]) -> Iterator[None]:
    """torch's intra-op thread count set to ``threads`` (``None``: left as it is) inside the block."""
    previous = torch.get_num_threads()
    if threads is None or threads == previous:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _forget_pools() -> None:
    """In a forked child: the pools' threads were not copied, so the pools are dropped unclosed
    (and the lock, which another thread may have held at the fork, is made anew)."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)
