"""The one JSON reader: bounded in size and depth, never a RecursionError, never NaN."""

from __future__ import annotations

import json
import sys

import pytest

from contextembed._runtime import json_io as _json
from contextembed._runtime.json_io import JSONError

DEEP = "[" * 1500 + "]" * 1500


@pytest.mark.parametrize("data, reason", [
    (DEEP, "nested 1500 levels deep; at most 64 are read"),
    ('{"a": ' * 1500 + "1" + "}" * 1500, "nested 1500 levels deep"),
    ("[" * 1500, "nested 1500 levels deep"),  # unterminated too
    ('{"a": NaN}', "holds NaN, which is not a JSON number"),
    ("[Infinity]", "holds Infinity"),
    ("[-Infinity]", "holds -Infinity"),
    ('{"a": 1', r"not valid JSON \(Expecting ',' delimiter, line 1 column 8\)"),
    ("", "not valid JSON"),
    (b"\xff\xfe{}", r"not UTF-8 text \(byte 0\)"),
    ("9" * 5000, "not valid JSON"),
    (" " * 101, "larger than the 100 bytes"),
], ids=["deep-array", "deep-object", "unterminated", "nan", "infinity", "-infinity", "truncated", "empty",
        "not-utf8", "huge-integer", "too-large"])
def test_what_is_refused_and_why(data, reason):
    with pytest.raises(JSONError, match=reason):
        _json.loads(data, max_bytes=100 if data == " " * 101 else _json.MAX_BYTES)


def test_a_deep_document_is_refused_even_from_deep_in_the_stack():
    def nested(levels: int):
        return nested(levels - 1) if levels else _json.loads(DEEP)

    with pytest.raises(JSONError, match="nested 1500"):
        nested(sys.getrecursionlimit() - 100)


def test_what_is_read():
    text = '{"a": "[[[[{{{", "b": [[1, 2.5], {"c": "\\"]]]"}], "d": null}'
    assert _json.loads(text) == json.loads(text)
    assert _json.loads(text.encode()) == json.loads(text)
    assert _json.nesting(text) == 3 and _json.nesting("[" * 64 + "]" * 64) == 64
    assert _json.loads("[" * 64 + "]" * 64, max_depth=64) == json.loads("[" * 64 + "]" * 64)
    assert _json.loads('{"eps": Infinity}', finite=False) == {"eps": float("inf")}


def test_a_hooks_own_error_passes_through():
    class Duplicate(ValueError):
        pass

    def unique(pairs):
        if len(dict(pairs)) != len(pairs):
            raise Duplicate("twice")
        return dict(pairs)

    with pytest.raises(Duplicate, match="twice"):
        _json.loads('{"a": 1, "a": 2}', object_pairs_hook=unique)
    assert _json.loads('{"a": 1}', object_pairs_hook=unique) == {"a": 1}


def test_read_bounds_what_it_reads(tmp_path):
    path = tmp_path / "big.json"
    path.write_text("[" + "1," * 1000 + "1]")
    assert len(_json.read(path)) == 1001
    with pytest.raises(JSONError, match="larger than the 100 bytes"):
        _json.read(path, max_bytes=100)
    with pytest.raises(FileNotFoundError):
        _json.read(tmp_path / "missing.json")


def test_every_reader_of_json_in_the_package_uses_this_one():
    """No module but this one calls the standard parser (each would need its own bounds)."""
    import pathlib
    import re

    import contextembed

    root = pathlib.Path(contextembed.__file__).parent
    calls = re.compile(r"\bjson\.loads?\(")
    found = [str(path.relative_to(root)) for path in root.rglob("*.py")
             if path.name != "json_io.py" and calls.search(path.read_text(encoding="utf-8"))]
    assert found == []
