"""SequenceTagger: fitting, predicting, scoring, schemes, bad input, model selection."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

from contextembed import load_encoder
from contextembed.sklearn import SequenceTagger, TokenEmbedder
from contextembed.sklearn.feature_extraction import is_cased
from contextembed.sklearn.metrics import entity_f1, entity_f1_scorer
from contextembed.sklearn._tagger_features import SHAPE_NAMES


def _tagger(bert, **options):
    return SequenceTagger(TokenEmbedder(bert, layers=[-2, -1], combine="concat"), **options)


def test_fits_training_data_and_predicts_aligned_tags(static_path, sentences, tags):
    classifier = LogisticRegression(C=100.0, max_iter=2000)
    tagger = SequenceTagger(TokenEmbedder(static_path), classifier=classifier).fit(sentences, tags)
    predicted = tagger.predict(sentences)
    assert [len(p) for p in predicted] == [len(s) for s in sentences]
    assert set(t for p in predicted for t in p) <= set(tagger.classes_)
    # random vectors per word type plus neighbours: a weakly regularised linear model separates them
    assert tagger.score(sentences, tags) > 0.9
    assert tagger.tag_scheme_ == "IOB2"


def test_predictions_never_invent_tags(bert, sentences, tags):
    only_per = [[t if t.endswith("PER") else "O" for t in ts] for ts in tags]
    tagger = _tagger(bert).fit(sentences, only_per)
    unseen = [["Unseen", "Words", "in", "Zurich"]]
    assert set(tagger.predict(unseen)[0]) <= {"B-PER", "I-PER", "O"}


def test_feature_layout(bert, sentences, tags):
    tagger = _tagger(bert, window=2, shape_features=True).fit(sentences, tags)
    features = tagger.transform_features(sentences)
    width = len(tagger.embedder_.get_feature_names_out()) + len(SHAPE_NAMES)
    assert features.shape == (sum(map(len, sentences)), 5 * width)
    assert len(tagger.feature_names()) == features.shape[1]
    # the middle block is the token's own features
    own = tagger.embedder_.transform(sentences)
    np.testing.assert_array_equal(features[:, 2 * width : 2 * width + own.shape[1]], own)


def test_iob1_and_bilou_tags_are_accepted(bert, sentences, tags):
    bilou = [["U-" + t[2:] if t.startswith("B-") and (i + 1 == len(ts) or not ts[i + 1].startswith("I-"))
              else t for i, t in enumerate(ts)] for ts in tags]
    bilou = [["L-" + t[2:] if t.startswith("I-") and (i + 1 == len(ts) or not ts[i + 1].startswith("I-"))
              else t for i, t in enumerate(ts)] for ts in bilou]
    tagger = _tagger(bert).fit(sentences, bilou)
    assert tagger.tag_scheme_ == "BILOU"
    assert tagger.score(sentences, bilou) == pytest.approx(entity_f1(bilou, tagger.predict(sentences)))
    iob1 = [["I-" + t[2:] if t.startswith("B-") and (i == 0 or ts[i - 1][2:] != t[2:]) else t
             for i, t in enumerate(ts)] for ts in tags]
    assert _tagger(bert).fit(sentences, iob1).tag_scheme_ == "IOB1"


def test_io_tags_are_detected_and_reported_by_type(static_path, sentences, tags):
    """Issue 38 item 3: bare types (PER, LOC, O) train, score and report as the IO scheme."""
    io = [[t[2:] if t != "O" else t for t in ts] for ts in tags]
    classifier = LogisticRegression(C=100.0, max_iter=2000)
    tagger = SequenceTagger(TokenEmbedder(static_path), classifier=classifier).fit(sentences, io)
    assert tagger.tag_scheme_ == "IO"
    assert set(tagger.classes_) == {"LOC", "MISC", "O", "ORG", "PER"}
    report = tagger.report(sentences, io)
    assert [name for name in report if "avg" not in name] == ["LOC", "MISC", "ORG", "PER"]
    assert tagger.score(sentences, io) == report["micro avg"]["f1-score"] > 0.9


def test_a_mix_of_prefixed_and_bare_tags_is_refused_naming_the_tags(static_path, sentences, tags):
    mixed = [list(ts) for ts in tags]
    mixed[3][1] = "ORG"  # sentence 3, token 1: B-ORG without its prefix
    with pytest.raises(ValueError, match=r"tag 'ORG' \(y sentence 3, token 1\) has no scheme prefix, but tag "
                                         r"'B-ORG' \(y sentence 0, token 0\) has one"):
        SequenceTagger(TokenEmbedder(static_path)).fit(sentences, mixed)


def test_scalar_mix_is_learned_and_exposed(bert, sentences, tags):
    tagger = SequenceTagger(TokenEmbedder(bert, max_epochs=4)).fit(sentences, tags)
    np.testing.assert_array_equal(tagger.mix_weights_, tagger.embedder_.mix_weights_)
    assert tagger.mix_weights_.sum() == pytest.approx(1.0, abs=1e-6)
    assert tagger.gamma_ == tagger.embedder_.gamma_


def test_bad_input(bert, sentences, tags):
    tagger = _tagger(bert)
    with pytest.raises(TypeError, match="single string"):
        tagger.fit("EU rejects German call", tags)
    with pytest.raises(ValueError, match="X has 6 sentences but y has 5"):
        tagger.fit(sentences, tags[:5])
    bad = [list(t) for t in tags]
    bad[2] = bad[2] + ["O"]
    with pytest.raises(ValueError, match="sentence 2 has 2 tokens but 3 tags"):
        tagger.fit(sentences, bad)
    with pytest.raises(ValueError, match="requires y"):
        tagger.fit(sentences, None)
    with pytest.raises(ValueError, match="at least one sentence"):
        tagger.fit([], [])
    with pytest.raises(ValueError, match="window must be an int >= 0"):
        _tagger(bert, window=-1).fit(sentences, tags)


def test_empty_prediction_input(bert, sentences, tags):
    tagger = _tagger(bert).fit(sentences, tags)
    assert tagger.predict([]) == []
    assert tagger.predict([[], ["EU"]])[0] == []


def test_scorer_in_model_selection(bert, sentences, tags):
    X, y = sentences * 2, tags * 2
    scores = cross_val_score(_tagger(bert), X, y, cv=KFold(3), scoring=entity_f1_scorer)
    assert scores.shape == (3,) and np.all((0 <= scores) & (scores <= 1))
    search = GridSearchCV(_tagger(bert), {"window": [0, 1]}, cv=KFold(2), scoring=entity_f1_scorer).fit(X, y)
    assert search.best_params_["window"] in (0, 1)
    default = cross_val_score(_tagger(bert), X, y, cv=KFold(3))  # estimator.score is entity F1 too
    np.testing.assert_allclose(default, scores)


@pytest.mark.slow
def test_classifier_parameters_are_searchable(bert, sentences, tags):
    from contextembed.sklearn._tagger import DEFAULT_C

    assert _tagger(bert).fit(sentences, tags).classifier_.C == DEFAULT_C
    tagger = _tagger(bert, classifier=LogisticRegression(max_iter=500))
    search = GridSearchCV(tagger, {"classifier__C": [0.01, 100.0]}, cv=KFold(2)).fit(sentences * 2, tags * 2)
    assert search.best_estimator_.classifier_.C == search.best_params_["classifier__C"]
    assert search.cv_results_["params"] == [{"classifier__C": 0.01}, {"classifier__C": 100.0}]


def test_shape_features_auto_follows_casing(bert, static_path, sentences, tags):
    assert is_cased(load_encoder(bert))
    assert not is_cased(load_encoder(static_path))  # a lowercase vocabulary
    assert not _tagger(bert).fit(sentences, tags).uses_shape_
    static = SequenceTagger(TokenEmbedder(static_path)).fit(sentences, tags)
    assert static.uses_shape_


def _with_empty(items, empty):
    """``items`` with an empty entry first, in the middle and last."""
    return [empty] + items[:3] + [empty] + items[3:] + [empty]


def test_empty_sentences_contribute_nothing(static_path, sentences, tags):
    """An empty sentence adds no row: the same classifier as without it, and [] predicted for it."""
    plain = SequenceTagger(TokenEmbedder(static_path)).fit(sentences, tags)
    padded = SequenceTagger(TokenEmbedder(static_path)).fit(_with_empty(sentences, []), _with_empty(tags, []))
    np.testing.assert_array_equal(padded.classifier_.coef_, plain.classifier_.coef_)
    predicted = padded.predict(_with_empty(sentences, []))
    assert predicted == _with_empty(plain.predict(sentences), [])
    assert padded.score(_with_empty(sentences, []), _with_empty(tags, [])) == plain.score(sentences, tags)


def test_training_data_without_tokens_is_refused(static_path):
    with pytest.raises(ValueError, match="the training data holds no tokens: all 2 sentences of X are empty"):
        SequenceTagger(TokenEmbedder(static_path)).fit([[], []], [[], []])


def test_dataframes_and_missing_x_or_y_are_named(static_path, sentences, tags):
    import pandas as pd

    tagger = SequenceTagger(TokenEmbedder(static_path)).fit(pd.DataFrame({"tokens": sentences}),
                                                            pd.DataFrame({"tags": tags}))
    assert tagger.predict(pd.DataFrame({"tokens": sentences})) == tagger.predict(sentences)
    both = pd.DataFrame({"tokens": sentences, "tags": tags})
    for call in (tagger.predict, tagger.transform_features, lambda X: tagger.score(X, tags),
                 lambda X: SequenceTagger(TokenEmbedder(static_path)).fit(X, tags)):
        with pytest.raises(TypeError, match=r"X is a DataFrame with 2 columns \('tokens', 'tags'\); expected one column "
                                            r"of token lists: .* X=df\['tokens'\]\.tolist\(\)"):
            call(both)
        with pytest.raises(TypeError, match="X is None; expected a list of tokenized sentences"):
            call(None)
    with pytest.raises(ValueError, match="requires y to be passed, but the target y is None; pass one tag list"):
        tagger.score(sentences, None)
    with pytest.raises(TypeError, match="y is int"):
        tagger.score(sentences, 3)


# -- n_threads (issue 38 item 9) ----------------------------------------------------------------


class _RecordingClassifier(LogisticRegression):
    """Logistic regression that records torch's and the BLAS/OpenMP pools' threads when it fits."""

    seen: list = []

    def fit(self, X, y, *args, **kwargs):
        import torch
        from threadpoolctl import threadpool_info

        _RecordingClassifier.seen.append((torch.get_num_threads(), {pool["num_threads"] for pool in threadpool_info()}))
        return super().fit(X, y, *args, **kwargs)


def test_n_threads_bounds_the_taggers_own_work_and_not_the_encoder(static_path, sentences, tags, monkeypatch):
    """n_threads is the tagger's (the mix probe, the classifier); the encoder keeps the process's
    threads, where the encoding is most of a fit's time at base size."""
    import torch

    from contextembed.encoders._registry import get_encoder

    embedder = TokenEmbedder(static_path).fit(sentences)
    encoder = get_encoder(embedder.encoder_ref_)
    threads_while_encoding = []
    original = encoder.iter_encode_pooled
    monkeypatch.setattr(encoder, "iter_encode_pooled", lambda *a, **k: threads_while_encoding.append(
        torch.get_num_threads()) or original(*a, **k))
    before = torch.get_num_threads()
    SequenceTagger(TokenEmbedder(static_path, cache=None), classifier=_RecordingClassifier(max_iter=200),
                   n_threads=before + 1).fit(sentences, tags)
    assert threads_while_encoding and set(threads_while_encoding) == {before}
    assert _RecordingClassifier.seen[-1][0] == before + 1


def test_n_threads_bounds_torch_and_the_blas_pools_during_fit_and_restores_them(static_path, sentences, tags):
    import torch

    before = torch.get_num_threads()
    _RecordingClassifier.seen = []
    tagger = SequenceTagger(TokenEmbedder(static_path), classifier=_RecordingClassifier(max_iter=200), n_threads=1)
    tagger.fit(sentences, tags)
    [(torch_threads, pools)] = _RecordingClassifier.seen
    assert torch_threads == 1 and pools <= {1}
    assert torch.get_num_threads() == before
    assert [len(p) for p in tagger.predict(sentences)] == [len(s) for s in sentences]
    assert torch.get_num_threads() == before


def _blas_threads() -> set:
    from threadpoolctl import threadpool_info

    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


class _Probe:
    """Work under a tagger's ``head_threads`` that records the BLAS pools' threads as it enters, then
    waits to be let go."""

    def __init__(self, n_threads):
        import threading

        self.n_threads, self.entered, self.release, self.seen = n_threads, threading.Event(), threading.Event(), []

    def run(self):
        from contextembed.sklearn._base import head_threads

        with head_threads(self):
            self.seen.append(_blas_threads())
            self.entered.set()
            assert self.release.wait(10)
            self.seen.append(_blas_threads())

    def run_released(self):
        self.release.set()
        return self.run()


def test_n_threads_of_overlapping_calls_in_two_threads_never_mix_nor_leak():
    """BLAS limits are process-wide: a call with n_threads=3 started while one with 1 ran set 3 for
    both, and the one with 1, leaving first, restored the original, then the other "restored" 1 for
    the rest of the process. A call with another n_threads now waits for the running ones; calls
    with the same n_threads run together, and the last to leave restores the original."""
    import threading

    original = _blas_threads()
    one, three, also_one = _Probe(1), _Probe(3), _Probe(1)
    threads = [threading.Thread(target=probe.run, daemon=True) for probe in (one, three, also_one)]
    try:
        threads[0].start()
        assert one.entered.wait(10)
        threads[1].start()
        threads[2].start()
        assert also_one.entered.wait(10)  # the same limit: runs beside the first
        assert not three.entered.wait(0.5)  # another limit: waits
        one.release.set()
        threads[0].join(10)
        assert not three.entered.wait(0.3) and _blas_threads() == {1}  # still one call with 1 inside
        also_one.release.set()
        threads[2].join(10)
        assert three.entered.wait(10)
    finally:
        for probe in (one, three, also_one):
            probe.release.set()
        for thread in threads:
            thread.join(10)
    assert one.seen == [{1}, {1}] and also_one.seen == [{1}, {1}] and three.seen == [{3}, {3}]
    assert _blas_threads() == original


def test_blas_pools_another_thread_holds_are_named_once_not_silently_left(monkeypatch):
    """threadpoolctl lets one Python thread at a time set a shared OpenBLAS pool's limit and ignores
    the others: a limit n_threads could not set is a warning, once."""
    import threadpoolctl

    from contextembed.sklearn import _threads

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    if not hasattr(controller, "clear_controlling_thread") or not _blas_threads():
        pytest.skip("needs an OpenBLAS and a threadpoolctl that gives one thread its control")
    limit = _threads._ProcessLimit()
    monkeypatch.setattr(_threads, "_BLAS", limit)
    held = threadpoolctl.threadpool_limits(max(_blas_threads()), user_api="blas")  # this thread takes control
    try:
        with pytest.warns(RuntimeWarning, match=r"n_threads=1 could not limit the BLAS pools .*openblas.*: another "
                                                r"thread holds their limits"):
            _Probe(1).run_released()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _Probe(1).run_released()  # once
    finally:
        held.restore_original_limits()
        controller.clear_controlling_thread()
    probe = _Probe(1)
    probe.run_released()
    assert probe.seen == [{1}, {1}]  # control given back: the limit is set again
    limit.control.shutdown()


@pytest.mark.slow
def test_two_taggers_fitted_at_once_in_two_threads_leave_the_pools_as_they_were(static_path, sentences, tags):
    import threading

    import torch

    original, before = _blas_threads(), torch.get_num_threads()
    _RecordingClassifier.seen = []
    taggers = [SequenceTagger(TokenEmbedder(static_path), classifier=_RecordingClassifier(max_iter=200), n_threads=n)
               for n in (1, 3)]
    errors = []

    def fit(tagger):
        try:
            for _ in range(3):
                tagger.fit(sentences, tags)
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=fit, args=(tagger,)) for tagger in taggers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sorted(torch_threads for torch_threads, _ in _RecordingClassifier.seen) == [1, 1, 1, 3, 3, 3]
    assert all(pools <= {torch_threads} for torch_threads, pools in _RecordingClassifier.seen)
    assert _blas_threads() == original and torch.get_num_threads() == before


@pytest.mark.parametrize("n_threads", [0, -3, True, 2.0, "1", 1025])
def test_a_bad_n_threads_is_a_value_error_naming_it(static_path, sentences, tags, n_threads):
    with pytest.raises(ValueError, match=r"n_threads must be None .* or an int from 1 to 1,024"):
        SequenceTagger(TokenEmbedder(static_path), n_threads=n_threads).fit(sentences, tags)


def test_n_threads_survives_clone_and_grid_search_params(static_path):
    from sklearn.base import clone

    tagger = SequenceTagger(TokenEmbedder(static_path), n_threads=2)
    assert clone(tagger).get_params()["n_threads"] == 2
    assert clone(tagger).set_params(n_threads=None).n_threads is None
