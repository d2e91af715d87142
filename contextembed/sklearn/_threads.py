"""The BLAS pools' thread limit, which the whole process shares, held for the taggers' ``n_threads``.

threadpoolctl sets the thread counts of the BLAS libraries (OpenBLAS, MKL, BLIS) loaded in the
process, and one count holds for every thread. Two calls that each set their own and put back what
they found leak: a call with 3 started while one with 1 runs sets 3 for both, the one with 1 puts
back the original when it leaves, and the other then puts back 1 for the rest of the process. Here
the limit is held under one lock with a count of the calls inside it: calls with the same limit run
together, a call with another waits until they have left, and the last to leave restores the
original counts. threadpoolctl (3.6 and later) lets one Python thread at a time change a shared
OpenBLAS pool and ignores the others, so every change is made on one thread of this module's, which
gives that control up when it restores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Optional


@dataclasses.dataclass
class _ProcessLimit:
    """The BLAS limit the process holds: its thread count, how many calls run under it, the
    threadpoolctl limiter that restores the original counts when the last leaves, and the one
    thread that sets and restores it (threadpoolctl lets one Python thread at a time change a
    shared OpenBLAS pool and ignores the others)."""

    condition: threading.Condition = dataclasses.field(default_factory=threading.Condition)
    threads: Optional[int] = None
    holders: int = 0
    limiter: object = None
    control: Optional[ThreadPoolExecutor] = None
    warned: bool = False

    def run(self, function: Callable, *args):
        """``function(*args)`` on the controlling thread (started on first use)."""
        if self.control is None:
            self.control = ThreadPoolExecutor(1, thread_name_prefix="contextembed-blas-limits")
        return self.control.submit(function, *args).result()


_BLAS = _ProcessLimit()
#: ``value``: how many bounded calls the current thread is inside
_DEPTH = threading.local()


def _forget_blas_limit() -> None:
    """In a forked child: the calls holding the limit, and the controlling thread, were the parent's
    (its limit stays set)."""
    global _BLAS
    _BLAS = _ProcessLimit()


os.register_at_fork(after_in_child=_forget_blas_limit)


@contextlib.contextmanager
def blas_threads(n_threads: int) -> Iterator[None]:
    """The BLAS pools (threadpoolctl's ``"blas"``: OpenBLAS, MKL, BLIS) limited to ``n_threads``.

    Their limit is process-wide, so two calls with different limits cannot both hold theirs: a call
    waits until the calls holding another limit have left, calls with the same limit run together,
    and the last to leave restores the original counts. A call made inside another in the same
    thread runs under the outer one's limit (waiting there would never end).
    """
    depth = getattr(_DEPTH, "value", 0)
    _DEPTH.value = depth + 1
    try:
        if depth:
            yield
            return
        limit = _BLAS
        with limit.condition:
            limit.condition.wait_for(lambda: limit.holders == 0 or limit.threads == n_threads)
            if limit.holders == 0:
                (limit.limiter, kept), limit.threads = limit.run(_set_blas_threads, n_threads), n_threads
                if kept and not limit.warned:
                    limit.warned = True
                    warnings.warn(f"n_threads={n_threads} could not limit the BLAS pools {', '.join(kept)}: another "
                                  "thread holds their limits (threadpoolctl lets one thread at a time set them); "
                                  "torch's and OpenMP's threads are limited", RuntimeWarning, stacklevel=4)
            limit.holders += 1
        try:
            yield
        finally:
            with limit.condition:
                limit.holders -= 1
                if limit.holders == 0:
                    limit.run(_restore_blas_threads, limit.limiter)
                    limit.limiter = limit.threads = None
                    limit.condition.notify_all()
    finally:
        _DEPTH.value = depth


def _set_blas_threads(n_threads: int) -> tuple[object, list[str]]:
    """On the controlling thread: the limiter of ``n_threads``, and the pools that did not take a
    lower limit (another thread holds their threadpoolctl limits), named with the count they kept."""
    from threadpoolctl import threadpool_info, threadpool_limits

    before = {pool["filepath"]: pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}
    limiter = threadpool_limits(n_threads, user_api="blas")
    kept = [f"{os.path.basename(pool['filepath'])} ({pool['num_threads']})" for pool in threadpool_info()
            if pool["user_api"] == "blas" and n_threads < before.get(pool["filepath"], 0) == pool["num_threads"]]
    return limiter, kept


def _restore_blas_threads(limiter) -> None:
    """On the controlling thread: the original counts back, and OpenBLAS's control given up, so
    that any thread may set its limits again."""
    limiter.restore_original_limits()
    for controller in _openblas_controllers():
        controller.clear_controlling_thread()


def _openblas_controllers() -> tuple:
    """threadpoolctl's OpenBLAS controller class, where it has the controlling thread (3.6 and later)."""
    import threadpoolctl

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    return (controller,) if hasattr(controller, "clear_controlling_thread") else ()
