"""The parameters TextEmbedder, TokenEmbedder and TextPairEmbedder share: one definition, one text,
one default, and scikit-learn's ``__init__`` contract kept (explicit keyword arguments, only stored)."""

from __future__ import annotations

import inspect
import re

import pytest
from sklearn.base import clone

from contextembed.sklearn import TextEmbedder, TextPairEmbedder, TokenEmbedder
from contextembed.sklearn._parameters import (
    FITTED_ATTRIBUTES,
    MODEL_PARAMETERS,
    RUN_PARAMETERS,
    SHARED_DEFAULTS,
    SHARED_PARAMETERS,
    shared_docs,
)

CLASSES = [TextEmbedder, TokenEmbedder, TextPairEmbedder]

#: every parameter's default as it was before the shared definition (a change here is an API change)
DEFAULTS = {
    TokenEmbedder: {"subword_pooling": "first", "context": 0},
    TextEmbedder: {"subword_pooling": "mean", "text_pooling": "piece_mean", "normalize": True, "tokenizer": "auto"},
    TextPairEmbedder: {"subword_pooling": "first", "pair_features": "interactions", "text_pooling": "mean",
                       "tokenizer": "auto"},
}


def _section(doc: str, heading: str) -> dict[str, list[str]]:
    """A numpydoc section of ``doc``: ``{name: entry lines}``; a name documented twice is a list of two."""
    lines = inspect.cleandoc(doc).splitlines()
    start = lines.index(heading) + 2
    entries: dict[str, list[str]] = {}
    current = None
    for i in range(start, len(lines)):
        if i + 1 < len(lines) and lines[i + 1] and set(lines[i + 1]) == {"-"}:
            break  # the next section
        match = re.match(r"(\w+) : ", lines[i])
        if match:
            current = match.group(1)
            assert current not in entries, f"{current} documented twice"
            entries[current] = [lines[i]]
        elif current and lines[i].startswith("    "):
            entries[current].append(lines[i])
    return entries


def _signature(cls) -> dict[str, object]:
    parameters = inspect.signature(cls.__init__).parameters
    return {name: p.default for name, p in parameters.items() if name != "self"}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_parameter_is_documented_once_and_shared_ones_with_the_shared_text(cls):
    """TextEmbedder documented ten parameters as "As in :class:`TokenEmbedder`", TextPairEmbedder
    thirteen as "As in :class:`TextEmbedder`"; each class now carries the one shared text."""
    documented = _section(cls.__doc__, "Parameters")
    assert set(documented) == set(_signature(cls))
    shared = {**_section("Parameters\n----------\n" + MODEL_PARAMETERS + RUN_PARAMETERS, "Parameters")}
    assert set(shared) == set(SHARED_PARAMETERS)
    for name in SHARED_PARAMETERS:
        assert documented[name] == shared[name], name
    assert _section(cls.__doc__, "Attributes") == _section(FITTED_ATTRIBUTES, "Attributes")
    assert "$" not in cls.__doc__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_class_lists_each_parameter_with_its_default(cls):
    """scikit-learn reads the parameters from ``__init__``'s signature: every class lists each shared
    one explicitly, with the shared default, and keeps its own defaults."""
    signature = _signature(cls)
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
               for p in list(inspect.signature(cls.__init__).parameters.values())[1:])
    expected = {**SHARED_DEFAULTS, **DEFAULTS[cls]}
    assert signature == expected
    assert cls().get_params() == expected


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_init_stores_every_argument_and_nothing_else(cls):
    arguments = {name: f"value of {name}" for name in _signature(cls)}  # never validated in __init__
    estimator = cls(**arguments)
    assert vars(estimator) == arguments
    assert clone(estimator).get_params() == arguments


def test_a_placeholder_without_a_block_is_refused():
    class Documented:
        """Text.

        Parameters
        ----------
        $no_such_block
        """

    with pytest.raises(KeyError, match=r"\$no_such_block names no shared docstring block"):
        shared_docs(Documented)
