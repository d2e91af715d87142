"""The one check every sentence passes through (``contextembed._inputs.sentences``): a batch of good
sentences is checked at once, and whatever is wrong is named by sentence and word."""

import pytest

from contextembed._inputs.sentences import check_sentence_chunks, check_sentences

GOOD = [["EU", "rejects"], [], ("a", "tuple"), ["ça", "東京", ""]]

BAD = {
    "a plain string": (GOOD + ["EU rejects"], TypeError, r"^sentence 4 is a plain string \('EU rejects'\)"),
    "a word that is not a str": (GOOD + [["ok", None]], TypeError, r"^sentence 4, word 1 is NoneType \(None\); every token must be a str"),
    "a number": (GOOD + [["ok", 3]], TypeError, r"^sentence 4, word 1 is int"),
    "bytes": (GOOD + [[b"ok"]], TypeError, r"^sentence 4, word 0 is bytes"),
    "a lone surrogate": (GOOD + [["ok", "caf\udce9"]], ValueError, r"^sentence 4, word 1 .* at character 3, a lone surrogate"),
    "two halves of a pair in two words": (GOOD + [["\ud83d", "\ude00"]], ValueError, r"^sentence 4, word 0 .* lone surrogate"),
    "not a sequence": (GOOD + [None], TypeError, r"^sentence 4 is a NoneType"),
}


def test_good_sentences_come_back_as_they_are():
    assert check_sentences(GOOD) == GOOD and check_sentences(iter(GOOD)) == GOOD
    assert check_sentences([]) == []
    assert [len(chunk) for chunk in check_sentence_chunks(iter(GOOD * 3), 5)] == [5, 5, 2]


@pytest.mark.parametrize("case", BAD)
def test_what_is_wrong_is_named_by_sentence_and_word(case):
    sentences, error, message = BAD[case]
    with pytest.raises(error, match=message):
        check_sentences(sentences)
    with pytest.raises(error, match=message):
        list(check_sentence_chunks(iter(sentences), 2))  # counted across chunks


def test_a_sequence_of_another_kind_is_checked_word_by_word():
    class Words(list):
        pass

    assert check_sentences([Words(["a", "b"])]) == [["a", "b"]]
    with pytest.raises(TypeError, match=r"^sentence 0, word 1 is int"):
        check_sentences([Words(["a", 1])])
