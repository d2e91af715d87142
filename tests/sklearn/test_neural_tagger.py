"""BiLSTMCRFTagger: a BiLSTM-CRF on frozen features, with the scikit-learn contract."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold

from contextembed.sklearn import BiLSTMCRFTagger, TokenEmbedder, clear_cache, clear_encoders

FAST = {"hidden_size": 32, "max_epochs": 60, "patience": 60, "learning_rate": 1e-2, "dropout": 0.1,
        "word_dropout": 0.0, "validation_fraction": 0.0}


def _tagger(bert, **options):
    embedder = TokenEmbedder(bert, layers="all", combine="scalar_mix", device="cpu", precision="fp32")
    return BiLSTMCRFTagger(embedder, **{**FAST, **options})


@pytest.mark.slow
def test_fits_its_training_data_and_learns_the_mix(bert, sentences, tags):
    tagger = _tagger(bert, char_dim=8).fit(sentences, tags)
    assert tagger.score(sentences, tags) == 1.0
    assert [len(p) for p in tagger.predict(sentences)] == [len(s) for s in sentences]
    assert all(isinstance(t, str) for p in tagger.predict(sentences) for t in p)
    [weights] = tagger.mix_weights_
    assert weights.shape == (3,) and abs(weights.sum() - 1) < 1e-5 and not np.allclose(weights, 1 / 3)
    assert tagger.best_epoch_ <= tagger.n_epochs_ and tagger.validation_f1_ == 1.0


def test_predictions_are_valid_sequences_of_training_tags(bert, sentences, tags):
    tagger = _tagger(bert, max_epochs=2).fit(sentences, tags)  # barely trained: the CRF still forbids
    known = set(t for s in tags for t in s)
    for path in tagger.predict(sentences + [["completely", "new", "words", "here"]]):
        assert set(path) <= known
        for previous, tag in zip(["O"] + path, path):  # IOB2: I-X only after B-X or I-X
            if tag.startswith("I-"):
                assert previous[2:] == tag[2:] and previous != "O"


@pytest.mark.slow
def test_learned_scores_past_any_finite_penalty_never_make_a_forbidden_move(static_path, sentences, tags):
    """With learning_rate=1000 the allowed scores grew past the -1e4 of forbidden moves and a sentence
    started with I-PER under IOB2; forbidden moves are now impossible whatever was learned."""
    tagger = BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 2}).fit(sentences, tags)
    n, allowed = len(tagger.classes_), tagger.allowed_
    state = dict(tagger.model_state_)
    state["crf.start"] = np.where(allowed[n, :n], -1e6, 1e6).astype(np.float32)  # every allowed start scored far below
    state["crf.transitions"] = np.where(allowed[:n, :n], -1e6, 1e6).astype(np.float32)
    tagger.model_state_, tagger._model = state, None
    for path in tagger.predict(sentences + [["completely", "new", "words", "here"]]):
        for previous, tag in zip(["O"] + path, path):
            assert not tag.startswith("I-") or previous[2:] == tag[2:] != "", path


@pytest.mark.slow
def test_huge_mix_logits_give_finite_mix_weights(bert, sentences, tags):
    tagger = _tagger(bert, max_epochs=1).fit(sentences, tags)
    tagger.model_state_["poolings.0.mix.weights"] = np.array([1000.0, 0.0, -5.0], dtype=np.float32)  # np.exp overflowed
    tagger._set_mix_attributes()
    np.testing.assert_allclose(tagger.mix_weights_[0], [1.0, 0.0, 0.0], atol=1e-6)


@pytest.mark.slow
def test_iob1_b_after_o_is_a_chunk_start_it_can_learn(bert):
    """CoNLL-2003's training file has B-MISC after O; an IOB1 tagger trains on it, not refuses it."""
    sentences = [["EU", "rejects", "German", "call"], ["Peter", "met", "the", "British", "team"]] * 3
    tags = [["I-ORG", "O", "B-MISC", "O"], ["I-PER", "O", "O", "I-MISC", "O"]] * 3
    tagger = _tagger(bert, max_epochs=3).fit(sentences, tags)
    assert tagger.tag_scheme_ == "IOB1"
    assert [len(p) for p in tagger.predict(sentences)] == [4, 5] * 3


@pytest.mark.slow
def test_io_tags_train_a_crf_that_allows_every_move(bert, sentences, tags):
    """Issue 38 item 3: bare types (PER, LOC, O) are the IO scheme: every CRF move is valid, and the
    report names the types."""
    io = [[t[2:] if t != "O" else t for t in ts] for ts in tags]
    tagger = _tagger(bert).fit(sentences, io)
    n = len(tagger.classes_)
    assert tagger.tag_scheme_ == "IO"
    assert tagger.allowed_[:n, :n].all() and tagger.allowed_[n, :n].all() and tagger.allowed_[:n, n + 1].all()
    assert tagger.score(sentences, io) == 1.0
    assert [name for name in tagger.report(sentences, io) if "avg" not in name] == ["LOC", "MISC", "ORG", "PER"]
    mixed = [list(ts) for ts in io]
    mixed[1][0] = "B-PER"
    with pytest.raises(ValueError, match=r"tag 'ORG' \(y sentence 0, token 0\) has no scheme prefix, but tag "
                                         r"'B-PER' \(y sentence 1, token 0\) has one"):
        _tagger(bert).fit(sentences, mixed)


@pytest.mark.slow
def test_deterministic_with_random_state(bert, sentences, tags):
    first = _tagger(bert, max_epochs=5, validation_fraction=0.2).fit(sentences, tags)
    second = _tagger(bert, max_epochs=5, validation_fraction=0.2).fit(sentences, tags)
    for name, value in first.model_state_.items():
        np.testing.assert_array_equal(value, second.model_state_[name], err_msg=name)


@pytest.mark.slow
def test_stacked_encoders_and_softmax_head(bert, static_path, sentences, tags):
    stacked = [TokenEmbedder(bert, layers=[-2, -1], combine="concat", device="cpu", precision="fp32"),
               TokenEmbedder(static_path)]
    tagger = BiLSTMCRFTagger(stacked, crf=False, **FAST).fit(sentences, tags)
    assert tagger.score(sentences, tags) == 1.0 and tagger.mix_weights_ == [None, None]
    assert len(tagger.embedders_) == 2


@pytest.mark.slow
def test_persistence_round_trips(bert, sentences, tags):
    skops_io = pytest.importorskip("skops.io")
    from contextembed.sklearn import TRUSTED_TYPES

    tagger = _tagger(bert, max_epochs=3).fit(sentences, tags)
    before = tagger.predict(sentences)
    restored = pickle.loads(pickle.dumps(tagger))
    clear_cache(), clear_encoders()
    assert restored.predict(sentences) == before
    data = skops_io.dumps(tagger)
    assert set(skops_io.get_untrusted_types(data=data)) <= set(TRUSTED_TYPES)
    assert skops_io.loads(data, trusted=TRUSTED_TYPES).predict(sentences) == before


@pytest.mark.slow
def test_sklearn_contract(bert, sentences, tags):
    tagger = _tagger(bert, max_epochs=2)
    assert clone(tagger).get_params().keys() == tagger.get_params().keys()
    search = GridSearchCV(tagger, {"hidden_size": [16, 32]}, cv=KFold(2)).fit(sentences, tags)
    assert len(search.cv_results_["params"]) == 2
    assert 0.0 <= search.score(sentences, tags) <= 1.0


@pytest.mark.parametrize("X, y, error, message", [
    ([], [], ValueError, "X is empty"),
    ([["a", "b"]], None, ValueError, "requires y"),
    ([["a", "b"]], [["O", "O"]], ValueError, "a single tag 'O'; a tagger needs at least two"),
    ([["a", "b"]], [["O"]], ValueError, "sentence 0 has 2 tokens but 1 tags"),
    ([["a", "b"]], [["O", None]], TypeError, "sentence 0, token 1: the label is NoneType"),
    ([["a", "b"], ["c"]], [["B-PER", "O"], ["S-LOC"]], ValueError, "sentence 0, token 1: 'O' cannot follow 'B-PER' in IOBES"),
    ([["a"], ["c"]], [["S-LOC"], ["B-PER"]], ValueError, "sentence 1, token 1: the end cannot follow 'B-PER' in IOBES"),
])
def test_bad_training_data(bert, X, y, error, message):
    with pytest.raises(error, match=message):
        _tagger(bert).fit(X, y)


def test_bad_parameters(bert, sentences, tags):
    for options, message in [({"hidden_size": 0}, "hidden_size must be a positive int"),
                             ({"dropout": 1.0}, r"dropout=1.0 is out of range; expected a finite number in \[0, 1\)"),
                             ({"learning_rate": 0.0}, r"learning_rate=0.0 is out of range; expected a finite number in \(0, "),
                             ({"learning_rate": float("nan")}, r"learning_rate=nan is out of range"),
                             ({"learning_rate": -1e-3}, r"learning_rate=-0.001 is out of range"),
                             ({"random_state": -1}, r"random_state=-1 is out of range"),
                             ({"char_dim": -1}, "char_dim must be an int >= 0"),
                             ({"char_dim": 10**9}, "char_dim=1000000000 is wider than a tagger layer may be"),
                             ({"hidden_size": 1 << 17}, "hidden_size=131072 is wider than a tagger layer"),
                             *[({"projection": bad}, "projection must be None .no projection. or an int from 1 to "
                                "65,536, got " + repr(bad)) for bad in (0, -1, 2.5, 1 << 17, True)]]:
        with pytest.raises(ValueError, match=message):
            _tagger(bert, **options).fit(sentences, tags)
    with pytest.raises(TypeError, match="embedder must be a TokenEmbedder or a list of them"):
        BiLSTMCRFTagger(embedder="minilm-l6").fit(sentences, tags)


@pytest.mark.parametrize("name, value", [("dropout", "0.1"), ("word_dropout", "0"), ("validation_fraction", "0.1"),
                                         ("learning_rate", "1e-3"), ("learning_rate", None), ("random_state", "0"),
                                         ("random_state", 1.5), ("random_state", np.random.default_rng(0))])
def test_a_parameter_of_the_wrong_type_is_a_type_error_naming_it_before_any_work(bert, sentences, tags, name, value,
                                                                                 monkeypatch):
    """A str rate failed in a comparison, and random_state=None in torch.manual_seed, naming nothing."""
    monkeypatch.setattr(TokenEmbedder, "fit", lambda *a, **k: pytest.fail("encoded before the check"))
    with pytest.raises(TypeError, match=rf"{name}={re.escape(repr(value))} is a \w+; expected "):
        _tagger(bert, **{name: value}).fit(sentences, tags)


@pytest.mark.parametrize("random_state", [None, np.random.RandomState(0), np.int64(3)], ids=["None", "RandomState", "np.int64"])
def test_random_state_takes_what_scikit_learn_takes(static_path, sentences, tags, random_state):
    tagger = BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 2}, random_state=random_state)
    assert [len(p) for p in tagger.fit(sentences, tags).predict(sentences)] == [len(s) for s in sentences]


@pytest.mark.slow
def test_a_random_state_instance_gives_a_reproducible_sequence_of_fits(static_path, sentences, tags):
    def two_fits():
        state = np.random.RandomState(1)
        return [BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 2}, random_state=state)
                .fit(sentences, tags).model_state_ for _ in range(2)]

    (first, second), (first_again, second_again) = two_fits(), two_fits()
    for name in first:
        np.testing.assert_array_equal(first[name], first_again[name], err_msg=name)
        np.testing.assert_array_equal(second[name], second_again[name], err_msg=name)
    assert any(not np.array_equal(first[name], second[name]) for name in first)  # a new seed per fit


@pytest.mark.slow
@pytest.mark.parametrize("change", [{"crf": False}, {"hidden_size": 8}, {"projection": 4}, {"num_layers": 2},
                                    {"char_dim": 4}, {"shape_features": False}, {"shape_dim": 3}],
                         ids=lambda change: next(iter(change)))
def test_set_params_after_fit_leaves_the_fitted_network_as_trained(static_path, sentences, tags, change):
    """The network was rebuilt from the new parameters: load_state_dict failed (crf, hidden_size,
    projection), or the inputs no longer matched it."""
    tagger = BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 3}, char_dim=2).fit(sentences, tags)
    before = tagger.predict(sentences)
    restored = pickle.loads(pickle.dumps(tagger)).set_params(**change)  # rebuilt from model_state_
    assert restored.predict(sentences) == before
    assert tagger.set_params(**change).predict(sentences) == before


def test_a_tagger_trained_on_a_gpu_predicts_on_a_cpu_only_machine(static_path, sentences, tags, monkeypatch):
    """device_='cuda' (where it trained) made predict move the network to CUDA on a machine without it."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    tagger = BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 3}).fit(sentences, tags)
    before = tagger.predict(sentences)
    tagger.device_ = "cuda"  # as fitted on a GPU, then pickled and loaded here
    restored = pickle.loads(pickle.dumps(tagger))
    assert restored.predict(sentences) == before and restored.score(sentences, tags) == tagger.score(sentences, tags)
    with pytest.raises(ValueError, match="device='cuda' was asked for but CUDA is not available here; use device='cpu'"):
        restored.set_params(device="cuda").predict(sentences)


def test_length_batches_cover_every_row_once_with_little_padding():
    from contextembed.sklearn._neural_tagger import POOL_BATCHES, _length_batches

    lengths = np.random.default_rng(1).integers(1, 60, size=1000)
    rows = np.arange(0, 1000, 2)  # a training subset
    batches = _length_batches(rows, lengths, 8, np.random.default_rng(0))
    assert sorted(np.concatenate(batches).tolist()) == rows.tolist()
    assert all(1 <= len(b) <= 8 for b in batches)
    # sorted within pools: padding far below random batches'
    padded = sum(len(b) * lengths[b].max() for b in batches)
    random_padded = sum(len(b) * lengths[b].max() for b in np.array_split(rows, len(batches)))
    assert padded < 0.7 * random_padded
    again = _length_batches(rows, lengths, 8, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    other = _length_batches(rows, lengths, 8, np.random.default_rng(1))
    assert not all(np.array_equal(a, b) for a, b in zip(batches, other))
    assert POOL_BATCHES * 8 < len(rows)  # more than one pool was exercised


def _with_empty(items, empty):
    """``items`` with an empty entry first, in the middle and last."""
    return [empty] + items[:3] + [empty] + items[3:] + [empty]


@pytest.mark.slow
def test_empty_sentences_contribute_nothing(static_path, sentences, tags):
    """An empty training sentence was a CRF error ("the end cannot follow the start"); now it adds no
    row: the tagger learns exactly what it learns without it, and predicts [] for it."""
    def tagger():
        return BiLSTMCRFTagger(TokenEmbedder(static_path), **{**FAST, "max_epochs": 3})

    plain = tagger().fit(sentences, tags)
    padded = tagger().fit(_with_empty(sentences, []), _with_empty(tags, []))
    assert plain.model_state_.keys() == padded.model_state_.keys()
    for name, value in plain.model_state_.items():
        np.testing.assert_array_equal(padded.model_state_[name], value, err_msg=name)
    predicted = padded.predict(_with_empty(sentences, []))
    assert predicted == _with_empty(plain.predict(sentences), [])
    assert padded.score(_with_empty(sentences, []), _with_empty(tags, [])) == plain.score(sentences, tags)


def test_training_data_without_tokens_is_refused(bert):
    with pytest.raises(ValueError, match="the training data holds no tokens: all 3 sentences of X are empty"):
        _tagger(bert).fit([[], [], []], [[], [], []])


@pytest.mark.slow
def test_missing_or_dataframe_input_is_named(bert, sentences, tags):
    import pandas as pd

    tagger = _tagger(bert, max_epochs=1).fit(pd.DataFrame({"tokens": sentences}), tags)
    assert tagger.predict(pd.DataFrame({"tokens": sentences})) == tagger.predict(sentences)
    for call in (tagger.predict, lambda X: tagger.score(X, tags), lambda X: _tagger(bert).fit(X, tags)):
        with pytest.raises(TypeError, match="X is None; expected a list of tokenized sentences"):
            call(None)
        with pytest.raises(TypeError, match=r"X is a DataFrame with 2 columns"):
            call(pd.DataFrame({"tokens": sentences, "tags": tags}))
    with pytest.raises(ValueError, match="requires y to be passed, but the target y is None; pass one tag list"):
        tagger.score(sentences, None)


# -- n_threads (issue 38 item 9) ----------------------------------------------------------------


@pytest.mark.slow
def test_n_threads_sets_torch_threads_while_training_and_predicting_and_restores_them(bert, sentences, tags,
                                                                                       monkeypatch):
    import torch

    before = torch.get_num_threads()
    wanted = before + 1  # differs from the current count on any machine
    seen = []
    train_epoch, decode = BiLSTMCRFTagger._train_epoch, BiLSTMCRFTagger._decode
    monkeypatch.setattr(BiLSTMCRFTagger, "_train_epoch",
                        lambda self, *a: seen.append(("train", torch.get_num_threads())) or train_epoch(self, *a))
    monkeypatch.setattr(BiLSTMCRFTagger, "_decode",
                        lambda self, *a, **k: seen.append(("decode", torch.get_num_threads())) or decode(self, *a, **k))
    tagger = _tagger(bert, max_epochs=2, n_threads=wanted).fit(sentences, tags)
    assert torch.get_num_threads() == before
    tagger.score(sentences, tags)
    assert torch.get_num_threads() == before
    assert {kind for kind, _ in seen} == {"train", "decode"} and {n for _, n in seen} == {wanted}
    seen.clear()
    _tagger(bert, max_epochs=1).fit(sentences, tags)  # None: left as it is
    assert {n for _, n in seen} == {before}


def test_n_threads_is_restored_after_an_error(bert, sentences, tags, monkeypatch):
    import torch

    before = torch.get_num_threads()

    def fail(self, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(BiLSTMCRFTagger, "_train_epoch", fail)
    with pytest.raises(RuntimeError, match="boom"):
        _tagger(bert, n_threads=before + 1).fit(sentences, tags)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("n_threads", [0, -1, True, False, 1.5, "2", 10**6, np.float64(2)])
def test_a_bad_n_threads_is_a_value_error_naming_it_before_any_work(bert, sentences, tags, n_threads, monkeypatch):
    monkeypatch.setattr(TokenEmbedder, "fit", lambda *a, **k: pytest.fail("encoded before the check"))
    with pytest.raises(ValueError, match=r"n_threads must be None \(the current thread settings\) or an int from 1 "
                                         rf"to 1,024, got {re.escape(repr(n_threads))}"):
        _tagger(bert, n_threads=n_threads).fit(sentences, tags)


def test_n_threads_is_a_parameter_clone_and_set_params_keep():
    tagger = BiLSTMCRFTagger(n_threads=1)
    assert tagger.get_params()["n_threads"] == 1
    assert clone(tagger).n_threads == 1
    assert tagger.set_params(n_threads=None).n_threads is None
    assert BiLSTMCRFTagger().n_threads is None


def test_decoding_batches_hold_a_bounded_number_of_bytes():
    """256 sentences of 124 words with every layer of a base-sized model made a 1.3 GB decoding
    batch (several times that while it was gathered): batches are cut by their padded bytes."""
    from contextembed.sklearn._neural_tagger import DECODE_BYTES, _decode_batches

    lengths = np.array([3] * 500 + [120] * 30 + [2000])
    order = np.argsort(lengths, kind="stable")
    token_bytes = 13 * 768 * 4
    batches = _decode_batches(order, lengths, 256, token_bytes)
    assert np.array_equal(np.concatenate(batches), order)  # every sentence once, in order
    for batch in batches:
        assert len(batch) <= 256
        assert len(batch) == 1 or len(batch) * lengths[batch].max() * token_bytes <= DECODE_BYTES
    assert [len(b) for b in batches][-1] == 1  # a sentence beyond the bound alone
    assert len(_decode_batches(order, lengths, 256, 4)) == 3  # narrow rows: 256-sentence batches
