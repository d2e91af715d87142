"""What an encoder tells its caller while it runs: its progress, and the one warning about pairs
longer than the model takes.

An encoder draws a progress bar of its own (:func:`contextembed._runtime.terminal.progress_bar`) or
counts its items on a bar the caller holds (anything with ``update(n)``: the CLI's, an estimator's),
as its ``show_progress`` says (:data:`ShowProgress`, :func:`progress_bar`). A call that encoded
pairs by the window policy of long pairs says so once (:class:`LongPairWarning`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sized
from typing import Protocol, Union

import numpy as np

from .._runtime import terminal


class ProgressCounter(Protocol):
    """A progress bar the caller holds and an encoder counts its items on (a tqdm bar will do)."""

    def update(self, n: int = 1) -> object: ...


#: what the encoders' ``show_progress`` takes: draw a bar of their own, or count on the caller's
ShowProgress = Union[bool, ProgressCounter]


def progress_bar(items: object, show_progress: ShowProgress, unit: str = "sent"):
    """A progress bar over ``items`` (:func:`contextembed._runtime.terminal.progress_bar`): with their count
    where they have one (a list), open-ended for an iterator, which encoders read one chunk at a
    time (:func:`~contextembed._inputs.sentences.check_sentence_chunks`). ``show_progress`` may instead be a bar the caller holds
    (anything with ``update(n)``: the CLI's, an estimator's): the encoder counts its items on it and
    leaves it open."""
    if not isinstance(show_progress, (bool, np.bool_)) and callable(getattr(show_progress, "update", None)):
        return contextlib.nullcontext(show_progress)
    return terminal.progress_bar(len(items) if isinstance(items, Sized) else None, unit=unit, show=bool(show_progress))


class LongPairWarning(UserWarning):
    """Some pairs were longer than the model takes and were encoded by the window policy."""


def warn_long_pairs(n_long: int, n_pairs: int, budget: int) -> None:
    """Say once per call how many pairs the window policy of long pairs applied to."""
    warnings.warn(
        f"{n_long} of {n_pairs} sentence pairs hold more than the {budget} pieces one model input takes "
        "(besides special tokens): each side was encoded in windows paired with the other side's start "
        "(docs/pairs.md); no piece was dropped",
        LongPairWarning,
        stacklevel=3,
    )
