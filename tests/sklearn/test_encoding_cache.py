"""Encode once: the byte-bounded cache, the disk cache, the encoder registry, n_jobs."""

from __future__ import annotations

import numpy as np
import pytest
from joblib import Memory
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline

from contextembed.encoders._base import PieceEncoding
from contextembed.sklearn import TextEmbedder, TokenEmbedder, clear_cache
from contextembed.sklearn import _encoding
from contextembed.sklearn._encoding import EncoderRef, EncodingCache, encode_all, get_encoder, sentence_key


def _encoding_of(n_bytes: int) -> PieceEncoding:
    return PieceEncoding(np.zeros((1, 1, n_bytes // 4), np.float32), np.array([0, 1]))


def test_memory_cache_evicts_least_recently_used_by_bytes():
    offsets = 16  # two int64
    cache = EncodingCache(max_bytes=3 * (400 + offsets))
    for key in "abc":
        cache.put(key, _encoding_of(400))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("d", _encoding_of(400))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("d") is not None
    assert cache.nbytes <= cache.max_bytes
    cache.put("huge", _encoding_of(4000))  # larger than the whole cache: not stored
    assert cache.get("huge") is None and len(cache) == 3


def test_sentence_keys_tell_tokenizations_and_encoders_apart():
    assert sentence_key("enc", ["ab"]) != sentence_key("enc", ["a", "b"])
    assert sentence_key("enc", ["a b"]) != sentence_key("enc", ["a", "b"])
    assert sentence_key("enc", ["x"]) != sentence_key("other", ["x"])
    assert sentence_key("enc", ["x"]) == sentence_key("enc", ("x",))


def test_encoder_key_changes_with_precision_and_spec(bert, static_path):
    assert EncoderRef(bert, precision="fp32").cache_key() != EncoderRef(bert, precision="bf16").cache_key()
    assert EncoderRef(bert, precision="int8").cache_key() != EncoderRef(bert, precision="fp32").cache_key()
    resolved = get_encoder(EncoderRef(bert)).precision  # "auto" is keyed by what the encoder runs
    assert EncoderRef(bert).cache_key() == EncoderRef(bert, precision=resolved).cache_key()
    assert EncoderRef(bert).cache_key() != EncoderRef(static_path).cache_key()


def test_encoder_key_follows_the_model_files_not_the_path(bert, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bert, copy)
    assert _fitted_ref(bert).cache_key() == _fitted_ref(copy).cache_key()  # same model, shared entries
    config = (copy / "config.json").read_text()
    (copy / "config.json").write_text(config.replace('"hidden_dropout_prob": 0.1', '"hidden_dropout_prob": 0.2'))
    assert _fitted_ref(bert).cache_key() != _fitted_ref(copy).cache_key()


def test_clones_share_one_loaded_encoder(bert, sentences):
    first = TokenEmbedder(bert).fit(sentences)
    second = TokenEmbedder(bert, layers=-1, combine="concat").fit(sentences)
    assert get_encoder(first.encoder_ref_) is get_encoder(second.encoder_ref_)


def _fitted_ref(spec) -> EncoderRef:
    """The reference an estimator fitted on ``spec`` with default options holds."""
    return EncoderRef.fitted(spec, "auto", "auto", None)


class CountingEncoder:
    """Wraps the registry's encoder's ``iter_encode_pieces``, ``iter_encode_piece_means`` and
    ``encode_piece_means`` (the tiny BERT's do not call one another) and counts sentences and calls."""

    def __init__(self, monkeypatch, ref: EncoderRef) -> None:
        self.calls = 0
        self.sentences = 0
        encoder = get_encoder(ref)
        # pieces, text-level piece means, or (uncached) their layers combined by the encoder
        for name in ("iter_encode_pieces", "iter_encode_piece_means", "encode_piece_means"):
            monkeypatch.setattr(encoder, name, self._counted(getattr(encoder, name)))

    def _counted(self, original):
        def counted(sentences, layers="all", **options):
            self.calls += 1
            self.sentences += len(sentences)
            return original(sentences, layers, **options)

        return counted


def test_grid_search_encodes_each_sentence_once(bert, sentences, monkeypatch):
    clear_cache()
    texts = [" ".join(s) for s in sentences] * 2 + ["another text about Brussels", "and one more"]
    labels = [0, 1] * 7
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    grid = {
        "textembedder__layers": [-1, [-2, -1], "all"],
        "textembedder__combine": ["concat", "mean"],
    }  # 6 candidates
    pipe = make_pipeline(TextEmbedder(bert), LogisticRegression())
    search = GridSearchCV(pipe, grid, cv=KFold(3)).fit(texts, labels)
    assert len(search.cv_results_["params"]) == 6
    n_distinct = len(set(texts))
    # 6 candidates x 3 folds x (fit + score) + refit, but every distinct text is encoded once
    assert counter.sentences == n_distinct
    assert counter.calls <= 3  # the first fold's training part, its test part, nothing after


def test_pooling_candidates_reuse_the_cache(bert, sentences, monkeypatch):
    clear_cache()
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    for pooling in ["first", "mean", "last", "first_last", "max"]:
        TokenEmbedder(bert, subword_pooling=pooling, combine="sum").fit(sentences).transform(sentences)
    assert counter.sentences == len(sentences)


@pytest.mark.parametrize("as_memory", [False, True])
def test_disk_cache_serves_a_fresh_process_state(bert, sentences, tmp_path, monkeypatch, as_memory):
    cache = Memory(tmp_path / "cache", verbose=0) if as_memory else str(tmp_path / "cache")
    clear_cache()
    first = TokenEmbedder(bert, cache=cache).fit(sentences).transform(sentences)
    clear_cache()  # as if in another process: only the disk remains
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    second = TokenEmbedder(bert, cache=cache).fit(sentences).transform(sentences)
    assert counter.calls == 0
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_a_cache_directory_gains_one_subdirectory_and_nothing_else(bert, sentences, tmp_path, monkeypatch, as_path):
    """joblib wrote a .gitignore of '*' into the directory it was given, hiding the user's untracked
    files from git; the store and joblib's .gitignore are now in a subdirectory of ours."""
    (tmp_path / "notes.txt").write_text("mine")
    clear_cache()
    TokenEmbedder(bert, cache=tmp_path if as_path else str(tmp_path)).fit(sentences).transform(sentences)
    assert sorted(p.name for p in tmp_path.iterdir()) == [_encoding.DISK_CACHE_DIR, "notes.txt"]
    store = tmp_path / _encoding.DISK_CACHE_DIR
    assert any(p.name != ".gitignore" for p in store.iterdir())  # the entries are there
    clear_cache()
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    TokenEmbedder(bert, cache=str(tmp_path)).fit(sentences).transform(sentences)
    assert counter.calls == 0  # served from the subdirectory


def test_an_empty_cache_path_is_refused_before_anything_is_written(bert, sentences, tmp_path, monkeypatch):
    """cache='' made ./joblib/ silently."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="cache='' names no directory"):
        TokenEmbedder(bert, cache="").fit(sentences)
    assert list(tmp_path.iterdir()) == []


def test_no_cache_encodes_every_time(bert, sentences, monkeypatch):
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    embedder = TokenEmbedder(bert, cache=None).fit(sentences)
    embedder.transform(sentences)
    embedder.transform(sentences)
    assert counter.sentences == 2 * len(sentences)
    with pytest.raises(ValueError, match="cache=42 is not understood"):
        TokenEmbedder(bert, cache=42).fit(sentences)


def test_encode_all_deduplicates_and_keeps_order(bert, sentences):
    ref = EncoderRef(bert)
    X = [sentences[0], sentences[1], sentences[0]]
    out = encode_all(ref, X, cache=None)
    direct = get_encoder(ref).encode_pieces(X)
    for got, expected in zip(out, direct):
        np.testing.assert_array_equal(got.hidden, expected.hidden)
        np.testing.assert_array_equal(got.word_offsets, expected.word_offsets)
    assert out[0] is out[2]


@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_n_jobs_gives_identical_results(bert, sentences, monkeypatch, backend):
    from joblib import parallel_backend

    monkeypatch.setattr(_encoding, "BLOCK_SIZE", 2)  # several blocks from six sentences
    X = sentences * 2 + [["one", "more", "sentence"]]
    serial = TokenEmbedder(bert, cache=None, n_jobs=1).fit(X).transform(X)
    with parallel_backend(backend):
        parallel = TokenEmbedder(bert, cache=None, n_jobs=2).fit(X).transform(X)
    np.testing.assert_array_equal(serial, parallel)


@pytest.mark.parametrize("text_pooling", ["piece_mean", "mean"])
def test_text_blocks_are_the_same_whatever_n_jobs(bert, sentences, monkeypatch, text_pooling):
    """Texts are pooled where the encoder ran, in blocks of POOLED_BLOCK_SIZE (not the sentences'
    BLOCK_SIZE) in the caller and in workers alike, so n_jobs changes no bit. Both runs use the same
    block size: a block is the encoder's chunk, whose batches decide the bits (a model's fp32 vectors
    can change with their batch neighbours: this tiny BERT's do on an AVX2-only CPU)."""
    from joblib import parallel_backend

    blocks = []
    original = _encoding._encode_block

    def recorded(ref, items, *args, **kwargs):
        blocks.append(len(items))
        return original(ref, items, *args, **kwargs)

    monkeypatch.setattr(_encoding, "_encode_block", recorded)
    monkeypatch.setattr(_encoding, "POOLED_BLOCK_SIZE", 2)
    monkeypatch.setattr(_encoding, "BLOCK_SIZE", 1000)  # not the pooled kinds' block
    X = [" ".join(s) for s in sentences] * 2 + ["one more text"]
    n_distinct = len(set(X))
    every_block = [2] * (n_distinct // 2) + [1] * (n_distinct % 2)
    serial = TextEmbedder(bert, text_pooling=text_pooling, cache=None).fit(X).transform(X)
    # uncached piece means in this process: the encoder's own call combines the layers
    # (TextEmbedder._pools_on_encoder), a call per block, through no _encode_block
    assert blocks == ([] if text_pooling == "piece_mean" else every_block)
    blocks.clear()
    with parallel_backend("threading"):
        parallel = TextEmbedder(bert, text_pooling=text_pooling, cache=None, n_jobs=2).fit(X).transform(X)
    assert sorted(blocks) == sorted(every_block)
    np.testing.assert_array_equal(serial, parallel)


def test_text_piece_means_reuse_cached_pieces(bert, sentences, monkeypatch):
    clear_cache()
    TokenEmbedder(bert).fit(sentences).transform(sentences)  # caches every sentence's pieces
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    from_pieces = TextEmbedder(bert, text_pooling="piece_mean").fit(sentences).transform(sentences)
    assert counter.sentences == 0
    fresh = TextEmbedder(bert, text_pooling="piece_mean", cache=None).fit(sentences).transform(sentences)
    np.testing.assert_array_equal(from_pieces, fresh)  # the same float64 sums either way
    assert counter.sentences == len(sentences)  # no cache: the device sums, once per text


def _held(array: np.ndarray) -> int:
    return _encoding._held_bytes(array)


@pytest.mark.filterwarnings("ignore::contextembed.encoders._base.LongPairWarning")
@pytest.mark.parametrize("kind, options", [("sentence", ()), ("piece_mean", ()), ("text_layers", ("first", "mean")),
                                           ("pair_layers", ("first", "mean"))])
def test_the_memory_cache_keeps_only_the_bytes_it_counts(bert, sentences, kind, options):
    # the encoder hands out views of a chunk's rows or a batch's pieces; cached as they are, one
    # entry left after evictions would keep all of them alive while the cache counts its own bytes
    items = [(a, b) for a, b in zip(sentences, sentences[1:])] if kind == "pair_layers" else sentences
    encodings = get_encoder(EncoderRef(bert)).encode_piece_means(sentences) if kind == "piece_mean" else None
    clear_cache()
    out = encode_all(EncoderRef(bert), items, cache="memory", kind=kind, options=options)
    cached = list(_encoding.MEMORY_CACHE._items.values())
    assert len(cached) == len(set(map(str, items)))
    for encoding in [*out, *cached]:
        for array in _encoding._arrays(encoding):
            assert _held(array) == array.nbytes
    assert _encoding.MEMORY_CACHE.nbytes == sum(map(_encoding._nbytes, cached))
    if encodings is not None:  # the copies are the encoder's values
        np.testing.assert_array_equal(np.stack(out), encodings)
    clear_cache()


def test_own_memory_copies_only_views_of_larger_arrays():
    import torch

    rows = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    view = rows[1]
    owned = _encoding.own_memory(view)
    assert owned is not view and owned.base is None and np.array_equal(owned, view)
    assert _encoding.own_memory(owned) is owned  # owns its memory: not copied
    whole = rows.reshape(8, 3)  # a view of all of an array holds no more
    assert _encoding.own_memory(whole) is whole
    tensor = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    from_torch = tensor[1:2].numpy()  # a view of the tensor's storage
    assert _held(from_torch) == 48 and _encoding.own_memory(from_torch).base is None
    assert _held(np.frombuffer(b"\0" * 16, dtype=np.float32)[:2]) == 16
    hidden = np.zeros((2, 6, 3), np.float32)
    encoding = PieceEncoding(hidden[:, 1:3], np.array([0, 2]), cls=hidden[:, 0], ids=np.arange(5)[1:3])
    compact = _encoding.own_memory(encoding)
    assert compact.word_offsets is encoding.word_offsets
    for array in _encoding._arrays(compact):
        assert _held(array) == array.nbytes
    np.testing.assert_array_equal(compact.hidden, encoding.hidden)
    np.testing.assert_array_equal(compact.cls, encoding.cls)
    np.testing.assert_array_equal(compact.ids, encoding.ids)
    assert _encoding._nbytes(compact) == 2 * 2 * 3 * 4 + 16 + 2 * 3 * 4 + 16  # ids counted too


@pytest.mark.parametrize("chunk_size", [2, 3], ids=["chunks within the blocks", "chunks across them"])
def test_uncached_piece_means_are_one_call_where_the_encoders_chunks_fall_within_the_blocks(bert, sentences, monkeypatch,
                                                                                           chunk_size):
    """The encoder combines the layers of uncached piece means in one call (tokenizing each chunk while
    the one before runs) when its chunks fall within encode_all's blocks, else block by block: the
    batches, and so the bits, of the cached path either way."""
    X = [" ".join(s) for s in sentences] + ["one more text", "and another one"]
    n_distinct = len(set(X))
    monkeypatch.setattr(_encoding, "POOLED_BLOCK_SIZE", 4)
    cached = TextEmbedder(bert, text_pooling="piece_mean", cache="memory").fit(X)
    encoder = get_encoder(cached.encoder_ref_)
    monkeypatch.setattr(encoder, "chunk_size", chunk_size)
    clear_cache()
    expected = cached.transform(X)
    calls = []
    original = encoder.encode_piece_means
    monkeypatch.setattr(encoder, "encode_piece_means", lambda items, *args, **kwargs: calls.append(len(items)) or original(items, *args, **kwargs))
    got = TextEmbedder(bert, text_pooling="piece_mean", cache=None).fit(X).transform(X)
    np.testing.assert_array_equal(got, expected)
    assert calls == ([n_distinct] if chunk_size == 2 else [4] * (n_distinct // 4) + [n_distinct % 4] * (n_distinct % 4 > 0))
