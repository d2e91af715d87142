"""The package's structure: no import cycle, the torch core free of adapters, options defined once."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "contextembed"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Modules imported at module level (``if TYPE_CHECKING:`` blocks included, lazy imports inside
    functions not: those are deliberate and cannot form an import-time cycle)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If):
            nodes.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            nodes.extend(node.body)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("contextembed")}


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles between modules (package ``__init__`` re-exports excluded: they import downwards)."""
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if _is_package(target):
                continue
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state and not _is_package(node):
            visit(node, [node])
    return found


def _is_package(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_core_never_imports_the_adapters():
    adapters = ("contextembed.sklearn", "contextembed.spacy", "contextembed.engines")
    for name, imported in _graph().items():
        if name.startswith(adapters) or name in ("contextembed.cli",):
            continue
        bad = sorted(m for m in imported if m.startswith(adapters))
        assert not bad, f"{name} imports {bad}"


def test_options_are_listed_once():
    """Each option's valid values come from its Literal, not from a second hand-written tuple."""
    from contextembed.devices import PRECISION_NAMES, Precision
    from contextembed.pooling import COMBINES, SUBWORD_POOLINGS, TEXT_POOLINGS, Combine, SubwordPooling, TextPooling

    for values, literal in ((COMBINES, Combine), (SUBWORD_POOLINGS, SubwordPooling), (TEXT_POOLINGS, TextPooling),
                            (PRECISION_NAMES, Precision)):
        assert values == typing.get_args(literal)
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    assert "1_000_000)" not in source.replace("tokenizer_limit < 1_000_000", ""), "layers checked with a fake encoder size"
    assert source.count('Literal["auto", "fp32", "bf16", "fp16", "int8"]') == 1
