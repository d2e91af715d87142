"""Dask on a LocalCluster (2 worker processes, loopback only): fitted estimators under dask-ml's
ParallelPostFit and map_partitions over bags and dataframes give the single-process features, and
the encoder is loaded once per worker, not once per task."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from conftest import SENTENCES
from contextembed import load_encoder
from contextembed.errors import ModelNotFoundError
from contextembed.extraction import FeatureExtractor

pytest.importorskip("dask.bag")
pytest.importorskip("distributed")
pytestmark = [pytest.mark.loopback, pytest.mark.slow]

TEXTS = [" ".join(s) for s in SENTENCES]


def test_parallel_post_fit_transforms_like_the_estimator(dask_client, tiny_bert_dir):
    import dask.array as da
    from dask_ml.wrappers import ParallelPostFit

    from contextembed.sklearn import TextEmbedder

    estimator = TextEmbedder(str(tiny_bert_dir), precision="fp32", max_epochs=2).fit(TEXTS, [len(t) % 2 for t in TEXTS])
    expected = estimator.transform(TEXTS)
    wrapped = ParallelPostFit(estimator, transform_meta=np.empty((0, 0), np.float32))
    column = da.from_array(np.array(TEXTS, dtype=object)[:, None], chunks=(8, 1))
    np.testing.assert_allclose(wrapped.transform(column).compute(), expected, atol=1e-5)


def test_the_encoder_loads_once_per_worker_not_per_task(dask_client, tiny_bert_dir):
    import dask.bag as db
    from engine_helpers import count_loads, loads

    from contextembed.engines.dask import embed_bag

    dask_client.run(count_loads)
    bag = db.from_sequence(SENTENCES, npartitions=12)
    got = embed_bag(bag, str(tiny_bert_dir), layers="all", combine="mean", precision="fp32").compute()
    again = embed_bag(bag, str(tiny_bert_dir), layers="all", combine="mean", precision="fp32").compute()
    per_worker = dask_client.run(loads)
    assert sum(per_worker.values()) <= len(per_worker) < 12, per_worker  # 24 tasks, at most one load each
    expected = FeatureExtractor(load_encoder(tiny_bert_dir, precision="fp32"), "all", "mean").words(SENTENCES)
    for mine, second, theirs in zip(got, again, expected):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)
        np.testing.assert_array_equal(mine.shape, second.shape)


def test_embedded_weights_are_scattered_once(dask_client, tiny_vectors):
    import dask.bag as db

    from contextembed.engines import BatchEmbedder
    from contextembed.engines.dask import embed_bag
    from contextembed.sklearn import TokenEmbedder

    estimator = TokenEmbedder(tiny_vectors, layers=0, combine="mean", embed_weights=True).fit(SENTENCES)
    reference = TokenEmbedder(tiny_vectors, layers=0, combine="mean").fit(SENTENCES)
    assert len(pickle.dumps(estimator)) > len(pickle.dumps(reference))  # the weights travel in the pickle
    shared = dask_client.scatter(BatchEmbedder(estimator), broadcast=True)
    got = embed_bag(db.from_sequence(SENTENCES, npartitions=6), shared).compute()
    for mine, theirs in zip(got, estimator.transform_sentences(SENTENCES)):
        np.testing.assert_array_equal(mine, theirs)


def test_dataframes_keep_their_columns_and_name_bad_rows_globally(dask_client, tiny_vectors):
    import dask
    import dask.bag as db
    import dask.dataframe as dd
    import pandas as pd

    from contextembed.engines.dask import embed_bag, embed_dataframe

    frame = dd.from_pandas(pd.DataFrame({"text": TEXTS, "n": range(len(TEXTS))}), npartitions=4)
    out = embed_dataframe(frame, tiny_vectors, level="text", tokenizer="whitespace").compute()  # "3,5" whole
    assert out["n"].tolist() == list(range(len(TEXTS)))
    expected = FeatureExtractor(load_encoder(tiny_vectors), level="text").texts(SENTENCES)
    np.testing.assert_array_equal(np.stack(out["features"].tolist()), expected)

    broken = [list(s) for s in SENTENCES]
    broken[29][1] = None
    with dask.config.set({"dataframe.convert-string": False}):
        frame = dd.from_pandas(pd.DataFrame({"tokens": broken}), npartitions=4)
    with pytest.raises(TypeError, match=r"^row 29, token 1 is NoneType \(None\)"):
        embed_dataframe(frame, tiny_vectors).compute()
    with pytest.raises(TypeError, match=r"^partition 2, row 7, token 1 is NoneType"):
        embed_bag(db.from_sequence(broken, npartitions=4), tiny_vectors).compute()  # 11 rows a partition
    with pytest.raises(ModelNotFoundError, match="no-such-model"):  # the loader's error, raised by the worker
        embed_bag(db.from_sequence(SENTENCES, npartitions=2), "/nonexistent/no-such-model").compute()
    converted = dd.from_pandas(pd.DataFrame({"tokens": SENTENCES}), npartitions=2)
    if converted._meta["tokens"].dtype != object:  # dask turned the lists into their text
        with pytest.raises(TypeError, match="Dask converted its token lists to text"):
            embed_dataframe(converted, tiny_vectors)
