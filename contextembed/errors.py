"""Exceptions that say what was wrong, where, and how to fix it."""

from __future__ import annotations

import os
from typing import Optional, Union


class ModelNotFoundError(FileNotFoundError):
    """A model name, path or cache entry could not be found locally (nothing is ever downloaded)."""


class MissingDependencyError(ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` line."""


class ClusterConnectionError(ConnectionError):
    """A cluster address did not answer within its connection timeout (or answered as something
    else); the message names the address and what to check."""


class FileFormatError(ValueError):
    """A file exists but its content breaks its format; the message names the file (and line).

    Parameters
    ----------
    message : str
        What is wrong, and what was expected.
    path : str or path, optional
        The file; the message is prefixed with ``"<path>, line <line>: "``.
    line : int, optional
        1-based line number (text files); for binary files name the entry or byte offset in the
        message instead.
    """

    def __init__(
        self, message: str, *, path: Optional[Union[str, os.PathLike]] = None, line: Optional[int] = None
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.line = line
        if self.path is not None:
            where = self.path if line is None else f"{self.path}, line {line}"
            message = f"{where}: {message}"
        super().__init__(message)

    def __reduce__(self):
        # the message already holds the location; keep the attributes across pickling (joblib)
        return (self.__class__, self.args, self.__dict__)


class ModelFormatError(FileFormatError):
    """A model's files are unreadable (truncated, corrupt) or do not describe the same model
    (weights missing or left over for the configured architecture, no tokenizer)."""


class ModelMismatchError(ValueError):
    """The model found where a fitted estimator or pipeline expects its encoder is not the model
    it was fitted with (other weights, config or tokenizer)."""


class SettingError(ValueError):
    """An environment variable holds a value contextembed cannot use; the message names the
    variable, the value received and what is accepted (:mod:`contextembed.settings`)."""


class ProvenanceError(ValueError):
    """An artifact contextembed wrote earlier (an output, a saved pipeline, embedded weights, a
    checkpoint) was made from other inputs, another model or other options than the ones at hand,
    or records no provenance: reusing it would give silently different results.

    Attributes
    ----------
    artifact : str
        The artifact, as named in the message.
    field : str or None
        The record's field that differs (``None``: the record is missing or damaged).
    """

    def __init__(self, message: str, *, artifact: str, field: Optional[str]) -> None:
        self.artifact, self.field = artifact, field
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild, (self.__class__, self.args, self.__dict__))


def _rebuild(cls, args, state):
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class MemoryBudgetError(MemoryError):
    """A call would build more features in memory than the memory budget allows
    (:func:`contextembed.set_memory_budget`, ``CONTEXTEMBED_MEMORY_BUDGET``): raised before anything
    is allocated, naming what needs the memory, how much, and what to do instead.

    Attributes
    ----------
    needed, budget : int
        Bytes the call needs, and the budget.
    """

    def __init__(self, message: str, *, needed: int, budget: int) -> None:
        self.needed, self.budget = needed, budget
        super().__init__(message)

    def __reduce__(self):
        return (_rebuild, (self.__class__, self.args, self.__dict__))


class EngineError(RuntimeError):
    """An inference engine (``backend="openvino"``) cannot run this model: the message names the
    model type and the backend that works for it."""


def missing_extra(package: str, extra: str, purpose: str) -> MissingDependencyError:
    """Build the error for a missing optional package that the ``extra`` installs."""
    return MissingDependencyError(
        f"{purpose} needs the '{package}' package, which is not installed; install it with "
        f'pip install ".[{extra}]" from the contextembed repository (or pip install {package})'
    )


# the exception types (missing_extra builds one for the package's own modules)
__all__ = ["ClusterConnectionError", "EngineError", "FileFormatError", "MemoryBudgetError", "MissingDependencyError",
           "ModelFormatError", "ModelMismatchError", "ModelNotFoundError", "ProvenanceError", "SettingError"]
