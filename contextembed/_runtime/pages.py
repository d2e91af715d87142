"""Fault in a fresh output array's pages on a helper thread, before the threads that fill it reach them.

A large ``np.empty`` is memory the kernel has not handed over yet: the first write to each page
stops the writing thread while the kernel zeroes the page (about 30 ms of 50 for 190 MB of word
rows on a 2-core Xeon). :func:`populate` asks the kernel for all of them at once
(``madvise(MADV_POPULATE_WRITE)``, Linux 5.14 and later) on a thread of its own, so that this work
runs while the caller tokenizes, on a core that would otherwise wait. It changes no byte of the
array (its threads may write into it meanwhile); where the call is missing or refused it does
nothing, and the writes fault the pages in as before.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from typing import Optional

import numpy as np

#: ``MADV_POPULATE_WRITE`` of ``<linux/mman.h>``
MADV_POPULATE_WRITE = 23
#: arrays smaller than this are left to fault in as they are written (a thread costs more)
MIN_BYTES = 8 << 20
PAGE = 4096


@functools.lru_cache(maxsize=1)
def _madvise() -> Optional[ctypes._CFuncPtr]:
    """libc's ``madvise`` on Linux (from the process's own symbols: no search for the library, which
    would start a subprocess); ``None`` elsewhere or where it cannot be found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def populate(array: np.ndarray) -> Optional[threading.Thread]:
    """Start faulting in the whole pages of ``array`` (a C-contiguous array of its own memory) on a
    daemon thread, which keeps ``array`` alive until it is done; ``None`` (nothing started) for a
    small array, where ``madvise`` is missing (not Linux), or where no thread can start (the
    interpreter shuts down)."""
    madvise = _madvise()
    if madvise is None or array.nbytes < MIN_BYTES or not array.flags.c_contiguous:
        return None
    address = array.ctypes.data
    begin, end = -(-address // PAGE) * PAGE, (address + array.nbytes) // PAGE * PAGE
    # a refusal (EINVAL before Linux 5.14) leaves the pages to fault in as they are written
    thread = threading.Thread(target=lambda held: madvise(begin, end - begin, MADV_POPULATE_WRITE), args=(array,),
                              name="contextembed-populate", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new threads at interpreter shutdown (an atexit handler encoding)
        return None
    return thread


__all__ = ["populate"]
