import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from contextembed._inputs.alignment import PieceTokenizer, check_window, plan_windows

# words that tokenizers turn into nothing, odd punctuation, unicode, long words
WORDS = st.one_of(
    st.sampled_from(
        ["the", "New", "York", "unaffable", ",", "!!", "\u200b", "\xad", "", " ", "\t", "naïve", "東京",
         "😀", "3,5", "U.S.", "don't", "a" * 60, "Washington", "\x00", "e\u0301"]
    ),
    st.text(min_size=0, max_size=8),
)
SENTENCES = st.lists(st.lists(WORDS, max_size=12), min_size=1, max_size=4)


def _reference(tokenizer, sentence):
    """Tokenize each word alone; a word with no pieces gets [UNK]."""
    ids, counts = [], []
    for word in sentence:
        pieces = tokenizer([word], is_split_into_words=True, add_special_tokens=False)["input_ids"]
        pieces = pieces or [tokenizer.unk_token_id]
        ids.extend(pieces)
        counts.append(len(pieces))
    return ids, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tokenizer(request, tiny_bert_dir, tiny_roberta_dir):
    from contextembed.encoders._hf_files import _tokenizer_options

    path = str(tiny_bert_dir if request.param == "bert" else tiny_roberta_dir)
    return AutoTokenizer.from_pretrained(path, local_files_only=True, **_tokenizer_options(path))


@settings(max_examples=80, deadline=None)
@given(sentences=SENTENCES)
def test_alignment_matches_per_word_reference(tokenizer, sentences):
    aligned = PieceTokenizer(tokenizer)(sentences)
    assert len(aligned) == len(sentences)
    for sentence, pieces in zip(sentences, aligned):
        ids, offsets = _reference(tokenizer, sentence)
        assert len(pieces.offsets) == len(sentence) + 1
        assert np.all(np.diff(pieces.offsets) >= 1)
        assert pieces.ids.tolist() == ids
        assert pieces.offsets.tolist() == offsets.tolist()


@settings(max_examples=40, deadline=None)
@given(sentences=SENTENCES)
def test_joined_pieces_are_the_sentences_pieces_one_after_the_other(tokenizer, sentences):
    """With the word cache (BERT) and by the batch call (RoBERTa), empty sentences included."""
    pieces = PieceTokenizer(tokenizer)
    sentences = sentences + [[]]
    ids, n_pieces = pieces.joined(sentences)
    each = pieces(sentences)
    assert ids.dtype == n_pieces.dtype == np.int64
    assert ids.tolist() == [i for p in each for i in p.ids.tolist()]
    assert n_pieces.tolist() == [p.n_pieces for p in each]


@settings(max_examples=80, deadline=None)
@given(words=st.lists(WORDS, max_size=30))
def test_words_alone_match_one_word_sentences(tokenizer, words):
    ids, counts = PieceTokenizer(tokenizer).words_alone(words)
    assert len(counts) == len(words) and np.all(counts >= 1)
    expected = [_reference(tokenizer, [word])[0] for word in words]
    assert ids.tolist() == [i for pieces in expected for i in pieces]
    assert counts.tolist() == [len(pieces) for pieces in expected]


def _aligned_by_batch_call(tokenizer, sentences):
    """The tokenizer's batch call aligned to the words, without the word cache."""
    pieces = PieceTokenizer(tokenizer)
    pieces._words = None
    return pieces(sentences)


def _assert_same_pieces(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.ids.dtype == b.ids.dtype == np.int64 and a.offsets.dtype == b.offsets.dtype == np.int64
        assert a.ids.tolist() == b.ids.tolist() and a.offsets.tolist() == b.offsets.tolist()


@settings(max_examples=60, deadline=None)
@given(sentences=SENTENCES, again=SENTENCES)
def test_cached_word_pieces_are_the_batch_calls(tiny_bert_dir, sentences, again):
    """WordPiece cuts each word alone: its pieces are looked up, new words and known ones alike."""
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    pieces = PieceTokenizer(tokenizer)
    assert pieces._words is not None
    _assert_same_pieces(pieces(sentences), _aligned_by_batch_call(tokenizer, sentences))
    both = sentences + again  # known words and new ones, in one call
    _assert_same_pieces(pieces(both), _aligned_by_batch_call(tokenizer, both))


def test_only_tokenizers_that_cut_words_alone_are_cached(tiny_bert_dir, tiny_roberta_dir):
    from tokenizers import pre_tokenizers

    from contextembed._inputs.alignment import context_free
    from contextembed.encoders._hf_files import _tokenizer_options

    bert = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    roberta = AutoTokenizer.from_pretrained(str(tiny_roberta_dir), local_files_only=True,
                                            **_tokenizer_options(str(tiny_roberta_dir)))
    assert context_free(bert) and not context_free(roberta)
    assert PieceTokenizer(roberta)._words is None
    bert.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()  # marks a sentence's first word
    assert not context_free(bert) and PieceTokenizer(bert)._words is None


def test_the_word_cache_is_bounded_and_follows_the_vocabulary(tiny_bert_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    pieces = PieceTokenizer(tokenizer)
    pieces._words.max_words = 5
    sentences = [["the", "New", "York", "unaffable"], ["naïve", "東京", "fox", "the", "a" * 150, ""]]
    for _ in range(2):
        _assert_same_pieces(pieces(sentences), _aligned_by_batch_call(tokenizer, sentences))
        assert len(pieces._words._known) <= 5
    before = pieces([["unaffable"]])[0].ids.tolist()
    tokenizer.add_tokens(["unaffable"])  # a new vocabulary: the word is one piece now
    after = pieces([["unaffable"]])[0].ids.tolist()
    assert len(before) > 1 and after == [tokenizer.convert_tokens_to_ids("unaffable")]
    _assert_same_pieces(pieces(sentences), _aligned_by_batch_call(tokenizer, sentences))


def test_roberta_words_get_word_initial_pieces(tiny_roberta_dir):
    from contextembed.encoders._hf_files import _tokenizer_options

    path = str(tiny_roberta_dir)
    tokenizer = AutoTokenizer.from_pretrained(path, **_tokenizer_options(path))
    pieces = PieceTokenizer(tokenizer)([["the", "fox"]])[0]
    tokens = tokenizer.convert_ids_to_tokens(pieces.ids.tolist())
    assert tokens[pieces.offsets[0]].startswith("Ġ") and tokens[pieces.offsets[1]].startswith("Ġ")


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 400), window=st.integers(1, 64), data=st.data())
def test_windows_tile_and_maximise_context(n, window, data):
    stride = data.draw(st.integers(1, window))
    windows = plan_windows(n, window, stride)
    owned = np.concatenate([np.arange(w.own_start, w.own_end) for w in windows]) if n else np.array([])
    assert owned.tolist() == list(range(n))
    for w in windows:
        assert 0 <= w.start <= w.own_start <= w.own_end <= w.end <= n
        assert w.end - w.start == min(window, n)
    # a piece's owner gives it at least as much two-sided context as any other window holding it
    for w in windows:
        for p in range(w.own_start, w.own_end):
            best = min(p - w.start if w.start else n, w.end - 1 - p if w.end < n else n)
            for other in windows:
                if other.start <= p < other.end:
                    left = p - other.start if other.start else n
                    right = other.end - 1 - p if other.end < n else n
                    assert min(left, right) <= best + 1


def test_window_validation():
    with pytest.raises(ValueError, match="stride must be between 1 and window=10"):
        check_window(10, 11)
    with pytest.raises(ValueError, match=r"window=0 is out of range; expected an integer in \[1, "):
        check_window(0, 1)
    with pytest.raises(TypeError, match="window=True is a bool"):  # not the window of one piece
        check_window(True, 1)
    with pytest.raises(TypeError, match="stride=2.0 is a float"):
        check_window(4, 2.0)
    with pytest.raises(ValueError, match="does not fit the model"):
        check_window(600, 100, max_window=510)


def test_a_piece_tokenizer_pickles_with_an_empty_word_cache(tiny_bert_dir):
    import pickle

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    pieces = PieceTokenizer(tokenizer)
    sentences = [["the", "New", "York", "unaffable"], []]
    first = pieces(sentences)
    copy = pickle.loads(pickle.dumps(pieces))
    assert copy._words is not None and not copy._words._known and copy._words._pieces is copy
    _assert_same_pieces(copy(sentences), first)
    assert len(copy._words._known) == 4


def test_the_word_cache_drops_its_oldest_words_and_stays_exact_call_after_call(tiny_bert_dir):
    import random

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    pieces = PieceTokenizer(tokenizer)
    cache = pieces._words
    cache.max_words = 7
    rng = random.Random(0)
    vocabulary = ["the", "New", "York", "unaffable", "naïve", "東京", "fox", "", "a" * 150, "co-op", "U.S.", "x", "jumps"]
    for _ in range(40):
        sentences = [rng.sample(vocabulary, rng.randint(0, 6)) for _ in range(rng.randint(1, 4))]
        _assert_same_pieces(pieces(sentences), _aligned_by_batch_call(tokenizer, sentences))
        # the newest words stay, in the order they came; the tables hold exactly their pieces
        ids, starts, counts = cache._tables()
        assert len(cache._known) <= 7 and sorted(cache._known.values()) == list(range(len(cache._known)))
        assert len(counts) == len(starts) == len(cache._known) and len(ids) == int(counts.sum())
        for word, slot in cache._known.items():
            assert ids[starts[slot] : starts[slot] + counts[slot]].tolist() == list(pieces.words_alone([word])[0])
    newest = [word for sentence in sentences for word in sentence][-1:]
    assert not newest or newest[0] in cache._known


def test_the_word_cache_grows_in_place_without_changing_what_a_call_read(tiny_bert_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    pieces = PieceTokenizer(tokenizer)
    cache = pieces._words
    batches = [[[f"w{i}x{j}" for j in range(start, start + 400)] for i in range(2)] for start in (0, 400, 800)]
    read = []
    for sentences in batches:  # 800 new words of several pieces each: the tables grow past 1024, twice
        _assert_same_pieces(pieces(sentences), _aligned_by_batch_call(tokenizer, sentences))
        ids, starts, counts = cache._tables()
        read.append((ids, ids.copy(), starts.copy(), counts.copy()))
    assert len(cache._known) == 2400 and len(read[-1][0]) > 2048
    for ids, copy, _, _ in read:  # later words went after what earlier calls held, or into new arrays
        assert np.array_equal(ids, copy)
    ids, starts, counts = cache._tables()
    for before_ids, _, before_starts, before_counts in read:
        assert np.array_equal(starts[: len(before_starts)], before_starts) and np.array_equal(counts[: len(before_counts)], before_counts)
        assert np.array_equal(ids[: len(before_ids)], before_ids)
