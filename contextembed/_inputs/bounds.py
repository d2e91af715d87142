"""Bounds of numeric settings (arguments, command-line options), and the one check that applies them.

A numeric setting is described once, as a :class:`Bound` next to where it is defined (the
pretraining methods' tables ``TRAINING_BOUNDS`` in :mod:`contextembed.pretraining._training_options`,
``MLM_BOUNDS`` in :mod:`contextembed.pretraining._mlm`, ...; the Ray engine's ``connect_timeout``;
the CLI's counts). The same bound serves both entry points:

- the library: :func:`check_setting` (a settings dataclass's ``__post_init__`` calls
  :func:`check_settings`);
- the command line: every numeric option's ``type=`` is :meth:`Bound.parse`, so ``argparse`` refuses
  a bad number before anything is read or written, naming the option and the allowed range.

A value must have the right type (an ``int`` for counts, no ``bool``; a real number for rates), be
finite and lie in its range. Upper bounds are generous: they refuse what cannot be meant (a learning
rate of ``1e40`` overflows float32 arithmetic; ``1e4`` is a typo for ``1e-4``), not what is merely
unusual; a run that diverges anyway is stopped by the training loop. On the command line numbers
are read in ASCII only: Python's ``int('٣')`` is 3 and ``float('²')`` fails with a message that
names nothing, so ``'٣'``, ``'²'``, ``'nan'``, ``'inf'``, ``'1_000'`` and ``' 5'`` are all refused.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

Number = Union[int, float]

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


@dataclass(frozen=True)
class Bound:
    """The type and range of one numeric setting.

    Attributes
    ----------
    kind : {int, float}
        ``int``: a whole number (``bool`` refused); ``float``: any finite real number.
    low, high : int or float
        The range; ``low_open`` / ``high_open`` exclude the end.
    flag : str
        The command-line option that sets it (named in every error; ``""``: the library's alone).
    optional : bool
        ``None`` is allowed (a default computed later).
    note : str
        Appended to the range in errors (``"0: off"``).
    """

    kind: type
    low: Number
    high: Number
    flag: str = ""
    low_open: bool = False
    high_open: bool = False
    optional: bool = False
    note: str = ""

    def describe(self) -> str:
        """``"an integer in [1, 1000]"``, ``"a finite number in (0, 1e+06]"``."""
        what = "an integer" if self.kind is int else "a finite number"
        left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
        text = f"{what} in {left}{_number(self.low)}, {_number(self.high)}{right}"
        return f"{text} ({self.note})" if self.note else text

    def contains(self, value: Number) -> bool:
        """Whether ``value`` lies in the range; never a number that is not finite (NaN compares false
        to everything, so a range check alone lets it through wherever it is written ``value < low``)."""
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def parse(self, text: str) -> Number:
        """The command-line value ``text`` as a checked number (``argparse`` ``type=``).

        Raises
        ------
        argparse.ArgumentTypeError
            If ``text`` is not an ASCII number of the right kind, or is out of range; ``argparse``
            prefixes the option's name.
        """
        pattern = _INTEGER if self.kind is int else _DECIMAL
        if not isinstance(text, str) or not pattern.match(text):
            example = "such as 8" if self.kind is int else "such as 0.001 or 1e-4"
            raise argparse.ArgumentTypeError(
                f"expected {self.describe()}, written in ASCII digits ({example}); got {text!r}")
        value = self.kind(text)
        if not self.contains(value):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}; got {text!r}")
        return value


def _number(value: Number) -> str:
    """A bound as written in errors: short where that is exact (``1e+09``), else an int in full
    (``2147483647``, not ``2.14748e+09``)."""
    short = f"{value:g}"
    return str(value) if isinstance(value, int) and float(short) != value else short


def check_setting(name: str, value, bound: Bound):
    """Return ``value`` if it fits ``bound``; else ``ValueError`` (or ``TypeError``) naming the setting.

    Parameters
    ----------
    name : str
        The field's name (``"learning_rate"``); the message also gives ``bound.flag``.
    value
        What was given.
    bound : Bound
        Its type and range.
    """
    if value is None and bound.optional:
        return value
    where = f"{name}={value!r}" + (f" ({bound.flag})" if bound.flag else "")
    if not _has_kind(value, bound.kind):
        got = type(value).__name__
        raise TypeError(f"{where} is a {got}; expected {bound.describe()}"
                        + ("" if not bound.optional else ", or None for the default"))
    if not bound.contains(value):  # NaN and infinities too
        raise ValueError(f"{where} is out of range; expected {bound.describe()}")
    return value


def check_settings(settings, bounds: Mapping[str, Bound]) -> None:
    """:func:`check_setting` for every field of ``settings`` listed in ``bounds``."""
    check_values({name: getattr(settings, name) for name in bounds}, bounds)


def check_values(values: Mapping[str, object], bounds: Mapping[str, Bound]) -> None:
    """:func:`check_setting` for every entry of ``values`` (keyword arguments, by name) that ``bounds``
    lists; the others are left to their own checks."""
    for name, value in values.items():
        if name in bounds:
            check_setting(name, value, bounds[name])


def check_integers(name: str, values, bound: Bound, *, increasing: bool = False) -> Optional[list[int]]:
    """A list of integers, each in ``bound`` (``None`` passes when ``bound.optional``); with
    ``increasing``, strictly increasing."""
    if values is None and bound.optional:
        return None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name}={values!r} ({bound.flag}) must be a list of integers")
    values = list(values)
    for value in values:
        check_setting(name, value, Bound(int, bound.low, bound.high, bound.flag))
    if not values or (increasing and any(b <= a for a, b in zip(values, values[1:]))):
        order = "strictly increasing " if increasing else ""
        raise ValueError(f"{name}={values!r} ({bound.flag}) must be a non-empty {order}list of integers "
                         f"in [{_number(bound.low)}, {_number(bound.high)}]")
    return values


def parse_integers(bound: Bound):
    """An ``argparse`` ``type=`` for comma-separated integers, each checked against ``bound``."""

    def parse(text: str) -> list[int]:
        return [Bound(int, bound.low, bound.high, bound.flag).parse(part) for part in text.split(",")]

    return parse


def _has_kind(value, kind: type) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if kind is int:
        return isinstance(value, (int, np.integer))
    return isinstance(value, (int, float, np.integer, np.floating))


#: seconds a cluster address has to answer before an engine gives up (default 30)
CONNECT_TIMEOUT = Bound(float, 0, 600, "--connect-timeout", low_open=True, note="seconds; default 30")
#: a seed: what NumPy's and torch's generators both take
SEED = Bound(int, 0, 2**32 - 1, "--seed")
#: a learning rate (SGD or AdamW); a run that diverges below the bound is stopped by the loop
LEARNING_RATE = Bound(float, 0, 1e6, "--lr", low_open=True)
#: a count of items, pieces or positions a library option sets (a batch, a chunk, a window): at least one
COUNT = Bound(int, 1, 2**31 - 1)
#: the same, where ``None`` stands for a default chosen later (from the model, the device)
OPTIONAL_COUNT = Bound(int, 1, 2**31 - 1, optional=True)


__all__ = ["CONNECT_TIMEOUT", "COUNT", "LEARNING_RATE", "OPTIONAL_COUNT", "SEED", "Bound", "check_integers", "check_setting",
           "check_settings", "check_values", "parse_integers"]
