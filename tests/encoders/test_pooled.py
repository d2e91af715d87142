"""Words pooled where the model ran (``TransformerEncoder.iter_encode_pooled``) against the host's
pooling of the same hidden states (``Encoder._iter_pooled``, the plain path): equal bit for
bit in fp32, for every subword pooling and layer combination, windows and document context."""

import contextlib
import threading

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed._inputs.documents import in_context
from contextembed.encoders.transformer._host_copies import HostCopies
from contextembed.encoders._base import Encoder
from contextembed.encoders._static.vectors import StaticVectors
from contextembed.pooling import COMBINES, SUBWORD_POOLINGS, LayerPooling

SENTENCES = [
    ["the", "quick", "unaffable", "fox"],
    [],
    ["New", "York", "unaffable", "pretrained"] * 12,  # longer than the tiny models' 40 positions: windows
    ["ça", "coûte", "3,5", "€", "naïve", "東京"],
    ["Peter", "Blackburn"],
]
DOC_IDS = [0, 0, 0, 1, 1]
#: the tiny models, and the real MiniLM (seconds a case: the quick tier leaves it out)
MODELS = ["bert", "roberta", pytest.param("minilm", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request, tiny_bert_dir, tiny_roberta_dir):
    path = tiny_bert_dir if request.param == "bert" else tiny_roberta_dir
    return load_encoder(str(path), device="cpu", precision="fp32")


def _pooling(encoder, combine: str) -> LayerPooling:
    pooling = LayerPooling(encoder.n_layers, [-1, 0, 1], combine).eval()
    if pooling.mix is not None:  # fixed, unequal weights: a trained mix
        with torch.no_grad():
            pooling.mix.weights.copy_(torch.tensor([0.3, -1.2, 0.7]))
            pooling.mix.gamma.fill_(1.7)
    return pooling


def _assert_equal(pooled, reference, dim):
    assert len(pooled) == len(reference) == len(SENTENCES)
    for sentence, rows, expected in zip(SENTENCES, pooled, reference):
        assert rows.shape == expected.shape == (len(sentence), dim)
        assert rows.dtype == expected.dtype
        assert np.array_equal(rows, expected)


@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("method", SUBWORD_POOLINGS)
def test_pooled_on_the_device_equals_pooled_on_the_host(tiny, method, combine):
    pooling = _pooling(tiny, combine)
    dim = pooling.output_width(tiny.width * (2 if method == "first_last" else 1))
    pooled = list(tiny.iter_encode_pooled(SENTENCES, pooling, method))
    _assert_equal(pooled, list(Encoder._iter_pooled(tiny, SENTENCES, pooling, method, False, "float32", False)), dim)
    assert np.abs(pooled[0]).max() > 0  # not left empty


@pytest.mark.parametrize("method", SUBWORD_POOLINGS)
def test_pooled_in_context_equals_pooled_on_the_host(tiny, method):
    pooling = _pooling(tiny, "concat")
    dim = pooling.output_width(tiny.width * (2 if method == "first_last" else 1))
    pooled = list(tiny.iter_encode_pooled(in_context(SENTENCES, DOC_IDS, 6), pooling, method, in_context=True))
    reference = list(Encoder._iter_pooled(tiny, in_context(SENTENCES, DOC_IDS, 6), pooling, method, True, "float32", False))
    _assert_equal(pooled, reference, dim)
    alone = list(tiny.iter_encode_pooled(SENTENCES, pooling, method))
    assert not np.array_equal(pooled[0], alone[0])  # the context reached the rows


def test_a_selection_that_reorders_every_layer_is_combined_in_its_order(tiny):
    """Against a plain reference: layers [-1, 0, 1] of a 3-layer model concatenated in that order
    (the module's forward would select them a second time)."""
    pooling = _pooling(tiny, "concat")
    assert pooling.layer_indexes == (2, 0, 1) and tiny.n_layers == 3
    for method in ("first", "mean"):
        for rows, hidden in zip(tiny.iter_encode_pooled(SENTENCES, pooling, method),
                                tiny.encode(SENTENCES, "all", method)):
            assert np.array_equal(rows, np.concatenate([hidden[2], hidden[0], hidden[1]], axis=-1))


def _layer_norm_mix_reference(pooling: LayerPooling, hidden: np.ndarray) -> np.ndarray:
    """Plain NumPy: ``(layers, words, width)`` of one sentence, each layer normalised by one mean and
    variance over all its values, then mixed by ``gamma * sum_k softmax(w)_k h_k``."""
    hidden = hidden.astype(np.float64)
    normalised = [(layer - layer.mean()) / np.sqrt(layer.var() + 1e-12) for layer in hidden]
    weights = np.exp(pooling.mix.weights.detach().double().numpy())
    weights /= weights.sum()
    return float(pooling.mix.gamma.detach()) * sum(w * layer for w, layer in zip(weights, normalised))


@pytest.mark.parametrize("in_context_", [False, True], ids=["alone", "in context"])
@pytest.mark.parametrize("method", SUBWORD_POOLINGS)
def test_a_scalar_mix_with_layer_norm_normalises_each_sentence_on_its_own(tiny, method, in_context_):
    """Its statistics span the rows it is given: on the device they spanned every sentence of a
    batch, so a sentence's features changed (by 0.07 on the tiny BERT) with its neighbours. Each
    sentence's rows are those it has alone, the host's bit for bit, and a NumPy reference's."""
    pooling = LayerPooling(tiny.n_layers, [-1, 0, 1], "scalar_mix", layer_norm=True).eval()
    with torch.no_grad():
        pooling.mix.weights.copy_(torch.tensor([0.3, -1.2, 0.7]))
        pooling.mix.gamma.fill_(1.7)
    items = (lambda: in_context(SENTENCES, DOC_IDS, 6)) if in_context_ else (lambda: SENTENCES)
    pooled = list(tiny.iter_encode_pooled(items(), pooling, method, in_context=in_context_))
    host = list(Encoder._iter_pooled(tiny, items(), pooling, method, in_context_, "float32", False))
    _assert_equal(pooled, host, tiny.width * (2 if method == "first_last" else 1))
    half = list(tiny.iter_encode_pooled(items(), pooling, method, in_context=in_context_, dtype="float16"))
    assert all(np.array_equal(a, b.astype(np.float16)) for a, b in zip(half, pooled))
    if in_context_:
        return
    hidden = tiny.encode(SENTENCES, pooling.layer_indexes, method)
    for sentence, rows, layers in zip(SENTENCES, pooled, hidden):
        (alone,) = tiny.iter_encode_pooled([sentence], pooling, method)
        np.testing.assert_allclose(rows, alone, rtol=1e-5, atol=1e-5)  # batch neighbours move fp32's last bits only
        if sentence:
            np.testing.assert_allclose(rows, _layer_norm_mix_reference(pooling, layers), rtol=1e-4, atol=1e-5)


def test_float16_rows_are_the_float32_rows_rounded(tiny):
    pooling = _pooling(tiny, "concat")
    full = list(tiny.iter_encode_pooled(SENTENCES, pooling, "first"))
    half = list(tiny.iter_encode_pooled(SENTENCES, pooling, "first", dtype="float16"))
    for rows, expected in zip(half, full):
        assert rows.dtype == np.float16 and np.array_equal(rows, expected.astype(np.float16))


def test_rows_of_a_chunk_share_one_array(tiny_bert_dir):
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=3)
    pooled = list(encoder.iter_encode_pooled(SENTENCES, _pooling(encoder, "mean"), "first"))
    bases = [rows.base for rows in pooled]
    assert bases[0] is bases[1] is bases[2] and bases[3] is bases[4] and bases[0] is not bases[3]
    assert len(bases[0]) == sum(map(len, SENTENCES[:3]))


def test_an_unknown_dtype_or_pooling_is_refused(tiny):
    pooling = _pooling(tiny, "concat")
    with pytest.raises(ValueError, match="dtype='float64' is not one of 'float32', 'float16'"):
        tiny.iter_encode_pooled(SENTENCES, pooling, "first", dtype="float64")  # at the call
    with pytest.raises(ValueError, match="subword_pooling='median' is not one of"):
        tiny.iter_encode_pooled(SENTENCES, pooling, "median")


def test_a_pooling_for_another_layer_count_is_refused(tiny, tiny_elmo_dir):
    """A pooling of fewer layers was used on the first ones (its -1 is not the last layer here), one
    of more raised an IndexError from inside the forward pass."""
    static = StaticVectors(["the"], np.ones((1, 3), dtype=np.float32))
    elmo = load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32")
    for encoder in (tiny, static, elmo):
        for n_layers in (encoder.n_layers - 1, encoder.n_layers + 10):
            if n_layers < 1:
                continue
            pooling = LayerPooling(n_layers, [-1], "concat")
            with pytest.raises(ValueError, match=rf"^pooling is a LayerPooling of {n_layers} layers, but the "
                                                 rf"{encoder.family} encoder .* has {encoder.n_layers}: build it"):
                encoder.iter_encode_pooled(SENTENCES, pooling)  # at the call, before anything is encoded
    with pytest.raises(TypeError, match="^pooling is a str; expected a LayerPooling"):
        tiny.iter_encode_pooled(SENTENCES, "concat")


def test_in_context_takes_in_context_items_only(tiny):
    """Plain sentences with ``in_context=True`` raised an AttributeError from inside the encoder."""
    pooling = _pooling(tiny, "concat")
    with pytest.raises(TypeError, match=r"^item 0 is a list; encoding in context takes the InContext items"):
        list(tiny.iter_encode_pooled(SENTENCES, pooling, in_context=True))
    items = list(in_context(SENTENCES, DOC_IDS, 4))
    with pytest.raises(TypeError, match=r"^item 2 is a tuple"):  # found as the iterator is read
        list(tiny.iter_encode_pooled(iter(items[:2] + [("a",)]), pooling, in_context=True))
    with pytest.raises(TypeError, match=r"^item 0 is a list"):
        list(tiny.iter_encode_pieces_in_context(SENTENCES))
    assert len(list(tiny.iter_encode_pooled(iter(items), pooling, in_context=True))) == len(SENTENCES)


def test_cpu_copies_are_consumed_at_once():
    copies, seen = HostCopies(torch.device("cpu")), []
    copies.put(torch.arange(6.0).reshape(2, 3), seen.append)
    assert len(seen) == 1 and np.array_equal(seen[0], np.arange(6.0).reshape(2, 3))
    copies.flush()
    assert len(seen) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_copies_go_through_two_reused_pinned_buffers():
    copies, seen = HostCopies(torch.device("cuda")), []
    tensors = [torch.full((3, 5), float(i), device="cuda") for i in range(5)] + [torch.ones(2000, 600, device="cuda")]
    for i, tensor in enumerate(tensors):
        copies.put(tensor, lambda array: seen.append(array.copy()))
        assert len(seen) == i  # each copy is consumed at the next put, once complete
    assert len(seen) == len(tensors) - 1
    copies.flush()
    assert [array.shape for array in seen] == [(3, 5)] * 5 + [(2000, 600)]
    for tensor, array in zip(tensors, seen):
        assert np.array_equal(array, tensor.cpu().numpy())
    assert all(buffer.is_pinned() for buffer in copies._buffers)


def test_chunks_are_tokenized_ahead_on_a_producer_in_order():
    from contextembed.encoders.transformer._chunking import _tokenized

    threads = []

    def tokenize(chunk):
        threads.append(threading.current_thread().name)
        if chunk == ["bad"]:
            raise ValueError("sentence 4 is bad")
        return [word.upper() for word in chunk]

    chunks = [["a", "b"], ["c"], ["d"]]
    assert list(_tokenized(iter(chunks), tokenize, ahead=True)) == [(c, [w.upper() for w in c]) for c in chunks]
    assert all(name.startswith("contextembed-tokenize") for name in threads)
    threads.clear()
    assert list(_tokenized(iter(chunks), tokenize, ahead=False))[-1] == (["d"], ["D"])
    assert threads == [threading.current_thread().name] * 3
    produced = _tokenized(iter([["a"], ["bad"], ["c"]]), tokenize, ahead=True)
    assert next(produced) == (["a"], ["A"])  # the outputs before the error come first
    with pytest.raises(ValueError, match="sentence 4"):
        next(produced)


def test_a_list_gives_the_rows_of_an_iterator_over_several_chunks(tiny_bert_dir):
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=2)
    pooling = _pooling(encoder, "concat")
    listed = list(encoder.iter_encode_pooled(SENTENCES * 3, pooling, "mean"))
    streamed = list(encoder.iter_encode_pooled(iter(SENTENCES * 3), pooling, "mean"))
    assert len(listed) == len(streamed) == 15
    assert all(np.array_equal(a, b) for a, b in zip(listed, streamed))


def _index_add_sums(rows: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The reference: torch's ``index_add_`` in float64 from zeros (what the device runs), one row after
    the other: ``(segments, width)``."""
    index = np.concatenate([np.arange(start, start + count) for start, count in zip(starts, counts)] + [np.zeros(0, dtype=np.int64)])
    owner = torch.repeat_interleave(torch.arange(len(counts)), torch.from_numpy(counts))
    return torch.zeros(len(counts), rows.shape[1], dtype=torch.float64).index_add_(
        0, owner, torch.from_numpy(rows[index]).double()).numpy()


@pytest.mark.parametrize("width", [16, 3])
def test_window_sums_are_torch_index_add_bit_for_bit(width):
    """``_segment_sums`` (the CPU's window sums) against torch's ``index_add_`` in float64 (the
    device's), on values of every magnitude where the order of the additions shows: a batch's
    windows (evenly spaced runs of one count, read as one view), and segments in any order,
    overlapping or empty."""
    from contextembed.encoders.transformer._means import _segment_sums

    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((900, width)) * np.exp(rng.uniform(-40, 40, (900, 1)))).astype(np.float32)
    rows[:, 0] = -0.0  # a sum of negative zeros from 0.0 is +0.0
    rows[100:140] = -0.0  # whole segments of negative zeros
    # a batch of 30 rows of 30 positions, each window from position 1, counts non-decreasing in runs
    batch_counts = np.sort(rng.integers(0, 28, 30))
    batch_starts = np.arange(30) * 30 + 1
    # anything else: descending, overlapping, repeated, empty, the last row, one row, negative zeros
    other_starts = np.array([800, 700, 600, 5, 5, 5, 899, 0, 895, 100, 110, 120, 898])
    other_counts = np.array([40, 40, 40, 10, 10, 0, 1, 1, 5, 10, 10, 10, 2])
    for starts, counts in [(batch_starts, batch_counts), (other_starts, other_counts),
                           (np.concatenate([batch_starts, other_starts]), np.concatenate([batch_counts, other_counts]))]:
        expected = _index_add_sums(rows, starts, counts)
        sums = _segment_sums([rows, rows[::-1].copy()], starts, counts)
        assert sums.shape == (2, len(counts), width) and sums.dtype == np.float64
        assert np.array_equal(sums[0], expected) and np.array_equal(np.signbit(sums[0]), np.signbit(expected))
        assert np.array_equal(sums[1], _index_add_sums(rows[::-1].copy(), starts, counts))
        assert not np.signbit(sums[0][:, 0]).any()
    reversed_order = np.stack([rows[start : start + count].astype(np.float64)[::-1].sum(axis=0)
                               for start, count in zip(batch_starts, batch_counts)])
    assert not np.array_equal(_segment_sums([rows], batch_starts, batch_counts)[0], reversed_order)  # order shows
    assert _segment_sums([rows], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).shape == (1, 0, width)


def _on_the_device_paths(monkeypatch):
    """The torch operations every device runs, in place of the CPU's NumPy copies and sums."""
    from contextembed.encoders.transformer import TransformerEncoder
    from contextembed.encoders.transformer._pooled import _Pooled

    monkeypatch.setattr(TransformerEncoder, "_sums_on_host", lambda self, flat: False)
    monkeypatch.setattr(_Pooled, "copies_in_place", lambda self, flat: False)


@pytest.mark.parametrize("method", ["first", "last", "first_last"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_rows_copied_on_the_cpu_are_the_torch_paths_rows(tiny, method, dtype, monkeypatch):
    pooling = _pooling(tiny, "concat")
    copied = list(tiny.iter_encode_pooled(SENTENCES, pooling, method, dtype=dtype))
    in_context_copied = list(tiny.iter_encode_pooled(in_context(SENTENCES, DOC_IDS, 6), pooling, method, in_context=True))
    _on_the_device_paths(monkeypatch)
    dim = pooling.output_width(tiny.width * (2 if method == "first_last" else 1))
    _assert_equal(copied, list(tiny.iter_encode_pooled(SENTENCES, pooling, method, dtype=dtype)), dim)
    reference = list(tiny.iter_encode_pooled(in_context(SENTENCES, DOC_IDS, 6), pooling, method, in_context=True))
    _assert_equal(in_context_copied, reference, dim)


def _piece_means_reference(encoder, sentences, layers) -> np.ndarray:
    """A plain loop over each sentence's pieces as ``iter_encode_pieces`` gives them (the same
    batches): every window's own pieces added one after the other in float64 from 0, the windows'
    sums added in window order, divided by the pieces, rounded to float32 (zeros for no pieces)."""
    from contextembed._inputs.alignment import plan_windows

    means = []
    for encoding in encoder.iter_encode_pieces(sentences, layers):
        hidden = encoding.hidden  # (layers, pieces, width) float32
        total = None
        for window in plan_windows(hidden.shape[1], encoder.window, encoder.stride):
            sums = np.zeros((hidden.shape[0], hidden.shape[2]), dtype=np.float64)  # (layers, width)
            for piece in range(window.own_start, window.own_end):
                sums = sums + hidden[:, piece]
            total = sums if total is None else total + sums
        means.append((total / max(hidden.shape[1], 1)).astype(np.float32))
    return np.stack(means)


def _many_sentences(request, model: str, options: dict):
    """The encoder ``model`` (``"minilm"``: the real MiniLM-L6, skipped without the models extra; else
    a tiny one) with ``options``, and many sentences of each length: windows of long ones beside
    whole sentences in one batch, empty and repeated sentences."""
    if model == "minilm":
        request.getfixturevalue("minilm")
        path = "minilm-l6"
    else:
        path = str(request.getfixturevalue(f"tiny_{model}_dir"))
    encoder = load_encoder(path, device="cpu", precision="fp32", **options)
    sentences = SENTENCES + [s[: len(s) // 2] for s in SENTENCES] + [["unaffable"] * 30, ["a"] * 7, ["a"] * 8, []] + SENTENCES
    return encoder, sentences


@pytest.mark.parametrize("options", [{}, {"max_batch_size": 3, "window": 7, "stride": 3}],
                         ids=["default", "small batches and windows"])
@pytest.mark.parametrize("model", MODELS)
def test_piece_means_are_a_plain_loop_over_the_pieces_bit_for_bit(request, model, options):
    """``encode_piece_means`` builds its model inputs and batches as arrays: the rows, the batches
    (MiniLM's fp32 vectors change with a sentence's batch neighbours) and the sums are those of the
    piece path, to the bit (many sentences of each length, windows of long ones beside whole
    sentences in one batch, empty sentences, repeated ones)."""
    encoder, sentences = _many_sentences(request, model, options)
    for layers in ("all", [-1, 0]):
        means = encoder.encode_piece_means(sentences, layers)
        assert means.dtype == np.float32 and means.shape == (len(sentences), len(encoder.layer_indexes(layers)), encoder.width)
        assert np.array_equal(means, _piece_means_reference(encoder, sentences, layers))
        assert not np.signbit(means[1]).any() and not means[1].any()  # the empty sentence


@pytest.mark.parametrize("chunk_size", [4096, 5], ids=["one chunk", "chunks of 5"])
def test_piece_means_one_at_a_time_are_the_array_bit_for_bit(request, tiny_bert_dir, chunk_size):
    """``iter_encode_piece_means`` yields views of each chunk's means in run order: in input order,
    each sentence's own row (split sentences, empty and repeated ones), the bits of the array form and
    of the plain loop; the same holds for an encoder without its own (static vectors)."""
    from contextembed.encoders import StaticVectors

    encoder, sentences = _many_sentences(request, "bert", {"max_batch_size": 3, "window": 7, "stride": 3,
                                                            "chunk_size": chunk_size})
    rows = list(encoder.iter_encode_piece_means(sentences, [-1, 0]))
    assert len(rows) == len(sentences) and all(row.shape == (2, encoder.width) for row in rows)
    assert np.array_equal(np.stack(rows), encoder.encode_piece_means(sentences, [-1, 0]))
    assert np.array_equal(np.stack(rows), _piece_means_reference(encoder, sentences, [-1, 0]))
    with pytest.raises(TypeError, match="sentence 1"):  # checked at the call, not at the first row
        encoder.iter_encode_piece_means([["a"], "not a token list"])
    static = StaticVectors(["the", "fox"], np.arange(8, dtype=np.float32).reshape(2, 4))
    rows = list(static.iter_encode_piece_means([["the", "fox", "fox"], [], ["fox"]]))
    expected = np.array([[8 / 3, 11 / 3, 14 / 3, 17 / 3], [0, 0, 0, 0], [4, 5, 6, 7]]).astype(np.float32)  # rounded once
    np.testing.assert_array_equal(np.stack(rows)[:, 0], expected)


def test_piece_means_summed_on_the_cpu_are_the_torch_paths(tiny, monkeypatch):
    sentences = SENTENCES + [["unaffable"] * 30]  # far over the 40 positions: windows
    means = tiny.encode_piece_means(sentences)
    _on_the_device_paths(monkeypatch)
    assert np.array_equal(means, tiny.encode_piece_means(sentences))
    assert np.abs(means[-1]).max() > 0


class _DeferredCopies:
    """CUDA's order of :class:`HostCopies` on a CPU: each copy is handed to its consumer only at the
    next put or at flush."""

    staged = True

    def __init__(self, device) -> None:
        self._pending = None

    def put(self, tensor, consume) -> None:
        self.flush()
        self._pending = (tensor.clone(), consume)

    def flush(self) -> None:
        if self._pending is not None:
            (tensor, consume), self._pending = self._pending, None
            consume(tensor.numpy())


def test_piece_means_divided_on_the_device_come_back_as_cuda_hands_them_over(request, monkeypatch):
    """On a device the means are divided there and consumed a batch late, as CUDA's pinned copies
    complete; a sentence in several windows is still written last, over its first window's row."""
    from contextembed.encoders.transformer import _means, _paths

    encoder, sentences = _many_sentences(request, "bert", {"max_batch_size": 3, "window": 7, "stride": 3})
    expected = encoder.encode_piece_means(sentences, [-1, 0])
    assert any(len(encoder.pieces.joined([s])[0]) > 7 for s in sentences)  # some sentences span windows
    _on_the_device_paths(monkeypatch)
    monkeypatch.setattr(_means, "HostCopies", _DeferredCopies)
    monkeypatch.setattr(_paths, "HostCopies", _DeferredCopies)
    assert np.array_equal(encoder.encode_piece_means(sentences, [-1, 0]), expected)
    assert np.array_equal(np.stack(list(encoder.iter_encode_piece_means(sentences, [-1, 0]))), expected)
    assert np.array_equal(expected, _piece_means_reference(encoder, sentences, [-1, 0]))


@pytest.mark.parametrize("options", [{}, {"max_batch_size": 3, "window": 7, "stride": 3, "chunk_size": 4}],
                         ids=["default", "small batches, windows and chunks"])
@pytest.mark.parametrize("model", MODELS)
def test_words_pooled_where_the_model_ran_are_the_hosts_pooling_bit_for_bit(request, model, options):
    """Every path plans its chunk's model inputs and batches one way (``_plan.Plan``), so the words
    pooled where the model ran are the host's pooling of the pieces ``iter_encode_pieces`` gives,
    bit for bit (MiniLM's fp32 vectors change with a sentence's batch neighbours), with windows
    beside whole sentences in one batch, empty sentences, repeated ones and several chunks, and
    the same rows from an iterator."""
    encoder, sentences = _many_sentences(request, model, options)
    for method in SUBWORD_POOLINGS:
        for combine in ("concat", "scalar_mix"):
            pooling = _pooling(encoder, combine)
            pooled = list(encoder.iter_encode_pooled(sentences, pooling, method))
            reference = list(Encoder._iter_pooled(encoder, sentences, pooling, method, False, "float32", False))
            assert [rows.shape[0] for rows in pooled] == [len(s) for s in sentences]
            assert all(np.array_equal(a, b) for a, b in zip(pooled, reference, strict=True)), (method, combine)
            streamed = list(encoder.iter_encode_pooled(iter(sentences), pooling, method))
            assert all(np.array_equal(a, b) for a, b in zip(streamed, pooled, strict=True))
    assert np.abs(np.concatenate(pooled)).max() > 0


def test_picked_words_of_only_empty_sentences_or_none(tiny):
    pooling = _pooling(tiny, "concat")
    dim = pooling.output_width(tiny.width)
    rows = list(tiny.iter_encode_pooled([[], []], pooling, "first"))
    assert [r.shape for r in rows] == [(0, dim), (0, dim)]
    assert list(tiny.iter_encode_pooled([], pooling, "first")) == []


@pytest.mark.parametrize("model", ["bert", "roberta"])
def test_word_pieces_are_the_sentences_pieces_joined(request, model):
    """``PieceTokenizer.word_pieces`` (the lookup of a context-free tokenizer, or the aligned batch
    call of any other) is ``__call__``'s pieces, word after word."""
    encoder = load_encoder(str(request.getfixturevalue(f"tiny_{model}_dir")), device="cpu", precision="fp32")
    sentences = SENTENCES + [[], ["unaffable"] * 3]
    ids, starts, first_word, n_words = encoder.pieces.word_pieces(sentences)
    pieces = encoder.pieces(sentences)
    assert np.array_equal(n_words, [len(s) for s in sentences])
    assert np.array_equal(first_word, np.cumsum([0] + [len(s) for s in sentences])[:-1])
    for i, expected in enumerate(pieces):
        begin, end = starts[first_word[i]], starts[first_word[i] + n_words[i]]
        assert np.array_equal(ids[begin:end], expected.ids)
        assert np.array_equal(starts[first_word[i] : first_word[i] + n_words[i] + 1] - begin, expected.offsets)
    assert starts[-1] == len(ids) and ids.dtype == starts.dtype == np.int64
    empty = encoder.pieces.word_pieces([[], []])
    assert [a.tolist() for a in empty] == [[], [0], [0, 0], [0, 0]]


def test_picked_words_count_progress_by_sentence(tiny_bert_dir, monkeypatch):
    from contextembed.encoders.transformer import _paths

    counted = []

    class Bar:
        def update(self, n):
            counted.append(n)

    monkeypatch.setattr(_paths, "progress_bar", lambda items, show: contextlib.nullcontext(Bar()))
    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=3, max_batch_size=1)
    rows = list(encoder.iter_encode_pooled(SENTENCES, _pooling(encoder, "concat"), "first", show_progress=True))
    assert len(rows) == len(SENTENCES)
    assert sum(counted) == len(SENTENCES) and len(counted) > 2  # counted as batches finish, exact at the end


class _Counter:
    """A bar the caller holds: ``update(n)`` only."""

    def __init__(self):
        self.counts = []

    def update(self, n):
        self.counts.append(n)


def test_piece_means_count_progress_on_the_callers_bar(tiny_bert_dir):
    from contextembed.encoders import StaticVectors

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", chunk_size=3, max_batch_size=1)
    bar = _Counter()
    means = encoder.encode_piece_means(SENTENCES, show_progress=bar)
    assert sum(bar.counts) == len(SENTENCES) and len(bar.counts) > 2  # as batches finish, exact at the end
    assert np.array_equal(means, encoder.encode_piece_means(SENTENCES))
    static = StaticVectors(["the", "fox"], np.arange(8, dtype=np.float32).reshape(2, 4))  # the host's path
    bar = _Counter()
    means = static.encode_piece_means(SENTENCES, show_progress=bar)
    assert sum(bar.counts) == len(SENTENCES) and means.shape == (len(SENTENCES), 1, 4)


def _selected_pooling(n_layers: int, combine: str, layer_norm: bool = False) -> LayerPooling:
    """A pooling of ``n_layers`` selected layers (as the estimators build theirs), with fixed unequal
    weights for a scalar mix."""
    options = {"layer_norm": layer_norm} if combine == "scalar_mix" else {}
    pooling = LayerPooling(n_layers, "all", combine, **options).eval()
    if pooling.mix is not None:
        with torch.no_grad():
            pooling.mix.weights.copy_(torch.linspace(-1.0, 0.8, n_layers))
            pooling.mix.gamma.fill_(1.3)
    return pooling


@pytest.mark.parametrize("options", [{}, {"max_batch_size": 3, "window": 7, "stride": 3, "chunk_size": 5}],
                         ids=["default", "small batches, windows and chunks"])
@pytest.mark.parametrize("combine", COMBINES)
@pytest.mark.parametrize("model", MODELS)
def test_piece_means_pooled_where_the_model_ran_are_the_hosts_pooling_bit_for_bit(request, model, combine, options):
    """``encode_piece_means(pooling=...)`` combines each batch's means where the model ran (and a
    sentence in several windows once its windows are in): the bits of combining the layers of the
    means it gives without a pooling, for every combination and layer selection, empty, repeated and
    split sentences."""
    encoder, sentences = _many_sentences(request, model, options)
    for layers in ("all", [-1, 0], [2]):
        means = encoder.encode_piece_means(sentences, layers)
        pooling = _selected_pooling(means.shape[1], combine)
        with torch.no_grad():
            expected = pooling.combine_selected(torch.from_numpy(np.ascontiguousarray(means.transpose(1, 0, 2)))).numpy()
        pooled = encoder.encode_piece_means(sentences, layers, pooling=pooling)
        assert pooled.dtype == np.float32 and pooled.shape == (len(sentences), pooling.output_width(encoder.width))
        assert np.array_equal(pooled, expected)
        assert not pooled[1].any()  # the empty sentence


def test_piece_means_pooled_on_the_device_come_back_as_cuda_hands_them_over(request, monkeypatch):
    """The device's path (means divided and combined there, consumed a batch late) gives the CPU's bits;
    a sentence in several windows is combined on the host, over its first window's row."""
    from contextembed.encoders.transformer import _means, _paths

    encoder, sentences = _many_sentences(request, "bert", {"max_batch_size": 3, "window": 7, "stride": 3})
    for combine in COMBINES:
        pooling = _selected_pooling(2, combine)
        expected = encoder.encode_piece_means(sentences, [-1, 0], pooling=pooling)
        with monkeypatch.context() as patched:
            _on_the_device_paths(patched)
            patched.setattr(_means, "HostCopies", _DeferredCopies)
            patched.setattr(_paths, "HostCopies", _DeferredCopies)
            assert np.array_equal(encoder.encode_piece_means(sentences, [-1, 0], pooling=pooling), expected)


def test_piece_means_pooled_by_an_encoder_without_its_own_path(tiny_elmo_dir):
    """Static vectors and ELMo combine the means the host computed: the same as pooling them after."""
    from contextembed.pooling import pool_layers_numpy

    static = StaticVectors(["the", "fox"], np.arange(8, dtype=np.float32).reshape(2, 4))
    elmo = load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32")
    for encoder in (static, elmo):
        for combine in COMBINES:
            means = encoder.encode_piece_means(SENTENCES)
            pooling = _selected_pooling(encoder.n_layers, combine)
            pooled = encoder.encode_piece_means(SENTENCES, pooling=pooling)
            assert pooled.flags.c_contiguous and pooled.shape == (len(SENTENCES), pooling.output_width(encoder.width))
            np.testing.assert_array_equal(pooled, pool_layers_numpy(pooling, np.ascontiguousarray(means.transpose(1, 0, 2))))


def test_a_pooling_that_cannot_pool_each_text_alone_is_refused(tiny, monkeypatch):
    """A pooling of another number of layers, a scalar mix with layer_norm (its statistics span every
    text it is given) and a pooling that is not one are refused at the call, before any encoding."""
    from contextembed.encoders.transformer import TransformerEncoder

    monkeypatch.setattr(TransformerEncoder, "_piece_means", lambda *args, **kwargs: pytest.fail("encoded"))
    with pytest.raises(ValueError, match=r"^encode_piece_means: the pooling combines 3 layers, but 2 are selected"):
        tiny.encode_piece_means(SENTENCES, [-1, 0], pooling=_selected_pooling(3, "mean"))
    with pytest.raises(ValueError, match=r"^encode_piece_means: a scalar mix with layer_norm normalises each layer"):
        tiny.encode_piece_means(SENTENCES, [-1, 0], pooling=_selected_pooling(2, "scalar_mix", layer_norm=True))
    with pytest.raises(TypeError, match=r"^encode_piece_means: pooling is a str; expected a LayerPooling"):
        tiny.encode_piece_means(SENTENCES, [-1, 0], pooling="mean")
    static = StaticVectors(["the"], np.ones((1, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"^encode_piece_means: the pooling combines 2 layers, but 1 are selected"):
        static.encode_piece_means(SENTENCES, pooling=_selected_pooling(2, "mean"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_piece_means_pooled_on_cuda_are_the_cpus(tiny_bert_dir):
    sentences = SENTENCES + [["unaffable"] * 30]
    cpu = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")
    cuda = load_encoder(str(tiny_bert_dir), device="cuda", precision="fp32")
    for combine in COMBINES:
        pooling = _selected_pooling(cpu.n_layers, combine)
        np.testing.assert_allclose(cuda.encode_piece_means(sentences, pooling=pooling),
                                   cpu.encode_piece_means(sentences, pooling=pooling), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["first", "mean"])
def test_a_chunk_s_state_lives_on_its_own_object_never_on_the_shared_settings(tiny, method):
    """Each chunk's output and copies to the host are set on a copy of the pooling settings made for
    that chunk (issue 54): the settings every chunk shares are frozen and stay empty, so two runs
    (or stream threads) never write one object."""
    import dataclasses

    from contextembed.encoders.transformer._pooled import _Pooled

    pooling = _pooling(tiny, "concat")
    pooled = _Pooled(pooling, pooling, method, "float32")
    with pytest.raises(dataclasses.FrozenInstanceError):
        pooled.out = np.zeros(1)
    sentences = [["a", "b"], ["c"] * 30, []] * 3
    rows = list(tiny._pooled_words(tiny._planned(sentences, False), pooled))
    assert [r.shape[0] for r in rows] == [len(s) for s in sentences]
    assert pooled.out is None and pooled.copies is None
