"""Where contextembed's own lines for the user go (progress bars, hints): ``sys.stderr``, unless a
block has sent this process's stderr elsewhere and named the terminal's stream instead.

:func:`contextembed.engines.ray.ray_lines_aside` does so while Ray runs: Ray writes to this
process's stderr from its C++ core, its loggers and its threads, so for the block descriptor 2 and
``sys.stderr`` lead to ``os.devnull``, and :func:`stderr` is a stream on the terminal. A bar drawn
on :class:`LiveStderr` follows, whether it started before the block or in it.

Every bar contextembed draws is made by :func:`progress_bar`: it shows ``0/N`` as soon as it
starts and its last line (100%) once.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Optional, TextIO

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


def progress_bar(total: Optional[int] = None, *, desc: Optional[str] = None, unit: str = "it", show: bool = True):
    """A tqdm bar on :class:`LiveStderr`, drawn only when ``show``: ``0/total`` at once (no rate
    estimate until work is counted), and its final line once.

    tqdm draws the state of an update that completes the bar, then draws it again when the bar
    closes: in a log or a captured stderr the 100% line came twice. Here the update that reaches
    ``total`` only counts; closing the bar (a ``with`` block, ``close()``) draws it, once.
    """
    return _bar_class()(total=total, desc=desc, unit=unit, disable=not show, file=LiveStderr())


@lru_cache(maxsize=None)
def _bar_class() -> type:
    from tqdm.auto import tqdm

    class Bar(tqdm):
        def update(self, n=1):
            if not self.disable and self.total is not None and n > 0 and self.n + n >= self.total:
                self.n += n  # the last step: close() draws it
                return None
            return super().update(n)

    return Bar


__all__ = ["LiveStderr", "progress_bar", "stderr", "stderr_to"]
