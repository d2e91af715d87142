"""Sentence pairs: one joint pass with the model's pair template and segment ids, one row per word."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from contextembed import load_encoder
from contextembed._inputs.alignment import pair_template
from contextembed.encoders._base import LongPairWarning

PAIRS = [
    (["Peter", "Blackburn", "met", "EU", "officials"], ["the", "quick", "brown", "fox"]),
    (["New", "York", "Times", "reported"], ["unaffable", "behaviour", "in", "Washington"]),
    (["contextual", "embeddings"], ["piece", "by", "piece", "tokenization"]),
]


def _reference(path, pair):
    """Raw transformers: the tokenizer's pair encoding, first piece of every word of each side."""
    from transformers import AutoModel, AutoTokenizer

    options = {"add_prefix_space": True} if "roberta" in str(path) else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **options)
    model = AutoModel.from_pretrained(path).eval()
    batch = tokenizer(pair[0], pair[1], is_split_into_words=True, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        hidden = torch.stack(model(**batch, output_hidden_states=True).hidden_states)[:, 0].numpy()
    sequence, words = batch.sequence_ids(0), batch.word_ids(0)
    firsts = [[], []]
    for position, (side, word) in enumerate(zip(sequence, words)):
        if side is not None and (position == 0 or words[position - 1] != word or sequence[position - 1] != side):
            firsts[side].append(position)
    return hidden[:, firsts[0]], hidden[:, firsts[1]], hidden[:, 0], batch


@pytest.mark.parametrize("model", ["tiny_bert_dir", "tiny_roberta_dir"])
def test_pairs_equal_raw_transformers(request, model):
    path = request.getfixturevalue(model)
    encoder = load_encoder(path, device="cpu", precision="fp32")
    for (first, second, cls), pair in zip(encoder.encode_pairs(PAIRS), PAIRS):
        want_first, want_second, want_cls, _ = _reference(path, pair)
        assert first.shape == (encoder.n_layers, len(pair[0]), encoder.width)
        assert second.shape == (encoder.n_layers, len(pair[1]), encoder.width)
        np.testing.assert_allclose(first, want_first, atol=1e-4)
        np.testing.assert_allclose(second, want_second, atol=1e-4)
        np.testing.assert_allclose(cls, want_cls, atol=1e-4)


def test_segment_ids_follow_the_tokenizer(tiny_bert_dir, tiny_roberta_dir):
    from transformers import AutoTokenizer

    bert = AutoTokenizer.from_pretrained(tiny_bert_dir)
    template = pair_template(bert)
    assert template.prefix == (bert.cls_token_id,) and template.middle == template.suffix == (bert.sep_token_id,)
    assert template.types == (0, 0, 0, 1, 1)
    _, _, _, batch = _reference(tiny_bert_dir, PAIRS[0])
    first, second = (bert(side, is_split_into_words=True, add_special_tokens=False)["input_ids"] for side in PAIRS[0])
    assert template.ids(np.asarray(first), np.asarray(second)).tolist() == batch["input_ids"][0].tolist()
    assert template.type_ids(len(first), len(second)).tolist() == batch["token_type_ids"][0].tolist()
    roberta = AutoTokenizer.from_pretrained(tiny_roberta_dir, add_prefix_space=True)
    template = pair_template(roberta)
    assert template.prefix == (roberta.bos_token_id,) and template.middle == (roberta.eos_token_id,) * 2
    assert template.types == (0, 0, 0, 0, 0)


def test_the_joint_pass_differs_from_separate_passes(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")
    [(first, _, _)] = encoder.encode_pairs(PAIRS[:1])
    alone = encoder.encode([PAIRS[0][0]])[0]
    assert np.abs(first[1:] - alone[1:]).max() > 1e-3  # contextual layers see the other sentence
    np.testing.assert_allclose(first[0][:, :], alone[0], atol=0.2)  # embeddings differ by segment only


def test_long_pairs_follow_the_window_policy_with_one_warning(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")  # 40 positions
    long_first = (PAIRS[0][0] + PAIRS[1][0]) * 4
    long_second = (PAIRS[0][1] + PAIRS[2][1]) * 3
    pairs = [(long_first, long_second), (long_first, ["short"]), (["short"], long_second), PAIRS[0]]
    with pytest.warns(LongPairWarning, match="3 of 4 sentence pairs hold more than") as record:
        encoded = encoder.encode_pairs(pairs)
    assert len(record) == 1
    for (first, second, cls), (a, b) in zip(encoded, pairs):
        assert first.shape[1] == len(a) and second.shape[1] == len(b)
        assert np.isfinite(first).all() and np.isfinite(second).all() and cls is not None
    # the pair that fits is exactly what it is alone
    [(first, second, cls)] = encoder.encode_pairs([PAIRS[0]])
    np.testing.assert_allclose(encoded[3][0], first, atol=1e-5)


def test_pair_windows_tile_both_sides(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")
    budget = encoder._pair_budget()
    for n_first, n_second in [(5, 5), (50, 3), (3, 50), (60, 70), (budget, 1), (0, 100)]:
        first, second = encoder._pair_windows(n_first, n_second)
        for windows, n in ((first, n_first), (second, n_second)):
            assert windows[0].own_start == 0 and windows[-1].own_end == n
            assert all(a.own_end == b.own_start for a, b in zip(windows, windows[1:]))
        assert (first[0].end - first[0].start) + (second[0].end - second[0].start) <= budget
    # a side that fits in half the budget is kept whole, and the other side takes the rest
    first, second = encoder._pair_windows(50, 3)
    assert len(second) == 1 and (second[0].start, second[0].end) == (0, 3)
    assert {w.end - w.start for w in first} == {budget - 3}
    first, second = encoder._pair_windows(60, 70)  # both long: half each
    assert {w.end - w.start for w in first} == {budget // 2} and {w.end - w.start for w in second} == {budget - budget // 2}


@pytest.mark.parametrize("family", ["static", "elmo"])
def test_other_families_encode_each_side_on_its_own(family, tiny_elmo_dir, tmp_path):
    from contextembed.encoders import write_word2vec

    if family == "static":
        words = sorted({w.lower() for a, b in PAIRS for w in a + b})
        write_word2vec(tmp_path / "v.txt", words, np.random.default_rng(0).normal(size=(len(words), 6)).astype("f"))
        encoder = load_encoder(tmp_path / "v.txt")
    else:
        encoder = load_encoder(tiny_elmo_dir, device="cpu", precision="fp32")
    for (first, second, cls), (a, b) in zip(encoder.encode_pairs(PAIRS), PAIRS):
        assert cls is None
        np.testing.assert_allclose(first, encoder.encode([a])[0], atol=1e-6)
        np.testing.assert_allclose(second, encoder.encode([b])[0], atol=1e-6)


@pytest.mark.parametrize("pairs, error, message", [
    ([PAIRS[0], None], TypeError, "pair 1 is None; expected a \\(first, second\\) pair"),
    ([PAIRS[0], (["a"],)], TypeError, "pair 1 is .*expected a \\(first, second\\) pair"),
    ([PAIRS[0], "a b"], TypeError, "pair 1 is 'a b'"),
    ([(["a"], None)], TypeError, "pair 0, side 1 is a NoneType"),
    ([(["a"], "b c")], TypeError, "pair 0, side 1 is a plain string"),
    ([(["a", 3], ["b"])], TypeError, "pair 0, side 0, word 1 is int"),
    ([(["a"], ["b\ud800"])], ValueError, "pair 0, side 1, word 0 .*lone surrogate"),
    (None, TypeError, "expected a list of \\(first, second\\) sentence pairs"),
])
def test_bad_pairs_name_the_pair(tiny_bert_dir, pairs, error, message):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")
    with pytest.raises(error, match=message):
        encoder.encode_pairs(pairs)


def test_an_empty_side_has_no_rows_and_the_pair_keeps_its_cls(tiny_bert_dir):
    encoder = load_encoder(tiny_bert_dir, device="cpu", precision="fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # short pairs warn nothing
        [(first, second, cls), (first2, second2, cls2)] = encoder.encode_pairs([(["a", "b"], []), ([], [])])
    assert first.shape == (3, 2, 32) and second.shape == (3, 0, 32) and cls.shape == (3, 32)
    assert first2.shape[1] == second2.shape[1] == 0 and np.isfinite(cls2).all()
