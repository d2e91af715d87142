"""The package's structure: no import cycle (lazy imports inside functions included), the torch core
free of adapters, options defined once."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import typing
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "contextembed"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Every ``contextembed`` module the module ``name`` imports, wherever the import statement is:
    at module level, under ``if TYPE_CHECKING:`` or ``try:``, and inside functions and methods (a
    lazy import is still an arrow: two modules importing each other lazily are a circle too).
    ``from package import name`` gives ``package`` and ``package.name``."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {imported for imported in found if imported.startswith("contextembed")}


def _reexports(modules: dict[str, Path]) -> dict[str, str]:
    """``package.Name`` -> the module a package ``__init__`` takes ``Name`` from, so that importing a
    name through its package counts as importing the module that defines it."""
    found = {}
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + 1]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    found[f"{name}.{alias.asname or alias.name}"] = submodule if submodule in modules else module
    return found


def _resolve(name: str, reexports: dict[str, str]) -> str:
    seen = set()
    while name in reexports and name not in seen:
        seen.add(name)
        name = reexports[name]
    return name


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    reexports = _reexports(modules)
    graph = {}
    for name, path in modules.items():
        imported = _imports(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py")
        graph[name] = {m for m in (_resolve(i, reexports) for i in imported) if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]], is_package=None) -> list[list[str]]:
    """Cycles between modules (package ``__init__`` re-exports excluded: they import downwards, and
    a name imported through a package is an arrow to the module that defines it)."""
    is_package = is_package or _is_package
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if is_package(target):
                continue
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state and not is_package(node):
            visit(node, [node])
    return found


def _is_package(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_a_circle_of_lazy_imports_is_found():
    """The check sees imports inside functions: two modules importing each other only lazily (as
    corpus.py and engines/ray.py, devices.py and quantization.py once did) are a cycle."""
    sources = {
        "contextembed.a": "def run():\n    from .b import work\n    return work()\n",
        "contextembed.b": "class B:\n    def method(self):\n        from .a import run\n",
        "contextembed.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from contextembed.a import run\n",
    }
    graph = {name: {m for m in _imports(ast.parse(text), name, False) if m in sources}
             for name, text in sources.items()}
    assert graph == {"contextembed.a": {"contextembed.b"}, "contextembed.b": {"contextembed.a"},
                     "contextembed.c": {"contextembed.a"}}
    assert _cycles(graph, is_package=lambda name: False) == [["contextembed.a", "contextembed.b", "contextembed.a"]]


def test_a_name_imported_through_its_package_is_an_arrow_to_its_module():
    graph = _graph()
    # engines/batch.py imports ``from ..sklearn import TextEmbedder``: an arrow to sklearn.text itself
    assert "contextembed.sklearn._text" in graph["contextembed.engines._batch"]


def test_the_layers_below_run_one_way():
    """What each module split out to break a circle stays below the modules that use it."""
    graph = _graph()
    below = {
        "contextembed.io._jobs": ("contextembed.corpus", "contextembed.engines"),
        "contextembed._runtime.precisions": ("contextembed._runtime.devices", "contextembed._runtime.quantization"),
        "contextembed._runtime.quantization": ("contextembed._runtime.devices",),
        "contextembed.encoders._static.files": ("contextembed.encoders._static.vectors",),
        "contextembed.encoders._static.directory": ("contextembed.encoders._static.vectors",),
        # the vector files: each format's reader below the detection and the writer (files), the text
        # formats (with what every format shares) below the binary one
        "contextembed.encoders._static.text_files": ("contextembed.encoders._static.binary_files",
                                                     "contextembed.encoders._static.files",
                                                     "contextembed.encoders._static.vectors"),
        "contextembed.encoders._static.binary_files": ("contextembed.encoders._static.files",
                                                       "contextembed.encoders._static.vectors"),
        # what encoders yield and how they report, below the interface
        "contextembed.encoders._pieces": ("contextembed.encoders._base",),
        "contextembed.encoders._reporting": ("contextembed.encoders._base",),
        # the feature store: what a table is and its files below every other part of it (store, store_memory,
        # store_rows), the budget below the rows read back
        "contextembed._runtime.store_files": ("contextembed._runtime.store",),
        "contextembed._runtime.store_memory": ("contextembed._runtime.store_rows",),
        # Ray: connecting and keeping Ray's lines aside below the engine that maps datasets and files
        "contextembed.engines._ray_cluster": ("contextembed.engines.ray", "contextembed.engines._ray_lines"),
        "contextembed.engines._ray_lines": ("contextembed.engines.ray",),
        # pretraining: a run's settings below its optimisation and the training loop
        "contextembed.pretraining._training_options": ("contextembed.pretraining._optimisation",
                                                       "contextembed.pretraining._training"),
        # contextembed.io: the readers and the writer below the output records, the records below embed_file
        "contextembed.io.readers": ("contextembed.io._records", "contextembed.io._pipeline", "contextembed.io.writer"),
        "contextembed.io.writer": ("contextembed.io._records", "contextembed.io._pipeline", "contextembed.io.readers"),
        "contextembed.io._records": ("contextembed.io._pipeline", "contextembed.io.readers"),
        # the settings of an output below everything that takes them
        "contextembed.io._settings": ("contextembed.io._records", "contextembed.io._pipeline", "contextembed.io._jobs",
                                      "contextembed.io.writer", "contextembed.corpus", "contextembed.engines"),
    }
    for module, above in below.items():
        upward = sorted(m for m in graph[module] if m.startswith(above))
        assert not upward, f"{module} imports {upward}, which are above it"
    assert "contextembed.io._jobs" in graph["contextembed.engines.ray"] and "contextembed.io._jobs" in graph["contextembed.corpus"]


def test_the_core_never_imports_the_adapters():
    """Lazy imports count: the core names an engine by module path (``contextembed.corpus.RUNNERS``)
    and never imports it."""
    adapters = ("contextembed.sklearn", "contextembed.spacy", "contextembed.engines")
    for name, imported in _graph().items():
        if name.startswith(adapters) or name in ("contextembed.cli",):
            continue
        bad = sorted(m for m in imported if m.startswith(adapters))
        assert not bad, f"{name} imports {bad}"


def test_every_engine_has_a_runner_listed_by_name():
    from contextembed.corpus import ENGINES, RUNNERS, run_local, runner

    assert set(RUNNERS) == set(ENGINES)
    assert runner("local") is run_local
    ray_runner = runner("ray")  # imported now, from its module path
    assert ray_runner.__module__ == "contextembed.engines.ray" and callable(ray_runner)


def test_options_are_listed_once():
    """Each option's valid values come from its Literal, not from a second hand-written tuple."""
    from contextembed.pooling import COMBINES, SUBWORD_POOLINGS, TEXT_POOLINGS, Combine, SubwordPooling, TextPooling
    from contextembed._runtime.precisions import PRECISION_NAMES, Precision

    for values, literal in ((COMBINES, Combine), (SUBWORD_POOLINGS, SubwordPooling), (TEXT_POOLINGS, TextPooling),
                            (PRECISION_NAMES, Precision)):
        assert values == typing.get_args(literal)
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    assert "1_000_000)" not in source.replace("tokenizer_limit < 1_000_000", ""), "layers checked with a fake encoder size"
    assert source.count('Literal["auto", "fp32", "bf16", "fp16", "int8"]') == 1


def test_one_function_checks_a_choice():
    """``contextembed._inputs.options.check_choice`` is the only check of a value against its Literal: no
    module keeps its own copy."""
    copies = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "check_choice":
                copies.append(_module_name(path))
    assert copies == ["contextembed._inputs.options"]


def test_the_table7_configurations_live_beside_their_scripts():
    """The Table 7 rows are the NER example's and benchmark's configuration, not the library's."""
    assert importlib.util.find_spec("contextembed.sklearn.experiments") is None
    sys.path.insert(0, str(PACKAGE.parent))
    try:
        table7 = importlib.import_module("examples.table7")
    finally:
        sys.path.remove(str(PACKAGE.parent))
    assert list(table7.table7_configs(1)) == ["vectors"]
    for script in ("examples/feature_based_ner.py", "benchmarks/ner_table7.py"):
        assert "from examples.table7 import" in (PACKAGE.parent / script).read_text(encoding="utf-8")


def test_every_public_module_says_what_it_exports():
    """A module without a leading underscore anywhere in its path lists its public names (``__all__``),
    each of which it defines or imports (issue 54)."""
    missing, wrong = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        if any(part.startswith("_") for part in name.split(".")[1:]):
            continue
        module = importlib.import_module(name)
        if not hasattr(module, "__all__"):
            missing.append(name)
            continue
        wrong += [f"{name}.{item}" for item in module.__all__ if not hasattr(module, item)]
    assert missing == [] and wrong == []


def test_the_encoder_registry_lives_below_the_adapters():
    """The engines and the spaCy layer load encoders through the one registry
    (``contextembed.encoders._registry``), not through scikit-learn's encoding internals (issue 54;
    the public estimators they accept are imported from ``contextembed.sklearn``)."""
    graph = _graph()
    reaching = sorted(name for name, imported in graph.items()
                      if name.startswith(("contextembed.engines", "contextembed.spacy"))
                      and "contextembed.sklearn._encoding" in imported)
    assert reaching == []
    assert not any(m.startswith("contextembed.sklearn") for m in graph["contextembed.encoders._registry"])
