"""contextembed.tokenizers: splitting many texts at once gives what splitting each alone gives, errors
included."""

import re

import pytest

from contextembed.tokenizers import get_tokenizer, tokenize_item, tokenize_items

TEXTS = ["EU rejects German call to boycott British lamb.", "", "  ", "Peter Blackburn's U.S.-based co-op, naïve 東京!",
         "tab\tand\nnewline", "3,5 € ... ?"]


def _one_by_one(items, split, what):
    return [tokenize_item(item, split, f"{what} {i}") for i, item in enumerate(items)]


@pytest.mark.parametrize("name", ["auto", "regex", "whitespace"])
def test_texts_split_together_are_the_texts_split_alone(name):
    split = get_tokenizer(name)
    together = tokenize_items(TEXTS, split, "text")
    assert together == _one_by_one(TEXTS, split, "text") and all(type(tokens) is list for tokens in together)
    assert together[0][-1] == ("." if name != "whitespace" else "lamb.")
    mixed = [TEXTS[0], ["token", "lists"], ("kept",), TEXTS[3]]  # token lists go through the one-by-one checks
    assert tokenize_items(mixed, split, "text") == _one_by_one(mixed, split, "text") == [
        split(TEXTS[0]), ["token", "lists"], ["kept"], split(TEXTS[3])]


def test_a_callable_tokenizer_is_checked_text_by_text():
    assert tokenize_items(TEXTS, str.split, "text") == [text.split() for text in TEXTS]
    with pytest.raises(TypeError, match=re.escape("the tokenizer returned str for text 0")):
        tokenize_items(TEXTS, str.upper, "text")


@pytest.mark.parametrize("items, error, message", [
    (["fine", "also fine", "EU\ud800 rejects"], ValueError, "text 2 holds '\\ud800' at character 2, a lone surrogate"),
    (["fine", ["EU", 3]], TypeError, "text 1, token 1 is int"),
    (["fine", None], TypeError, "text 1 is NoneType"),
])
def test_errors_name_the_text_as_one_by_one(items, error, message):
    split = get_tokenizer("auto")
    with pytest.raises(error, match=re.escape(message)) as together:
        tokenize_items(items, split, "text")
    with pytest.raises(error) as alone:
        _one_by_one(items, split, "text")
    assert str(together.value) == str(alone.value)
