"""Document context (contextembed._inputs.documents, the transformer's context rows): against a plain reference.

The reference encodes each sentence inside its document's text with the raw transformers model:
the document's words tokenized at once (``is_split_into_words``), the sentence's pieces with up to
``N`` pieces on each side cut from the document's pieces (the room of one window shared as
docs/sklearn.md says), ``[CLS] ... [SEP]`` around them, and each word's first piece read from every
hidden state.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contextembed._inputs.alignment import split_context
from contextembed._inputs.documents import InContext, check_context, in_context
from contextembed.encoders import load_encoder
from contextembed.extraction import FeatureExtractor

DOC_A = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Peter", "Blackburn"],
    [],
    ["BRUSSELS", "1996-08-22"],
]
DOC_B = [
    ["The", "European", "Commission", "said", "on", "Thursday", "it", "disagreed", "."],
    ["Germany", "'s", "representative", "to", "the", "EU", "said", "."],
]
SENTENCES = DOC_A + DOC_B
DOC_IDS = ["a"] * len(DOC_A) + ["b"] * len(DOC_B)


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def reference(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir), local_files_only=True)
    model = AutoModel.from_pretrained(str(tiny_bert_dir), local_files_only=True).eval()

    def encode(sentences, doc_ids, size, window):
        """``(layers, words, width)`` per sentence: first pieces, each sentence inside its document."""
        out = []
        for i, sentence in enumerate(sentences):
            doc = [s for s, d in zip(sentences, doc_ids) if d == doc_ids[i]]
            k = [j for j, d in enumerate(doc_ids) if d == doc_ids[i]].index(i)
            words = [w for s in doc for w in s]
            first_word = sum(len(s) for s in doc[:k])
            encoded = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
            owners = encoded.word_ids()
            ids = encoded["input_ids"]
            own = [p for p, w in enumerate(owners) if first_word <= w < first_word + len(sentence)]
            if not own:
                out.append(np.zeros((3, 0, 32), dtype=np.float32))
                continue
            start, end = own[0], own[-1] + 1
            if end - start > window:  # windowed as alone: not what this reference covers
                out.append(None)
                continue
            room = window - (end - start)
            left, right = _reference_split(room, min(size, start), min(size, len(ids) - end))
            piece_ids = [tokenizer.cls_token_id] + ids[start - left : end + right] + [tokenizer.sep_token_id]
            with torch.no_grad():
                hidden = model(torch.tensor([piece_ids]), output_hidden_states=True).hidden_states
            firsts = [1 + left + p - start for p in own if p == start or owners[p] != owners[p - 1]]
            out.append(np.stack([h[0, firsts].numpy() for h in hidden]))
        return out

    return encode


def _reference_split(room, left, right):
    """Both sides when they fit; else half each, a side needing less giving the rest to the other."""
    if left + right <= room:
        return left, right
    half = room // 2
    if left < half:
        return left, room - left
    if right < room - half:
        return room - right, right
    return half, room - half


def _ours(encoder, sentences, doc_ids, size):
    items = in_context(sentences, doc_ids, size)
    return [e.words("first") for e in encoder.iter_encode_pieces_in_context(items, "all")]


@pytest.mark.parametrize("size", [1, 3, 8, 38])
def test_context_rows_equal_the_sentence_encoded_inside_its_document(encoder, reference, size):
    """Middle, first and last sentences, a document boundary, an empty sentence between two, and
    (size 38) more context than the neighbours hold."""
    ours = _ours(encoder, SENTENCES, DOC_IDS, size)
    expected = reference(SENTENCES, DOC_IDS, size, encoder.window)
    assert [o.shape[1] for o in ours] == [len(s) for s in SENTENCES]
    for i, (got, want) in enumerate(zip(ours, expected)):
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"sentence {i}")


def test_one_document_without_ids_reaches_across(encoder, reference):
    ours = _ours(encoder, SENTENCES, None, 6)
    expected = reference(SENTENCES, [0] * len(SENTENCES), 6, encoder.window)
    np.testing.assert_allclose(ours[4], expected[4], atol=1e-5)  # DOC_B's first sentence sees DOC_A
    assert not np.allclose(ours[4], _ours(encoder, SENTENCES, DOC_IDS, 6)[4], atol=1e-4)


def test_short_room_is_split_half_each_and_unused_half_goes_to_the_other_side(tiny_bert_dir, reference):
    narrow = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", window=16, stride=8)
    ours = _ours(narrow, SENTENCES, DOC_IDS, 12)
    expected = reference(SENTENCES, DOC_IDS, 12, 16)
    compared = [i for i, want in enumerate(expected) if want is not None and want.shape[1]]
    assert len(compared) >= 2
    for i in compared:
        np.testing.assert_allclose(ours[i], expected[i], atol=1e-5, err_msg=f"sentence {i}")


def test_split_context_rule():
    assert split_context(10, 3, 4) == (3, 4)
    assert split_context(10, 8, 8) == (5, 5)
    assert split_context(11, 8, 8) == (5, 6)
    assert split_context(10, 2, 8) == (2, 8)
    assert split_context(10, 8, 2) == (8, 2)
    assert split_context(0, 5, 5) == (0, 0)


def test_a_sentence_longer_than_the_window_is_windowed_as_alone(tiny_bert_dir):
    narrow = load_encoder(str(tiny_bert_dir), device="cpu", precision="fp32", window=6, stride=3)
    long_sentence = ["The", "European", "Commission", "said", "on", "Thursday", "it", "disagreed", "."]
    sentences = [["Peter", "Blackburn"], long_sentence, ["BRUSSELS"]]
    with_context = _ours(narrow, sentences, None, 6)
    alone = narrow.encode(sentences, "all")
    assert np.array_equal(with_context[1], alone[1])
    assert not np.allclose(with_context[0], alone[0], atol=1e-4)  # the short ones do take context


def test_zero_context_is_todays_output_bit_for_bit(encoder):
    plain = FeatureExtractor(encoder).words(SENTENCES)
    zero = FeatureExtractor(encoder, context=0).words(SENTENCES)
    assert all(np.array_equal(a, b) for a, b in zip(plain, zero))


def test_feature_extractor_pools_the_context_encodings(encoder):
    extractor = FeatureExtractor(encoder, layers="all", combine="mean", context=5)
    rows = list(extractor.iter_words(iter(SENTENCES), doc_ids=iter(DOC_IDS)))
    pieces = _ours(encoder, SENTENCES, DOC_IDS, 5)
    for got, hidden in zip(rows, pieces):
        np.testing.assert_allclose(got, hidden.mean(axis=0), atol=1e-6)


def test_in_context_words_and_documents():
    items = list(in_context(SENTENCES, DOC_IDS, 3))
    assert [item.words for item in items] == SENTENCES
    assert items[0] == InContext(SENTENCES[0], (), ("Peter", "Blackburn", "BRUSSELS"), 3)
    assert items[1].left == ("boycott", "British", "lamb", ".")[-3:] and items[1].right == ("BRUSSELS", "1996-08-22")
    assert items[2] == InContext([], (), (), 3)  # an empty sentence: no rows, no context
    assert items[3].left == ("lamb", ".", "Peter", "Blackburn")[-3:] and items[3].right == ()
    assert items[4].left == () and items[5].right == ()


def test_in_context_streams_an_iterator_in_order():
    many = [[f"w{i}"] for i in range(10000)]
    items = in_context(iter(many), iter([i // 7 for i in range(10000)]), 2)
    for i, item in enumerate(items):
        assert item.words == many[i]


@pytest.mark.parametrize("bad, error, match", [
    (-1, ValueError, ">= 0"), (True, TypeError, "bool"), (2.0, TypeError, "float"), ("4", TypeError, "str"),
    (39, ValueError, "use context <= 38"),
])
def test_bad_context(encoder, bad, error, match):
    with pytest.raises(error, match=match):
        check_context(bad, encoder)


def test_context_refused_by_static_vectors_and_elmo(tiny_elmo_dir, tmp_path):
    from contextembed.encoders._static.vectors import StaticVectors

    static = StaticVectors(["a", "b"], np.ones((2, 3), dtype=np.float32), spec="table")
    assert check_context(0, static) == 0
    with pytest.raises(ValueError, match="static vector is the same whatever"):
        check_context(4, static)
    with pytest.raises(ValueError, match="transformers only"):
        FeatureExtractor(static, context=2)
    elmo = load_encoder(str(tiny_elmo_dir), device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="ELMo reads words"):
        check_context(4, elmo)


def test_context_is_for_word_features(encoder):
    with pytest.raises(ValueError, match="level='word'"):
        FeatureExtractor(encoder, level="text", context=4)
