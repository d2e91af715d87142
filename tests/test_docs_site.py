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
#: the site is built (or read) once for the module: a full-run check, out of the quick tier
pytestmark = pytest.mark.slow

PUBLIC_PACKAGES = ("contextembed", "contextembed.encoders", "contextembed.pooling", "contextembed.sklearn",
                   "contextembed.spacy", "contextembed.pretraining", "contextembed.engines", "contextembed.heads",
                   "contextembed.io", "contextembed.errors", "contextembed.extraction",
                   "contextembed.sklearn.metrics", "contextembed.sklearn.feature_extraction")
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


def numpydoc_of(obj):
    """``obj``'s docstring as numpydoc reads it (a class's own sections, not its members')."""
    return ClassDoc(obj, config={"show_class_members": False}) if inspect.isclass(obj) else FunctionDoc(obj)


def documented_entries(sections=("Parameters",)):
    """``(qualified name, names, entry)`` of each entry in ``sections`` of the docstring of every
    listed class and function (``names``: ``{"window", "stride"}`` for ``window, stride : int``)."""
    for qualified in listed_names():
        obj = resolve(qualified)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = numpydoc_of(obj)
            for section in sections:
                for entry in doc[section]:
                    yield qualified, {name.strip() for name in entry.name.split(",")}, entry


def documented_parameters(obj) -> list[str]:
    """The names in the numpydoc parameter and attribute sections of ``obj``'s docstring
    (``window, stride : int`` gives both)."""
    doc = numpydoc_of(obj)
    names = []
    for section in PARAMETER_SECTIONS:
        for parameter in doc[section]:
            names += [name.strip().lstrip("*") for name in parameter.name.split(",") if name.strip()]
    return names


def missing_from(text: str, names) -> list[str]:
    """The names that do not appear as a whole word in ``text``."""
    return [name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)]


def present_in(text: str, names) -> list[str]:
    """The names that appear as a whole word in ``text``, sorted."""
    absent = set(missing_from(text, names))
    return sorted(name for name in names if name not in absent)


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
    unlinked = [f"{qualified}: {entry.name}" for qualified, names, entry in documented_entries()
                if names & {"precision", "backend"} and "docs/choosing.md" not in " ".join(entry.desc)]
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


# -- what a new reader meets --------------------------------------------------------------------

README = ROOT / "README.md"
#: the README's front, which docs/getting_started.md includes between these markers
FRONT_MARKERS = ("<!-- start: docs/getting_started.md -->", "<!-- end: docs/getting_started.md -->")
#: a name under a private module (``contextembed._runtime.backends``, ``contextembed.sklearn._base.X``)
PRIVATE_PATH = re.compile(r"(?<![\w.])contextembed(?:\.\w+)*\._\w+(?:\.\w+)*")
#: what scikit-learn's inherited docstrings say of ``X``; our estimators take texts or token lists
SKLEARN_GENERIC_INPUT = "array-like of shape (n_samples, n_features)"
_NAVBAR = re.compile(r'<ul class="bd-navbar-elements navbar-nav">(?P<items>.*?)</ul>\s*</nav>', re.DOTALL)
#: the longest label of the top bar that the theme shows whole
NAVBAR_LABEL_MAX = 30


def listed_classes() -> dict[str, type]:
    """``{qualified name: class}`` of the listed classes with a page of their own, exceptions and
    warnings left out (their examples are the guides' ``except`` blocks)."""
    classes = {}
    for qualified, (page, _) in listed_names().items():
        obj = resolve(qualified)
        if page and inspect.isclass(obj) and not issubclass(obj, BaseException):
            classes[qualified] = obj
    return classes


def examples_page_sections() -> list[str]:
    """The qualified names heading the sections of docs/examples.md (``## `name` ``)."""
    return re.findall(r"^## `([\w.]+)`\s*$", (DOCS / "examples.md").read_text(encoding="utf-8"), re.MULTILINE)


def private_classes() -> set[str]:
    """Names of the contextembed classes that listed classes inherit from but the reference does not
    list (``LayerFeaturesBase``): a reader cannot import them, so no page names them."""
    listed = {id(resolve(name)) for name in listed_names()}
    return {base.__name__ for cls in listed_classes().values() for base in cls.__mro__[1:]
            if base.__module__.split(".")[0] == "contextembed" and id(base) not in listed}


def reference_pages(site: Path) -> list[Path]:
    """The pages of the reference and the front: everything but the guides (which may say where a
    thing is implemented) and Sphinx's own indexes."""
    pages = [*sorted((site / "api").rglob("*.html"))]
    return pages + [site / f"{name}.html" for name in ("index", "getting_started", "guides", "examples", "cli",
                                                       "spacy_registry")]


def docstring_source(cls: type, name: str) -> type:
    """The class whose ``name`` gives ``cls.name`` its docstring (``cls`` itself when it has one)."""
    return next(klass for klass in cls.__mro__ if name in vars(klass) and getattr(vars(klass)[name], "__doc__", None)
                or klass is object)


def test_every_public_class_has_its_own_example():
    sections = examples_page_sections()
    assert sorted(set(listed_classes()) - set(sections)) == [], "classes without a section in docs/examples.md"
    assert sorted(set(sections) - set(listed_classes())) == [], "sections of docs/examples.md of no listed class"
    assert len(sections) == len(set(sections)), "a class with two sections in docs/examples.md"


def test_every_public_class_page_shows_its_own_example(site):
    missing = []
    for qualified in listed_classes():
        text = page_text(site / f"api/generated/{qualified}.html")
        example = text.partition("where this block runs in the test suite on its own")[2]
        if not re.search(rf"(?<![\w.]){qualified.rpartition('.')[2]}(?!\w)", example):
            missing.append(qualified)
    assert missing == [], "class pages without their example from docs/examples.md"


def test_no_private_name_on_a_reference_page(site):
    private = private_classes()
    assert "LayerFeaturesBase" in private  # the check sees the base the estimators share
    found = []
    for page in reference_pages(site):
        relative = page.relative_to(site).as_posix()
        text = page_text(page)
        paths = set(PRIVATE_PATH.findall(text))
        found += [f"{relative}: {name}" for name in sorted(paths) + present_in(text, private)]
    assert found == [], "private names on public pages (say what the reader can use instead)"


def test_no_page_documents_scikit_learns_generic_input(site):
    pages = [page.relative_to(site).as_posix() for page in sorted(site.rglob("*.html"))
             if "_static" not in page.parts and SKLEARN_GENERIC_INPUT in page_text(page)]
    assert pages == [], f"pages that describe X as {SKLEARN_GENERIC_INPUT!r} (an inherited docstring)"


def test_every_method_of_a_listed_class_is_documented_by_contextembed():
    """A method a listed class defines without a docstring would show its base's, written for
    another input (scikit-learn's ``fit_transform``, spaCy's ``from_bytes``); it needs its own."""
    foreign = []
    for qualified, cls in listed_classes().items():
        for name, member in vars(cls).items():
            function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if name.startswith("_") or name in SKLEARN_ROUTING or not (
                    inspect.isfunction(function) or isinstance(member, property)):
                continue
            source = docstring_source(cls, name)
            if source is not object and source.__module__.split(".")[0] != "contextembed":
                foreign.append(f"{qualified}.{name}: the docstring of {source.__module__}.{source.__qualname__}")
    assert foreign == []


def accepted_precisions(qualified: str) -> set[str]:
    """The values the code accepts for ``precision`` of ``qualified``: the ``typing.get_args`` of the
    ``Literal`` it is checked against (a stored table's, pretraining's, or inference's)."""
    from typing import get_args

    from contextembed._runtime.precisions import Precision
    from contextembed.encoders._static.tables import StoragePrecision
    from contextembed.pretraining._training import TrainingPrecision

    if qualified == "contextembed.encoders.TableStorage":
        return set(get_args(StoragePrecision))
    if qualified == "contextembed.ElmoEncoder":  # its constructor runs a chosen one; load and from_options choose "auto"
        return set(get_args(Precision)) - {"auto"}
    return set(get_args(TrainingPrecision if qualified.startswith("contextembed.pretraining.") else Precision))


def test_precision_lists_what_the_code_accepts():
    """Every ``precision : {...}`` documented on a listed name lists exactly the values its check
    accepts (the estimators' shared docs once left out ``"int8"``)."""
    wrong = [f"{qualified}: {entry.type} (the code accepts {sorted(accepted_precisions(qualified))})"
             for qualified, names, entry in documented_entries(PARAMETER_SECTIONS)
             if "precision" in names and entry.type.startswith("{")
             and set(re.findall(r'"(\w+)"', entry.type)) != accepted_precisions(qualified)]
    assert wrong == []


def test_reference_and_command_line_are_one_click_from_every_page(site):
    problems = []
    for page in sorted(site.rglob("*.html")):
        if "_static" in page.parts:
            continue
        relative = page.relative_to(site).as_posix()
        navbar = _NAVBAR.search(page.read_text(encoding="utf-8"))
        if navbar is None:
            problems.append(f"{relative}: no top bar")
            continue
        if "dropdown" in navbar["items"]:
            problems.append(f"{relative}: top-bar pages hidden under 'More'")
        targets = {(page.parent / href.split("#")[0]).resolve() if href.split("#")[0] else page.resolve()
                   for href in re.findall(r'href="([^"]*)"', navbar["items"])}
        for wanted in ("api/index.html", "cli.html"):
            if (site / wanted).resolve() not in targets:
                problems.append(f"{relative}: no link to {wanted} in the top bar")
        labels = [" ".join(html.unescape(label).split()) for label in re.findall(r"<a [^>]*>(.*?)</a>", navbar["items"], re.DOTALL)]
        problems += [f"{relative}: the top-bar label {label!r} is too long to show whole" for label in labels
                     if len(label) > NAVBAR_LABEL_MAX]
    assert problems == []


def test_getting_started_is_the_readmes_front(site):
    readme = README.read_text(encoding="utf-8")
    assert all(marker in readme for marker in FRONT_MARKERS), f"the README lost a marker of its front: {FRONT_MARKERS}"
    front = readme.split(FRONT_MARKERS[0])[1].split(FRONT_MARKERS[1])[0]
    text = " ".join(page_text(site / "getting_started.html").split())
    blocks = re.findall(r"```\w*\n(.*?)```", front, re.DOTALL)
    assert len(blocks) >= 4, "the README's front lost its install commands or examples"
    missing = [line for block in blocks for line in block.splitlines()
               if line.strip() and " ".join(line.split()) not in text]
    assert missing == [], "lines of the README's front missing from getting_started.html"


def test_readme_lists_every_command():
    from contextembed.cli import build_parser

    subparsers = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    row = next(line for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("| `contextembed` command |"))
    assert [name for name in subparsers.choices if f"`{name}" not in row] == []


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


def test_private_path_finds_names_under_private_modules():
    text = ("(contextembed._runtime.backends) and contextembed.sklearn._base.LayerFeaturesBase, "
            "not contextembed.sklearn.TextEmbedder nor my_contextembed._x")
    assert PRIVATE_PATH.findall(text) == ["contextembed._runtime.backends", "contextembed.sklearn._base.LayerFeaturesBase"]
    assert present_in("Bases: LayerFeaturesBase", ["LayerFeaturesBase", "EntityScoresMixin"]) == ["LayerFeaturesBase"]


def test_a_reference_page_is_titled_by_its_short_name_and_shows_where_to_import_it(site):
    """Full dotted titles were cut at the edge of the article in headless Chromium at 1280 pixels
    (issue 54): a page's title is the object's own name (as scikit-learn's are), the signature
    below it the full path."""
    for qualified, (page, _) in listed_names().items():
        if not page:
            continue
        source = (site / page).read_text(encoding="utf-8")
        title = re.search(r"<h1>(.*?)<a class=\"headerlink\"", source, flags=re.DOTALL)
        assert title is not None, f"{page}: no title"
        assert html.unescape(re.sub(r"<[^>]+>", "", title[1])).strip() == qualified.rsplit(".", 1)[1], page
        assert f'id="{qualified}"' in source, f"{page}: the signature does not name {qualified}"
    assert (site / "_static" / "contextembed.css").is_file()
