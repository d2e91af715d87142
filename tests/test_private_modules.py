"""What is public is what the reference lists; the rest is private by name, and old paths still load.

The modules the API reference (docs/api/*.rst) documents are the public ones; every other module has
a leading underscore in its path, so the package tree shows the architecture. The paths contextembed
0.1 gave the private modules still import (as the very same modules), so pickles and skops files
saved before the rename load: tests/fixtures/legacy_v0_1 holds fitted estimators written by that
version (its make.py says how).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import pkgutil
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import contextembed
from contextembed._moved import MOVED, moved_to

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "fixtures" / "legacy_v0_1"
# the command's module: the CLI page is generated from its parser, not from autodoc
NOT_IN_AUTODOC = {"contextembed.cli", "contextembed.__main__"}


def _documented_modules() -> set[str]:
    text = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "docs" / "api").glob("*.rst"))
    return set(re.findall(r"^\.\. (?:currentmodule|automodule):: (\S+)", text, re.M))


def _all_modules() -> set[str]:
    names = {"contextembed"}
    for info in pkgutil.walk_packages(contextembed.__path__, "contextembed.", onerror=lambda name: None):
        names.add(info.name)
    return names


def _is_private(name: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in name.split("."))


def test_documented_modules_are_exactly_the_public_ones():
    documented = _documented_modules()
    public = {name for name in _all_modules() if not _is_private(name)}
    assert documented, "no module found in docs/api/*.rst"
    assert not {name for name in documented if _is_private(name)}, "the reference documents a private module"
    assert public - NOT_IN_AUTODOC == documented, (
        f"public by name but not in the reference: {sorted(public - NOT_IN_AUTODOC - documented)}; "
        f"in the reference but missing: {sorted(documented - public)}"
    )


def test_the_package_root_shows_the_architecture():
    root = {info.name for info in pkgutil.iter_modules(contextembed.__path__)}
    public = sorted(name for name in root if not name.startswith("_"))
    assert public == ["cli", "corpus", "encoders", "engines", "errors", "extraction", "heads", "io",
                      "plotting", "pooling", "pretraining", "settings", "sklearn", "spacy", "tokenizers", "tuning"]


def _forget(name: str) -> None:
    for loaded in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
        if moved_to(loaded) is not None:  # only the old aliases: the modules themselves stay loaded
            del sys.modules[loaded]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_the_same_module_with_a_deprecation(old):
    new = MOVED[old]
    try:
        module = importlib.import_module(new)
    except ModuleNotFoundError as error:  # an optional dependency of that module
        if (error.name or "").startswith("contextembed"):
            raise
        pytest.skip(f"{new} needs {error.name}")
    _forget(old)
    with pytest.warns(DeprecationWarning, match=re.escape(old) + ".*" + re.escape(new)):
        aliased = importlib.import_module(old)
    assert aliased is module
    assert module.__name__ == new and module.__spec__.name == new  # the module keeps its own identity
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is module  # once: later imports are silent


def test_a_package_s_old_submodule_is_not_loaded_twice():
    _forget("contextembed.encoders.elmo")
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("contextembed.encoders.elmo.weights")
    from contextembed.encoders._elmo import weights as new

    assert old is new
    assert sys.modules["contextembed.encoders.elmo.weights"] is new


def test_names_that_never_existed_still_fail():
    assert moved_to("contextembed.devicesx") is None and moved_to("contextembed.corpus") is None
    assert moved_to("contextembed.sklearn.text.extra") == "contextembed.sklearn._text.extra"
    with pytest.raises(ModuleNotFoundError, match="contextembed.sklearn.nothing"):
        importlib.import_module("contextembed.sklearn.nothing")
    with pytest.raises(ModuleNotFoundError, match="contextembed.sklearn.text.nothing"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        importlib.import_module("contextembed.sklearn.text.nothing")


@pytest.mark.parametrize("name", ["contextembed.encoders.elmo.made_up", "contextembed.encoders.elmo.weights.x",
                                  "contextembed.pooling.layers.x", "contextembed.encoders.elmo._weights"])
def test_an_old_package_finds_only_what_exists(name):
    """``find_spec`` of a name under a moved package that never existed is ``None`` (or the error a
    name under a module gives), as for any package, and importing it names the path imported, not
    the private one (issue 53, item 15)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            assert importlib.util.find_spec(name) is None
        except ModuleNotFoundError as error:  # its parent is a module, not a package
            assert "__path__ attribute not found" in str(error)
        with pytest.raises(ModuleNotFoundError) as caught:
            importlib.import_module(name)
    assert caught.value.name == name and f"No module named {name!r}" in str(caught.value)
    assert "._" not in str(caught.value).split(";")[0].replace("._weights", "")  # never the private path


def test_an_old_package_still_finds_what_exists():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        spec = importlib.util.find_spec("contextembed.encoders.elmo.weights")
        # (once imported, the alias is the module itself, whose spec names its own path)
        assert spec is not None and spec.origin.endswith(os.path.join("_elmo", "weights.py"))
        from contextembed.encoders._elmo import weights

        assert importlib.import_module("contextembed.encoders.elmo.weights") is weights


def _outputs(name, estimator):
    sys.path.insert(0, str(LEGACY))
    try:
        spec = importlib.util.spec_from_file_location("legacy_make", LEGACY / "make.py")
        make = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(make)
    finally:
        sys.path.remove(str(LEGACY))
    if name == "tagger":
        return np.array([tag for sentence in estimator.predict(make.SENTENCES) for tag in sentence])
    inputs = {"text": make.TEXTS, "token": make.SENTENCES, "pair": make.PAIRS}[name]
    output = estimator.transform(inputs)
    return np.concatenate(output) if isinstance(output, list) else np.asarray(output)


def _check_outputs(name, estimator):
    expected = np.load(LEGACY / f"{name}.expected.npy", allow_pickle=False)
    got = _outputs(name, estimator)
    if expected.dtype.kind == "U":
        assert got.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


LEGACY_NAMES = ["text", "token", "pair", "tagger"]


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_a_pickle_saved_before_the_rename_loads_and_transforms_as_it_did(name):
    data = (LEGACY / f"{name}.pkl").read_bytes()
    assert re.search(rb"contextembed\.sklearn\.(text|token|pairs|tagger)\b", data), "not an old-path pickle"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        estimator = pickle.loads(data)
    assert type(estimator).__module__.startswith("contextembed.sklearn._")
    _check_outputs(name, estimator)
    assert b"contextembed.sklearn._" in pickle.dumps(estimator)  # saved again: today's paths


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_a_skops_file_saved_before_the_rename_loads_with_the_trusted_types(name):
    skops_io = pytest.importorskip("skops.io")
    from contextembed.sklearn import TRUSTED_TYPES

    path = LEGACY / f"{name}.skops"
    untrusted = set(skops_io.get_untrusted_types(file=path))
    assert any(".sklearn.text." in t or ".sklearn.token." in t or ".sklearn.pairs." in t or ".sklearn.tagger." in t
               for t in untrusted), "not an old-path file"
    assert untrusted <= set(TRUSTED_TYPES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        estimator = skops_io.load(path, trusted=TRUSTED_TYPES)
    _check_outputs(name, estimator)


@pytest.mark.slow
def test_a_fresh_process_unpickles_an_old_path_first():
    """The first import a process makes may be an old path (pickle.load of a 0.1 file)."""
    code = ("import pickle, sys, warnings; warnings.simplefilter('ignore', DeprecationWarning)\n"
            f"with open({str(LEGACY / 'text.pkl')!r}, 'rb') as handle: estimator = pickle.load(handle)\n"
            "print(type(estimator).__module__, sys.modules['contextembed.sklearn.text'] is sys.modules[type(estimator).__module__])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["contextembed.sklearn._text", "True"]
