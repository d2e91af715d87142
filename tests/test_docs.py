"""Code blocks of the README and docs that show their output are run, and must print exactly it.

A ```python block immediately followed by a ```text block is executed in an empty temporary
directory (with the socket guard of the test suite); its standard output must equal the text block.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```python\n(?P<code>(?:(?!```).)*)```\n\n```text\n(?P<output>(?:(?!```).)*)```", re.DOTALL)


def _examples() -> list:
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(pytest.param(match["code"], match["output"], id=f"{document.name}:{line}"))
    return found


EXAMPLES = _examples()


def test_the_readme_shows_the_bad_input_contract():
    assert any("FileFormatError" in param.values[1] for param in EXAMPLES if "README" in param.id)


@pytest.mark.parametrize("code, output", EXAMPLES)
def test_example_prints_what_the_docs_say(code, output, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "<docs example>", "exec"), {"__name__": "__docs__"})
    assert printed.getvalue() == output
