"""BatchEmbedder without an engine: every batch kind, estimator sources, row errors, pickling."""

from __future__ import annotations

import copy
import pickle
import sys

import numpy as np
import torch
import pytest

from conftest import SENTENCES
from contextembed import load_encoder
from contextembed.engines import BatchEmbedder, read_parquet_features
from contextembed.engines._carry import WorkerError, carried_errors, raise_carried
from contextembed.engines._arrow import column_arrays, feature_array
from contextembed.errors import MissingDependencyError, ModelNotFoundError
from contextembed.extraction import FeatureExtractor

pa = pytest.importorskip("pyarrow")


def _reference(spec, level="word", **options):
    extractor = FeatureExtractor(load_encoder(spec, precision="fp32"), **options, level=level)
    return extractor.words(SENTENCES) if level == "word" else list(extractor.texts(SENTENCES))


def _batches(rows, column="tokens"):
    import pandas as pd

    return {
        "list": rows,
        "arrow": pa.table({column: rows}),
        "pandas": pd.DataFrame({column: rows}),
        "numpy": {column: np.array(rows + [None], dtype=object)[:-1]},
    }


def _features(kind, out):
    if kind == "list":
        return out
    if kind == "arrow":
        column = out.column("features")
        features, lengths = column_arrays(column)
        return features if pa.types.is_fixed_size_list(column.type) else np.split(features, np.cumsum(lengths)[:-1])
    return list(out["features"])


@pytest.mark.parametrize("kind", ["list", "arrow", "pandas", "numpy"])
def test_word_features_equal_the_feature_extractor_row_for_row(tiny_bert_dir, kind):
    embedder = BatchEmbedder(tiny_bert_dir, layers=[-2, -1], precision="fp32")
    got = _features(kind, embedder(_batches(SENTENCES)[kind]))
    expected = _reference(tiny_bert_dir, layers=[-2, -1])
    assert len(got) == len(SENTENCES)
    for row, (mine, theirs) in enumerate(zip(got, expected)):
        assert mine.shape == theirs.shape == (len(SENTENCES[row]), 64)
        np.testing.assert_allclose(mine, theirs, atol=1e-5)


@pytest.mark.parametrize("kind", ["list", "arrow", "pandas", "numpy"])
def test_text_features_from_a_text_column(tiny_vectors, kind):
    texts = [" ".join(s) for s in SENTENCES]
    embedder = BatchEmbedder(tiny_vectors, level="text", text_pooling="max", tokenizer="whitespace")  # "3,5"
    got = np.stack(_features(kind, embedder(_batches(texts, "text")[kind])))
    np.testing.assert_array_equal(got, np.stack(_reference(tiny_vectors, "text", text_pooling="max")))


def test_other_columns_are_kept_and_the_layout_is_documented(tiny_vectors, tmp_path):
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(len(SENTENCES))), "tokens": SENTENCES})
    out = BatchEmbedder(tiny_vectors)(table)
    assert out.column_names == ["id", "tokens", "features"]
    assert str(out.schema.field("features").type) == "list<item: fixed_size_list<item: float>[6]>"
    pq.write_table(out.slice(0, 20), tmp_path / "part-0.parquet")
    pq.write_table(out.slice(20), tmp_path / "part-1.parquet")
    (tmp_path / ".part-2.parquet.1234.partial").write_bytes(b"half a file")  # never read
    back = read_parquet_features(tmp_path)
    np.testing.assert_array_equal(back["features"], np.concatenate(_reference(tiny_vectors)))
    assert back["lengths"].tolist() == [len(s) for s in SENTENCES]
    text = BatchEmbedder(tiny_vectors, level="text")(table)
    assert str(text.schema.field("features").type) == "fixed_size_list<item: float>[6]"


def test_a_fitted_estimator_is_used_with_its_learned_mix(tiny_bert_dir):
    from contextembed.sklearn import TextEmbedder, TokenEmbedder

    labels = [["B" if w[:1].isupper() else "O" for w in s] for s in SENTENCES]
    tokens = TokenEmbedder(str(tiny_bert_dir), precision="fp32", max_epochs=2).fit(SENTENCES, labels)
    assert not np.allclose(tokens.mix_weights_, tokens.mix_weights_[0])  # learned, not uniform
    shipped = pickle.loads(pickle.dumps(BatchEmbedder(tokens)))
    # fp32 within the documented batch tolerance (the estimator's features come from its fit-time
    # cache, encoded in other batches); a uniform mix instead of the learned one is far outside it
    untrained = copy.deepcopy(tokens)
    with torch.no_grad():
        untrained.pooling_.mix.weights.zero_()
        untrained.pooling_.mix.gamma.fill_(1.0)
    expected = tokens.transform_sentences(SENTENCES)
    for mine, theirs in zip(shipped(SENTENCES), expected):
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-5)
    assert np.abs(np.concatenate(BatchEmbedder(untrained)(SENTENCES)) - np.concatenate(expected)).max() > 1e-3
    texts = [" ".join(s) for s in SENTENCES]
    text = TextEmbedder(str(tiny_bert_dir), precision="fp32", max_epochs=2).fit(texts, [len(t) % 2 for t in texts])
    np.testing.assert_allclose(np.stack(BatchEmbedder(text)(texts)), text.transform(texts), rtol=0, atol=1e-5)
    assert tokens.cache == "memory" and BatchEmbedder(tokens).estimator.cache is None  # the original is unchanged


def test_an_estimator_source_refuses_options_and_unfitted_estimators(tiny_vectors):
    from sklearn.exceptions import NotFittedError

    from contextembed.sklearn import TokenEmbedder

    fitted = TokenEmbedder(tiny_vectors, combine="mean").fit(SENTENCES)
    with pytest.raises(ValueError, match="layers cannot be given with a fitted TokenEmbedder"):
        BatchEmbedder(fitted, layers=-1)
    with pytest.raises(NotFittedError):
        BatchEmbedder(TokenEmbedder(tiny_vectors))
    with pytest.raises(TypeError, match="encoder spec .* or a fitted TokenEmbedder/TextEmbedder, got dict"):
        BatchEmbedder({"spec": tiny_vectors})


@pytest.mark.parametrize("option, message", [
    ({"level": "sentence"}, "level='sentence' is not one of 'word', 'text'"),
    ({"combine": "avg"}, "combine='avg' is not one of"),
    ({"tokenizer": "nltk"}, "tokenizer='nltk' is not one of"),
    ({"text_pooling": "sum"}, "text_pooling='sum' is not one of"),
])
def test_options_are_checked_on_the_driver(tiny_vectors, option, message):
    with pytest.raises(ValueError, match=message):
        BatchEmbedder(tiny_vectors, **option)


def test_malformed_rows_name_their_row(tiny_vectors):
    import pandas as pd

    embedder = BatchEmbedder(tiny_vectors)
    with pytest.raises(TypeError, match=r"^row 2, token 1 is NoneType \(None\); every token must be a str"):
        embedder([["a"], ["b"], ["c", None]])
    with pytest.raises(TypeError, match=r"^row 1 is int \(3\); expected a list of str tokens"):
        embedder([["a"], 3])
    with pytest.raises(ValueError, match=r"^row 0, token 1 \('c\\ud800t'\) holds '\\ud800' at character 1"):
        embedder([["the", "c\ud800t"]])
    frame = pd.DataFrame({"tokens": [["a"], ["b", 7]]}, index=[1041, 1042])
    with pytest.raises(TypeError, match=r"^row 1042, token 1 is int \(7\)"):
        embedder(frame)  # pandas rows are named by their index label (Dask: the global one)
    table = pa.table({"doc": ["d1", "d2"], "tokens": [["a"], ["b"]]})
    with pytest.raises(TypeError, match=r"^row doc='d2' of the 'tokens' column is a str \('b c'\)"):
        BatchEmbedder(tiny_vectors, id_column="doc")({"doc": ["d1", "d2"], "tokens": [["a"], "b c"]})
    with pytest.raises(TypeError, match=r"^row 0 of the batch of the 'text' column is list"):
        BatchEmbedder(tiny_vectors, level="text")({"text": [["a"]]})
    with pytest.raises(ValueError, match=r"neither a 'tokens' \(list of str\) nor a 'text' \(str\) column; .*'words'"):
        embedder(pa.table({"words": [["a"]]}))
    with pytest.raises(ValueError, match="no id column 'id'"):
        BatchEmbedder(tiny_vectors, id_column="id")(table)


def test_a_missing_model_is_the_loaders_error(tmp_path):
    embedder = BatchEmbedder(tmp_path / "no-such-model")  # nothing is checked until a worker loads it
    with pytest.raises(ModelNotFoundError):
        embedder([["a"]])


def test_pickles_never_carry_a_loaded_encoder(tiny_bert_dir):
    embedder = BatchEmbedder(tiny_bert_dir, precision="fp32")
    before = len(pickle.dumps(embedder))
    embedder([["a", "b"]])
    assert len(pickle.dumps(embedder)) == before < 2000
    copy = pickle.loads(pickle.dumps(embedder))
    assert copy._extractor is None and copy.spec == str(tiny_bert_dir)  # local paths become absolute


def test_worker_errors_come_back_as_their_own_class():
    class EngineWrapper(RuntimeError):  # what an engine raises, holding only the worker's text
        pass

    with pytest.raises(ModelNotFoundError, match="^no model at /x; install it\n.raised in a Test worker") as caught:
        with raise_carried("Test"):
            try:
                with carried_errors():
                    raise ModelNotFoundError("no model at /x; install it")
            except WorkerError as error:
                raise EngineWrapper(f"the actor died: traceback...\n{error}\nmore text") from None
    assert isinstance(caught.value.__cause__, EngineWrapper)
    with pytest.raises(EngineWrapper):  # a class that is not ours or built in stays wrapped
        with raise_carried("Test"):
            try:
                with carried_errors():
                    raise EngineWrapper("custom")
            except WorkerError as error:
                raise EngineWrapper(str(error)) from None


def test_engines_without_their_extras_say_how_to_install(monkeypatch):
    from contextembed.engines import dask as dask_engine
    from contextembed.engines import ray as ray_engine

    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "dask", None)
    with pytest.raises(MissingDependencyError, match=r'pip install "\.\[ray\]"'):
        ray_engine.import_ray()
    with pytest.raises(MissingDependencyError, match=r'pip install "\.\[dask\]"'):
        dask_engine.embed_bag([], "glove-6b-50d")


@pytest.mark.slow
def test_the_core_never_imports_the_engines():
    import subprocess

    code = ("import contextembed, contextembed.cli, contextembed.io, contextembed.sklearn, sys; "
            "print(sorted(m for m in sys.modules if m.startswith(('contextembed.engines', 'ray', 'dask'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_feature_array_of_no_rows():
    assert len(feature_array([], "word", 4)) == 0
    features, lengths = column_arrays(feature_array([np.zeros((0, 4), np.float32)], "word", 4))
    assert features.shape == (0, 4) and lengths.tolist() == [0]


def test_workers_pick_the_precision_the_driver_measured(tiny_bert_dir, monkeypatch):
    """A worker adopts the driver's measurements behind precision="auto" instead of taking its own
    (under load, two processes can measure their way to different precisions)."""
    from contextembed._runtime import devices

    embedder = BatchEmbedder(str(tiny_bert_dir), device="cpu")
    driver = devices.measured_speedups()
    assert "int8" in driver and embedder._speedups == driver
    shipped = pickle.loads(pickle.dumps(embedder))
    monkeypatch.setattr(devices, "_SPEEDUPS", {})  # a fresh worker process
    monkeypatch.setattr(devices, "_measure_speedups", lambda names: pytest.fail("the worker measured again"))
    shipped.load()
    assert devices.measured_speedups() == driver


# -- backend= -----------------------------------------------------------------------------------


@pytest.fixture
def engine_cache():
    """The session's engine cache (``tests/conftest.py``); skipped without OpenVINO."""
    pytest.importorskip("openvino", reason='backend="openvino" needs pip install ".[openvino]"')


def test_backend_auto_is_resolved_on_the_driver_and_shipped_pinned(tiny_bert_dir, engine_cache):
    embedder = BatchEmbedder(tiny_bert_dir, layers=[-1], precision="fp32", backend="auto")
    assert embedder.options["backend"] in ("torch", "openvino")  # never "auto" in a worker
    worker = pickle.loads(pickle.dumps(embedder))
    assert worker.options["backend"] == embedder.options["backend"]
    got = worker(SENTENCES[:6])
    for mine, theirs in zip(got, _reference(tiny_bert_dir, layers=[-1])[:6]):
        np.testing.assert_allclose(mine, theirs, atol=1e-4)


def test_the_engine_precision_auto_chose_is_pinned_too(tiny_bert_dir, engine_cache, monkeypatch):
    monkeypatch.setenv("CONTEXTEMBED_AUTO_CPU_PRECISION", "fp32")
    embedder = BatchEmbedder(tiny_bert_dir, layers=[-1], backend="openvino")
    assert (embedder.options["backend"], embedder.options["precision"]) == ("openvino", "fp32")
    assert BatchEmbedder(tiny_bert_dir, backend="torch").options["precision"] == "auto"  # torch: adopted speedups


def test_a_backend_is_checked_on_the_driver(tiny_bert_dir, tmp_path):
    with pytest.raises(ValueError, match="backend='onnx' is not one of"):
        BatchEmbedder(tiny_bert_dir, backend="onnx")
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("the 0.1 0.2\nfox 0.3 0.4\n", encoding="utf-8")
    with pytest.raises(ValueError, match="static vectors are a table"):
        BatchEmbedder(str(vectors), backend="openvino")([["the", "fox"]])


def test_a_fitted_estimator_carries_its_resolved_backend(tiny_bert_dir, engine_cache):
    from contextembed.sklearn import TokenEmbedder

    fitted = TokenEmbedder(str(tiny_bert_dir), layers=[-1], device="cpu", precision="fp32", backend="auto").fit(
        SENTENCES[:6])
    embedder = BatchEmbedder(fitted)
    assert pickle.loads(pickle.dumps(embedder)).estimator.encoder_ref_.backend == fitted.backend_
    with pytest.raises(ValueError, match="backend cannot be given with a fitted TokenEmbedder"):
        BatchEmbedder(fitted, backend="torch")


def test_ray_file_jobs_get_the_backend_auto_chose_on_the_driver(tiny_bert_dir, engine_cache, tmp_path, shipped_jobs):
    """No cluster needed: what run_corpus_jobs hands the actors is looked at before Ray would run."""
    from contextembed.engines import ray as ray_engine
    from contextembed.io._jobs import Job

    shipped = shipped_jobs
    ray_engine.run_corpus_jobs(str(tiny_bert_dir), [Job(str(tmp_path / "a.txt"), str(tmp_path / "a.npz"))], set(),
                               overwrite=False, done=print, device="cpu", precision="fp32", backend="auto")
    assert [job["backend"] for job in shipped] in (["torch"], ["openvino"])
    assert shipped[0]["precision"] == "fp32"
