"""Where contextembed's own lines for the user go (progress bars, hints): ``sys.stderr``, unless a
block has sent this process's stderr elsewhere and named the terminal's stream instead.

:func:`contextembed.engines.ray.ray_lines_aside` does so while Ray runs: Ray writes to this
process's stderr from its C++ core, its loggers and its threads, so for the block descriptor 2 and
``sys.stderr`` lead to ``os.devnull``, and :func:`stderr` is a stream on the terminal. A bar drawn
on :class:`LiveStderr` follows, whether it started before the block or in it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_REPLACED: list[TextIO] = []


def stderr() -> TextIO:
    """The stream contextembed's own lines go to now (``sys.stderr`` unless :func:`stderr_to` says)."""
    return _REPLACED[-1] if _REPLACED else sys.stderr


@contextmanager
def stderr_to(stream: TextIO) -> Iterator[None]:
    """:func:`stderr` is ``stream`` for the block."""
    _REPLACED.append(stream)
    try:
        yield
    finally:
        _REPLACED.remove(stream)


class LiveStderr:
    """A file for tqdm that writes to :func:`stderr` as it is at each write, not as it was when the
    bar started."""

    def write(self, text: str) -> int:
        return stderr().write(text)

    def flush(self) -> None:
        stderr().flush()

    def __getattr__(self, name: str):
        return getattr(stderr(), name)


__all__ = ["LiveStderr", "stderr", "stderr_to"]
