"""backend= on the estimators: "torch" by default, the engine on request, "auto" resolved once in
fit and pinned for workers, and the encoding cache never mixing one backend's features with another's."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from joblib import parallel_backend
from sklearn.base import clone

from contextembed.sklearn import SequenceTagger, TextEmbedder, TextPairEmbedder, TokenEmbedder, clear_cache
from contextembed.encoders._registry import EncoderRef, clear_encoders

openvino = pytest.importorskip("openvino", reason='backend="openvino" needs pip install ".[openvino]"')

from contextembed.encoders.transformer import _engine as engine  # noqa: E402

#: the engine in fp32 against torch in fp32 (tests/encoders/test_engine.py)
FP32_TOLERANCE = 1e-4


@pytest.fixture(autouse=True)
def engine_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(engine.ENGINE_CACHE_ENV, str(tmp_path / "engines"))
    clear_cache()
    yield
    clear_cache()


def _token_embedder(bert, **params) -> TokenEmbedder:
    return TokenEmbedder(bert, combine="concat", device="cpu", precision="fp32", **params)


@pytest.mark.parametrize("cls", [TokenEmbedder, TextEmbedder, TextPairEmbedder])
def test_backend_is_a_parameter_torch_by_default(cls):
    assert cls().get_params()["backend"] == "torch"
    assert clone(cls(backend="auto")).get_params()["backend"] == "auto"  # stored as given
    assert cls(backend="openvino").set_params(backend="torch").backend == "torch"


def test_the_engine_gives_the_torch_features_and_the_cache_keeps_them_apart(bert, sentences):
    on_torch = _token_embedder(bert).fit(sentences)
    on_engine = _token_embedder(bert, backend="openvino").fit(sentences)
    assert (on_torch.backend_, on_engine.backend_) == ("torch", "openvino")
    assert on_torch.encoder_ref_.cache_key() != on_engine.encoder_ref_.cache_key()
    want = on_torch.transform(sentences)  # cached first: the engine must not be served these
    got = on_engine.transform(sentences)
    assert got.shape == want.shape
    assert 0 < np.abs(got - want).max() < FP32_TOLERANCE  # close, but the engine's own numbers
    clear_cache()
    assert np.array_equal(on_engine.transform(sentences), got)  # recomputed on the engine: the same


@pytest.mark.slow
def test_auto_is_resolved_once_in_fit_and_pinned(bert, sentences):
    embedder = _token_embedder(bert, backend="auto").fit(sentences)
    assert embedder.backend == "auto"
    assert embedder.backend_ in ("torch", "openvino")
    assert embedder.encoder_ref_.backend == embedder.backend_  # what workers load
    reference = _token_embedder(bert).fit(sentences).transform(sentences)
    assert np.abs(embedder.transform(sentences) - reference).max() < FP32_TOLERANCE
    copy = pickle.loads(pickle.dumps(embedder))
    assert copy.encoder_ref_ == embedder.encoder_ref_


def test_auto_keeps_torch_where_the_engine_cannot_export(bert, sentences, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("unsupported operation aten::frobnicate")

    monkeypatch.setattr(openvino, "convert_model", refuse)
    clear_encoders()
    embedder = _token_embedder(bert, backend="auto").fit(sentences)
    assert (embedder.backend_, embedder.encoder_ref_.backend) == ("torch", "torch")
    clear_encoders()


def test_the_engine_precision_auto_chose_is_pinned_for_workers(bert, sentences, monkeypatch):
    monkeypatch.setenv("CONTEXTEMBED_AUTO_CPU_PRECISION", "fp32")
    embedder = TextEmbedder(bert, device="cpu", precision="auto", backend="openvino").fit(sentences)
    assert (embedder.encoder_ref_.backend, embedder.encoder_ref_.precision) == ("openvino", "fp32")


@pytest.mark.slow
def test_joblib_workers_run_the_pinned_backend(bert, sentences, monkeypatch):
    from contextembed.sklearn import _encoding

    seen = []
    original = _encoding._encode_block

    def recorded(ref, *args, **kwargs):
        seen.append(ref)
        return original(ref, *args, **kwargs)

    monkeypatch.setattr(_encoding, "POOLED_BLOCK_SIZE", 2)  # several blocks: the workers encode them
    monkeypatch.setattr(_encoding, "_encode_block", recorded)
    embedder = TextEmbedder(bert, device="cpu", precision="fp32", backend="auto", n_jobs=2, cache=None)
    with parallel_backend("threading"):
        parallel = embedder.fit(sentences).transform(sentences)
    assert seen and {ref.backend for ref in seen} == {embedder.backend_}
    assert np.array_equal(parallel, embedder.set_params(n_jobs=1).transform(sentences))


def test_pairs_and_taggers_take_the_backend(bert, sentences, tags):
    pairs = [(sentences[1], sentences[2]), (sentences[2], sentences[1])]  # short: one model input each
    embedder = TextPairEmbedder(bert, device="cpu", precision="fp32", backend="openvino", combine="mean").fit(pairs)
    reference = TextPairEmbedder(bert, device="cpu", precision="fp32", combine="mean").fit(pairs)
    assert np.abs(embedder.transform(pairs) - reference.transform(pairs)).max() < FP32_TOLERANCE
    tagger = SequenceTagger(_token_embedder(bert, backend="openvino")).fit(sentences, tags)
    assert tagger.embedder_.backend_ == "openvino"
    assert [len(p) for p in tagger.predict(sentences)] == [len(s) for s in sentences]


@pytest.mark.parametrize("backend", ["openvino", "onnx"])
def test_a_backend_the_encoder_cannot_use_is_refused_in_fit(static_path, sentences, backend):
    message = "static vectors are a table" if backend == "openvino" else "is not one of 'auto', 'torch', 'openvino'"
    with pytest.raises(ValueError, match=message):
        TokenEmbedder(static_path, backend=backend).fit(sentences)
    assert TokenEmbedder(static_path, backend="auto").fit(sentences).backend_ == "torch"


def test_a_pickle_from_before_backend_existed_loads_on_torch(bert, sentences):
    embedder = _token_embedder(bert).fit(sentences)
    state = embedder.__getstate__()
    del state["backend"], state["backend_"]
    old = TokenEmbedder.__new__(TokenEmbedder)
    old.__setstate__(state)
    assert (old.backend, old.backend_) == ("torch", "torch")
    assert np.array_equal(old.transform(sentences), embedder.transform(sentences))
    assert EncoderRef("x").backend == "torch"
