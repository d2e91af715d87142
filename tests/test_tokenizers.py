"""contextembed.tokenizers: splitting many texts at once gives what splitting each alone gives, errors
included."""

import re

import numpy as np

import pytest
from hypothesis import example, given, settings
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
    from contextembed.tokenizers import _FINDALL

    for text in texts:
        assert get_tokenizer("auto")(text) == plain.findall(text) == _FINDALL(text), text  # printable or not


#: every ASCII character, the information separators \x1c-\x1f (white space to str.split, invisible
#: to ``\s``) and underscores (word characters that are not alphanumeric) among them
_ASCII = "".join(map(chr, range(128)))
#: the ASCII characters that are neither white space to ``\s`` nor visible
_ASCII_INVISIBLE = "".join(map(chr, [*range(0x09), *range(0x0e, 0x20), 0x7f]))


def _visible(text: str) -> str:
    return text.translate({ord(c): None for c in _ASCII_INVISIBLE})


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(_ASCII + "aZ09_-'. \t\n" * 4), max_size=40))
def test_ascii_text_splits_as_the_plain_expression_run_over_its_visible_characters(text):
    """Each token has a visible character; taking the invisible ones out of the tokens gives the
    plain expression's tokens of the text without them (and the split ahead of the expression
    gives what the expression gives run over the whole text)."""
    from contextembed.tokenizers import _ASCII_FINDALL

    plain = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]", re.ASCII)
    tokens = get_tokenizer("auto")(text)
    assert tokens == _ASCII_FINDALL(text)
    assert [_visible(token) for token in tokens] == plain.findall(_visible(text))


@pytest.mark.parametrize("text, tokens", [
    ("a\x1cb c_d e-f_ 'g h.", ["a\x1cb", "c_d", "e-f_", "'", "g", "h", "."]),
    ("plain words only", ["plain", "words", "only"]),
    ("x\x1f \x1f", ["x\x1f"]),
    ("\x0b\x0c\r\n", []),
])
def test_ascii_edge_cases(text, tokens):
    assert get_tokenizer("regex")(text) == tokens


# -- invisible characters: part of the word they touch, never a word of their own -------------------

#: format characters (soft hyphen, zero-width space and no-break space, word joiner, the bidi marks,
#: embeddings and isolates, a BOM) and controls that are not white space
INVISIBLE = ["\u00ad", "\u200b", "\u200e", "\u200f", "\u2060", "\u202a", "\u202c", "\u2066", "\u2069", "\ufeff",
             "\u061c", "\x00", "\x07", "\x1b", "\x7f", "\x9b"]


@pytest.mark.parametrize("mark", INVISIBLE, ids=repr)
def test_an_invisible_character_joins_the_word_it_touches(mark):
    """A soft hyphen made ``co\\u00adoperate`` three words, the middle one nothing but the hyphen
    (a BERT tokenizer's normaliser removes it, so it became ``[UNK]``)."""
    split = get_tokenizer("auto")
    assert split(f"co{mark}operate") == [f"co{mark}operate"]
    assert split(f"{mark}Hello {mark}world{mark}, co-{mark}op{mark}!{mark}") == [
        f"{mark}Hello", f"{mark}world{mark}", ",", f"co-{mark}op{mark}", f"!{mark}"]
    assert split(f"a {mark} b {mark}{mark}") == ["a", "b"]  # standing alone: nothing, as white space
    assert split(mark) == split(f" {mark}{mark} ") == [] and split(f"({mark})") == [f"({mark}", ")"]
    assert tokenize_items([f"co{mark}op", "x"], split, "text") == [[f"co{mark}op"], ["x"]]


def test_joiners_join_words_and_emoji_but_are_not_words_alone():
    split = get_tokenizer("auto")
    assert split("x\u200dy \u200d \u200c and \u0627\u0644\u200c\u0628") == ["x\u200dy", "and", "\u0627\u0644\u200c\u0628"]
    assert split("\U0001F468\u200d\U0001F469\u200d\U0001F467\ufeff!") == ["\U0001F468\u200d\U0001F469\u200d\U0001F467\ufeff", "!"]


@settings(max_examples=300, deadline=None)
@example(text="👍\u200d👍").via("found by hypothesis")
@example(text="👍\u2060\u200d👍")
@given(text=st.text(alphabet=st.sampled_from(INVISIBLE + ["\u200d", "\u200c", "a", "é", "東", "²", "_", "-", "'", ".",
                                                          "!", "€", "👍", " ", "\n", "\u00a0", "\x1c"]), max_size=30))
def test_any_text_splits_as_the_plain_expression_run_over_its_visible_characters(text):
    """As for ASCII text: no token is invisible alone, and taking the invisible characters out of
    the tokens gives the plain expression's tokens of the text without them, but for a joiner
    between two pictographs (``"👍\u200d👍"``), which Unicode makes one character of, as the
    tokenizer does."""
    import regex

    invisible = {ord(c): None for c in INVISIBLE + ["\u200d", "\u200c", "\x1c"]}
    plain = regex.compile(r"[\w\p{N}]+(?:[-'’.][\w\p{N}]+)*|(?=\S)\X")
    emoji_joiner = regex.compile(r"(?<=\p{Extended_Pictographic})\u200d(?=\p{Extended_Pictographic})")
    kept = "\U000f0000"  # stands for a kept joiner while the others are taken out
    visible = emoji_joiner.sub(kept, text).translate(invisible).replace(kept, "\u200d")
    tokens = get_tokenizer("auto")(text)
    assert all(token.translate(invisible) for token in tokens)
    assert ([token.translate(invisible) for token in tokens]
            == [token.translate(invisible) for token in plain.findall(visible)])


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f"], ids=repr)
def test_information_separators_are_invisible_as_to_the_models(separator):
    """``str.split`` splits at them, but Unicode's white space and the models' pre-tokenizers do not
    (a BERT normaliser removes them): they were tokens of their own, ``[UNK]`` to a BERT tokenizer."""
    for text in (f"a{separator}b c {separator}", f"a{separator}b \u00e9 {separator}"):  # ASCII and the other path
        assert get_tokenizer("auto")(text) == [f"a{separator}b", text[-3]]


def _pieces_of(encoder, text: str) -> list[int]:
    """The piece ids of ``text`` split by the auto tokenizer, as the encoder aligns them."""
    (pieces,) = encoder.pieces([get_tokenizer("auto")(text)])
    return pieces.ids.tolist()


INVISIBLE_TEXTS = ["We co\u00adoperate with the Commission.", "zero\u200bwidth and \u200b alone",
                   "\ufeffEU rejects German call", "right\u200f-to-left \u200emarks\u200f.", "bell\x07 and null\x00s",
                   "word\u2060joiner, \u2066isolate\u2069 and a group\x1dseparator"]


@pytest.mark.parametrize("model", ["tiny_bert", "minilm"])
def test_words_are_what_the_models_own_tokenizer_makes_of_the_text(request, model):
    """The pieces of the auto tokenizer's words are the model's own tokenizer's pieces of the raw
    text (a BERT normaliser removes invisible characters), never an unknown piece it did not make."""
    from contextembed import load_encoder

    if model == "minilm":
        encoder = request.getfixturevalue("minilm")
    else:
        encoder = load_encoder(str(request.getfixturevalue("tiny_bert_dir")), device="cpu", precision="fp32")
    for text in INVISIBLE_TEXTS:
        own = encoder.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert _pieces_of(encoder, text) == own, text
    visible = "We cooperate with the Commission."
    assert _pieces_of(encoder, INVISIBLE_TEXTS[0]) == _pieces_of(encoder, visible)


def test_a_text_embedder_reads_a_soft_hyphen_as_the_model_does(minilm):
    from contextembed.sklearn import TextEmbedder

    embedder = TextEmbedder("minilm-l6", combine="mean", device="cpu", precision="fp32").fit(["a text"])
    hyphenated, plain = embedder.transform(["We co\u00adoperate, \u200b \ufeffdon\u200bt we?", "We cooperate, dont we?"])
    np.testing.assert_allclose(hyphenated, plain, rtol=1e-5, atol=1e-6)
