"""contextembed.tokenizers: splitting many texts at once gives what splitting each alone gives, errors
included."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@pytest.mark.parametrize("text, tokens", [
    ("caf\u00e9 cr\u00e8me", ["caf\u00e9", "cr\u00e8me"]),  # NFC
    ("cafe\u0301 cre\u0300me", ["cafe\u0301", "cre\u0300me"]),  # NFD: the accents stay in their words
    ("हिन्दी भाषा, नमस्ते!", ["हिन्दी", "भाषा", ",", "नमस्ते", "!"]),  # vowel signs and the virama
    ("தமிழ் மொழி", ["தமிழ்", "மொழி"]),
    ("x\u200dy and \u0627\u0644\u200c\u0628", ["x\u200dy", "and", "\u0627\u0644\u200c\u0628"]),  # joiners
    ("\U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F44D\U0001F3FD\U0001F1EB\U0001F1F7!",
     ["\U0001F468\u200d\U0001F469\u200d\U0001F467", "\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7", "!"]),
    ("x\u00b2 H\u2082O \u00bd", ["x\u00b2", "H\u2082O", "\u00bd"]),  # numbers stay word characters
    ("a \u0301b", ["a", "\u0301b"]),  # a mark after a space starts a word; the space is never a token
    ("naïve co-op’s U.S.-based", ["naïve", "co-op’s", "U.S", ".", "-", "based"]),
])
def test_auto_keeps_combining_marks_joiners_and_grapheme_clusters(text, tokens):
    assert get_tokenizer("auto")(text) == tokens
    assert tokenize_items([text], get_tokenizer("regex"), "text") == [tokens]


def test_nfc_and_nfd_texts_split_into_the_same_words():
    import unicodedata

    text = "Crème brûlée à Montréal, Ñandú and Ångström; हिन्दी; 한국어"
    nfc, nfd = (get_tokenizer("auto")(unicodedata.normalize(form, text)) for form in ("NFC", "NFD"))
    assert len(nfc) == len(nfd) == 12
    assert [unicodedata.normalize("NFC", token) for token in nfd] == nfc


def test_text_without_marks_splits_as_the_standard_library_rule():
    """Where no combining mark, joiner or multi-code-point symbol occurs, the rule is the plain
    ``\\w+(?:[-'’.]\\w+)*|[^\\w\\s]`` of ``re`` (ASCII takes that path; other text must agree)."""
    plain = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]")
    texts = TEXTS + ["Äpfel, Birnen & Œufs — 3½ km² über'm Fluß.", "日本語のテキスト。", "¿Qué? «Ça» 1.5e-3 _x_",
                     "Ελληνικά: αβγ; кириллица — ок", "tab\t\u00a0nbsp\u2003em"]
    for text in texts:
        assert get_tokenizer("auto")(text) == plain.findall(text), text


#: every ASCII character, the information separators \x1c-\x1f (white space to str.split, a token to
#: ``\s``) and underscores (word characters that are not alphanumeric) among them
_ASCII = "".join(map(chr, range(128)))


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(_ASCII + "aZ09_-'. \t\n" * 4), max_size=40))
def test_ascii_text_splits_as_the_plain_expression_run_over_it_whole(text):
    plain = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]", re.ASCII)
    assert get_tokenizer("auto")(text) == plain.findall(text)


@pytest.mark.parametrize("text, tokens", [
    ("a\x1cb c_d e-f_ 'g h.", ["a", "\x1c", "b", "c_d", "e-f_", "'", "g", "h", "."]),
    ("plain words only", ["plain", "words", "only"]),
    ("x\x1f", ["x", "\x1f"]),
    ("\x0b\x0c\r\n", []),
])
def test_ascii_edge_cases(text, tokens):
    assert get_tokenizer("regex")(text) == tokens
