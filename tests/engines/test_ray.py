"""Ray Data on a local instance (``ray.init(num_cpus=2)``, loopback only): the same features as one
process, row for row in input order; a worker killed mid-job; the loader's and the rows' errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import SENTENCES
from contextembed import load_encoder
from contextembed.errors import ModelNotFoundError
from contextembed.extraction import FeatureExtractor

pytest.importorskip("ray.data")
pytestmark = [pytest.mark.loopback, pytest.mark.slow]


@pytest.fixture(scope="module")
def dataset(ray_cluster):
    rows = [{"id": i, "tokens": s} for i, s in enumerate(SENTENCES)]
    return ray_cluster.data.from_items(rows, override_num_blocks=6)


def _single_process(spec, **options):
    return FeatureExtractor(load_encoder(spec, precision="fp32"), **options).words(SENTENCES)


def test_parquet_and_npz_equal_the_single_process_path_row_for_row(dataset, tiny_bert_dir, tmp_path):
    from contextembed.engines import read_parquet_features
    from contextembed.engines.ray import embed_dataset, write_array, write_parquet

    features = embed_dataset(dataset, str(tiny_bert_dir), precision="fp32", concurrency=2, batch_size=5)
    write_parquet(features, tmp_path / "parquet")
    expected = np.concatenate(_single_process(tiny_bert_dir))
    back = read_parquet_features(tmp_path / "parquet")
    assert back["lengths"].tolist() == [len(s) for s in SENTENCES]  # input order, every row
    np.testing.assert_allclose(back["features"], expected, atol=1e-5)  # fp32 batch tolerance
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]
    with pytest.raises(FileExistsError, match="already exists"):
        write_parquet(features, tmp_path / "parquet")

    summary = write_array(dataset, tmp_path / "features.npz", str(tiny_bert_dir), precision="fp32",
                          concurrency=2, batch_size=7)
    archive = np.load(tmp_path / "features.npz")
    assert summary["rows"] == len(expected) and archive["lengths"].tolist() == back["lengths"].tolist()
    np.testing.assert_allclose(archive["features"], expected, atol=1e-5)
    ids = [row["id"] for row in features.select_columns(["id"]).take_all()]
    assert ids == list(range(len(SENTENCES)))


def test_a_fitted_text_embedder_is_shipped_with_its_mix(ray_cluster, tiny_vectors, tmp_path):
    from contextembed.engines.ray import embed_dataset, write_array
    from contextembed.io import embed_file
    from contextembed.sklearn import TextEmbedder

    texts = [" ".join(s) for s in SENTENCES]
    estimator = TextEmbedder(tiny_vectors, layers=0, combine="mean", embed_weights=True).fit(texts)
    dataset = ray_cluster.data.from_items([{"text": t} for t in texts], override_num_blocks=4)
    rows = embed_dataset(dataset, estimator, concurrency=2, batch_size=4).take_all()
    np.testing.assert_array_equal(np.stack([r["features"] for r in rows]), estimator.transform(texts))
    assert [r["text"] for r in rows] == texts

    (tmp_path / "texts.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    embed_file(tiny_vectors, tmp_path / "texts.txt", tmp_path / "cli.npz", level="text", show_progress=False)
    write_array(dataset, tmp_path / "ray.npz", tiny_vectors, level="text", concurrency=2, batch_size=4)
    cli, mine = np.load(tmp_path / "cli.npz"), np.load(tmp_path / "ray.npz")
    # the layout of contextembed embed, less the provenance record it keeps for resuming
    assert sorted(mine.files) == ["features", "lengths"] and sorted(cli.files) == ["features", "lengths", "provenance"]
    for key in mine.files:
        np.testing.assert_array_equal(mine[key], cli[key])


def test_a_worker_killed_mid_job_is_retried_and_the_output_is_complete(dataset, tiny_vectors, tmp_path):
    from engine_helpers import DiesOnce

    from contextembed.engines import read_parquet_features
    from contextembed.engines.ray import embed_dataset, write_parquet

    marker = tmp_path / "killed"
    embedder = DiesOnce(tiny_vectors, marker=str(marker), victim=17)
    write_parquet(embed_dataset(dataset, embedder, concurrency=2, batch_size=4), tmp_path / "out")
    assert marker.exists(), "the worker was never killed: the test proves nothing"
    back = read_parquet_features(tmp_path / "out")
    assert back["lengths"].tolist() == [len(s) for s in SENTENCES]
    np.testing.assert_array_equal(back["features"], np.concatenate(_single_process(tiny_vectors)))


def test_a_worker_that_cannot_load_the_model_fails_with_the_loaders_error(dataset, tmp_path):
    from contextembed.engines.ray import embed_dataset, write_parquet

    with pytest.raises(ModelNotFoundError, match="no-such-model") as caught:
        write_parquet(embed_dataset(dataset, str(tmp_path / "no-such-model"), concurrency=1), tmp_path / "out")
    assert "Ray worker" in "".join(getattr(caught.value, "__notes__", []))
    assert not os.path.exists(tmp_path / "out") and not os.listdir(tmp_path)  # no partial output


def test_a_malformed_row_names_its_id(ray_cluster, tiny_vectors, tmp_path):
    from contextembed.engines.ray import embed_dataset, write_parquet

    rows = [{"id": 100 + i, "tokens": s} for i, s in enumerate(SENTENCES[:9])]
    rows[7]["tokens"] = ["fine", "", "then", "c\ud800t"]  # a lone surrogate: cannot be encoded
    dataset = ray_cluster.data.from_pandas(__import__("pandas").DataFrame(rows))
    with pytest.raises(ValueError, match=r"row id=107, token 3 \('c\\ud800t'\) holds '\\ud800'"):
        write_parquet(embed_dataset(dataset, tiny_vectors, id_column="id"), tmp_path / "out")
    assert not os.listdir(tmp_path)


def test_the_corpus_engine_ray_writes_what_the_local_engine_writes(ray_cluster, tiny_vectors, tmp_path):
    from contextembed.corpus import embed_corpus

    (tmp_path / "in" / "sub").mkdir(parents=True)
    for i in range(3):
        path = tmp_path / "in" / ("sub" if i else "") / f"part{i}.txt"
        path.write_text("\n".join(" ".join(s) for s in SENTENCES[i::3]) + "\n", encoding="utf-8")
    local = embed_corpus(tiny_vectors, str(tmp_path / "in"), str(tmp_path / "local"), show_progress=False)
    remote = embed_corpus(tiny_vectors, str(tmp_path / "in"), str(tmp_path / "ray"), engine="ray", concurrency=2)
    assert remote["embedded"] == local["embedded"] == 3
    for mine, theirs in zip(remote["outputs"], local["outputs"]):
        assert os.path.relpath(mine, tmp_path / "ray") == os.path.relpath(theirs, tmp_path / "local")
        a, b = np.load(mine), np.load(theirs)
        np.testing.assert_array_equal(a["features"], b["features"])
        np.testing.assert_array_equal(a["lengths"], b["lengths"])
    again = embed_corpus(tiny_vectors, str(tmp_path / "in"), str(tmp_path / "ray"), engine="ray")
    assert again["skipped"] == 3 and again["embedded"] == 0


def test_a_running_cluster_passes_the_address_check(ray_cluster):
    """The bounded check that runs before ``ray.init(address)`` (a gRPC server must answer, see
    tests/robustness/test_resource_bounds_cluster.py) accepts a real cluster's GCS at once."""
    import time

    from contextembed.engines.ray import check_address

    address = ray_cluster.get_runtime_context().gcs_address
    start = time.monotonic()
    check_address(address, 5)
    check_address("ray://" + address, 5)  # the same check for a Ray Client address (also gRPC)
    assert time.monotonic() - start < 2
