"""What the estimators show: nothing by default; with ``show_progress=True`` tqdm bars on stderr over
the sentences encoded (cache hits excluded) and the training epochs; log records of what ``"auto"``
chose (INFO) and of the cache's hits and misses (DEBUG) on the ``contextembed`` loggers."""

from __future__ import annotations

import logging
import re

import joblib
import pytest
from sklearn.model_selection import GridSearchCV, KFold

from contextembed.sklearn import (
    BiLSTMCRFTagger,
    SequenceTagger,
    TextEmbedder,
    TextPairEmbedder,
    TokenEmbedder,
    clear_cache,
    clear_encoders,
)
from contextembed.sklearn import _encoding, _text as text

TEXTS = ["EU rejects German call", "Peter Blackburn", "BRUSSELS 1996-08-22", "The European Commission said",
         "Germany 's representative", "Fischler proposed EU-wide measures"]
PAIRS = [(TEXTS[i], TEXTS[i + 1]) for i in range(5)]
TWO_CLASSES = [0, 1, 0, 1, 0, 1]
CPU = {"device": "cpu", "precision": "fp32"}


def _bars(err: str, desc: str) -> list[str]:
    """The final state of every bar called ``desc`` in captured stderr (tqdm redraws with ``\\r`` and
    ends a closed bar with a newline)."""
    return [line.rsplit("\r", 1)[-1] for line in err.split("\n") if f"{desc}:" in line]


def _count(bar: str) -> tuple[int, int]:
    """``(done, total)`` of a bar's final state, ``"encoding: 100%|...| 6/6 [...]"``."""
    done, total = re.search(r"\| *(\d+)/(\d+) ", bar).groups()
    return int(done), int(total)


def _estimators(bert, **options):
    """One of each estimator, fitted on the toy data, with labels (so that a mix is learned)."""
    token = {"layers": "all", "combine": "scalar_mix", "max_epochs": 2, **CPU}
    return {
        "TokenEmbedder": lambda s, t: TokenEmbedder(bert, **token, **options).fit(s, t).transform(s),
        "TextEmbedder": lambda s, t: TextEmbedder(bert, max_epochs=2, **CPU, **options).fit(TEXTS, TWO_CLASSES)
        .transform(TEXTS),
        "TextPairEmbedder": lambda s, t: TextPairEmbedder(bert, max_epochs=2, **CPU, **options)
        .fit(PAIRS, TWO_CLASSES[:5]).transform(PAIRS),
        "SequenceTagger": lambda s, t: SequenceTagger(TokenEmbedder(bert, **token), **options).fit(s, t).predict(s),
        "BiLSTMCRFTagger": lambda s, t: BiLSTMCRFTagger(TokenEmbedder(bert, **token), hidden_size=8, max_epochs=2,
                                                        **options).fit(s, t).predict(s),
    }


@pytest.mark.parametrize("name", ["TokenEmbedder", "TextEmbedder", "TextPairEmbedder", "SequenceTagger",
                                  "BiLSTMCRFTagger"])
def test_silent_by_default(bert, sentences, tags, name, capfd):
    """A fit that encodes, learns a mix and trains prints nothing, and the library adds no handler
    that would print its log records."""
    clear_cache()
    capfd.readouterr()
    _estimators(bert)[name](sentences, tags)
    assert capfd.readouterr() == ("", "")
    handlers = logging.getLogger("contextembed").handlers
    assert handlers and all(type(h) is logging.NullHandler for h in handlers)


@pytest.mark.parametrize("name", ["TokenEmbedder", "TextEmbedder", "TextPairEmbedder", "SequenceTagger",
                                  "BiLSTMCRFTagger"])
def test_show_progress_draws_bars_on_stderr(bert, sentences, tags, name, capsys):
    clear_cache()
    _estimators(bert, show_progress=True)[name](sentences, tags)
    out, err = capsys.readouterr()
    assert out == ""
    encoded = _bars(err, "encoding")
    assert encoded, err
    assert all(done == total for done, total in map(_count, encoded))
    # the training loop: the scalar mix's epochs, or the BiLSTM-CRF's (whose mix is learned with it)
    training = _bars(err, "BiLSTM-CRF" if name == "BiLSTMCRFTagger" else "scalar mix")
    assert training and all("epoch" in bar for bar in training), err


def test_encoding_bar_counts_only_what_is_not_cached(bert, sentences, capsys):
    clear_cache()
    embedder = TokenEmbedder(bert, layers=-1, show_progress=True, **CPU)
    embedder.fit_transform(sentences)
    assert [_count(bar) for bar in _bars(capsys.readouterr().err, "encoding")] == [(6, 6)]
    embedder.transform(sentences)  # every sentence cached: no bar at all
    assert capsys.readouterr().err == ""
    embedder.transform(sentences + [["a", "new", "one"], ["and", "another"], ["a", "new", "one"]])
    assert [_count(bar) for bar in _bars(capsys.readouterr().err, "encoding")] == [(2, 2)]


def test_one_bar_over_all_blocks_of_a_large_input(bert, monkeypatch, capsys):
    """TextEmbedder encodes STREAM_TEXTS texts at a time; the bar covers the whole call."""
    clear_cache()
    monkeypatch.setattr(text, "STREAM_TEXTS", 4)
    TextEmbedder(bert, combine="mean", show_progress=True, **CPU).fit_transform(TEXTS * 2 + ["one more text"])
    assert [_count(bar) for bar in _bars(capsys.readouterr().err, "encoding")] == [(7, 7)]


def test_joblib_workers_draw_no_bar_of_their_own(bert, sentences, monkeypatch, capsys):
    """n_jobs encodes blocks in workers: one bar, in the caller, counting every block once."""
    clear_cache()
    monkeypatch.setattr(_encoding, "BLOCK_SIZE", 2)
    with joblib.parallel_backend("threading"):
        TokenEmbedder(bert, layers=-1, n_jobs=2, show_progress=True, **CPU).fit_transform(sentences)
    assert [_count(bar) for bar in _bars(capsys.readouterr().err, "encoding")] == [(6, 6)]


@pytest.mark.slow
def test_grid_search_clones_stay_silent_unless_asked(bert, sentences, tags, capfd):
    clear_cache()
    capfd.readouterr()
    tagger = SequenceTagger(TokenEmbedder(bert, layers=[-2, -1], combine="concat", **CPU))
    search = GridSearchCV(tagger, {"window": [0, 1]}, cv=KFold(2)).fit(sentences, tags)
    assert capfd.readouterr() == ("", "")
    assert search.best_estimator_.embedder_.show_progress is False


def test_a_tagger_turns_bars_on_in_its_fitted_embedder_only(bert, sentences, tags):
    embedder = TokenEmbedder(bert, layers=-1, **CPU)
    tagger = SequenceTagger(embedder, show_progress=True).fit(sentences, tags)
    assert tagger.embedder_.show_progress is True and embedder.show_progress is False
    neural = BiLSTMCRFTagger([embedder], hidden_size=8, max_epochs=1, show_progress=True).fit(sentences, tags)
    assert [e.show_progress for e in neural.embedders_] == [True] and embedder.show_progress is False


@pytest.mark.parametrize("make", [
    lambda bert: TokenEmbedder(bert, layers=-1, show_progress="yes"),
    lambda bert: SequenceTagger(TokenEmbedder(bert, layers=-1), show_progress=1),
    lambda bert: BiLSTMCRFTagger(TokenEmbedder(bert, layers=-1), show_progress=None),
], ids=["TokenEmbedder", "SequenceTagger", "BiLSTMCRFTagger"])
def test_show_progress_must_be_a_bool(bert, sentences, tags, make):
    with pytest.raises(TypeError, match=r"show_progress must be True or False, got"):
        make(bert).fit(sentences, tags)


# -- logging ------------------------------------------------------------------------------------


def test_info_says_what_auto_chose(bert, sentences, caplog):
    clear_encoders()
    caplog.set_level(logging.INFO, logger="contextembed")
    TokenEmbedder(bert, layers=-1, precision="fp32").fit(sentences)  # device "auto"
    [loaded] = [r for r in caplog.records if r.name == "contextembed.encoders._registry" and r.levelno == logging.INFO]
    message = loaded.getMessage()
    assert bert in message
    assert re.search(r"device=(cpu|cuda\S*) \(auto\)", message)
    assert "precision=fp32," in message and "precision=fp32 (auto)" not in message
    assert re.search(r"batch_tokens=\d+ \(the encoder's default\)", message)


def test_debug_counts_cache_hits_and_misses_per_call(bert, sentences, caplog):
    clear_cache()
    embedder = TokenEmbedder(bert, layers=-1, **CPU)
    embedder.fit_transform(sentences)
    caplog.set_level(logging.DEBUG, logger="contextembed.sklearn")
    embedder.transform(sentences + [["a", "new", "one"], sentences[0]])
    embedder.transform(sentences)
    records = [r.getMessage() for r in caplog.records if r.name == "contextembed.sklearn._encoding"]
    assert len(records) == 2  # one per call, not one per sentence
    assert "encoding 8 items (sentence)" in records[0]
    assert "7 distinct, 6 stored (6 in memory, 0 on disk), 1 to encode" in records[0]
    assert "6 distinct, 6 stored (6 in memory, 0 on disk), 0 to encode" in records[1]


def test_disk_hits_are_counted_as_such(bert, sentences, tmp_path, caplog):
    clear_cache()
    TokenEmbedder(bert, layers=-1, cache=str(tmp_path), **CPU).fit_transform(sentences)
    clear_cache()  # a fresh process: only the disk holds them
    caplog.set_level(logging.DEBUG, logger="contextembed")
    TokenEmbedder(bert, layers=-1, cache=str(tmp_path), **CPU).fit_transform(sentences)
    [record] = [r.getMessage() for r in caplog.records if r.name == "contextembed.sklearn._encoding"]
    assert "6 stored (0 in memory, 6 on disk), 0 to encode" in record


def test_the_encoding_bar_prints_its_last_line_once_and_moves_before_the_block_ends(bert, monkeypatch, capsys):
    """Issue 38 item 12: the 100% line came twice, and the count moved only once a block of 512
    sentences was encoded ("1/600 [00:04<48:38"): now it moves as each forward pass finishes."""
    import time

    from contextembed.encoders import transformer

    from contextembed.encoders.transformer import _paths

    run_batch, batches = transformer.TransformerEncoder._run_batch, _paths.batches
    monkeypatch.setattr(transformer.TransformerEncoder, "_run_batch",
                        lambda self, *a, **k: (time.sleep(0.12), run_batch(self, *a, **k))[1])
    monkeypatch.setattr(_paths, "batches", lambda rows, length, tokens, size: batches(rows, length, tokens, 2))
    clear_cache()
    sentences = [["the", "quick", "fox", str(i)] for i in range(8)]
    TokenEmbedder(bert, layers=-1, show_progress=True, **CPU).fit_transform(sentences)
    err = capsys.readouterr().err
    states = [state for state in err.split("\r") if "encoding:" in state]
    assert sum("8/8" in state for state in states) == 1 and err.count("100%") == 1
    assert any(f"{k}/8" in state for state in states for k in range(1, 8))


def test_static_vectors_are_counted_on_the_encoding_bar(static_path, sentences, capsys):
    clear_cache()
    TokenEmbedder(static_path, show_progress=True).fit_transform(sentences)
    assert [_count(bar) for bar in _bars(capsys.readouterr().err, "encoding")] == [(6, 6)]
