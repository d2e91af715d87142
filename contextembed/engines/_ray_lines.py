"""Ray's own lines kept off this process's terminal while Ray runs.

Ray writes to this process's output four ways (its C++ core to descriptor 2, its threads to
``sys.stdout``, its Python loggers' console handlers, Ray Data's progress bars) and keeps what
matters in its own logs (``/tmp/ray/session_latest/logs``). :func:`ray_lines_aside` sends all of it
to ``os.devnull`` for a block, except contextembed's own lines (the progress bar), unless
``CONTEXTEMBED_RAY_LOGS=show`` (:func:`ray_logs_shown`). The public names are exported by
:mod:`contextembed.engines.ray`, whose :func:`~contextembed.engines.ray.connected` uses them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .._runtime import terminal
from .. import settings
from ._ray_cluster import import_ray

#: the environment variable that lets Ray's own lines through to the terminal: ``show`` or ``hide``
RAY_LOGS_ENV = "CONTEXTEMBED_RAY_LOGS"
#: ``ray.init`` options while Ray's lines are kept aside: the workers' output stays in Ray's logs
#: (the driver would print it to its stdout)
QUIET_INIT = {"log_to_driver": False}


def ray_logs_shown() -> bool:
    """Whether ``CONTEXTEMBED_RAY_LOGS`` is ``show`` (``hide``, or unset: no).

    Raises
    ------
    SettingError
        For any other value, naming the variable.
    """
    return settings.choice(RAY_LOGS_ENV, ("show", "hide")) == "show"


@contextmanager
def ray_lines_aside() -> Iterator[None]:
    """For the block, what this process writes to stderr and ``sys.stdout`` goes to ``os.devnull``,
    except contextembed's own lines (:func:`contextembed._runtime.terminal.stderr`: the progress bar), which still
    reach the terminal.

    Ray writes to this process's output four ways, and keeps what matters in its own log files: its
    C++ core writes its error lines to file descriptor 2 whatever its log level
    (ray-project/ray#18577); its threads print the errors the cluster reports (a task that failed
    and will be retried) to ``sys.stdout``; its Python loggers (``ray``, ``ray.data``) have console
    handlers; Ray Data draws progress bars. So descriptor 2, ``sys.stderr`` and ``sys.stdout``
    (contextembed prints nothing there while Ray runs) lead to ``os.devnull``, the console handlers of Ray's
    loggers drop every record (their file handlers still write), and Ray Data's bars are off;
    :func:`contextembed._runtime.terminal.stderr` is the previous ``sys.stderr``, or a stream on a copy of
    descriptor 2 where that is what it wrote to. Everything is put back after the block.
    """
    import_ray()
    with _ray_data_bars_off(), _dropping(_console_handlers("ray")), _output_to_devnull():
        yield


@contextmanager
def _ray_data_bars_off() -> Iterator[None]:
    context = sys.modules["ray.data"].DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, False
    try:
        yield
    finally:
        context.enable_progress_bars = bars


@contextmanager
def _dropping(handlers: list[logging.Handler]) -> Iterator[None]:
    """``handlers`` let no record through for the block."""
    for handler in handlers:
        handler.addFilter(_drop)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_drop)


@contextmanager
def _output_to_devnull() -> Iterator[None]:
    """Descriptor 2, ``sys.stderr`` and ``sys.stdout`` to ``os.devnull`` for the block, and
    :func:`contextembed._runtime.terminal.stderr` to where ``sys.stderr`` wrote (through a copy of descriptor
    2 where that is what it wrote to)."""
    stderr, stdout = sys.stderr, sys.stdout
    stderr.flush()
    copy = os.dup(2)
    ours = open(copy, "w", encoding=stderr.encoding, errors=stderr.errors, buffering=1, closefd=False) \
        if _writes_to_descriptor(stderr, 2) else stderr
    nowhere = open(os.devnull, "w", encoding="utf-8")
    try:
        _point_descriptor(2, os.devnull)
        sys.stderr = sys.stdout = nowhere
        with terminal.stderr_to(ours):
            yield
    finally:
        sys.stderr, sys.stdout = stderr, stdout
        nowhere.close()
        if ours is not stderr:
            ours.close()
        os.dup2(copy, 2)
        os.close(copy)


def _console_handlers(name: str) -> list[logging.Handler]:
    """The handlers of the logger ``name`` and of those below it that write to a stream, not a file."""
    loggers = [logging.getLogger(name)] + [logger for key, logger in sorted(logging.root.manager.loggerDict.items())
                                           if key.startswith(name + ".") and isinstance(logger, logging.Logger)]
    return [handler for logger in loggers for handler in logger.handlers
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)]


def _drop(record: logging.LogRecord) -> bool:
    """A logging filter that lets nothing through."""
    return False


def _point_descriptor(descriptor: int, path: str) -> None:
    opened = os.open(path, os.O_WRONLY)
    try:
        os.dup2(opened, descriptor)
    finally:
        os.close(opened)


def _writes_to_descriptor(stream, descriptor: int) -> bool:
    try:
        return stream.fileno() == descriptor
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: a captured or notebook stream
        return False
