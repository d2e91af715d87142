"""Reading JSON that may be damaged, forged or huge: bounded in size and depth, never a crash.

Every JSON document contextembed reads (a tuning record, a provenance record, a model's
``config.json``, ELMo's ``options.json``, a saved table's options and words, a spaCy pipeline's
embedded-encoder meta, a JSONL input line, a pretraining run's files, the messages between an
engine's processes) goes through :func:`loads` or :func:`read`.

Python's parser recurses once per level of nesting: a document nested 1,500 deep raises
``RecursionError``, which no reader expects. Here a document larger than its reader's limit, nested
deeper than :data:`MAX_DEPTH` (counted before the parser sees it), holding ``NaN`` or
``Infinity`` (not JSON, though Python's parser takes them), not UTF-8 or not JSON, is a
:class:`JSONError` (a ``ValueError``) saying which; each reader turns it into its own error naming
the file (:class:`~contextembed.errors.ProvenanceError`,
:class:`~contextembed.errors.ModelFormatError`, ...). What the parsed value must look like (its
types, keys and ranges) each reader checks itself, before anything uses it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable
from typing import Any, Optional, Union

#: the deepest nesting read (a real record, config or input line is under 10 levels deep)
MAX_DEPTH = 64
#: the largest document read unless the reader says otherwise (a real config is well under 1 MiB)
MAX_BYTES = 16 << 20

#: a JSON string, escapes included (what may hold brackets that are not nesting)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEPS = {"[": 1, "{": 1, "]": -1, "}": -1}


class JSONError(ValueError):
    """A JSON document that cannot be used: too large, nested too deep, not UTF-8, not JSON, or
    holding a number JSON does not have.

    Attributes
    ----------
    reason : str
        What is wrong (the message).
    line, column : int or None
        Where the parser stopped (1-based), for a document that is not JSON.
    parser_message : str or None
        The parser's own words, without the position (``"Expecting ',' delimiter"``).
    """

    def __init__(self, reason: str, line: Optional[int] = None, column: Optional[int] = None,
                 parser_message: Optional[str] = None) -> None:
        self.reason, self.line, self.column, self.parser_message = reason, line, column, parser_message
        super().__init__(reason)


def loads(data: Union[str, bytes], *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH, finite: bool = True,
          object_pairs_hook: Optional[Callable[[list], Any]] = None) -> Any:
    """Parse the JSON document ``data``, bounded.

    Parameters
    ----------
    data : str or bytes
        The document (bytes must be UTF-8).
    max_bytes : int
        The longest document taken (in bytes; characters for a ``str``).
    max_depth : int
        The deepest nesting of arrays and objects taken.
    finite : bool
        Refuse ``NaN``, ``Infinity`` and ``-Infinity`` (``False``: read them as Python does, for
        files another program writes with them, such as a Hugging Face ``config.json``).
    object_pairs_hook : callable, optional
        As for :func:`json.loads`; what it raises passes through unchanged.

    Raises
    ------
    JSONError
        Naming what is wrong (and for a parse error, the line and column).
    """
    if len(data) > max_bytes:
        raise JSONError(f"larger than the {max_bytes} bytes a file of its kind may have")
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as error:
            raise JSONError(f"not UTF-8 text (byte {error.start})") from None
    depth = nesting(data)
    if depth > max_depth:
        raise JSONError(f"nested {depth} levels deep; at most {max_depth} are read")
    raised: list[BaseException] = []
    hook = None if object_pairs_hook is None else _passing(object_pairs_hook, raised)
    try:
        return json.loads(data, object_pairs_hook=hook, parse_constant=_refused if finite else None)
    except json.JSONDecodeError as error:
        raise JSONError(f"not valid JSON ({error.msg}, line {error.lineno} column {error.colno})",
                        error.lineno, error.colno, error.msg) from None
    except RecursionError:  # nested within the limit, but read from deep in the stack
        raise JSONError(f"nested too deep to read here ({depth} levels)") from None
    except ValueError as error:
        if raised and error is raised[-1] or isinstance(error, JSONError):
            raise
        raise JSONError(f"not valid JSON ({error})") from None  # an integer of over 4300 digits


def read(path: Union[str, os.PathLike], *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
         finite: bool = True) -> Any:
    """Parse the JSON file ``path`` with :func:`loads` (a link is followed: a model in a Hugging
    Face cache is links to its files), reading at most ``max_bytes + 1`` bytes.

    Raises
    ------
    JSONError
        For a document :func:`loads` refuses.
    OSError
        If the file cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    return loads(data, max_bytes=max_bytes, max_depth=max_depth, finite=finite)


def nesting(text: str) -> int:
    """How deeply the arrays and objects of the JSON text ``text`` nest (brackets inside strings do
    not count; the text need not be valid JSON)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(0, max(itertools.accumulate(map(_STEPS.__getitem__, brackets)), default=0))


def _refused(constant: str):
    raise JSONError(f"holds {constant}, which is not a JSON number (only finite numbers are read)")


def _passing(hook: Callable[[list], Any], raised: list) -> Callable[[list], Any]:
    def hooked(pairs: list) -> Any:
        try:
            return hook(pairs)
        except BaseException as error:
            raised.append(error)
            raise

    return hooked


__all__ = ["MAX_BYTES", "MAX_DEPTH", "JSONError", "loads", "nesting", "read"]
