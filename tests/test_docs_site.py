"""The documentation site: every public name has its page, every documented parameter is on it.

The site is the one ``.ci/run`` builds (``python -m sphinx -W --keep-going -b html docs
docs/_build/html``); this test reads it when it is newer than every file it is built from, and
otherwise builds it into a temporary directory (under a minute), offline: the build runs under the
socket guard, so a theme or extension that reaches for the network fails it.

What is public is what ``docs/api/*.rst`` lists (autosummary entries and ``autodata`` directives);
each public module's ``__all__`` must be listed there in full, so a name cannot become public
without its page.
"""

from __future__ import annotations

import argparse
import html
import importlib
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import socket_guard

pytest.importorskip("sphinx")
pytest.importorskip("numpydoc")
pytest.importorskip("myst_parser")
pytest.importorskip("pydata_sphinx_theme")
pytest.importorskip("sphinxarg")

from numpydoc.docscrape import ClassDoc, FunctionDoc  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BUILT = DOCS / "_build" / "html"
#: modules whose ``__all__`` is public API, listed in full in the reference
PUBLIC_PACKAGES = ("contextembed", "contextembed.encoders", "contextembed.pooling", "contextembed.sklearn",
                   "contextembed.spacy", "contextembed.pretraining", "contextembed.engines", "contextembed.heads",
                   "contextembed.io", "contextembed.errors", "contextembed.extraction")
#: the numpydoc sections whose entries must all appear on the page
PARAMETER_SECTIONS = ("Parameters", "Other Parameters", "Attributes")
_ENTRY = re.compile(r"^   (?P<name>\w+)\s*$")
_CURRENT = re.compile(r"^\.\. currentmodule:: (?P<module>\S+)\s*$")
_AUTODATA = re.compile(r"^\.\. autodata:: (?P<name>\S+)\s*$")


# -- the site -----------------------------------------------------------------------------------


def _sources() -> list[Path]:
    patterns = [(DOCS, "*.md"), (DOCS, "*.rst"), (DOCS, "*.py"), (DOCS / "api", "*.rst"), (DOCS / "_templates", "**/*"),
                (ROOT / "contextembed", "**/*.py")]
    return [path for folder, pattern in patterns for path in folder.glob(pattern) if path.is_file()] + [
        ROOT / "pyproject.toml"]


def _is_fresh(built: Path) -> bool:
    stamp = built / ".buildinfo"
    if not stamp.is_file():
        return False
    return stamp.stat().st_mtime >= max(path.stat().st_mtime for path in _sources())


def build_site(out: Path) -> None:
    """Build the site as ``.ci/run`` does (warnings are errors), with every socket refused."""
    log = out.parent / "sockets.log"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(out.parent / "doctrees"),
               str(DOCS), str(out)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=socket_guard.guarded_env(log),
                            timeout=900)
    assert result.returncode == 0, f"the site does not build without warnings:\n{result.stderr[-5000:]}"
    assert socket_guard.read_log(log) == "", "building the site opened a network socket"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if _is_fresh(BUILT):
        return BUILT
    out = tmp_path_factory.mktemp("site") / "html"
    build_site(out)
    return out


def page_text(path: Path) -> str:
    """The visible text of an HTML page: entities decoded, tags dropped (a space in their place,
    but inside ``<pre>``, where syntax highlighting splits a line into spans)."""
    source = path.read_text(encoding="utf-8")
    source = re.sub(r"<pre>.*?</pre>", lambda pre: re.sub(r"<[^>]+>", "", pre[0]), source, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", source))


# -- what the reference lists -------------------------------------------------------------------


def listed_names(rst_files=None) -> dict[str, tuple[str, str]]:
    """``{qualified name: (page file or "", rst file)}`` of everything ``docs/api/*.rst`` lists.

    Autosummary entries get a page of their own (``api/generated/<qualified name>.html``);
    ``autodata`` entries are described on the page that lists them (page file ``""``).
    """
    listed: dict[str, tuple[str, str]] = {}
    for rst in rst_files or sorted((DOCS / "api").glob("*.rst")):
        module = None
        for line in rst.read_text(encoding="utf-8").splitlines():
            if match := _CURRENT.match(line):
                module = match["module"]
            elif (match := _AUTODATA.match(line)) and module:
                listed[f"{module}.{match['name']}"] = ("", rst.name)
            elif (match := _ENTRY.match(line)) and module:
                qualified = f"{module}.{match['name']}"
                listed[qualified] = (f"api/generated/{qualified}.html", rst.name)
    return listed


def resolve(qualified: str):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def documented_parameters(obj) -> list[str]:
    """The names in the numpydoc parameter and attribute sections of ``obj``'s docstring
    (``window, stride : int`` gives both)."""
    doc = ClassDoc(obj, config={"show_class_members": False}) if inspect.isclass(obj) else FunctionDoc(obj)
    names = []
    for section in PARAMETER_SECTIONS:
        for parameter in doc[section]:
            names += [name.strip().lstrip("*") for name in parameter.name.split(",") if name.strip()]
    return names


def missing_from(text: str, names) -> list[str]:
    """The names that do not appear as a whole word in ``text``."""
    return [name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)]


def cli_words(parser: argparse.ArgumentParser, path=()) -> list[tuple[tuple[str, ...], str]]:
    """``(command path, word)`` for every sub-command name and option string of ``parser`` (but
    ``-h``/``--help``, which every command has and the page does not repeat)."""
    words = []
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction):
            words += [(path, option) for option in action.option_strings]
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append((path, name))
                words += cli_words(sub, (*path, name))
    return words


# -- the tests ----------------------------------------------------------------------------------


def test_every_public_name_is_listed():
    listed = {id(resolve(name)) for name in listed_names()}
    unlisted = []
    for package in PUBLIC_PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if name == "__version__" or type(obj).__module__ == "typing":  # Literal aliases: their tuples are listed
                continue
            if id(obj) not in listed:
                unlisted.append(f"{package}.{name}")
    errors = importlib.import_module("contextembed.errors")
    unlisted += [f"contextembed.errors.{name}" for name, obj in vars(errors).items()
                 if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors.__name__
                 and id(obj) not in listed]
    assert unlisted == [], f"public names missing from docs/api/*.rst: {unlisted}"


def test_every_listed_name_has_its_page_with_every_parameter(site):
    problems = []
    for qualified, (page, rst) in listed_names().items():
        path = site / (page or f"api/{Path(rst).stem}.html")
        if not path.is_file():
            problems.append(f"{qualified}: no page {path.relative_to(site)}")
            continue
        if f'id="{qualified}"' not in path.read_text(encoding="utf-8"):  # autodoc's anchor of the object
            problems.append(f"{qualified}: not described on {path.relative_to(site)}")
        text = page_text(path)
        obj = resolve(qualified)
        if page and (inspect.isclass(obj) or inspect.isfunction(obj)):
            missing = missing_from(text, documented_parameters(obj))
            if missing:
                problems.append(f"{qualified}: documented parameters missing from its page: {missing}")
    assert problems == []


def test_every_precision_and_backend_parameter_points_to_the_guide():
    unlinked = []
    for qualified in listed_names():
        obj = resolve(qualified)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = ClassDoc(obj, config={"show_class_members": False}) if inspect.isclass(obj) else FunctionDoc(obj)
        for parameter in doc["Parameters"]:
            names = {name.strip() for name in parameter.name.split(",")}
            if names & {"precision", "backend"} and "docs/choosing.md" not in " ".join(parameter.desc):
                unlinked.append(f"{qualified}: {parameter.name}")
    assert unlinked == [], "these precision/backend parameters do not name docs/choosing.md"


def test_every_command_and_option_is_on_the_cli_page(site):
    from contextembed.cli import build_parser

    text = page_text(site / "cli.html")
    missing = [f"{' '.join(path) or 'contextembed'}: {word}" for path, word in cli_words(build_parser())
               if missing_from(text, [word])]
    assert missing == []


def test_every_registered_spacy_function_has_its_config_block(site):
    text = page_text(site / "spacy_registry.html")
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    names = [name for group, table in entry_points.items() if group.startswith("spacy_") for name in table]
    assert "contextembed.Listener.v2" in names
    for name in names:
        if name == "contextembed":  # the factory
            assert '[components.contextembed]' in text and 'factory = "contextembed"' in text
            continue
        registry = next(group for group, table in entry_points.items() if name in table).removeprefix("spacy_")
        assert f'@{registry} = "{name}"' in text, f"no config block of {name} on spacy_registry.html"


#: entry points whose reference page must show an executed example from the guides
WITH_EXAMPLES = ("contextembed.load_encoder", "contextembed.distill", "contextembed.extraction.FeatureExtractor",
                 "contextembed.sklearn.TextEmbedder", "contextembed.sklearn.TokenEmbedder",
                 "contextembed.sklearn.SequenceTagger", "contextembed.io.read_sentences")


def test_entry_points_show_an_example_that_runs(site):
    for qualified in WITH_EXAMPLES:
        text = page_text(site / f"api/generated/{qualified}.html")
        assert "where this block runs in the test suite" in text, f"{qualified}: no example on its page"
        assert re.search(rf"(?<![\w.]){qualified.rpartition('.')[2]}\(", text.split("where this block runs")[1]), qualified


def test_every_guide_is_a_page(site):
    for page in sorted(DOCS.glob("*.md")):
        assert (site / f"{page.stem}.html").is_file(), f"{page.name} is not on the site"


# -- the checks themselves can fail -------------------------------------------------------------


def _example(alpha, window=None, stride=None):
    """An example.

    Parameters
    ----------
    alpha : int
        First.
    window, stride : int, optional
        Two at once.
    """


def test_documented_parameters_reads_numpydoc_sections():
    assert documented_parameters(_example) == ["alpha", "window", "stride"]


def test_missing_from_finds_names_only_as_whole_words():
    assert missing_from("alpha : int  window_size", ["alpha", "window", "stride"]) == ["window", "stride"]
    assert missing_from("load_encoder(spec)", ["encoder"]) == ["encoder"]


def test_listed_names_reads_autosummary_and_autodata(tmp_path):
    rst = tmp_path / "page.rst"
    rst.write_text(".. currentmodule:: contextembed\n\n.. autosummary::\n   :toctree: generated\n\n   load_encoder\n\n"
                   ".. currentmodule:: contextembed.pooling\n\n.. autodata:: COMBINES\n", encoding="utf-8")
    assert listed_names([rst]) == {"contextembed.load_encoder": ("api/generated/contextembed.load_encoder.html", "page.rst"),
                                   "contextembed.pooling.COMBINES": ("", "page.rst")}


def test_cli_words_walks_sub_commands():
    parser = argparse.ArgumentParser()
    parser.add_argument("--top")
    sub = parser.add_subparsers().add_parser("run")
    sub.add_argument("--fast", "-f")
    assert cli_words(parser) == [((), "--top"), ((), "run"), (("run",), "--fast"), (("run",), "-f")]


#: methods a class page leaves to scikit-learn's own reference (docs/conf.py excludes them)
SKLEARN_ROUTING = {"set_fit_request", "set_transform_request", "set_predict_request", "set_score_request",
                   "set_partial_fit_request"}


def test_every_public_method_of_a_listed_class_is_on_its_page(site):
    """A class page documents the methods and properties the class defines (the template's
    ``:members:``), each with the parameters its docstring names."""
    problems = []
    for qualified, (page, _) in listed_names().items():
        cls = resolve(qualified)
        if not page or not inspect.isclass(cls):
            continue
        source = (site / page).read_text(encoding="utf-8")
        text = page_text(site / page)
        for name, member in vars(cls).items():
            if name.startswith("_") or name in SKLEARN_ROUTING or not member.__doc__:
                continue
            function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if not (inspect.isfunction(function) or isinstance(member, property)):
                continue
            if f'id="{qualified}.{name}"' not in source:
                problems.append(f"{qualified}.{name}: not on {page}")
            elif inspect.isfunction(function):
                missing = missing_from(text, documented_parameters(function))
                if missing:
                    problems.append(f"{qualified}.{name}: documented parameters missing from {page}: {missing}")
    assert problems == []
