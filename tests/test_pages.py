"""contextembed._runtime.pages: a fresh array's pages faulted in on a helper thread, its bytes untouched."""

import sys

import numpy as np
import pytest

from contextembed._runtime import pages


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_POPULATE_WRITE) is Linux's")
def test_populating_changes_no_byte_of_the_array_while_it_is_written():
    array = np.empty((pages.MIN_BYTES // 4 + 12345,), dtype=np.float32)
    array[: len(array) // 2] = np.arange(len(array) // 2, dtype=np.float32)  # written before
    thread = pages.populate(array)
    assert thread is not None and thread.daemon
    array[len(array) // 2 :] = -1.5  # and while the pages are populated
    thread.join(timeout=60)
    assert not thread.is_alive()
    np.testing.assert_array_equal(array[: len(array) // 2], np.arange(len(array) // 2, dtype=np.float32))
    assert (array[len(array) // 2 :] == -1.5).all()


def test_no_thread_at_interpreter_shutdown_starts_nothing(monkeypatch):
    """An atexit handler that encodes: no new thread can start, and the pages fault in as written."""
    import threading

    def refused(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refused)
    assert pages.populate(np.empty(pages.MIN_BYTES, dtype=np.float32)) is None


def test_small_strided_or_foreign_arrays_start_nothing(monkeypatch):
    assert pages.populate(np.empty(pages.MIN_BYTES // 4 - 1, dtype=np.float32)) is None  # one page short of the bound
    assert pages.populate(np.empty((pages.MIN_BYTES // 4, 2), dtype=np.float32)[:, 0]) is None  # not contiguous
    monkeypatch.setattr(sys, "platform", "win32")
    pages._madvise.cache_clear()
    try:
        assert pages.populate(np.empty(pages.MIN_BYTES, dtype=np.float32)) is None
    finally:
        monkeypatch.undo()
        pages._madvise.cache_clear()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise(MADV_POPULATE_WRITE) is Linux's")
def test_word_rows_are_the_same_with_their_pages_populated_or_not(tiny_bert_dir, monkeypatch):
    """The picked words' chunk output is populated while the chunk is tokenized; the rows are those
    written without it (a chunk large enough to be populated)."""
    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
    extractor = FeatureExtractor(encoder, layers=[-1, 0], combine="concat", subword_pooling="first")
    sentences = [["the", "quick", "unaffable", "fox"] * 8] * 1200  # 38,400 rows of 2 x 32 floats: 9.8 MB
    started = []
    original = pages.populate
    monkeypatch.setattr(pages, "populate", lambda array: started.append(original(array)) or started[-1])
    populated = extractor.words(sentences)
    assert started and started[0] is not None
    monkeypatch.setattr(pages, "populate", lambda array: None)
    for got, expected in zip(populated, extractor.words(sentences)):
        np.testing.assert_array_equal(got, expected)
