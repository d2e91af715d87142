"""Sphinx directives of the contextembed site that render reference pages from the code itself.

``contextembed-spacy-factory``
    the ``[components.contextembed]`` block with every default of the ``contextembed`` factory
    (:data:`contextembed.spacy._component.DEFAULT_CONFIG`), then the factory's docstring.
``contextembed-spacy-registry``
    one section per builder that contextembed registers with spaCy (``@misc``, ``@architectures``,
    ``@layers``): its config block, generated from the function's signature, then its docstring.
``contextembed-examples NAME``
    on each API page: the name's own example from ``docs/examples.md`` (one self-contained block
    per public class, under a heading that is its qualified name), else the first code block of the
    guides (``docs/*.md``) that uses the name; then the other guides that do. Those blocks run in
    the test suite (``tests/test_docs.py``), so the example on a reference page is one that is
    known to run.

Both read what spaCy's registry and the component hold at build time, so the page cannot drift
from the code; tests/test_docs_site.py checks that every entry point of ``pyproject.toml`` has its
section.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

#: the registries contextembed uses, in the order the page lists them
REGISTRIES = ("misc", "architectures", "layers")
#: where each registry's block sits in a typical pipeline (``ner`` stands for any downstream component)
SECTIONS = {
    "misc": "components.contextembed.encoder",
    "architectures": "components.ner.model.tok2vec",
    "layers": "components.ner.model.tok2vec.pooling",
}
#: values shown for arguments that have no default
REQUIRED_EXAMPLES = {"name": "minilm-l6"}
#: the sub-layer shown for an argument that takes a thinc ``Model``
MODEL_EXAMPLE = {"@layers": "contextembed.ScalarMix.v1", "layer_norm": False, "layer_dropout": 0.0}
PREFIX = "contextembed."


def cli_parser():
    """:func:`contextembed.cli.build_parser`, its help texts escaped for reStructuredText.

    sphinx-argparse reads help texts as reStructuredText, where the glob ``corpus/**/*.txt`` of a
    help text would open emphasis; the command line shows them as plain text, and so does the site.
    """
    import argparse

    from contextembed.cli import build_parser

    def escape(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if action.help:
                action.help = action.help.replace("*", "\\*")
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    escape(sub)

    parser = build_parser()
    escape(parser)
    return parser


def registered() -> list[tuple[str, str, object]]:
    """``(registry, name, function)`` of every builder contextembed registers, newest version first."""
    import spacy

    import contextembed.spacy  # noqa: F401  (registers the builders)

    found = []
    for registry in REGISTRIES:
        table = getattr(spacy.registry, registry).get_all()
        names = sorted((n for n in table if n.startswith(PREFIX)), key=lambda n: (n.rsplit(".", 1)[0], -_version(n)))
        found.extend((registry, name, table[name]) for name in names)
    return found


def _version(name: str) -> int:
    return int(name.rsplit(".v", 1)[1])


def block_values(registry: str, name: str, function) -> dict:
    """The config block of ``function``: its registry name, then each argument at its default."""
    values: dict = {f"@{registry}": name}
    for parameter in inspect.signature(function).parameters.values():
        if "Model" in str(parameter.annotation):
            values[parameter.name] = dict(MODEL_EXAMPLE)
        elif parameter.default is inspect.Parameter.empty:
            values[parameter.name] = REQUIRED_EXAMPLES[parameter.name]
        else:
            values[parameter.name] = parameter.default
    return values


def config_text(section: str, values: dict) -> str:
    """``values`` as spaCy config text under ``[section]``, without the empty parent sections."""
    from thinc.api import Config

    nested: dict = values
    for part in reversed(section.split(".")):
        nested = {part: nested}
    text = Config(nested).to_str()
    blocks = [block for block in text.strip().split("\n\n") if "\n" in block.strip()]
    return "\n\n".join(blocks)


def _literal_block(text: str) -> list[str]:
    return ["", ".. code-block:: ini", "", *("   " + line if line else "" for line in text.splitlines()), ""]


class _Generated(SphinxDirective):
    """A directive whose content is reStructuredText generated at build time."""

    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(self.lines(), source="<contextembed_docs>"), container)
        return container.children


class SpacyFactory(_Generated):
    def lines(self) -> list[str]:
        from contextembed.spacy._component import DEFAULT_CONFIG

        title = "The ``contextembed`` component"
        text = config_text("components.contextembed", {"factory": "contextembed", **DEFAULT_CONFIG})
        return [title, "-" * len(title), "", "Every setting at its default:", *_literal_block(text),
                ".. autofunction:: contextembed.spacy.make_contextembed", "   :no-index:", ""]


class SpacyRegistry(_Generated):
    def lines(self) -> list[str]:
        out: list[str] = []
        for registry, name, function in registered():
            title = f"``{name}``"
            out += [title, "-" * len(title), "",
                    f"Registered under ``@{registry}``; built by "
                    f":func:`{function.__module__}.{function.__qualname__}`.",
                    *_literal_block(config_text(SECTIONS[registry], block_values(registry, name, function))),
                    f".. autofunction:: {function.__module__}.{function.__qualname__}", "   :no-index:", ""]
        return out


#: a fenced code block of a Markdown page (the pattern tests/test_docs.py runs them by)
_FENCE = re.compile(r"```(?P<language>\w*)\n(?P<body>(?:(?!```).)*)```", re.DOTALL)
#: the page of one self-contained example per public class, each under a heading that is the
#: class's qualified name (``## `contextembed.sklearn.TextEmbedder` ``)
EXAMPLES_PAGE = "examples"
_EXAMPLE_HEADING = re.compile(r"^## `(?P<name>[\w.]+)`\s*$", re.MULTILINE)


def guide_blocks(srcdir: str) -> list[tuple[str, str, str]]:
    """``(page, language, code)`` of every python and bash block of the guides, in page order."""
    blocks = []
    for page in sorted(Path(srcdir).glob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks += [(page.stem, m["language"], m["body"]) for m in _FENCE.finditer(text) if m["language"] in ("python", "bash")]
    return blocks


def class_examples(srcdir: str) -> dict[str, str]:
    """``{qualified name: code}``: the first python block under each heading of the examples page."""
    path = Path(srcdir) / f"{EXAMPLES_PAGE}.md"
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    headings = list(_EXAMPLE_HEADING.finditer(text))
    found = {}
    for heading, following in zip(headings, [*headings[1:], None]):
        section = text[heading.end():following.start() if following else len(text)]
        block = next((m for m in _FENCE.finditer(section) if m["language"] == "python"), None)
        if block is not None:
            found[heading["name"]] = block["body"]
    return found


def _code_lines(language: str, code: str) -> list[str]:
    return [f".. code-block:: {language}", "", *("   " + line if line else "" for line in code.splitlines()), ""]


class Examples(SphinxDirective):
    """The class's own example from the examples page; else the first guide block that calls (or
    else names) the object. Then the other guides that use it."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        qualified = self.arguments[0]
        short = qualified.rsplit(".", 1)[-1]
        named = re.compile(rf"(?<![\w.]){re.escape(short)}(?!\w)")
        called = re.compile(rf"(?<![\w.]){re.escape(short)}\(")
        uses = [block for block in guide_blocks(self.env.srcdir) if named.search(block[2])]
        own = class_examples(self.env.srcdir).get(qualified)
        if own is not None:
            page, language, code = EXAMPLES_PAGE, "python", own
            source = (f"From :doc:`/{EXAMPLES_PAGE}`, where this block runs in the test suite on its own "
                      "(a fresh interpreter namespace and directory):")
        elif uses:
            page, language, code = next((b for b in uses if called.search(b[2])), uses[0])
            source = f"From :doc:`/{page}`, where this block runs in the test suite:"
        else:
            return []
        others = sorted({p for p, _, _ in uses} - {page, EXAMPLES_PAGE})
        lines = [".. rubric:: Example", "", source, "", *_code_lines(language, code)]
        if others:
            lines += ["Also used in: " + ", ".join(f":doc:`/{p}`" for p in others) + ".", ""]
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source="<contextembed_docs>"), container)
        return container.children


_DOCS_PAGE = re.compile(r"``docs/(?P<page>\w+)\.md``")


def link_docs_pages(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstrings name a guide as ``docs/choosing.md`` (readable in the source and in ``help()``);
    on the site that becomes a link to the page."""
    pages = {path.stem for path in Path(app.srcdir).glob("*.md")}
    for index, line in enumerate(lines):
        lines[index] = _DOCS_PAGE.sub(lambda m: f":doc:`/{m['page']}`" if m["page"] in pages else m[0], line)


def is_private_class(cls) -> bool:
    """Whether ``cls`` is contextembed's and no public module exports it (``LayerFeaturesBase``).

    A class is public when the module it is defined in, or a package above it with the private
    parts of the path dropped, has it under its own name (``contextembed.encoders._base.Encoder`` is
    ``contextembed.Encoder``).
    """
    import importlib

    module = getattr(cls, "__module__", "") or ""
    if module.split(".")[0] != "contextembed":
        return False
    parts = module.split(".")
    public = [p for p in parts if not p.startswith("_")]
    candidates = {".".join(public[:i]) for i in range(1, len(public) + 1)}
    if not any(p.startswith("_") for p in parts):
        candidates.add(module)
    return cls.__name__.startswith("_") or not any(
        getattr(importlib.import_module(name), cls.__name__, None) is cls for name in candidates)


def public_bases(bases: list) -> list:
    """``bases`` with each private contextembed class replaced by its own bases, recursively
    (``LayerFeaturesBase`` becomes scikit-learn's mixins), ``object`` dropped unless it is all."""
    out: list = []
    for base in bases:
        for shown in (public_bases(list(base.__bases__)) if is_private_class(base) else [base]):
            if shown not in out and shown is not object:
                out.append(shown)
    return out or [object]


def show_public_bases(app, name, obj, options, bases: list) -> None:
    """A class page's "Bases:" names no private class (the reader cannot import it)."""
    bases[:] = public_bases(bases)


def setup(app):
    app.add_directive("contextembed-spacy-factory", SpacyFactory)
    app.add_directive("contextembed-spacy-registry", SpacyRegistry)
    app.add_directive("contextembed-examples", Examples)
    app.connect("autodoc-process-docstring", link_docs_pages)
    app.connect("autodoc-process-bases", show_public_bases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
