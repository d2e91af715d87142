"""The bounds of the numeric settings: one reader for the command line, one check for the library."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from contextembed._bounds import Bound, check_integers, check_setting

RATE = Bound(float, 0, 1, "--rate", low_open=True)
COUNT = Bound(int, 1, 100, "--count", optional=True)


@pytest.mark.parametrize(("text", "value"), [("0.5", 0.5), ("1", 1.0), (".25", 0.25), ("1e-3", 1e-3), ("+1E-2", 0.01)])
def test_rates_are_read_from_ascii_decimals(text, value):
    assert RATE.parse(text) == value


@pytest.mark.parametrize("text", ["0", "-0.1", "1.5", "nan", "NaN", "inf", "-inf", "infinity", "1e400", "٠.٥",
                                  "0.²", "1_0", " 0.5", "0.5 ", "0x1", "", "1e", "½"])
def test_anything_else_is_refused_with_the_range(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a finite number in \(0, 1\]") as caught:
        RATE.parse(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize("text", ["٣", "²", "3.0", "1e2", "0", "101", "-1", "+"])
def test_integers(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected an integer in \[1, 100\]"):
        COUNT.parse(text)
    assert COUNT.parse("+7") == 7 and COUNT.parse("100") == 100


@pytest.mark.parametrize(("value", "error"), [(True, TypeError), (np.bool_(True), TypeError), ("3", TypeError),
                                              (3.0, TypeError), (0, ValueError), (101, ValueError)])
def test_library_values(value, error):
    with pytest.raises(error, match=r"count=.* \(--count\)"):
        check_setting("count", value, COUNT)
    assert check_setting("count", None, COUNT) is None and check_setting("count", np.int64(5), COUNT) == 5


def test_rates_refuse_what_is_not_finite():
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="is out of range"):
            check_setting("rate", value, RATE)
    with pytest.raises(TypeError, match="expected a finite number"):
        check_setting("rate", None, RATE)


def test_integer_lists():
    assert check_integers("cutoffs", [1, 5], COUNT, increasing=True) == [1, 5]
    assert check_integers("cutoffs", None, COUNT) is None
    for bad, error in (([5, 5], ValueError), ([], ValueError), ([0, 5], ValueError), ("5", TypeError),
                       ([1.5], TypeError)):
        with pytest.raises(error, match="cutoffs"):
            check_integers("cutoffs", bad, COUNT, increasing=True)
