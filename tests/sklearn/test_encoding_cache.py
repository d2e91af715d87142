"""Encode once: the feature store behind every estimator, the disk cache, the encoder registry, n_jobs."""

from __future__ import annotations

import numpy as np
import pytest
from joblib import Memory
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline

from contextembed._runtime import store as _store
from contextembed._runtime import store_memory as _memory
from contextembed.sklearn import TextEmbedder, TokenEmbedder, clear_cache
from contextembed.sklearn import _encoding
from contextembed.encoders._registry import EncoderRef, get_encoder
from contextembed.sklearn._encoding import encode_stored, sentence_key


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
    """Wraps the registry's encoder's methods the estimators encode with (words pooled where the
    model ran, text vectors, piece means; the tiny BERT's do not call one another) and counts
    sentences and calls."""

    def __init__(self, monkeypatch, ref: EncoderRef) -> None:
        self.calls = 0
        self.sentences = 0
        encoder = get_encoder(ref)
        for name in ("iter_encode_pooled", "iter_encode_text_layers", "iter_encode_piece_means", "encode_piece_means"):
            monkeypatch.setattr(encoder, name, self._counted(getattr(encoder, name)))

    def _counted(self, original):
        def counted(sentences, *args, **options):
            self.calls += 1
            self.sentences += len(sentences)
            return original(sentences, *args, **options)

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


def test_each_subword_pooling_is_encoded_once(bert, sentences, monkeypatch):
    """The store keeps a word's rows once its subword pooling is fixed (not every piece): each
    pooling encodes the sentences once, and a second round of the same candidates encodes nothing."""
    clear_cache()
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    poolings = ["first", "mean", "last", "first_last", "max"]
    first = [TokenEmbedder(bert, subword_pooling=p, combine="sum").fit(sentences).transform(sentences) for p in poolings]
    assert counter.sentences == len(poolings) * len(sentences)
    again = [TokenEmbedder(bert, subword_pooling=p, combine="sum").fit(sentences).transform(sentences) for p in poolings]
    assert counter.sentences == len(poolings) * len(sentences)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


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


def test_a_cache_path_that_is_a_file_is_refused_at_fit(bert, sentences, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(NotADirectoryError, match=r"cache='.*notes\.txt' is a file, not a directory"):
        TokenEmbedder(bert, cache=str(tmp_path / "notes.txt")).fit(sentences)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_no_cache_encodes_every_time(bert, sentences, monkeypatch):
    counter = CountingEncoder(monkeypatch, _fitted_ref(bert))
    embedder = TokenEmbedder(bert, cache=None).fit(sentences)
    embedder.transform(sentences)
    embedder.transform(sentences)
    assert counter.sentences == 2 * len(sentences)
    with pytest.raises(ValueError, match="cache=42 is not understood"):
        TokenEmbedder(bert, cache=42).fit(sentences)


@pytest.mark.parametrize("cache", [None, "memory"])
def test_encode_stored_deduplicates_and_keeps_order(bert, sentences, monkeypatch, cache):
    ref = EncoderRef(bert, precision="fp32")
    X = [sentences[0], sentences[1], sentences[0], [], sentences[2]]
    counter = CountingEncoder(monkeypatch, ref)
    clear_cache()
    encoder = get_encoder(ref)
    stored = encode_stored(ref, X, layers=encoder.n_layers, cache=cache, options=("first",))
    assert counter.sentences == 4  # the repeated sentence once
    assert stored.n_items == len(X) and list(stored.counts) == [len(s) for s in X]
    direct = np.concatenate([words.transpose(1, 0, 2) for words in encoder.encode(X, subword_pooling="first")])
    every_layer = list(range(encoder.n_layers))
    np.testing.assert_array_equal(stored.items(0, len(X), every_layer), direct)
    rows = np.array([5, 0, 3, 3, len(direct) - 1])  # any order, repeats too
    np.testing.assert_array_equal(stored.take(rows, [1, 0]), direct[rows][:, [1, 0]])


@pytest.mark.parametrize("backend", [pytest.param("loky", marks=pytest.mark.slow), "threading"])
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


def test_layers_a_feature_does_not_use_are_never_run(bert, sentences, monkeypatch):
    """The store keeps the leading layers up to the last one the features use; the encoder runs
    no layer above it, and a later fit that needs fewer layers reads the deeper table's rows."""
    clear_cache()
    ref = _fitted_ref(bert)
    encoder = get_encoder(ref)
    depths = []
    original = encoder._forward
    monkeypatch.setattr(encoder, "_forward", lambda inputs, layer_index: depths.append(max(layer_index)) or
                        original(inputs, layer_index))
    embeddings = TokenEmbedder(bert, layers=0, combine="concat").fit(sentences).transform(sentences)
    assert depths and set(depths) == {0}
    depths.clear()
    last = TokenEmbedder(bert, layers=-1, combine="concat").fit(sentences).transform(sentences)
    assert set(depths) == {encoder.n_layers - 1}
    reference = np.concatenate(encoder.encode(sentences, layers=[0, -1]), axis=1)
    np.testing.assert_array_equal(embeddings, reference[0])
    np.testing.assert_array_equal(last, reference[1])
    depths.clear()
    clear_cache()
    TokenEmbedder(bert, layers=-1, combine="concat").fit(sentences).transform(sentences)  # every layer stored
    depths.clear()
    again = TokenEmbedder(bert, layers=0, combine="concat").fit(sentences).transform(sentences)
    assert depths == []  # the deeper rows serve the embeddings: nothing encoded
    np.testing.assert_array_equal(again, embeddings)


def test_rows_beyond_the_budget_are_read_back_from_disk(bert, sentences, monkeypatch):
    """With a budget too small to keep them, the rows live in their segment files and are read
    back a batch at a time: the same features, and the resident rows stay within the budget."""
    clear_cache()
    expected = TokenEmbedder(bert, combine="mean").fit(sentences).transform(sentences)
    clear_cache()
    monkeypatch.setattr(_memory, "_budget", _memory.MIN_BUDGET)
    monkeypatch.setattr(_encoding, "BLOCK_SIZE", 2)
    # every block is larger than the budget allows to keep, once it is: pretend rows are huge
    monkeypatch.setattr(_store, "_keep_resident", lambda segment: False)
    embedder = TokenEmbedder(bert, combine="mean").fit(sentences)
    got = embedder.transform(sentences)
    np.testing.assert_array_equal(got, expected)
    stored = embedder._word_rows(sentences).__dict__["_rows"]
    assert all(segment.data is None and segment.path is not None for segment in stored._segments)
    assert _store.resident_bytes() <= _store.memory_budget()
    clear_cache()


def test_an_output_beyond_the_budget_is_an_error_before_it_is_built(bert, sentences, monkeypatch):
    from contextembed.errors import MemoryBudgetError

    embedder = TokenEmbedder(bert, combine="concat").fit(sentences)
    monkeypatch.setattr(_memory, "_budget", _memory.MIN_BUDGET)
    monkeypatch.setattr(embedder, "_word_rows", lambda *args: _encoding.LayerRows(
        np.zeros((3, 800_000, 32), np.float32)))
    with pytest.raises(MemoryBudgetError, match=r"TokenEmbedder: the features \(800,000 x 96 float32\) needs "
                       r"293\.0 MiB .* over the memory budget of 16\.0 MiB \(CONTEXTEMBED_MEMORY_BUDGET") as caught:
        embedder.transform(sentences)
    assert caught.value.needed == 800_000 * 96 * 4 and caught.value.budget == _memory.MIN_BUDGET


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
