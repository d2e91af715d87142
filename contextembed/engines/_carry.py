"""Carrying a worker's error through an engine's own wrappers, back to the caller as it was raised.

Ray wraps what a worker raises (``ActorDiedError`` when an actor's constructor fails,
``RayTaskError(UserCodeException)`` for a batch) and keeps only the text of the original error.
:func:`carried_errors` (around the worker's code) writes the error's class and message into that
text under a marker; :func:`raise_carried` (around the driver's call) finds the marker and raises
the same class with the same message, naming the engine. Only exception classes of
:mod:`contextembed.errors` and built-in ones are rebuilt (nothing is unpickled); any other error is
left as the engine raised it.
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

from .._runtime import json_io as _json
from .. import errors as _errors

_MARKER = "[contextembed worker error]"
_CARRIED = re.compile(re.escape(_MARKER) + r" (\[.*?\]) " + re.escape(_MARKER))


class WorkerError(RuntimeError):
    """What a worker raises instead of the original error; its message carries the original."""


@contextmanager
def carried_errors() -> Iterator[None]:
    """Run worker code; an ``Exception`` leaves as :class:`WorkerError` whose text carries it."""
    try:
        yield
    except WorkerError:
        raise
    except Exception as error:
        kind = type(error)
        attributes = {k: v for k, v in vars(error).items() if isinstance(v, (str, int, float, bool, type(None)))}
        payload = json.dumps([kind.__module__, kind.__qualname__, str(error), attributes])
        raise WorkerError(f"{_MARKER} {payload} {_MARKER}\n{kind.__name__}: {error}") from error


def carried(error: BaseException):
    """The error a worker carried in ``error``'s text (rebuilt), or ``None``."""
    for text in _texts(error):
        match = _CARRIED.search(text)
        if match is None:
            continue
        payload = _payload(match.group(1))
        kind = _rebuildable(*payload[:2]) if payload is not None else None
        if kind is not None:
            return _rebuilt(kind, payload[2], payload[3])
    return None


def _payload(text: str):
    """``(module, name, message, attributes)`` carried in ``text``, or ``None`` where it is not what
    :func:`carried_errors` writes (a message that only looks like one is left as the engine raised it)."""
    try:
        found = _json.loads(text, finite=False)  # an attribute may be NaN
    except _json.JSONError:
        return None
    if not isinstance(found, list) or len(found) != 4 or not all(isinstance(part, str) for part in found[:3]) \
            or not isinstance(found[3], dict):
        return None
    return found


def _rebuilt(kind: type, message: str, attributes: dict) -> Exception:
    """``kind(message)`` with the attributes it had; a class whose constructor needs more than the
    message (``ProvenanceError``: ``artifact``, ``field``) is rebuilt from them without it."""
    try:
        error = kind(message)
    except TypeError:
        error = kind.__new__(kind)
        Exception.__init__(error, message)
    error.__dict__.update(attributes)
    return error


@contextmanager
def raise_carried(engine: str) -> Iterator[None]:
    """Re-raise a worker's error carried through ``engine``'s wrapper as its own class."""
    try:
        yield
    except Exception as error:
        original = carried(error)
        if original is None:
            raise
        if hasattr(original, "add_note"):
            original.add_note(f"(raised in a {engine} worker; the engine's error follows as the cause)")
        raise original from error


def _texts(error: BaseException) -> Iterator[str]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield str(error)
        yield str(getattr(error, "error_msg", ""))
        error = error.__cause__ or getattr(error, "cause", None) or error.__context__


def _rebuildable(module: str, name: str):
    scope = {"builtins": builtins, _errors.__name__: _errors}.get(module)
    kind = getattr(scope, name, None) if scope is not None else None
    return kind if isinstance(kind, type) and issubclass(kind, Exception) else None
