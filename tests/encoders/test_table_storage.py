"""Static tables stored as float16, int8 or clustered: accuracy, load-back in every adapter, damage."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from contextembed import StaticVectors, load_encoder
from contextembed.encoders import _static_directory as static_directory
from contextembed.encoders._table_storage import TableStorage, decode, encode
from contextembed.errors import ModelFormatError, ProvenanceError
from contextembed._provenance import PROVENANCE_FILE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "static_tables"
WORDS = ["the", "Cat", "café", "unknownword", "Paris"]
STORAGES = [TableStorage("float16"), TableStorage("int8"), TableStorage("int8", "dimension"),
            TableStorage("float32", clusters=3), TableStorage("int8", "dimension", clusters=3)]


def _table(rows=400, width=48, seed=0) -> np.ndarray:
    """Like a PCA'd table: columns of decreasing range, rows of varied length."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(rows, width)) * np.linspace(3, 0.05, width) * rng.uniform(0.1, 2, (rows, 1))
            ).astype(np.float32)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _int8_reference(vectors: np.ndarray, per: str) -> np.ndarray:
    """Plain loop: symmetric int8 with one scale per vector or per dimension, decoded."""
    out = np.empty_like(vectors)
    lines = vectors if per == "vector" else vectors.T
    target = out if per == "vector" else out.T
    for i, line in enumerate(lines):
        scale = max(abs(float(x)) for x in line) / 127 or 1.0
        target[i] = [max(-127, min(127, round(float(x) / scale))) * scale for x in line]
    return out


@pytest.mark.parametrize(("storage", "least"), [(TableStorage("float16"), 0.999), (TableStorage("int8"), 0.99),
                                                (TableStorage("int8", "dimension"), 0.99)])
def test_precisions_keep_the_cosine_to_float32(storage, least):
    vectors = _table()
    decoded = decode(encode(vectors, storage), storage, "t")
    assert decoded.dtype == np.float32 and decoded.shape == vectors.shape
    assert _cosines(decoded, vectors).min() >= least
    if storage.precision == "int8":
        np.testing.assert_allclose(decoded, _int8_reference(vectors, storage.scale), rtol=1e-5, atol=1e-6)


def test_int8_of_a_zero_row_and_column_is_exact():
    vectors = _table(10, 6)
    vectors[3], vectors[:, 2] = 0, 0
    for scale in ("vector", "dimension"):
        storage = TableStorage("int8", scale)
        tensors = encode(vectors, storage)
        assert (tensors["scales"] > 0).all()
        assert not decode(tensors, storage, "t")[3].any() and not decode(tensors, storage, "t")[:, 2].any()


def test_clustering_keeps_each_row_length_on_its_nearest_unit_centroid(tmp_path):
    vectors = _table(120, 8)
    vectors[7] = 0
    storage = TableStorage("float32", clusters=10)
    tensors = encode(vectors, storage)
    assert tensors["vectors"].shape == (10, 8) and tensors["assignment"].shape == (120,)
    centroids = tensors["vectors"]
    np.testing.assert_allclose(np.linalg.norm(centroids, axis=1), 1, rtol=1e-5)
    decoded = decode(tensors, storage, "t")
    lengths = np.linalg.norm(vectors, axis=1)
    np.testing.assert_allclose(np.linalg.norm(decoded, axis=1), lengths, rtol=1e-5, atol=1e-6)
    assert not decoded[7].any()
    # each row's direction is assigned to the centroid nearest to it (k-means' assignment)
    directions = vectors / np.where(lengths > 0, lengths, 1)[:, None]
    nearest = ((directions[:, None] - centroids[None]) ** 2).sum(-1).argmin(1)
    keep = np.arange(120) != 7
    agree = (centroids[nearest] * centroids[tensors["assignment"]]).sum(1)[keep]
    assert (agree > 0.98).mean() > 0.95  # k-means centres, then unit length: nearly always the same one
    assert _cosines(decoded[keep], vectors[keep]).mean() > 0.5
    table = StaticVectors([f"w{i}" for i in range(120)], vectors, storage=storage)
    table.save(tmp_path / "a")
    loaded = load_encoder(tmp_path / "a")
    loaded.save(tmp_path / "b")
    np.testing.assert_allclose(load_encoder(tmp_path / "b").table, loaded.table, rtol=1e-5, atol=1e-6)
    assert load_encoder(tmp_path / "b").storage == storage


def test_clusters_above_the_rows_are_refused():
    with pytest.raises(ValueError, match="clusters=9 exceeds the table's 5 rows"):
        encode(_table(5, 4), TableStorage(clusters=9))


@pytest.mark.parametrize("name", ["v2_plain", "v3_subwords"])
def test_tables_saved_before_storage_existed_load_as_before(name, tmp_path):
    with _maybe_warns(name):
        encoder = load_encoder(FIXTURES / name)
    # what the code before format 4 looked up: the table (OOV row last), then the seven words' rows
    expected = np.asarray(json.loads((FIXTURES / f"{name}.expected.json").read_text()), dtype=np.float32)
    (looked_up,) = encoder.encode([["the", "Cat", "cat", "café", "kitten", "Home", "zzqx"]])
    found = np.concatenate([encoder.table, looked_up[0]])
    np.testing.assert_array_equal(found.view(np.uint32), expected.view(np.uint32))  # bit for bit
    assert encoder.storage == TableStorage() and not (FIXTURES / name / PROVENANCE_FILE).exists()
    # saved again: the same format version as before, now with its record
    encoder.save(tmp_path / "again")
    options = json.loads((tmp_path / "again" / static_directory.SAVED_OPTIONS).read_text())
    assert options == json.loads((FIXTURES / name / static_directory.SAVED_OPTIONS).read_text())
    assert (tmp_path / "again" / PROVENANCE_FILE).exists()


def _maybe_warns(name):
    """The v2 fixture repeats a word on purpose (its rows are kept, the first wins)."""
    import contextlib

    return pytest.warns(UserWarning, match="repeat an earlier word") if name == "v2_plain" else contextlib.nullcontext()


@pytest.fixture(scope="module")
def distilled():
    return load_encoder(FIXTURES / "v3_subwords")


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_every_storage_loads_back_and_works_in_every_adapter(distilled, storage, tmp_path):
    from contextembed.sklearn import TextEmbedder, TokenEmbedder

    distilled.save(tmp_path / "t", storage=storage)
    loaded = load_encoder(tmp_path / "t")
    assert loaded.storage == storage and loaded.subwords is not None and loaded.words == distilled.words
    least = 0.999 if storage.precision == "float16" else 0.99
    if storage.clusters is None:
        assert _cosines(loaded.table[:-1], distilled.table[:-1]).min() >= least
        assert _cosines(loaded.subwords.vectors, distilled.subwords.vectors).min() >= least
    else:
        lengths = np.linalg.norm(loaded.table[:-1], axis=1, keepdims=True)
        directions = np.unique(np.round(loaded.table[:-1] / lengths, 4), axis=0)
        assert len(directions) <= storage.clusters
        np.testing.assert_allclose(lengths[:, 0], np.linalg.norm(distilled.table[:-1], axis=1), rtol=1e-2)
    sentences = [["the", "Cat", "kitten"], ["Home", "zzqx"]]
    (rows,) = loaded.encode(sentences[:1])
    text = TextEmbedder(str(tmp_path / "t")).fit_transform([" ".join(s) for s in sentences])
    mean = rows[0].mean(axis=0)
    np.testing.assert_allclose(text[0], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
    tokens = TokenEmbedder(str(tmp_path / "t")).fit(sentences)
    np.testing.assert_allclose(tokens.transform(sentences[:1]), rows[0], rtol=1e-6)
    restored = pickle.loads(pickle.dumps(tokens))  # the table travels inside the estimator
    np.testing.assert_array_equal(restored.transform(sentences[:1]), tokens.transform(sentences[:1]))


def test_a_clustered_int8_table_in_the_spacy_component(distilled, tmp_path):
    spacy = pytest.importorskip("spacy")
    from contextembed.sklearn import TextEmbedder

    distilled.save(tmp_path / "t", storage=TableStorage("int8", clusters=4))
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(tmp_path / "t"), "device": "cpu"}})
    doc = nlp("the Cat sat home")
    expected = TextEmbedder(str(tmp_path / "t")).fit_transform([[t.text for t in doc]])[0]
    np.testing.assert_allclose(doc.vector, expected, rtol=1e-6)


def test_options_are_checked():
    for options, message in [({"precision": "int4"}, "precision='int4'"), ({"precision": "float16", "scale": "vector"},
                             "applies to precision 'int8' only"), ({"precision": "int8", "scale": "row"}, "scale='row'"),
                             ({"clusters": 0}, "clusters must be"), ({"clusters": True}, "clusters must be"),
                             ({"clusters": 2.0}, "clusters must be")]:
        with pytest.raises(ValueError, match=message):
            TableStorage(**options)
    with pytest.raises(ValueError, match="clusters=9 exceeds the table's 5 rows"):
        StaticVectors(WORDS, _table(5, 4)).save("/nonexistent/never-written", storage=TableStorage(clusters=9))
    with pytest.raises(TypeError, match="storage must be a TableStorage"):
        StaticVectors(WORDS, _table(5, 4), storage="int8")


# -- damaged files -------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    """``save(storage) -> folder`` of a 5-word table."""

    def save(storage):
        folder = tmp_path / f"t{len(list(tmp_path.iterdir()))}"
        StaticVectors(WORDS, _table(5, 4)).save(folder, storage=storage)
        return folder

    return save


def _forge(folder: Path, change) -> None:
    """Change the stored tensors and write a matching provenance record (a forger who knows the
    format): only the content checks can catch it."""
    path = folder / static_directory.SAVED_VECTORS
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)
    options = json.loads((folder / static_directory.SAVED_OPTIONS).read_text())
    storage = TableStorage(**options["storage"])
    record = static_directory._table_record(str(folder), storage, len(WORDS), 4, False)
    (folder / PROVENANCE_FILE).write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("storage", "change", "message"),
    [
        (TableStorage("int8"), lambda t: t["scales"].__setitem__(2, np.nan), "int8 scale 2 \\(per vector\\) is nan"),
        (TableStorage("int8"), lambda t: t["scales"].__setitem__(0, np.inf), "int8 scale 0 \\(per vector\\) is inf"),
        (TableStorage("int8", "dimension"), lambda t: t["scales"].__setitem__(1, 0), "int8 scale 1 \\(per dimension\\) is 0"),
        (TableStorage("int8", "dimension"), lambda t: t["scales"].__setitem__(1, -2), "is -2"),
        (TableStorage("int8"), lambda t: t.update(scales=t["scales"][:3]), "must be float32 of shape \\(5,\\)"),
        (TableStorage("int8"), lambda t: t.update(scales=t["scales"].astype(np.float16)), "must be float32"),
        (TableStorage("int8"), lambda t: t["vectors"].__setitem__((0, 0), -128), "-128"),
        (TableStorage("int8"), lambda t: t.pop("scales"), "has the tensors \\['scales', 'vectors'\\]"),
        (TableStorage("float16"), lambda t: t.update(vectors=t["vectors"].astype(np.float32)), "expected a float16"),
        (TableStorage("float16"), lambda t: t["vectors"].__setitem__((1, 1), np.inf), "row 1 of the saved vectors"),
        (TableStorage(clusters=2), lambda t: t["assignment"].__setitem__(4, 2), "row 4 names centroid 2, outside the 2"),
        (TableStorage(clusters=2), lambda t: t["assignment"].__setitem__(0, -1), "row 0 names centroid -1"),
        (TableStorage(clusters=2), lambda t: t.update(assignment=t["assignment"].astype(np.int64)), "int32"),
        (TableStorage(clusters=2), lambda t: t.update(vectors=np.zeros((3, 4), np.float32)), "3 centroids, more than"),
        (TableStorage(clusters=2), lambda t: t.update(assignment=t["assignment"][:4]), "\\(4,\\) float32 tensor 'lengths'"),
        (TableStorage(clusters=2), lambda t: t["lengths"].__setitem__(3, np.nan), "row 3 has length nan"),
        (TableStorage(clusters=2), lambda t: t["lengths"].__setitem__(1, -1), "row 1 has length -1"),
        (TableStorage(clusters=2), lambda t: t.pop("lengths"), "has the tensors \\['assignment', 'lengths', 'vectors'\\]"),
    ],
)
def test_forged_contents_are_named(saved, storage, change, message):
    folder = saved(storage)
    _forge(folder, change)
    with pytest.raises(ModelFormatError, match=message) as caught:
        load_encoder(folder)
    assert str(folder) in str(caught.value)


@pytest.mark.parametrize("storage", [TableStorage(), TableStorage("int8"), TableStorage(clusters=2)], ids=str)
@pytest.mark.parametrize("damage", ["truncate", "flip", "swap words", "options"])
def test_files_changed_after_saving_are_refused(saved, storage, damage):
    folder = saved(storage)
    vectors = folder / static_directory.SAVED_VECTORS
    if damage == "truncate":
        vectors.write_bytes(vectors.read_bytes()[:-3])
    elif damage == "flip":
        data = bytearray(vectors.read_bytes())
        data[-1] ^= 1
        vectors.write_bytes(bytes(data))
    elif damage == "swap words":
        (folder / static_directory.SAVED_WORDS).write_text(json.dumps(WORDS[::-1]))
    else:
        options = json.loads((folder / static_directory.SAVED_OPTIONS).read_text())
        options["oov"] = "mean" if options["oov"] == "zeros" else "zeros"
        (folder / static_directory.SAVED_OPTIONS).write_text(json.dumps(options))
    with pytest.raises(ProvenanceError, match="its files changed after it was saved"):
        load_encoder(folder)


def test_storage_damage_in_the_options(saved):
    folder = saved(TableStorage("int8"))
    options_path = folder / static_directory.SAVED_OPTIONS
    options = json.loads(options_path.read_text())
    for storage, message in [({"precision": "int4", "scale": None, "clusters": None}, "precision='int4'"),
                             ({"precision": "int8"}, "keys precision, scale and clusters"),
                             ({"precision": "int8", "scale": None, "clusters": None}, "not as contextembed writes")]:
        options_path.write_text(json.dumps({**options, "storage": storage}))
        with pytest.raises(ModelFormatError, match=message):
            load_encoder(folder)
    options_path.write_text(json.dumps({k: v for k, v in options.items() if k != "subwords"}))
    with pytest.raises(ModelFormatError, match='names "subwords"'):
        load_encoder(folder)
    options_path.write_text(json.dumps({**options, "format_version": 3}))
    with pytest.raises(ModelFormatError, match="does not fit format_version 3"):
        load_encoder(folder)
    options_path.write_text(json.dumps(options))
    (folder / PROVENANCE_FILE).unlink()
    with pytest.raises(ModelFormatError, match="must have its contextembed_provenance.json"):
        load_encoder(folder)


def test_a_table_of_another_storage_is_not_read_as_float32(saved, tmp_path):
    folder = saved(TableStorage("float16"))
    shutil.copyfile(saved(TableStorage()) / static_directory.SAVED_VECTORS, folder / static_directory.SAVED_VECTORS)
    with pytest.raises(ProvenanceError):
        load_encoder(folder)
