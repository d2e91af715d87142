"""Every entry point, fed each bad type: an error of a sensible type naming the sentence and word
(or text and token), never a traceback from tokenizers, spaCy or NumPy, never a coerced result.
And the odd-but-valid inputs give exactly one row per input token."""

from __future__ import annotations

import numpy as np
import pytest
import spacy

from contextembed import load_encoder
from contextembed.encoders import write_word2vec
from contextembed.extraction import FeatureExtractor
from contextembed.sklearn import SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder

GOOD = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
TAGS = [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"]]

#: a word that is not a usable str, and what the message must say about it
BAD_WORDS = {
    "None": (None, TypeError, "is NoneType"),
    "int": (3, TypeError, "is int"),
    "float": (2.5, TypeError, "is float"),
    "nan": (float("nan"), TypeError, "is float"),
    "bool": (True, TypeError, "is bool"),
    "bytes": (b"EU", TypeError, "is bytes"),
    "list": (["EU"], TypeError, "is list"),
    "lone surrogate": ("EU\ud800", ValueError, "lone surrogate"),
    "surrogate escape": ("caf\udce9", ValueError, "lone surrogate"),
}
#: a sentence that is not a list of tokens
BAD_SENTENCES = {
    "None": (None, TypeError, "sentence 1 is a NoneType"),
    "str": ("EU rejects German call", TypeError, "sentence 1 is a plain string"),
    "int": (7, TypeError, "sentence 1 is a int"),
    "dict": ({"tokens": ["a"]}, TypeError, "sentence 1 is a dict"),
}


@pytest.fixture(scope="module")
def static_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("vectors") / "vectors.txt"
    words = ["eu", "rejects", "german", "call", "peter", "blackburn"]
    write_word2vec(path, words, np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32))
    return path


@pytest.fixture(scope="module", params=["transformer", "static", "elmo"])
def encoder(request, tiny_bert_dir, static_path, tiny_elmo_dir):
    spec = {"transformer": tiny_bert_dir, "static": static_path, "elmo": tiny_elmo_dir}[request.param]
    return load_encoder(spec, device="cpu", precision="fp32") if request.param != "static" else load_encoder(spec)


def _with_bad_word(word):
    return [list(GOOD[0]), ["Peter", word]]  # sentence 1, word 1


def _encoder_entry_points(encoder):
    extractor = FeatureExtractor(encoder, layers="all", combine="mean")
    return {
        "encode": encoder.encode,
        "encode_pieces": encoder.encode_pieces,
        "iter_encode": lambda X: list(encoder.iter_encode(X)),
        "FeatureExtractor.words": extractor.words,
        "FeatureExtractor.texts": extractor.texts,
    }


@pytest.mark.parametrize("bad", list(BAD_WORDS))
def test_encoders_name_the_sentence_and_word(encoder, bad):
    word, error, says = BAD_WORDS[bad]
    for name, call in _encoder_entry_points(encoder).items():
        with pytest.raises(error, match="sentence 1, word 1") as raised:
            call(_with_bad_word(word))
        assert says in str(raised.value), name


@pytest.mark.parametrize("bad", list(BAD_SENTENCES))
def test_encoders_name_the_sentence(encoder, bad):
    sentence, error, says = BAD_SENTENCES[bad]
    for name, call in _encoder_entry_points(encoder).items():
        with pytest.raises(error, match=says):
            call([GOOD[0], sentence])


@pytest.mark.parametrize("batch", [None, "EU rejects German call", 3])
def test_encoders_refuse_a_batch_that_is_not_a_list_of_sentences(encoder, batch):
    for call in _encoder_entry_points(encoder).values():
        with pytest.raises(TypeError, match="expected a list of tokenized sentences"):
            call(batch)


def test_odd_but_valid_words_keep_one_row_each(encoder):
    sentences = [[], ["", " ", "\u200b", "\u00ad", "\x00", "a" * 300, "😀", "東京"], ["\n\t"]]
    for array, sentence in zip(encoder.encode(sentences), sentences):
        assert array.shape[1] == len(sentence) and np.isfinite(array).all()


@pytest.fixture(scope="module")
def fitted(tiny_bert_dir):
    spec = str(tiny_bert_dir)
    options = {"layers": "all", "combine": "mean", "device": "cpu", "precision": "fp32"}
    return {
        "token": TokenEmbedder(spec, **options).fit(GOOD),
        "text": TextEmbedder(spec, **options).fit([" ".join(s) for s in GOOD]),
        "tagger": SequenceTagger(TokenEmbedder(spec, **options)).fit(GOOD, TAGS),
    }


def _sklearn_entry_points(fitted, tiny_bert_dir):
    spec = str(tiny_bert_dir)
    fresh = {"layers": -1, "combine": "concat", "device": "cpu", "precision": "fp32"}
    return {
        "TokenEmbedder.fit": lambda X: TokenEmbedder(spec, **fresh).fit(X),
        "TokenEmbedder.transform": fitted["token"].transform,
        "TokenEmbedder.transform_sentences": fitted["token"].transform_sentences,
        "TextEmbedder.fit (token lists)": lambda X: TextEmbedder(spec, **fresh).fit(X),
        "TextEmbedder.transform (token lists)": fitted["text"].transform,
        "SequenceTagger.fit": lambda X: SequenceTagger(TokenEmbedder(spec, **fresh)).fit(X, [["O"] * len(s) for s in X]),
        "SequenceTagger.predict": fitted["tagger"].predict,
        "SequenceTagger.transform_features": fitted["tagger"].transform_features,
        "SequenceTagger.score": lambda X: fitted["tagger"].score(X, [["O"] * len(s) for s in X]),
    }


@pytest.mark.parametrize("bad", list(BAD_WORDS))
def test_estimators_name_the_sentence_and_word(fitted, tiny_bert_dir, bad):
    word, error, says = BAD_WORDS[bad]
    for name, call in _sklearn_entry_points(fitted, tiny_bert_dir).items():
        X = _with_bad_word(word)
        where = "text 1" if "TextEmbedder" in name else "sentence 1"
        with pytest.raises(error, match=f"{where}") as raised:
            call(X)
        message = str(raised.value)
        assert "word 1" in message or "token 1" in message, f"{name}: {message}"
        assert says in message, f"{name}: {message}"


@pytest.mark.parametrize("text, error, says", [
    (None, TypeError, "text 1 is NoneType"),
    (float("nan"), TypeError, "text 1 is float"),
    (3, TypeError, "text 1 is int"),
    (b"EU rejects", TypeError, "text 1 is bytes"),
    ("EU \ud800 rejects", ValueError, "text 1 holds '\\\\ud800' at character 3"),
])
def test_text_embedder_names_the_text(fitted, tiny_bert_dir, text, error, says):
    for call in (fitted["text"].transform, TextEmbedder(str(tiny_bert_dir), layers=-1, device="cpu", precision="fp32").fit):
        with pytest.raises(error, match=says):
            call(["a good text", text])


@pytest.mark.parametrize("tag, says", [(None, "is NoneType"), (1, "is int"), (float("nan"), "is float"), (b"O", "is bytes")])
def test_tagger_refuses_tags_that_are_not_str(tiny_bert_dir, tag, says):
    tagger = SequenceTagger(TokenEmbedder(str(tiny_bert_dir), layers=-1, device="cpu", precision="fp32"))
    with pytest.raises(TypeError, match=f"sentence 1, token 1: the label {says}"):
        tagger.fit(GOOD, [TAGS[0], ["B-PER", tag]])


def test_tag_lists_of_the_wrong_length_name_the_sentence(tiny_bert_dir):
    tagger = SequenceTagger(TokenEmbedder(str(tiny_bert_dir), layers=-1, device="cpu", precision="fp32"))
    with pytest.raises(ValueError, match="sentence 1 has 2 tokens but 1 tags"):
        tagger.fit(GOOD, [TAGS[0], ["B-PER"]])


def test_estimators_give_one_row_per_token_for_odd_words(fitted):
    sentences = [[], ["", " ", "\u200b", "\x00", "😀"], ["a" * 300]]
    assert fitted["token"].transform(sentences).shape[0] == 6
    assert [len(p) for p in fitted["tagger"].predict(sentences)] == [0, 5, 1]


def test_spacy_component_refuses_non_docs_and_spacy_refuses_surrogates(tiny_bert_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(tiny_bert_dir), "device": "cpu", "precision": "fp32"}})
    component = nlp.get_pipe("contextembed")
    for bad in (None, "text", 3, ["EU"]):
        with pytest.raises(TypeError, match="the doc is"):
            component(bad)
        with pytest.raises(TypeError, match="item 1 of the stream"):
            list(component.pipe([nlp.make_doc("fine"), bad]))
    # spaCy's own tokenizer refuses a lone surrogate before any component runs (a ValueError)
    with pytest.raises(ValueError):
        nlp("EU \ud800 rejects")
    doc = nlp("EU  rejects\u200b German\n call")  # whitespace tokens and zero-width characters
    assert doc.tensor.shape[0] == len(doc)


@pytest.mark.parametrize("bad", [None, 3, 2.5, object()], ids=["None", "int", "float", "object"])
def test_estimators_name_x_when_it_is_not_iterable(fitted, tiny_bert_dir, bad):
    """``TextEmbedder().fit(None)`` said "'NoneType' object is not iterable" without naming X."""
    spec = str(tiny_bert_dir)
    fresh = {"layers": -1, "device": "cpu", "precision": "fp32"}
    calls = {**_sklearn_entry_points(fitted, tiny_bert_dir),
             # the entry points' own fit and score derive y from X
             "SequenceTagger.fit": lambda X: SequenceTagger(TokenEmbedder(spec, **fresh)).fit(X, TAGS),
             "SequenceTagger.score": lambda X: fitted["tagger"].score(X, TAGS),
             "TextEmbedder.fit": TextEmbedder(spec, **fresh).fit,
             "TextPairEmbedder.fit": TextPairEmbedder(spec, **fresh).fit}
    received = "None" if bad is None else type(bad).__name__
    for name, call in calls.items():
        with pytest.raises(TypeError, match=f"^X is {received}\\b.*; expected "):
            call(bad)


def _token_frames():
    import pandas as pd

    two = pd.DataFrame({"tokens": GOOD, "tags": TAGS})
    nested = pd.DataFrame({("doc", "tokens"): GOOD, ("doc", "tags"): TAGS})  # MultiIndex columns
    return pd.DataFrame({"tokens": GOOD}), pd.DataFrame({("doc", "tokens"): GOOD}), two, nested


def test_a_one_column_dataframe_is_its_token_lists(fitted):
    """A DataFrame was iterated as its column names ("sentence 0 is a plain string ('tokens')")."""
    one, one_nested, _, _ = _token_frames()
    for frame in (one, one_nested):
        np.testing.assert_array_equal(fitted["token"].transform(frame), fitted["token"].transform(GOOD))
        assert fitted["tagger"].predict(frame) == fitted["tagger"].predict(GOOD)
        assert fitted["tagger"].score(frame, TAGS) == fitted["tagger"].score(GOOD, TAGS)


def test_other_dataframes_name_their_columns_and_the_fix(fitted, tiny_bert_dir):
    """With MultiIndex columns, the column labels were embedded as tokens."""
    _, _, two, nested = _token_frames()
    for frame, columns, fix in [(two, r"\('tokens', 'tags'\)", r"X=df\['tokens'\]\.tolist\(\)"),
                                (nested, r"\(\('doc', 'tokens'\), \('doc', 'tags'\)\)", r"X=df\[\('doc', 'tokens'\)\]")]:
        for name, call in _sklearn_entry_points(fitted, tiny_bert_dir).items():
            if "TextEmbedder" in name:
                continue
            with pytest.raises(TypeError, match=f"X is a DataFrame with 2 columns {columns}; expected one column of "
                                                f"token lists: pass the column that holds them, e.g. {fix}"):
                call(frame)
