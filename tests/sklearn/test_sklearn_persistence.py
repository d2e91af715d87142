"""pickle/joblib round trips: bit-identical outputs, small pickles, embedded weights, clear errors."""

from __future__ import annotations

import io
import pickle
import shutil

import joblib
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline

from contextembed.errors import ModelNotFoundError
from contextembed.sklearn import SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder, clear_cache, clear_encoders

TEXTS = ["EU rejects German call", "Peter Blackburn", "BRUSSELS 1996-08-22", "The European Commission said"] * 3
LABELS = [0, 1, 0, 1] * 3


def _pickle_round_trip(obj):
    return pickle.loads(pickle.dumps(obj))


def _joblib_round_trip(obj):
    buffer = io.BytesIO()
    joblib.dump(obj, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


def _fresh_process_state():
    """Forget loaded encoders and cached encodings, as a new process would."""
    clear_cache()
    clear_encoders()


@pytest.mark.slow
@pytest.mark.parametrize("round_trip", [_pickle_round_trip, _joblib_round_trip])
def test_fitted_estimators_round_trip_bit_identical(bert, sentences, tags, round_trip):
    fitted = {
        "token": (TokenEmbedder(bert, max_epochs=3).fit(sentences, tags), sentences, "transform"),
        "text": (TextEmbedder(bert, max_epochs=3).fit(TEXTS, LABELS), TEXTS, "transform"),
        "tagger": (SequenceTagger(TokenEmbedder(bert, max_epochs=3)).fit(sentences, tags), sentences, "predict_proba_rows"),
        "pipeline": (make_pipeline(TextEmbedder(bert, layers=-1), LogisticRegression()).fit(TEXTS, LABELS), TEXTS, "predict_proba"),
    }
    for name, (estimator, X, method) in fitted.items():
        before = _outputs(estimator, X, method)
        restored = round_trip(estimator)
        _fresh_process_state()
        after = _outputs(restored, X, method)
        np.testing.assert_array_equal(before, after, err_msg=name)
    np.testing.assert_array_equal(fitted["token"][0].mix_weights_, round_trip(fitted["token"][0]).mix_weights_)


def _outputs(estimator, X, method):
    if method == "predict_proba_rows":  # the tagger: its classifier's probabilities per token
        return estimator.classifier_.predict_proba(estimator.transform_features(X))
    return getattr(estimator, method)(X)


def test_grid_search_best_estimator_round_trips(bert):
    grid = {"textembedder__layers": [-1, [-2, -1]], "textembedder__combine": ["concat", "scalar_mix"]}
    search = GridSearchCV(make_pipeline(TextEmbedder(bert, max_epochs=2), LogisticRegression()), grid, cv=KFold(2))
    search.fit(TEXTS, LABELS)
    before = search.best_estimator_.predict_proba(TEXTS)
    restored = _joblib_round_trip(search.best_estimator_)
    _fresh_process_state()
    np.testing.assert_array_equal(restored.predict_proba(TEXTS), before)


@pytest.mark.slow
def test_pickle_holds_a_reference_not_the_weights(bert, sentences, tags):
    embedder = TokenEmbedder(bert, max_epochs=2).fit(sentences, tags)
    small = pickle.dumps(embedder)
    weights = sum(p.stat().st_size for p in __import__("pathlib").Path(bert).glob("*.safetensors"))
    assert len(small) < 20_000 < weights
    embedded = pickle.dumps(TokenEmbedder(bert, max_epochs=2, embed_weights=True).fit(sentences, tags))
    assert len(embedded) > weights


@pytest.mark.slow
def test_embedded_weights_load_without_the_original_model(bert, sentences, tags, tmp_path):
    path = tmp_path / "model"
    shutil.copytree(bert, path)
    embedder = TokenEmbedder(str(path), embed_weights=True, max_epochs=2).fit(sentences, tags)
    before = embedder.transform(sentences)
    data = pickle.dumps(embedder)
    shutil.rmtree(path)
    _fresh_process_state()
    restored = pickle.loads(data)
    np.testing.assert_array_equal(restored.transform(sentences), before)


@pytest.mark.parametrize("family", ["static", "elmo"])
def test_embedded_static_vectors_and_elmo(static_path, tiny_elmo_dir, sentences, tmp_path, family):
    if family == "static":
        path = tmp_path / "vectors.txt"
        shutil.copy(static_path, path)
    else:
        path = tmp_path / "elmo"
        shutil.copytree(tiny_elmo_dir, path)
    embedder = TokenEmbedder(str(path), embed_weights=True).fit(sentences)
    before = embedder.transform(sentences)
    data = pickle.dumps(embedder)
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    _fresh_process_state()
    np.testing.assert_array_equal(pickle.loads(data).transform(sentences), before)


def test_earlier_embedded_static_vectors_still_load(static_path, sentences):
    from contextembed.sklearn._embedded import unpack_encoder
    from contextembed.encoders._registry import EncoderRef, get_encoder

    packed = {"kind": "static", "files": {"vectors.bin": _vectors_bin(static_path)}}
    ref = unpack_encoder(packed, EncoderRef("gone.txt", "cpu", "fp32"))
    np.testing.assert_array_equal(get_encoder(ref).encode(sentences)[0],
                                  get_encoder(EncoderRef(static_path, "cpu", "fp32")).encode(sentences)[0])


def _vectors_bin(static_path) -> bytes:
    import tempfile

    from contextembed import load_encoder
    from contextembed.encoders._static.vectors import write_word2vec

    encoder = load_encoder(static_path)
    with tempfile.TemporaryDirectory() as folder:
        write_word2vec(f"{folder}/vectors.bin", encoder.words, encoder.table[:-1], binary=True)
        with open(f"{folder}/vectors.bin", "rb") as handle:
            return handle.read()


def test_missing_model_directory_is_a_clear_error_at_load(bert, sentences, tmp_path):
    path = tmp_path / "model"
    shutil.copytree(bert, path)
    data = pickle.dumps(TokenEmbedder(str(path)).fit(sentences))
    shutil.rmtree(path)
    with pytest.raises(ModelNotFoundError, match="embed_weights=True"):
        pickle.loads(data)


def test_missing_model_package_names_the_pip_line(monkeypatch, bert, sentences):
    from contextembed.encoders import _loading as loading
    from contextembed.sklearn import _base

    embedder = TokenEmbedder(bert).fit(sentences)
    state = embedder.__getstate__()
    fake = loading.NamedModel("no_such_model_package", "no-such-model-package", "missing", loading._minilm)
    monkeypatch.setitem(loading.NAMED_MODELS, "missing-model", fake)
    state["encoder_ref_"] = type(state["encoder_ref_"])("missing-model")
    with pytest.raises(ModelNotFoundError, match=r'pip install "\.\[models\]" from the contextembed repository'):
        TokenEmbedder().__setstate__(state)
    assert _base.NAMED_MODELS is loading.NAMED_MODELS


def test_unfitted_estimators_pickle(bert):
    for estimator in (TokenEmbedder(bert), TextEmbedder(bert), SequenceTagger()):
        assert _pickle_round_trip(estimator).get_params().keys() == estimator.get_params().keys()


@pytest.mark.slow
@pytest.mark.parametrize("embed_weights", [False, True])
def test_skops_round_trip_needs_only_the_documented_types(bert, sentences, tags, embed_weights):
    skops_io = pytest.importorskip("skops.io")
    from contextembed.sklearn import TRUSTED_TYPES

    fitted = {
        "token": (TokenEmbedder(bert, max_epochs=2, embed_weights=embed_weights).fit(sentences, tags), sentences, "transform"),
        "text": (TextEmbedder(bert, max_epochs=2).fit(TEXTS, LABELS), TEXTS, "transform"),
        "tagger": (SequenceTagger(TokenEmbedder(bert, max_epochs=2)).fit(sentences, tags), sentences, "predict_proba_rows"),
        "pipeline": (make_pipeline(TextEmbedder(bert, layers=-1), LogisticRegression()).fit(TEXTS, LABELS), TEXTS, "predict_proba"),
        "pairs": (TextPairEmbedder(bert, max_epochs=2).fit(list(zip(TEXTS, TEXTS[1:] + TEXTS[:1])), LABELS),
                  list(zip(TEXTS, TEXTS[1:] + TEXTS[:1])), "transform"),
    }
    for name, (estimator, X, method) in fitted.items():
        before = _outputs(estimator, X, method)
        data = skops_io.dumps(estimator)
        assert set(skops_io.get_untrusted_types(data=data)) <= set(TRUSTED_TYPES), name
        with pytest.raises(skops_io.exceptions.UntrustedTypesFoundException):
            skops_io.loads(data)  # nothing is trusted implicitly
        _fresh_process_state()
        restored = skops_io.loads(data, trusted=TRUSTED_TYPES)
        np.testing.assert_array_equal(_outputs(restored, X, method), before, err_msg=name)
        np.testing.assert_array_equal(_outputs(estimator, X, method), before, err_msg=f"{name}: saving changed the estimator")


def test_pickled_state_holds_no_torch_objects(bert, sentences, tags):
    import torch

    embedder = TokenEmbedder(bert, max_epochs=2).fit(sentences, tags)
    state = embedder.__getstate__()
    assert not any(isinstance(value, (torch.nn.Module, torch.Tensor)) for value in state.values())
    assert isinstance(embedder.pooling_, torch.nn.Module) and "_embedded_encoder" not in embedder.__dict__


@pytest.mark.slow
def test_embedded_encoders_unpack_into_a_folder_removed_at_exit(bert, sentences, tmp_path):
    """Nothing is left in the system temporary directory once the process that unpacked ends."""
    import os
    import subprocess
    import sys

    import socket_guard

    data_file = tmp_path / "embedder.pkl"
    data_file.write_bytes(pickle.dumps(TokenEmbedder(bert, layers=-1, combine="concat", embed_weights=True).fit(sentences)))
    code = (
        "import pickle, sys\n"
        "embedder = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "embedder.transform([['EU', 'rejects']])\n"
        "print(embedder.encoder_ref_.spec)\n"
    )
    log = tmp_path / "sockets.log"
    result = subprocess.run([sys.executable, "-c", code, str(data_file)], capture_output=True, text=True,
                            env=socket_guard.guarded_env(log), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    folder = result.stdout.strip().splitlines()[-1]
    assert "contextembed-embedded-" in folder and not os.path.exists(os.path.dirname(folder))
