"""The estimators' input checks (contextembed.sklearn._checks): each rule in one place, run once per
entry point, the checked value handed on to the estimators inside."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

import contextembed._inputs.sentences
from contextembed.sklearn import BiLSTMCRFTagger, SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder

FAST = {"hidden_size": 8, "max_epochs": 2, "patience": 2, "validation_fraction": 0.0}


@pytest.fixture
def checked(monkeypatch):
    """Counts the token lists validated (``contextembed._inputs.sentences._check_tokens``, the one rule for a
    token list) while the block under ``with checked() as seen:`` runs; a batch is checked sentence
    by sentence here (not at once in C, as a batch without faults is), so that each check counts."""
    seen = []
    monkeypatch.setattr(contextembed._inputs.sentences, "_all_words_fine", lambda sentences: False)
    original = contextembed._inputs.sentences._check_tokens

    def counting(sentence, where):
        seen.append(where)
        return original(sentence, where)

    monkeypatch.setattr(contextembed._inputs.sentences, "_check_tokens", counting)
    return seen


def _embedder(spec):
    return TokenEmbedder(spec, layers="all", combine="scalar_mix", device="cpu", precision="fp32", max_epochs=2)


@pytest.mark.slow
@pytest.mark.parametrize("make", [lambda spec: SequenceTagger(_embedder(spec)),
                                  lambda spec: BiLSTMCRFTagger(_embedder(spec), **FAST)], ids=["sequence", "bilstm"])
def test_a_tagger_checks_each_sentence_once_per_call(bert, sentences, tags, make, checked):
    """Following X through a tagger's fit, each sentence was checked three or four times (the tagger,
    its TokenEmbedder's fit, fit_mix and transform each checked it again)."""
    tagger = make(bert).fit(sentences, tags)  # encodes: the encoder's own check runs on cache misses
    checked.clear()
    clone(tagger).fit(sentences, tags)  # every encoding is cached now: only the entry points check
    assert checked == [f"sentence {i}" for i in range(len(sentences))]
    for call in (tagger.predict, lambda X: tagger.score(X, tags)):
        checked.clear()
        call(sentences)
        assert checked == [f"sentence {i}" for i in range(len(sentences))]


def test_token_embedder_entry_points_check_once(bert, sentences, checked):
    embedder = _embedder(bert).fit(sentences)
    embedder.transform(sentences)  # cached now, here and not by an earlier test: only the entry points check
    for call in (embedder.transform, embedder.transform_sentences, embedder.transform_layers):
        checked.clear()
        call(sentences)
        assert checked == [f"sentence {i}" for i in range(len(sentences))], call


def test_token_embedder_fit_transform_checks_once(bert, sentences, checked):
    embedder = _embedder(bert)
    embedder.fit_transform(sentences)  # encodes (the encoder's own check runs on cache misses)
    checked.clear()
    clone(embedder).fit_transform(sentences)
    assert checked == [f"sentence {i}" for i in range(len(sentences))]


class CountingSplit:
    """A tokenizer that counts the texts it splits (what a text's check does first)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> list:
        self.calls += 1
        return text.split()


@pytest.mark.parametrize("make, X", [
    (lambda bert, split: TextEmbedder(bert, layers=-1, tokenizer=split), ["EU rejects German call", "Peter Blackburn"]),
    (lambda bert, split: TextPairEmbedder(bert, layers=-1, tokenizer=split), [("EU rejects", "German call")] * 2),
], ids=["text", "pair"])
def test_text_estimators_split_each_text_once_in_fit_transform(bert, make, X):
    """fit_transform checked and split every text twice (once in fit, once in transform)."""
    split = CountingSplit()
    features = make(bert, split).fit_transform(X)
    texts = len(X) * (2 if isinstance(X[0], tuple) else 1)
    assert split.calls == texts and features.shape[0] == len(X)


def test_taggers_say_alike_that_they_require_y(bert, sentences):
    """BiLSTMCRFTagger said "requires y: one tag list per sentence", SequenceTagger scikit-learn's words."""
    for tagger in (SequenceTagger(_embedder(bert)), BiLSTMCRFTagger(_embedder(bert), **FAST)):
        name = type(tagger).__name__
        with pytest.raises(ValueError, match=f"^{name} requires y to be passed, but the target y is None; pass one tag "
                                             "list per sentence$"):
            tagger.fit(sentences, None)


def test_class_labels_of_pairs_are_named_per_pair(bert):
    """A wrong number of labels for pairs said "one class label per text"."""
    pairs = [("EU rejects", "German call")] * 3
    with pytest.raises(ValueError, match=r"y must hold one class label per pair: 3 pairs, got y of shape \(2,\)"):
        TextPairEmbedder(bert, layers="all").fit(pairs, [0, 1])
    with pytest.raises(ValueError, match=r"y\[1\] is None, a missing class label; give every pair a label"):
        TextPairEmbedder(bert, layers="all").fit(pairs, [0, None, 1])


@pytest.mark.parametrize("bad", [None, pytest.param(3, marks=pytest.mark.slow),
                                 pytest.param("EU rejects", marks=pytest.mark.slow)], ids=["None", "int", "str"])
def test_every_entry_point_refuses_what_is_not_x(bert, sentences, tags, bad):
    """The entry points of all five estimators, each through its one check."""
    token = _embedder(bert).fit(sentences)
    text = TextEmbedder(bert, layers=-1).fit(["EU rejects"])
    pair = TextPairEmbedder(bert, layers=-1).fit([("EU", "rejects")])
    tagger = SequenceTagger(_embedder(bert)).fit(sentences, tags)
    bilstm = BiLSTMCRFTagger(_embedder(bert), **FAST).fit(sentences, tags)
    calls = {
        "TokenEmbedder.fit_transform": clone(token).fit_transform, "TokenEmbedder.fit_mix": lambda X: token.fit_mix(X, []),
        "TokenEmbedder.transform_layers": token.transform_layers, "TokenEmbedder.transform_sentences": token.transform_sentences,
        "TextEmbedder.fit_transform": clone(text).fit_transform, "TextEmbedder.transform": text.transform,
        "TextPairEmbedder.fit_transform": clone(pair).fit_transform, "TextPairEmbedder.transform": pair.transform,
        "SequenceTagger.fit": lambda X: clone(tagger).fit(X, tags), "SequenceTagger.predict": tagger.predict,
        "BiLSTMCRFTagger.fit": lambda X: clone(bilstm).fit(X, tags), "BiLSTMCRFTagger.predict": bilstm.predict,
        "BiLSTMCRFTagger.score": lambda X: bilstm.score(X, tags),
    }
    says = "single string" if isinstance(bad, str) else f"X is {'None' if bad is None else 'int'}"
    for name, call in calls.items():
        with pytest.raises(TypeError, match=says):
            call(bad)
            pytest.fail(name)


def test_checked_token_lists_are_taken_as_they_are():
    from contextembed.sklearn._checks import TokenLists, check_token_lists

    checked = check_token_lists([["EU", "rejects"], []])
    assert isinstance(checked, TokenLists) and checked == [["EU", "rejects"], []]
    assert check_token_lists(checked) is checked
    assert check_token_lists(checked.subset([1, 0])) == [[], ["EU", "rejects"]]
    with pytest.raises(TypeError, match="sentence 1, word 0 is int"):
        check_token_lists([["EU"], [3]])
    with pytest.raises(ValueError, match="^fit needs at least one sentence; X is empty$"):
        check_token_lists(TokenLists(), fit=True)


def test_doc_ids_hold_one_id_per_sentence():
    pandas = pytest.importorskip("pandas")
    from contextembed.sklearn._checks import check_doc_ids

    assert check_doc_ids(None, 3) is None
    assert check_doc_ids(["a", "a", "b"], 3) == ["a", "a", "b"]
    assert check_doc_ids(np.array([1, 1, 2]), 3) == [1, 1, 2]
    assert check_doc_ids(pandas.DataFrame({"doc": [7, 8]}), 2) == [7, 8]
    for bad, error, message in [
        (["a", "b"], ValueError, "doc_ids has 2 ids but X has 3 sentences; pass one document id per sentence"),
        ("abc", TypeError, "doc_ids must hold one document id per sentence of X, got a single string"),
        (3, TypeError, r"doc_ids is int \('3'\); expected one document id \(e.g. a str or int\) per sentence of X"),
        (["a", None, "b"], ValueError, r"doc_ids\[1\] is None, a missing document id"),
        (["a", float("nan"), "b"], ValueError, r"doc_ids\[1\] is nan, a missing document id"),
        (["a", ["x"], "b"], TypeError, r"doc_ids\[1\] is list \(\"\['x'\]\"\), which is not hashable"),
        (["a", "b", "a"], ValueError, r"doc_ids\[2\] is 'a', a document that already ended at sentence 0"),
        (["a", True, "b"], TypeError, r"doc_ids\[1\] is bool"),
    ]:
        with pytest.raises(error, match=message):
            check_doc_ids(bad, 3)
