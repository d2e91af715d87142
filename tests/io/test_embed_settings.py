"""EmbedSettings: one frozen value for what an output is made with, checked once where it is built,
and the provenance record written from it (the same bytes as before it existed)."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import asdict

import numpy as np
import pytest

from contextembed.encoders import write_word2vec
from contextembed.encoders._registry import EncoderRef
from contextembed.io import embed_file, expected_record, read_output_record
from contextembed.io._pipeline import embed_with, record_for
from contextembed.io._settings import OPTION_NAMES, EmbedSettings
from contextembed.pooling import TEXT_DEFAULTS

WORDS = ["the", "quick", "brown", "fox", "lazy", "dog"]
LINES = "the quick brown fox\nthe lazy dog\nfox\n"


@pytest.fixture
def files(tmp_path):
    """A vectors file and an input, both fixed bytes (so their hashes are known)."""
    vectors = tmp_path / "vectors.txt"
    table = (np.arange(len(WORDS) * 4, dtype=np.float32).reshape(len(WORDS), 4) - 10) / 8
    write_word2vec(vectors, WORDS, table)
    source = tmp_path / "in.txt"
    source.write_text(LINES, encoding="utf-8")
    return str(vectors), str(source)


REF = EncoderRef("vectors.txt")


# -- the object -----------------------------------------------------------------------------------


def test_settings_are_frozen_and_hashable():
    settings = EmbedSettings(REF, layers=[0], level="word")
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.level = "text"
    assert settings.layers == (0,)  # a list is held as a tuple
    assert hash(settings) == hash(EmbedSettings(REF, layers=(0,)))
    assert len({settings, EmbedSettings(REF, layers=[0]), EmbedSettings(REF, level="text")}) == 2


def test_the_level_defaults_are_resolved_at_construction():
    word = EmbedSettings(REF)
    assert (word.tokenizer, word.subword_pooling) == ("whitespace", "first")
    # the encoder's own layers and combine; the text options do not apply to word rows
    assert (word.layers, word.combine, word.text_pooling, word.normalize) == (None, None, None, None)
    text = EmbedSettings(REF, level="text")
    assert {name: getattr(text, name) for name in asdict(TEXT_DEFAULTS)} == asdict(TEXT_DEFAULTS)
    assert text == EmbedSettings(REF, level="text", **asdict(TEXT_DEFAULTS))  # the same output, equal


def test_keywords_build_the_same_settings_back():
    settings = EmbedSettings(EncoderRef("m", "cpu", "fp32", backend="torch"), level="text", layers=[-1, -2],
                             text_pooling="max", dtype="float16", chunk_sentences=7)
    keywords = settings.keywords()
    assert set(keywords) == set(OPTION_NAMES) | {"device", "precision", "backend"}
    assert EmbedSettings.from_keywords("m", **keywords) == settings
    assert dataclasses.replace(settings) == settings  # checking resolved values again changes nothing


@pytest.mark.parametrize("given, error, message", [
    ({"level": "sentence"}, ValueError, "level='sentence' is not one of 'word', 'text'"),
    ({"tokenizer": "nltk"}, ValueError, "tokenizer='nltk' is not one of"),
    ({"dtype": "float64"}, ValueError, "dtype='float64' is not one of 'float32', 'float16'"),
    ({"combine": "avg"}, ValueError, "combine='avg' is not one of"),
    ({"subword_pooling": "avg"}, ValueError, "subword_pooling='avg' is not one of"),
    ({"text_pooling": "sum"}, ValueError, "text_pooling='sum' is not one of"),
    ({"text_pooling": "max"}, ValueError, r"text_pooling='max' \(--text-pooling\) shapes text vectors"),
    ({"normalize": True}, ValueError, r"normalize=True \(--normalize\) shapes text vectors"),
    ({"level": "text", "normalize": "yes"}, TypeError, "normalize must be True or False, got 'yes'"),
    ({"layers": "top"}, ValueError, "layers='top' is not understood"),
    ({"layers": []}, ValueError, "layers=.. selects no layer"),
    ({"context": -1}, ValueError, "context=-1: expected a number of pieces >= 0"),
    ({"context": 1.5}, TypeError, "context must be a whole number of pieces"),
    ({"doc_sep": "blank"}, ValueError, "doc_sep='blank' .* does nothing without context"),
    ({"doc_sep": "line", "context": 2}, ValueError, "doc_sep='line' is not one of"),
    ({"input_format": "csv"}, ValueError, "input format 'csv' is not one of"),
    ({"chunk_sentences": 0}, ValueError, "chunk_sentences=0 must be a positive integer"),
])
def test_invalid_options_are_refused_at_construction_naming_them(given, error, message):
    with pytest.raises(error, match=message):
        EmbedSettings(REF, **given)


@pytest.mark.parametrize("given, message", [
    ({"device": "gpu"}, "device='gpu' is not a device contextembed runs on"),
    ({"precision": "fp8"}, "precision='fp8' is not one of"),
    ({"backend": "onnx"}, "backend='onnx' is not one of"),
])
def test_how_the_encoder_runs_is_checked_at_construction(given, message):
    with pytest.raises(ValueError, match=message):
        EmbedSettings.from_keywords("vectors.txt", **given)


def test_an_unknown_keyword_is_named():
    with pytest.raises(TypeError, match="'dtypes'"):
        EmbedSettings.from_keywords("vectors.txt", dtypes="float16")


def test_options_are_checked_before_the_input(tmp_path):
    """The settings come first: a bad option is named even where the input does not exist."""
    with pytest.raises(ValueError, match="dtype='float64'"):
        embed_file("vectors.txt", tmp_path / "missing.txt", tmp_path / "out.npz", dtype="float64")


def test_embed_file_checks_its_options_once(files, tmp_path, monkeypatch):
    import contextembed.io._settings as module

    calls = []
    real = module._embed_options
    monkeypatch.setattr(module, "_embed_options", lambda *args: calls.append(args) or real(*args))
    vectors, source = files
    embed_file(vectors, source, tmp_path / "out.npz", show_progress=False)
    assert len(calls) == 1


# -- the record -----------------------------------------------------------------------------------


#: what contextembed wrote for these files before EmbedSettings (from the commit before it, all but
#: the ``contextembed`` version): a record written now must be the same, or earlier outputs are redone
INPUT, MODEL = "67fbc44bcf033470dd4417caa5134f49", "4c2259ff12ca0c49daf30d89cef68357"
RUN = {"artifact": "embedding output", "format": 1, "input": INPUT, "input_format": "text", "model": MODEL,
       "layers": [0], "precision": None, "backend": "numpy", "device": None, "encoder_options": {}}
OLD_RECORDS = {
    "w.npz": {**RUN, "level": "word", "tokenizer": "whitespace", "combine": "concat", "subword_pooling": "first",
              "text_pooling": None, "dtype": "float32", "output_format": "npz",
              "content": {"rows": 8, "dim": 4, "features": "c73d1b6fbd3660b4023db9af9d9e4cf6",
                          "lengths": "fbcfaa455cc014208a26fdb18fbd29f8"}},
    "t.npy": {**RUN, "level": "text", "tokenizer": "auto", "combine": "scalar_mix", "subword_pooling": "mean",
              "text_pooling": "piece_mean", "normalize": True, "dtype": "float16", "output_format": "npy",
              "content": {"rows": 3, "dim": 4, "features": "cc62eb334eedfb68314c97bf65f7b03d", "lengths": None}},
}


@pytest.mark.parametrize("options, name", [({}, "w.npz"), ({"level": "text", "dtype": "float16"}, "t.npy")])
def test_the_record_is_the_one_written_before(files, tmp_path, options, name):
    vectors, source = files
    out = str(tmp_path / name)
    embed_file(vectors, source, out, show_progress=False, **options)
    written = read_output_record(out)
    version = written.pop("contextembed")
    assert written == OLD_RECORDS[name]
    # and what a resume compares it with: the same, from keywords or from the settings
    from contextembed import load_encoder

    encoder = load_encoder(vectors)
    expected = expected_record(vectors, source, out, encoder=encoder, overwrite=True, **options)
    written.pop("content")
    assert expected == {**written, "contextembed": version}
    assert record_for(EmbedSettings.from_keywords(vectors, **options), source, out, encoder=encoder) == expected


def test_expected_record_takes_embed_file_keywords_without_inspecting_it(files, tmp_path, monkeypatch):
    """Built from the settings, not from ``inspect.signature(embed_file)``: it works with that gone."""
    vectors, source = files
    out = str(tmp_path / "o.npz")
    embed_file(vectors, source, out, show_progress=False)
    from contextembed import load_encoder

    encoder = load_encoder(vectors)

    def no_signature(*args, **kwargs):
        raise AssertionError("expected_record inspected a signature")

    monkeypatch.setattr(inspect, "signature", no_signature)
    record = expected_record(vectors, source, out, encoder=encoder, chunk_sentences=7, show_progress=False)
    assert record["level"] == "word" and record["tokenizer"] == "whitespace"
    with pytest.raises(TypeError, match="'dtypes'"):
        expected_record(vectors, source, out, encoder=encoder, dtypes="float16")


def test_embed_with_writes_what_embed_file_writes(files, tmp_path):
    vectors, source = files
    embed_file(vectors, source, tmp_path / "a.npz", level="text", show_progress=False)
    settings = EmbedSettings.from_keywords(vectors, level="text")
    embed_with(settings, source, tmp_path / "b.npz", show_progress=False)
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    np.testing.assert_array_equal(a["features"], b["features"])
    assert bytes(a["provenance"]) == bytes(b["provenance"])
