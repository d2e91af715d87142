"""A thread's alternate signal stack, kept across a call into a library that replaces it.

Why this module exists: OpenVINO's CPU plugin installs an alternate signal stack
(``sigaltstack(2)``) on the thread that compiles a model, and frees that memory when the compiled
model is destroyed, which may happen on another thread (the garbage collector runs wherever the
last reference goes). The first thread is then left with a stack that no longer exists, and the
next signal handled on it kills the process with SIGSEGV instead of running its handler: Python
installs every handler with ``SA_ONSTACK``, so a Ctrl-C or a SIGTERM that should unwind a command
cleanly (:func:`contextembed.cli.signals_interrupt`) crashes the interpreter instead.

:func:`signal_stack_kept` restores the calling thread's previous alternate stack (or none) when the
block ends, so that no thread of ours is left pointing at memory another library owns. On systems
other than Linux (where the ``stack_t`` layout differs) it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional


class _StackT(ctypes.Structure):
    """Linux's ``stack_t``: ``{void *ss_sp; int ss_flags; size_t ss_size;}``."""

    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


def _sigaltstack():
    """libc's ``sigaltstack``, or ``None`` where this module does nothing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sigaltstack
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.POINTER(_StackT), ctypes.POINTER(_StackT)]
    function.restype = ctypes.c_int
    return function


_SIGALTSTACK = _sigaltstack()


def current_signal_stack() -> Optional[tuple[int, int, int]]:
    """The calling thread's alternate signal stack as ``(address, flags, size)``; ``None`` where unknown."""
    if _SIGALTSTACK is None:
        return None
    state = _StackT()
    if _SIGALTSTACK(None, ctypes.byref(state)) != 0:
        return None
    return state.ss_sp or 0, state.ss_flags, state.ss_size


@contextmanager
def signal_stack_kept() -> Iterator[None]:
    """The calling thread's alternate signal stack is the same after the block as before it."""
    before = _StackT()
    if _SIGALTSTACK is None or _SIGALTSTACK(None, ctypes.byref(before)) != 0:
        yield
        return
    try:
        yield
    finally:
        after = _StackT()
        _SIGALTSTACK(None, ctypes.byref(after))
        if (after.ss_sp, after.ss_flags, after.ss_size) != (before.ss_sp, before.ss_flags, before.ss_size):
            # SS_ONSTACK is a state, not a setting: a handler never runs here, so it is not set
            restored = _StackT(before.ss_sp, before.ss_flags & ~1, before.ss_size)
            _SIGALTSTACK(ctypes.byref(restored), None)
