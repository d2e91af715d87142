"""The memory budget of contextembed's features, and the rows the feature store keeps resident in it.

One budget bounds the bytes of features contextembed keeps in memory at once (:func:`memory_budget`:
``CONTEXTEMBED_MEMORY_BUDGET`` or :func:`set_memory_budget`; default a quarter of the memory this
process may use, at least 1 GiB): the rows the store keeps resident plus any feature array a call
builds. :func:`reserve` makes room for such an array before it is allocated (an array larger than
the whole budget is a :class:`~contextembed.errors.MemoryBudgetError`); :func:`_keep_resident`
counts a segment's rows (:mod:`contextembed._runtime.store`) as resident. Either drops the least
recently used resident rows, which stay readable from their segment files, until everything fits.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Optional, Union

import numpy as np

from .store_files import _size, _warn
from ..errors import MemoryBudgetError, SettingError
from ..settings import MAX_BYTES, byte_size, parse_byte_size, raw

#: the variable that names the memory budget (a byte size, :mod:`contextembed.settings`)
BUDGET_ENV = "CONTEXTEMBED_MEMORY_BUDGET"
#: the smallest budget (a budget that cannot hold one batch of rows is a typo)
MIN_BUDGET = 16 << 20
#: the default budget's floor
DEFAULT_MIN_BUDGET = 1 << 30


# -- the budget ----------------------------------------------------------------------------------

_budget: Optional[int] = None


def memory_budget() -> int:
    """The bytes of features contextembed may keep in memory at once (read from
    ``CONTEXTEMBED_MEMORY_BUDGET`` the first time; see :func:`set_memory_budget`)."""
    global _budget
    if _budget is None:
        if raw("CONTEXTEMBED_CACHE_BYTES") is not None:
            _warn("CONTEXTEMBED_CACHE_BYTES is no longer read: the feature store and every feature array contextembed "
                  f"builds are bounded by one memory budget, {BUDGET_ENV}", FutureWarning)
        value = byte_size(BUDGET_ENV, -1)
        _budget = default_budget() if value == -1 else _in_range(BUDGET_ENV, value)
    return _budget


def set_memory_budget(value: Union[int, str, None]) -> None:
    """Set the memory budget of the feature store and of the feature arrays calls build.

    Parameters
    ----------
    value : int, str or None
        Bytes (at least 16 MiB, at most 1 PiB), a byte size such as ``"3GB"`` or ``"2GiB"`` (the
        spellings of :mod:`contextembed.settings`), or ``None``: ``CONTEXTEMBED_MEMORY_BUDGET``
        again, else the default (a quarter of the memory this process may use, at least 1 GiB).

    Raises
    ------
    TypeError, ValueError
        For anything else (a fraction, NaN, a bool, a negative or too small number), naming it.
    """
    global _budget
    if value is None:
        _budget = None
    elif isinstance(value, str):
        _budget = _in_range("budget", parse_byte_size("budget", value))
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"budget={value!r} ({type(value).__name__}): expected a whole number of bytes or a byte "
                        "size such as '3GB'")
    else:
        _budget = _in_range("budget", int(value))
    _make_room(0)


def _in_range(name: str, value: int) -> int:
    if not MIN_BUDGET <= value <= MAX_BYTES:
        raise (SettingError if name == BUDGET_ENV else ValueError)(f"{name}={value:,} bytes: expected a memory budget from {MIN_BUDGET:,} (16 MiB) to "
                         f"{MAX_BYTES:,} bytes, e.g. '3GB'")
    return value


def default_budget() -> int:
    """A quarter of the memory this process may use (its cgroup's limit, else the machine's), at
    least 1 GiB."""
    return max(DEFAULT_MIN_BUDGET, _process_memory() // 4)


def _process_memory() -> int:
    limits = []
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as handle:
                text = handle.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    return min(limits) if limits else 8 << 30


def reserve(nbytes: int, what: str, fix: str = "") -> None:
    """Make room for a feature array of ``nbytes`` that a call is about to build.

    Resident rows are dropped from memory (they stay on disk) until they and the array fit the
    budget together.

    Raises
    ------
    MemoryBudgetError
        ``nbytes`` alone exceeds the budget: naming ``what``, the bytes it needs, the budget and
        ``fix`` (what to do instead), before anything is allocated.
    """
    budget = memory_budget()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{what} needs {_size(nbytes)} ({nbytes:,} bytes) of memory, over the memory budget of {_size(budget)} "
            f"({BUDGET_ENV} or contextembed.set_memory_budget); raise the budget"
            + (f", or {fix}" if fix else ""), needed=nbytes, budget=budget)
    _make_room(nbytes)


# -- resident rows -------------------------------------------------------------------------------

#: resident segments (:class:`contextembed._runtime.store_rows._Segment`), least recently used first,
#: with their bytes
_RESIDENT: OrderedDict = OrderedDict()
_RESIDENT_LOCK = threading.RLock()
_resident_bytes = 0


def resident_bytes() -> int:
    """Bytes of rows the stores keep in memory now."""
    return _resident_bytes


def _keep_resident(segment) -> bool:
    """Count ``segment``'s rows as resident, dropping older ones beyond the budget; ``False`` when
    they alone exceed it."""
    global _resident_bytes
    with _RESIDENT_LOCK:
        if segment in _RESIDENT:
            _RESIDENT.move_to_end(segment)
            return True
        size = segment.data.nbytes
        if size > memory_budget():
            return False
        _make_room(size)
        _RESIDENT[segment] = size
        _resident_bytes += size
        return True


def _touch(segment) -> None:
    """Mark ``segment``'s resident rows as the most recently used."""
    with _RESIDENT_LOCK:
        if segment in _RESIDENT:
            _RESIDENT.move_to_end(segment)


def _make_room(nbytes: int) -> None:
    """Drop least recently used resident rows until they and ``nbytes`` more fit the budget."""
    global _resident_bytes
    with _RESIDENT_LOCK:
        budget = memory_budget()
        while _RESIDENT and _resident_bytes + nbytes > budget:
            segment, size = _RESIDENT.popitem(last=False)
            _resident_bytes -= size
            segment.release()


def _forget_resident(segment) -> None:
    """Stop counting ``segment``'s rows (a segment the store dropped)."""
    global _resident_bytes
    with _RESIDENT_LOCK:
        size = _RESIDENT.pop(segment, None)
        if size is not None:
            _resident_bytes -= size

