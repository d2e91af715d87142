"""The bounds of the numeric settings: one reader for the command line, one check for the library."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from contextembed._inputs.bounds import Bound, check_integers, check_setting

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


def _package_bounds() -> dict[str, Bound]:
    """Every ``Bound`` the package defines (module constants and tables of them), by where it is."""
    import importlib
    import pkgutil

    import contextembed

    found = {}
    for info in pkgutil.walk_packages(contextembed.__path__, "contextembed."):
        if info.name.endswith("__main__"):  # runs the command line
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional dependency (ray, spacy, ...) is missing
            continue
        for name, value in vars(module).items():
            values = value.items() if isinstance(value, dict) else [("", value)]
            for key, bound in values:
                if isinstance(bound, Bound):
                    found[f"{info.name}.{name}{f'[{key}]' if key else ''}"] = bound
    return found


def test_no_bound_of_the_package_takes_a_number_that_is_not_finite():
    """One rule, in ``Bound.contains``, for every option and file field with a bound (issue 53, item 13:
    a check written ``value < 0`` let ``cell_clip=NaN`` through)."""
    bounds = _package_bounds()
    assert "contextembed.encoders._elmo.options.OPTION_BOUNDS[lstm.cell_clip]" in bounds and len(bounds) > 20
    for where, bound in bounds.items():
        for value in (math.nan, math.inf, -math.inf):
            assert not bound.contains(value), where
            expected = (ValueError, "is out of range") if bound.kind is float else (TypeError, "expected an integer")
            with pytest.raises(expected[0], match=expected[1]):
                check_setting(where, value, bound)
