"""Settings from environment variables: the one place contextembed reads and checks them.

A variable is read when its setting is used, never at import, so a bad value cannot stop
``import contextembed``: the first call that needs it raises :class:`~contextembed.errors.SettingError`
(a ``ValueError``) naming the variable, the value received and what is accepted. An unset variable,
or one holding only spaces, takes the default.

=====================================  ===========================================  ====================
variable                               accepted                                     default
=====================================  ===========================================  ====================
``CONTEXTEMBED_CPU_STREAMS``           whole number >= 1: batches run at once on a  torch's intra-op
                                       CPU; above :data:`STREAMS_PER_CORE` x the    thread count
                                       cores this process may use it is capped
                                       there, with a warning
``CONTEXTEMBED_MEMORY_BUDGET``         byte size from 16 MiB to 1 PiB: the          a quarter of the
                                       features contextembed keeps in memory at     memory this
                                       once (the feature store's resident rows      process may use,
                                       and every feature array a call builds)       at least 1 GiB
``CONTEXTEMBED_STORE_DIR``             a directory: where the feature store makes   the user's cache:
                                       its session directories                      ``~/.cache/...``
``CONTEXTEMBED_STORE_SESSION``         set by contextembed, not by hand: the        named by the job's
                                       session directory a job's processes share    first process
``CONTEXTEMBED_AUTO_CPU_PRECISION``    ``bf16``, ``fp32`` or ``int8``: what         measured on this CPU
                                       ``precision="auto"`` runs on a CPU
``CONTEXTEMBED_TUNING``                ``on``, ``refresh`` or ``off``: whether      ``on``
                                       what ``auto`` measures is read from and
                                       written to tuning records
                                       (:mod:`contextembed.tuning`)
``CONTEXTEMBED_TUNING_DIR``            a directory: where tuning records live       the user's cache:
                                                                                    ``~/.cache/...``
``CONTEXTEMBED_RAY_LOGS``              ``show`` or ``hide``: whether Ray's own log  ``hide``
                                       lines reach the terminal while contextembed
                                       runs Ray (:mod:`contextembed.engines.ray`)
``CONTEXTEMBED_DATA``                  an existing directory: where the examples    ``../shared/data``
                                       read CoNLL-2003 (``conll2003/train.txt``,    beside the
                                       ``dev.txt``) and SST-2 (``sst2/train.tsv``)  repository
                                       when no ``--data`` is given
                                       (:func:`data_directory`)
``WORLD_SIZE``, ``RANK``,              set by torchrun: ``WORLD_SIZE`` >= 1,        1, 0, 0
``LOCAL_RANK``                         ``0 <= RANK < WORLD_SIZE``, ``LOCAL_RANK``
                                       >= 0 (:mod:`contextembed.pretraining`)
=====================================  ===========================================  ====================

Spellings
---------
Whole number
    ASCII digits ``0``-``9`` only, optionally surrounded by spaces or tabs: ``8``, `` 8 ``. No sign,
    fraction (``1.5``), exponent (``1e3``), separator (``1_000``, ``1,000``) or other digits
    (``²``, ``٣``, full-width ``８``), and at most 18 digits.
Byte size
    A whole number as above, optionally followed by a unit (spaces allowed between them; units are
    case-insensitive): ``B``; decimal ``KB``, ``MB``, ``GB``, ``TB`` (powers of 1000); binary
    ``KiB``, ``MiB``, ``GiB``, ``TiB`` (powers of 1024). Examples: ``0``, ``1073741824``, ``512MB``,
    ``1 GiB``. No fractions (``1.5GB``: write ``1536MiB``), exponents (``1e9``: write ``1GB``),
    negatives or one-letter units (``1G``: is it ``1GB`` or ``1GiB``?).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from .errors import SettingError

#: how many CPU streams each core may run before ``CONTEXTEMBED_CPU_STREAMS`` is capped
STREAMS_PER_CORE = 4
#: the largest byte size any setting takes (1 PiB): anything larger is a typo
MAX_BYTES = 1 << 50
#: bytes per unit of a byte size (lowercase keys: units are case-insensitive)
BYTE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_UNIT_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
#: digits a whole number may have: anything longer is a typo (and far beyond every range here)
MAX_DIGITS = 18
_WHOLE = re.compile(r"[0-9]+", re.ASCII)
_SIZE = re.compile(r"([0-9]+)[ \t]*([A-Za-z]*)", re.ASCII)
_BLANKS = " \t"


def raw(name: str) -> Optional[str]:
    """The variable ``name`` without surrounding spaces and tabs; ``None`` when unset or blank."""
    value = os.environ.get(name)
    if value is None or not value.strip(_BLANKS):
        return None
    return value.strip(_BLANKS)


def whole_number(name: str, default: int, *, minimum: int = 0, maximum: Optional[int] = None, hint: str = "") -> int:
    """The whole number in the variable ``name`` (``default`` when unset), checked against
    ``minimum`` and ``maximum`` (see the module docstring for the spellings accepted).

    Parameters
    ----------
    name : str
        The environment variable.
    default : int
        Returned when the variable is unset or blank (not checked).
    minimum, maximum : int
        The accepted range (``maximum=None``: no upper bound besides 18 digits).
    hint : str
        Added to the error: what the number means (``"1: one batch at a time"``).

    Raises
    ------
    SettingError
        Naming the variable, the value and the accepted range.
    """
    text = raw(name)
    return default if text is None else parse_whole_number(name, text, minimum=minimum, maximum=maximum, hint=hint)


def parse_whole_number(name: str, text: str, *, minimum: int = 0, maximum: Optional[int] = None, hint: str = "") -> int:
    """``text`` (the value of the setting ``name``) as a whole number in ``[minimum, maximum]``."""
    match = _WHOLE.fullmatch(text.strip(_BLANKS))
    _check_digits(name, text, match.group() if match else "")
    value = int(match.group()) if match else None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        raise SettingError(
            f"{name}={text!r}: expected {_range(minimum, maximum)} written in ASCII digits (e.g. "
            f"{max(minimum, 1) if maximum is None else maximum}){f'; {hint}' if hint else ''}; "
            f"set it to such a number, or unset it"
        )
    return value


def byte_size(name: str, default: int, *, maximum: int = MAX_BYTES) -> int:
    """The byte size in the variable ``name`` (``default`` when unset): a whole number of bytes,
    optionally with a unit (``512MB``, ``1GiB``; see the module docstring), from 0 to ``maximum``.

    Raises
    ------
    SettingError
        Naming the variable, the value, the spellings and the range accepted.
    """
    text = raw(name)
    return default if text is None else parse_byte_size(name, text, maximum=maximum)


def parse_byte_size(name: str, text: str, *, maximum: int = MAX_BYTES) -> int:
    """``text`` (the value of the setting ``name``) as a number of bytes from 0 to ``maximum``."""
    match = _SIZE.fullmatch(text.strip(_BLANKS))
    _check_digits(name, text, match.group(1) if match else "")
    unit = BYTE_UNITS.get(match.group(2).lower() or "b") if match else None
    if unit is None:
        raise SettingError(
            f"{name}={text!r}: expected a byte size: a whole number in ASCII digits with an optional unit "
            f"({_UNIT_NAMES}), e.g. 0, 536870912, 512MB or 1GiB; no fractions, exponents or signs"
        )
    value = int(match.group(1)) * unit
    if value > maximum:
        raise SettingError(f"{name}={text!r} is {value:,} bytes; expected at most {maximum:,} bytes")
    return value


def choice(name: str, choices: Sequence[str]) -> Optional[str]:
    """The value of the variable ``name`` if it is one of ``choices``; ``None`` when unset or blank.

    Raises
    ------
    SettingError
        Naming the variable, the value and the choices.
    """
    text = raw(name)
    if text is not None and text not in choices:
        names = [repr(value) for value in choices]
        alternatives = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        raise SettingError(f"{name}={text!r}: expected {alternatives}; set one of those or unset it")
    return text


#: the variable naming the directory of the corpora the examples read
DATA_ENV = "CONTEXTEMBED_DATA"


def directory(name: str) -> Optional[Path]:
    """The existing directory the variable ``name`` names (``~`` expanded); ``None`` when unset or blank.

    Raises
    ------
    SettingError
        The path does not exist or is not a directory, naming the variable and the path.
    """
    text = raw(name)
    if text is None:
        return None
    path = Path(text).expanduser()
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        raise SettingError(f"{name}={text!r}: {path} {what}; set it to an existing directory, or unset it")
    return path


def data_directory() -> Optional[Path]:
    """``CONTEXTEMBED_DATA``: the directory holding ``conll2003/`` and ``sst2/`` for the examples
    (:func:`directory`); ``None`` when unset."""
    return directory(DATA_ENV)


def cache_directory(name: str, folder: str) -> str:
    """The directory the variable ``name`` names (made absolute, ``~`` expanded), else ``folder`` in
    contextembed's cache: ``$XDG_CACHE_HOME/contextembed`` (default ``~/.cache/contextembed``)."""
    configured = raw(name)
    if configured is not None:
        return os.path.abspath(os.path.expanduser(configured))
    base = raw("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "contextembed", folder)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS tells it, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _check_digits(name: str, text: str, digits: str) -> None:
    if len(digits) > MAX_DIGITS:
        raise SettingError(
            f"{name}={text!r} has {len(digits)} digits; no setting takes a number of more than {MAX_DIGITS}: "
            "set a smaller value, or unset it"
        )


def _range(minimum: int, maximum: Optional[int]) -> str:
    if maximum is not None:
        return f"a whole number from {minimum} to {maximum}"
    return "a positive whole number" if minimum == 1 else f"a whole number >= {minimum}"


__all__ = [
    "BYTE_UNITS",
    "DATA_ENV",
    "MAX_BYTES",
    "STREAMS_PER_CORE",
    "byte_size",
    "cache_directory",
    "choice",
    "data_directory",
    "directory",
    "parse_byte_size",
    "parse_whole_number",
    "raw",
    "usable_cores",
    "whole_number",
]
