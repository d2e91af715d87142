"""The scorers and the taggers' feature helpers live where scikit-learn keeps its own
(``metrics``, ``feature_extraction``); their old names at the package root still import (issue 54)."""

from __future__ import annotations

import importlib

import pytest

import contextembed.sklearn as package


@pytest.mark.parametrize("name", sorted(package.MOVED_NAMES))
def test_a_moved_name_still_imports_with_a_warning_naming_its_new_module(name):
    new = f"contextembed.sklearn.{package.MOVED_NAMES[name]}"
    with pytest.warns(DeprecationWarning, match=f"contextembed.sklearn.{name} moved to {new}.{name}"):
        old = getattr(package, name)
    assert old is getattr(importlib.import_module(new), name) and name in importlib.import_module(new).__all__
    assert name not in package.__all__


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'contextembed.sklearn' has no attribute 'entity_f2'"):
        package.entity_f2  # noqa: B018
