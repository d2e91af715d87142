"""Fork safety: processes forked after an encoder ran neither hang nor oversubscribe the CPU.

The hazard
----------
PyTorch's Linux wheels run their CPU kernels (ATen, MKL, oneDNN) on GNU OpenMP (``libgomp``).
The first parallel region a thread runs creates that thread's pool of OpenMP workers, which then
sleep inside libgomp until the next region. ``fork`` copies the forking thread only: the child
inherits a pool that lists workers it does not have, and its first parallel region (any op large
enough to split, such as a transformer's first layer norm) waits for them forever at 0% CPU. A
parent that never ran a parallel region has no pool to pass on, which is why
``nlp.pipe(texts, n_process=2)`` worked in a fresh process and hung after one ``nlp(text)``.
The same holds for joblib's ``multiprocessing`` backend and for any worker forked by hand.
Hugging Face ``tokenizers`` has the same hazard with its Rust (rayon) pool: it turns its
parallelism off in a forked child by itself, unless ``TOKENIZERS_PARALLELISM`` was set to true,
in which case the child's first batch hangs the same way.

What contextembed does
----------------------
:func:`install` registers two :func:`os.register_at_fork` hooks, once per process. Building a
torch encoder, the spaCy component, or a scikit-learn ``n_jobs`` run calls it; until a process
forks, nothing else happens (the single-process path is untouched).

- Before a fork, in the parent: the forking thread's OpenMP pool is released
  (``omp_pause_resource_all``, OpenMP 5.0) in every libgomp loaded when :func:`install` ran.
  The child starts without a pool and may use any number of threads. The parent's next parallel
  region starts its workers again (about 0.2 ms, once per fork); pools of the parent's other
  threads are not touched.
- After a fork, in the child: torch's intra-op threads are set to :func:`child_threads` (default
  1: a forked worker is one of several processes sharing the cores, as in PyTorch's
  ``DataLoader`` workers; :func:`set_child_threads` changes it) and ``TOKENIZERS_PARALLELISM``
  is set to ``false``. scikit-learn ``n_jobs`` workers still encode each block with the
  caller's thread count (:mod:`contextembed.sklearn._encoding`), which the first step allows.

Neither step changes a vector here: the encoders' CPU kernels split their work over independent
outputs, and 1 and 2 intra-op threads gave bitwise-equal features (MiniLM-L6 and a tiny BERT, fp32
and bf16; ``tests/spacy/test_multiprocessing.py`` compares forked workers with ``n_process=1``).

A libgomp without ``omp_pause_resource_all`` keeps children at 1 thread, the one count that never
enters the inherited pool. LLVM's and Intel's OpenMP runtimes (macOS, some conda builds)
reinitialise themselves in a forked child; there the first step finds no libgomp and does
nothing. Processes started by ``spawn``, ``forkserver`` or joblib's default ``loky`` backend
inherit no thread state and need none of this.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

import torch

#: ``omp_pause_soft`` of OpenMP 5.0 (libgomp frees the calling thread's pool for either kind)
_OMP_PAUSE_SOFT = 1

_installed = False
#: ``omp_pause_resource_all`` of every libgomp loaded when :func:`install` ran
_pause_functions: list = []
#: a loaded libgomp cannot release its pool: forked children must stay at one thread
_pool_stays = False
_child_threads: Optional[int] = 1


def install() -> None:
    """Register the fork hooks of this module (once per process; later calls do nothing)."""
    global _installed, _pool_stays
    if _installed or not hasattr(os, "register_at_fork"):
        return
    _installed = True
    paths = _loaded_libgomp_paths()
    _pause_functions.extend(_find_pause_functions(paths))
    _pool_stays = len(_pause_functions) < len(paths)
    os.register_at_fork(before=_release_openmp_pool, after_in_child=_reset_child)


def set_child_threads(threads: Optional[int]) -> None:
    """Set torch's intra-op threads in processes forked from now on.

    Parameters
    ----------
    threads : int or None
        Threads per forked child (default 1); ``None`` keeps the parent's count. With
        ``n_process`` workers on ``C`` cores, ``C // n_process`` uses every core without
        oversubscribing them.
    """
    global _child_threads
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None (keep the parent's count), got {threads!r}")
    _child_threads = threads


def child_threads() -> Optional[int]:
    """Torch intra-op threads a forked child gets (``None``: the parent's count)."""
    return _child_threads


def _loaded_libgomp_paths() -> list[str]:
    """Paths of the libgomp copies mapped into this process (torch bundles its own)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            paths = {line.split(None, 5)[-1].strip() for line in handle if "libgomp" in line}
    except OSError:  # not Linux: no libgomp to worry about
        return []
    return sorted(path for path in paths if os.path.basename(path).startswith("libgomp"))


def _find_pause_functions(paths: list[str]) -> list:
    functions = []
    for path in paths:
        try:
            library = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0))
            function = library.omp_pause_resource_all
        except (OSError, AttributeError):  # unloadable, or a libgomp before OpenMP 5.0
            continue
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
        functions.append(function)
    return functions


def _release_openmp_pool() -> None:
    """Before ``fork``: free the forking thread's OpenMP workers (see the module docstring)."""
    for pause in _pause_functions:
        pause(_OMP_PAUSE_SOFT)  # -1 inside a parallel region: nothing to do then


def _reset_child() -> None:
    """After ``fork``, in the child: threads for one of several workers, no tokenizer pool."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    threads = 1 if _pool_stays else _child_threads
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
