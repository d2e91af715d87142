"""EncoderCache: the loaded encoders of a process in one small class, injectable into the registry."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from contextembed.encoders import write_word2vec
from contextembed.encoders._registry import (
    ENCODERS, EncoderCache, EncoderRef, clear_encoders, get_encoder, register_encoder, resolved,
)


@pytest.fixture
def vectors(tmp_path) -> str:
    path = tmp_path / "vectors.txt"
    write_word2vec(path, ["the", "fox"], np.ones((2, 3), dtype=np.float32))
    return str(path)


@pytest.fixture
def cache():
    """A cache of the test's own, emptied after it."""
    own = EncoderCache()
    yield own
    own.clear()


def test_get_put_clear(cache):
    ref, encoder = EncoderRef("a"), object()
    assert cache.get(ref) is None and len(cache) == 0
    cache.put(ref, encoder)
    assert cache.get(ref) is encoder and cache.get(EncoderRef("a")) is encoder  # by value
    assert cache.get(EncoderRef("a", precision="fp32")) is None
    cache.clear()
    assert cache.get(ref) is None and len(cache) == 0


def test_threads_asking_for_one_reference_load_it_once(cache):
    loads, ready = [], threading.Barrier(8)

    def load(ref):
        loads.append(ref)
        return object()

    def ask():
        ready.wait()
        found.append(cache.get_or_load(EncoderRef("a"), load))

    found: list = []
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1 and all(encoder is found[0] for encoder in found)


def test_the_registry_loads_into_the_cache_it_is_given(cache, vectors):
    ref = EncoderRef(vectors)
    before = len(ENCODERS)
    encoder = get_encoder(ref, cache)
    assert cache.get(ref) is encoder and get_encoder(ref, cache) is encoder
    assert ENCODERS.get(ref) is None and len(ENCODERS) == before  # the process-wide one is left alone
    pinned = resolved(ref, cache)
    assert cache.get(pinned) is encoder and ENCODERS.get(pinned) is None
    other = object()
    register_encoder(EncoderRef("b"), other, cache)
    assert get_encoder(EncoderRef("b"), cache) is other
    clear_encoders(cache)
    assert len(cache) == 0


def test_clear_encoders_empties_the_process_wide_cache(vectors):
    ref = EncoderRef(vectors)
    encoder = get_encoder(ref)
    assert ENCODERS.get(ref) is encoder
    clear_encoders()
    assert ENCODERS.get(ref) is None and get_encoder(ref) is not encoder
    clear_encoders()
