"""``check_calibration``: the calibration sentences read once and checked, raw texts split by the
estimators' ``tokenizer="auto"`` (never into characters), every bad item named."""

from __future__ import annotations

import pytest

from contextembed._runtime.backends import check_calibration
from contextembed.tokenizers import regex_tokenize


def test_token_lists_are_kept_and_empty_sentences_left_out():
    sentences = [["the", "cat"], [], ("sat", "down")]
    assert check_calibration(sentences, "openvino", "int8") == [["the", "cat"], ["sat", "down"]]


def test_raw_texts_are_split_by_the_auto_tokenizer_not_into_characters():
    texts = ["the cat sat on the mat.", "New York's officials", "   "]
    got = check_calibration(texts, "auto", "auto")
    assert got == [regex_tokenize(texts[0]), regex_tokenize(texts[1])]
    assert got[0] == ["the", "cat", "sat", "on", "the", "mat", "."]
    assert check_calibration([["mixed", "forms"], "a text"], "openvino", "int8") == [["mixed", "forms"], ["a", "text"]]


def test_a_generator_is_read_once():
    reads = []

    def sentences():
        for sentence in (["the", "cat"], "a text"):
            reads.append(sentence)
            yield sentence

    assert check_calibration(sentences(), "auto", "int8") == [["the", "cat"], ["a", "text"]]
    assert len(reads) == 2


@pytest.mark.parametrize("calibration", ["hello", b"hello", {"the cat": 1}, 5, 3.5])
def test_a_bare_string_or_a_non_sequence_is_a_type_error_naming_calibration(calibration):
    with pytest.raises(TypeError, match=r"^calibration is \w+ .*pass a list of sentences"):
        check_calibration(calibration, "openvino", "int8")


@pytest.mark.parametrize("calibration, where", [
    ([[1, 2, 3]], "calibration sentence 0, token 0 is int"),
    ([["a"], [None, "a"]], "calibration sentence 1, token 0 is NoneType"),
    ([["a", "b", 2.5]], "calibration sentence 0, token 2 is float"),
    ([["a"], 7], "calibration sentence 1 is int"),
    ([["a"], b"raw"], "calibration sentence 1 is bytes"),
])
def test_a_token_that_is_not_a_str_is_a_type_error_naming_sentence_and_token(calibration, where):
    with pytest.raises(TypeError, match=f"^{where}"):
        check_calibration(calibration, "openvino", "int8")


def test_a_lone_surrogate_is_a_value_error_naming_the_sentence():
    with pytest.raises(ValueError, match="calibration sentence 1"):
        check_calibration([["a"], ["b\ud800"]], "openvino", "int8")
    with pytest.raises(ValueError, match="calibration sentence 0 holds"):
        check_calibration(["b\ud800"], "openvino", "int8")


@pytest.mark.parametrize("calibration", [[], [[], ""], iter([])])
def test_no_non_empty_sentence_is_a_value_error(calibration):
    with pytest.raises(ValueError, match="calibration holds no non-empty sentence"):
        check_calibration(calibration, "openvino", "int8")


def test_where_calibration_cannot_take_effect_nothing_is_read():
    def never():
        raise AssertionError("read")
        yield

    with pytest.raises(ValueError, match="backend='torch' quantizes"):
        check_calibration(never(), "torch", "int8")
    with pytest.raises(ValueError, match="precision='fp32' never quantizes"):
        check_calibration(never(), "openvino", "fp32")
    assert check_calibration(None, "torch", "fp32") is None
