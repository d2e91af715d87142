"""The parameters TextEmbedder, TokenEmbedder and TextPairEmbedder share: one definition, one text,
one default, and scikit-learn's ``__init__`` contract kept (explicit keyword arguments, only stored)."""

from __future__ import annotations

import inspect
import re

import numpy as np
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


# -- the shared run parameters are checked in fit, each error naming the parameter -----------

#: what each class fits on (tiny inputs: the checks run before anything is encoded)
FIT_DATA = {TextEmbedder: ["eu call", "peter"], TokenEmbedder: [["eu", "call"], ["peter"]],
            TextPairEmbedder: [("eu call", "peter"), ("peter", "eu")]}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name, value, error, message", [
    ("embed_weights", "no", TypeError, r"embed_weights must be True or False, got 'no' \(str\)"),
    ("embed_weights", 1, TypeError, r"embed_weights must be True or False, got 1 \(int\)"),
    ("n_jobs", 0, ValueError, "n_jobs=0 would run no worker"),
    ("n_jobs", "2", TypeError, r"n_jobs must be None or an int .*, got '2' \(str\)"),
    ("n_jobs", 1.5, TypeError, r"n_jobs must be None or an int .*, got 1.5 \(float\)"),
    ("n_jobs", True, TypeError, r"n_jobs must be None or an int .*, got True \(bool\)"),
    ("max_epochs", 0, ValueError, r"max_epochs=0 is out of range; expected an integer in \[1, "),
    ("max_epochs", -3, ValueError, r"max_epochs=-3 is out of range"),
    ("max_epochs", 1.5, TypeError, r"max_epochs=1.5 is a float; expected an integer"),
    ("max_epochs", "3", TypeError, r"max_epochs='3' is a str; expected an integer"),
    ("validation_fraction", "0.1", TypeError, r"validation_fraction='0.1' is a str; expected a finite number in \[0, 1\)"),
    ("validation_fraction", 1.0, ValueError, r"validation_fraction=1.0 is out of range"),
    ("random_state", "0", TypeError, r"random_state='0' is a str; expected an integer .*or None, or a numpy.random.RandomState"),
    ("random_state", -1, ValueError, r"random_state=-1 is out of range"),
    ("random_state", 1.0, TypeError, r"random_state=1.0 is a float"),
])
def test_a_bad_run_parameter_is_named_in_fit(static_path, cls, name, value, error, message):
    """These were taken by truthiness (embed_weights='no' embedded the weights), or failed later with an
    error naming nothing (n_jobs='2' once 512 sentences missed the cache; max_epochs=1.5 in range()),
    or passed (max_epochs=0 reported equal weights as learned)."""
    with pytest.raises(error, match=message):
        cls(static_path, **{name: value}).fit(FIT_DATA[cls])


@pytest.mark.parametrize("n_jobs", [None, 1, 2, -1, -2, np.int64(2)])
def test_every_n_jobs_joblib_reads_is_accepted(static_path, n_jobs):
    embedder = TokenEmbedder(static_path, n_jobs=n_jobs).fit(FIT_DATA[TokenEmbedder])
    assert embedder.transform([["eu"]]).shape == (1, 8)


def test_n_jobs_set_after_fit_is_checked_where_it_is_used(static_path):
    embedder = TokenEmbedder(static_path).fit(FIT_DATA[TokenEmbedder]).set_params(n_jobs=0)
    with pytest.raises(ValueError, match="n_jobs=0 would run no worker"):
        embedder.transform([["eu"]])


def test_embed_weights_set_after_fit_is_checked_when_pickled(static_path):
    import pickle

    embedder = TokenEmbedder(static_path).fit(FIT_DATA[TokenEmbedder]).set_params(embed_weights="no")
    with pytest.raises(TypeError, match="embed_weights must be True or False, got 'no'"):
        pickle.dumps(embedder)
    assert "_embedded_encoder" not in embedder.set_params(embed_weights=np.bool_(False)).__getstate__()


@pytest.mark.parametrize("random_state", [None, np.random.RandomState(3), 7, np.int32(7)], ids=["None", "RandomState", "int", "np.int32"])
def test_random_state_takes_what_scikit_learn_takes(bert, random_state):
    texts, labels = ["eu call", "peter", "german call", "blackburn"] * 3, [0, 1, 0, 1] * 3
    fitted = TextEmbedder(bert, max_epochs=2, random_state=random_state, device="cpu", precision="fp32").fit(texts, labels)
    assert fitted.mix_weights_.sum() == pytest.approx(1.0, abs=1e-6)


def test_a_random_state_instance_gives_a_reproducible_sequence_of_fits(bert):
    texts, labels = ["eu call", "peter", "german call", "blackburn"] * 3, [0, 1, 0, 1] * 3

    def two_fits():
        state = np.random.RandomState(5)
        make = lambda: TextEmbedder(bert, max_epochs=3, random_state=state, validation_fraction=0.25, device="cpu",
                                    precision="fp32").fit(texts, labels).mix_weights_
        return make(), make()

    first, second = two_fits()
    again = two_fits()
    np.testing.assert_array_equal(first, again[0])
    np.testing.assert_array_equal(second, again[1])
