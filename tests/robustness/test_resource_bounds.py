"""Bounded resources: a generator streams with memory bounded by the chunk size, whatever its
length, for every encoder family and for :class:`~contextembed.extraction.FeatureExtractor`; the
encoders read an iterator no further ahead than one chunk; CPU streams never start more threads
than their cap.

Memory is measured with :mod:`tracemalloc` (Python and NumPy allocations: the input's token lists,
the vectors handed out) as the peak of a run over ``n`` sentences and over ``10 * n``. Before the
encoders streamed, they turned the generator into a list first, and the peak grew with the input:
+7 MB for 20k sentences, +74 MB for 200k. The bound here: the longer run may peak higher than the
shorter one by less than a fifth of what holding its extra sentences takes (measured the same way).

CPython keeps up to 2000 freed tuples of each length for reuse, which tracemalloc counts as held:
a longer run frees more of them and looked up to ~150 kB bigger for that alone (bounded, but as
large as the input of the short runs here). The free lists are filled before each measure, outside
it, and the garbage collector (whose full collections empty them) is paused while it runs.
"""

from __future__ import annotations

import gc
import threading
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from contextembed import load_encoder
from contextembed.encoders._static import vectors as static
from contextembed.encoders import write_word2vec
from contextembed.extraction import FeatureExtractor
from contextembed._runtime.streams import STREAMS_ENV, StreamsCappedWarning, cpu_streams, max_streams, run_all

WORDS = "the EU rejects German call to boycott British lamb".split()
#: the longer run holds this many times the shorter one's sentences
RATIO = 10
#: the longer run may exceed the shorter one's peak by this share of its extra input's size
MARGIN = 0.2


def short_sentences(n: int) -> Iterator[list[str]]:
    """``n`` four-word sentences, each made when asked for (as read from a file)."""
    for i in range(n):
        yield [f"{WORDS[(i + k) % len(WORDS)]}{i % 7}" for k in range(4)]


def peak_bytes(run: Callable[[Iterator], None], n: int) -> int:
    """Peak traced memory of ``run(short_sentences(n))`` above what was held before it."""
    gc.collect()
    _fill_tuple_free_lists()
    gc.disable()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        run(short_sentences(n))
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
        gc.enable()


def _fill_tuple_free_lists() -> None:
    """Free 2,000+ tuples of every length CPython keeps for reuse (1 to 19), so that reusing them
    later allocates nothing tracemalloc sees."""
    for length in range(1, 20):
        tuples = [tuple(range(i, i + length)) for i in range(2100)]
        del tuples


def drain(outputs: Iterator) -> None:
    for _ in outputs:
        pass


def assert_bounded(run: Callable[[Iterator], None], n: int) -> None:
    """The peak of ``10 n`` sentences is within the margin of the peak of ``n``."""
    run(short_sentences(50))  # first-call allocations (caches, lazy imports) out of the way
    small, large = peak_bytes(run, n), peak_bytes(run, RATIO * n)
    extra_input = peak_bytes(list, RATIO * n) - peak_bytes(list, n)  # what the input would take if held
    assert extra_input > 0
    assert large - small < MARGIN * extra_input, (
        f"peak memory grew with the input: {small / 1e6:.2f} MB for {n} sentences, {large / 1e6:.2f} MB for "
        f"{RATIO * n} (holding the extra sentences takes {extra_input / 1e6:.2f} MB)"
    )


@pytest.fixture(scope="module")
def vectors_path(tmp_path_factory):
    """Static vectors that know every word :func:`short_sentences` makes, and some it does not."""
    words = [f"{w}{j}" for w in WORDS for j in range(5)]
    path = tmp_path_factory.mktemp("vectors") / "vectors.txt"
    write_word2vec(path, words, np.random.default_rng(0).normal(size=(len(words), 8)).astype(np.float32))
    return path


def _encoders(family: str, vectors_path, tiny_bert_dir, tiny_elmo_dir):
    if family == "static":
        return load_encoder(str(vectors_path)), 1000
    spec = tiny_bert_dir if family == "transformer" else tiny_elmo_dir
    return load_encoder(str(spec), device="cpu", precision="fp32", chunk_size=32), 150


@pytest.mark.slow
@pytest.mark.parametrize("family", ["static", "transformer", "elmo"])
def test_iter_encode_memory_is_bounded_by_the_chunk(family, vectors_path, tiny_bert_dir, tiny_elmo_dir, monkeypatch):
    encoder, n = _encoders(family, vectors_path, tiny_bert_dir, tiny_elmo_dir)
    monkeypatch.setattr(static, "_LOOKUP_CHUNK", 256)
    assert_bounded(lambda sentences: drain(encoder.iter_encode(sentences)), n)


@pytest.mark.parametrize("family, text_pooling", [
    ("static", "mean"),  # through iter_words
    ("transformer", "cls"),  # from the pieces
    ("elmo", "piece_mean"),
])
@pytest.mark.slow
def test_feature_extractor_memory_is_bounded_by_the_chunk(
    family, text_pooling, vectors_path, tiny_bert_dir, tiny_elmo_dir, monkeypatch
):
    encoder, n = _encoders(family, vectors_path, tiny_bert_dir, tiny_elmo_dir)
    monkeypatch.setattr(static, "_LOOKUP_CHUNK", 256)
    extractor = FeatureExtractor(encoder, subword_pooling="mean", text_pooling=text_pooling)
    assert_bounded(lambda sentences: drain(extractor.iter_texts(sentences)), n)


class _Counting:
    """An iterator of sentences that records how many were taken from it."""

    def __init__(self, n: int) -> None:
        self.sentences, self.taken = short_sentences(n), 0

    def __iter__(self):
        return self

    def __next__(self) -> list[str]:
        sentence = next(self.sentences)
        self.taken += 1
        return sentence


@pytest.mark.parametrize("family", ["static", "transformer", "elmo"])
def test_an_iterator_is_read_no_further_than_one_chunk_ahead(family, vectors_path, tiny_bert_dir, tiny_elmo_dir, monkeypatch):
    encoder, _ = _encoders(family, vectors_path, tiny_bert_dir, tiny_elmo_dir)
    monkeypatch.setattr(static, "_LOOKUP_CHUNK", 32)
    source = _Counting(200)
    ahead = []
    for i, vectors in enumerate(encoder.iter_encode(source)):
        assert vectors.shape[1] == 4, f"sentence {i}: one row per word"
        ahead.append(source.taken - i)
    assert len(ahead) == 200 and source.taken == 200
    assert max(ahead) <= 32, f"read {max(ahead)} sentences ahead of the outputs; a chunk is 32"


@pytest.mark.parametrize("family", ["static", "transformer", "elmo"])
def test_a_streamed_iterator_gives_the_vectors_of_the_list(family, vectors_path, tiny_bert_dir, tiny_elmo_dir):
    encoder, _ = _encoders(family, vectors_path, tiny_bert_dir, tiny_elmo_dir)
    listed = encoder.encode(list(short_sentences(70)))
    streamed = list(encoder.iter_encode(short_sentences(70)))
    assert len(streamed) == len(listed) == 70
    for i, (a, b) in enumerate(zip(listed, streamed)):
        np.testing.assert_array_equal(a, b, err_msg=f"sentence {i}")


@pytest.mark.parametrize("family", ["static", "transformer", "elmo"])
def test_a_bad_sentence_in_a_stream_is_named_by_its_index_in_the_whole_input(
    family, vectors_path, tiny_bert_dir, tiny_elmo_dir
):
    encoder, _ = _encoders(family, vectors_path, tiny_bert_dir, tiny_elmo_dir)

    def sentences():
        yield from short_sentences(70)
        yield ["fine", None]

    with pytest.raises(TypeError, match="sentence 70, word 1 is NoneType"):
        drain(encoder.iter_encode(sentences()))


def test_a_huge_stream_count_is_capped_with_a_warning(monkeypatch):
    """``CONTEXTEMBED_CPU_STREAMS=100000`` started threads until the OS refused, then hung at exit."""
    monkeypatch.setenv(STREAMS_ENV, "100000")
    with pytest.warns(StreamsCappedWarning, match=f"{STREAMS_ENV}=100000 asks for more streams .* running {max_streams()}"):
        streams, threads = cpu_streams()
    assert streams == max_streams() and threads >= 1
    with pytest.warns(StreamsCappedWarning):
        run_all(lambda item: None, list(range(3 * max_streams())))
    running = [t for t in threading.enumerate() if t.name.startswith("contextembed-stream")]
    assert len(running) <= 2 * max_streams(), f"{len(running)} stream threads run"
