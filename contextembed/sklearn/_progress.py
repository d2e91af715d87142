"""What the estimators show while they work: progress bars when asked, log records always.

Bars (tqdm, on stderr) are drawn only by an estimator whose ``show_progress`` is true, in the
process that called it: a clone made by ``GridSearchCV`` draws one only when the estimator it was
cloned from asked for it, and joblib workers that encode blocks never draw (the caller's bar counts
their blocks). Log records go to the ``contextembed`` loggers (``contextembed.sklearn...``), which
have no handler but the package's ``NullHandler``: ``logging.basicConfig(level=logging.INFO)`` shows
what ``"auto"`` chose, ``level=logging.DEBUG`` the cache hits and misses of every encoding call.
"""

from __future__ import annotations

from types import TracebackType
from typing import Optional

from .._runtime import terminal


def bar(show: bool, desc: str, unit: str, total: Optional[int] = None):
    """A tqdm bar on stderr (:func:`contextembed._runtime.terminal.progress_bar`), drawn only when ``show``."""
    return terminal.progress_bar(total, desc=desc, unit=unit, show=show)


class EncodingProgress:
    """One bar over the items an estimator's call encodes (cache hits excluded), however many
    :func:`~contextembed.sklearn._encoding.encode_all` calls the estimator makes for it.

    The bar appears when the first item needs encoding (a call served entirely from the cache shows
    none); each call adds its misses to the total with :meth:`add`, and :meth:`update` counts them
    as they are encoded. A context manager: the bar is closed on exit.
    """

    def __init__(self, show: bool, unit: str = "sent") -> None:
        self.show = bool(show)
        self.unit = unit
        self._bar = None

    def add(self, n: int) -> None:
        """``n`` more items to encode."""
        if not self.show or n <= 0:
            return
        if self._bar is None:
            self._bar = bar(True, "encoding", self.unit, total=n)
            return
        self._bar.total += n
        self._bar.refresh()

    def update(self, n: int = 1) -> None:
        """``n`` items encoded."""
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "EncodingProgress":
        return self

    def __exit__(self, kind: Optional[type], value: Optional[BaseException], traceback: Optional[TracebackType]) -> None:
        self.close()


#: no bar (what encode_all uses when its caller passes none)
SILENT = EncodingProgress(False)

__all__ = ["EncodingProgress", "SILENT", "bar"]
