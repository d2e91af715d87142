"""Chunks of input, tokenized ahead on a thread, and a progress bar that moves with each batch.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Optional




logger = logging.getLogger(__name__)


def _counted(run: Callable, count: Callable, batch) -> None:
    run(batch)
    count(batch)


class _ChunkProgress:
    """Counts a chunk's ``n_items`` on ``bar`` as its batches finish, in proportion to the padded
    positions each batch computed (an estimate: a sentence's windows may sit in several batches),
    so that a bar moves, and its rate is measured, long before the chunk is done; :meth:`finish`
    makes the count exact. Batches finish on several streams at once: a lock keeps the count."""

    def __init__(self, bar, n_items: int) -> None:
        self._bar, self._n_items = bar, n_items
        self._total = self._done = self._counted = 0
        self._lock = threading.Lock()

    def expect(self, total: int) -> None:
        self._total = total

    def advance(self, cost: int) -> None:
        with self._lock:
            self._done += cost
            self._count(self._n_items * self._done // max(self._total, 1))

    def finish(self) -> None:
        with self._lock:
            self._count(self._n_items)

    def _count(self, target: int) -> None:
        step = min(target, self._n_items) - self._counted
        if step > 0:
            self._counted += step
            self._bar.update(step)


def _tokenized(chunks: Iterator[list], tokenize: Callable[[list], object], ahead: bool) -> Iterator[tuple[list, object]]:
    """``(chunk, tokenize(chunk))`` for each chunk, in order. With ``ahead``, a producer thread takes
    and tokenizes the next chunk while the caller runs the current one (the tokenizer's batch call
    releases the GIL); where no thread can start (the interpreter shuts down), one after the other."""
    def produce() -> Optional[tuple[list, list]]:
        chunk = next(chunks, None)
        return None if chunk is None else (chunk, tokenize(chunk))

    if not ahead:
        while (item := produce()) is not None:
            yield item
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="contextembed-tokenize") as producer:
        try:
            future = producer.submit(produce)
        except RuntimeError:  # no new threads at interpreter shutdown (an atexit handler)
            yield from _tokenized(chunks, tokenize, ahead=False)
            return
        while (item := future.result()) is not None:
            future = producer.submit(produce)
            yield item


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of at most ``size`` items (an iterator read one list at a time)."""
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
