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
from contextembed.encoders._static import directory as static_directory
from contextembed.encoders._static.tables import TableStorage, decode, encode
from contextembed.errors import ModelFormatError, ProvenanceError
from contextembed._runtime.provenance import PROVENANCE_FILE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "static_tables"
WORDS = ["the", "Cat", "café", "unknownword", "Paris"]
STORAGES = [TableStorage("float16"), TableStorage("int8"), TableStorage("int8", "dimension"),
            TableStorage("float32", clusters=3), TableStorage("int8", "dimension", clusters=3),
            TableStorage("int8", clusters=3, exact_columns=2)]


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


def test_exact_columns_keep_the_widest_columns_and_cluster_the_rest():
    vectors = _table(200, 8)
    storage = TableStorage("float32", clusters=12, exact_columns=3)
    tensors = encode(vectors, storage)
    decoded = decode(tensors, storage, "t")
    # plain reference: the three columns of largest variance, by a loop over the columns
    variances = [float(np.var(vectors[:, j].astype(np.float64))) for j in range(8)]
    widest = sorted(sorted(range(8), key=lambda j: -variances[j])[:3])
    assert tensors["columns"].tolist() == widest == [0, 1, 2]  # _table's columns shrink left to right
    np.testing.assert_array_equal(decoded[:, widest], vectors[:, widest])
    rest = [j for j in range(8) if j not in widest]
    # the other columns: each row's own length on one of at most 12 unit directions
    lengths = np.linalg.norm(vectors[:, rest], axis=1)
    np.testing.assert_allclose(np.linalg.norm(decoded[:, rest], axis=1), lengths, rtol=1e-5)
    assert len(np.unique(np.round(decoded[:, rest] / lengths[:, None], 5), axis=0)) <= 12
    assert tensors["vectors"].shape == (12, 5) and tensors["exact"].shape == (200, 3)
    # keeping columns exactly brings the rows closer than clustering them all
    plain = decode(encode(vectors, TableStorage(clusters=12)), TableStorage(clusters=12), "t")
    assert _cosines(decoded, vectors).mean() > _cosines(plain, vectors).mean()
    with pytest.raises(ValueError, match="exact_columns=8 leaves none of the table's 8 columns"):
        encode(vectors, TableStorage(clusters=12, exact_columns=8))
    with pytest.raises(ValueError, match="exact_columns=8 leaves none of the table's 8 columns"):
        StaticVectors([f"w{i}" for i in range(200)], vectors).save("/nonexistent/never", storage=TableStorage(
            clusters=12, exact_columns=8))


def test_clusters_above_the_rows_are_refused():
    with pytest.raises(ValueError, match="clusters=9 exceeds the table's 5 rows"):
        encode(_table(5, 4), TableStorage(clusters=9))


OLD_TABLES = {"v2_plain": TableStorage(), "v3_subwords": TableStorage(),
              "v4_int8_subwords": TableStorage("int8", "dimension"),
              "v4_clustered_subwords": TableStorage("float16", clusters=3)}


@pytest.mark.parametrize("name", list(OLD_TABLES))
def test_tables_saved_by_earlier_formats_load_as_before(name, tmp_path):
    with _maybe_warns(name):
        encoder = load_encoder(FIXTURES / name)
    # what the code of the table's format looked up: the table (OOV row last), then the seven words' rows
    expected = np.asarray(json.loads((FIXTURES / f"{name}.expected.json").read_text()), dtype=np.float32)
    sentence = ["the", "Cat", "cat", "café", "kitten", "Home", "zzqx"]
    (looked_up,) = encoder.encode([sentence])
    found = np.concatenate([encoder.table, looked_up[0]])
    np.testing.assert_array_equal(found.view(np.uint32), expected.view(np.uint32))  # bit for bit
    assert encoder.storage == OLD_TABLES[name]
    assert (FIXTURES / name / PROVENANCE_FILE).exists() == name.startswith("v4")
    # saved again: a table without pieces keeps its format, one with pieces becomes format 5; the same table
    with _maybe_warns(name):
        encoder.save(tmp_path / "again")
        again = load_encoder(tmp_path / "again")
    options = json.loads((tmp_path / "again" / static_directory.SAVED_OPTIONS).read_text())
    old_options = json.loads((FIXTURES / name / static_directory.SAVED_OPTIONS).read_text())
    if name == "v2_plain":
        assert options == old_options
    else:
        assert options["format_version"] == 5 and options["storage"] == OLD_TABLES[name].as_record()
    assert (tmp_path / "again" / PROVENANCE_FILE).exists() and again.storage == OLD_TABLES[name]
    (again_rows,) = again.encode([sentence])
    if OLD_TABLES[name].is_default:  # float32: nothing is rounded again
        np.testing.assert_array_equal(np.concatenate([again.table, again_rows[0]]).view(np.uint32), found.view(np.uint32))
    elif OLD_TABLES[name].clusters is not None:
        # format 4 clustered words and pieces apart (k centroids each), format 5 clusters them together:
        # every row keeps its length, and the words and pieces share at most k directions now
        lengths = np.linalg.norm(again.table[:-1], axis=1)
        np.testing.assert_allclose(lengths, np.linalg.norm(encoder.table[:-1], axis=1), rtol=1e-3)
        rows = np.vstack([again.table[:-1], again.subwords.vectors])
        directions = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        assert len(np.unique(np.round(directions, 3), axis=0)) <= OLD_TABLES[name].clusters
    else:  # rounded again (int8 scales now span the piece rows too): within two int8 steps of the old
        step = np.abs(found).max() / 127
        np.testing.assert_allclose(np.concatenate([again.table, again_rows[0]]), found, rtol=0, atol=2 * step)


def _maybe_warns(name):
    """The v2 fixture repeats a word on purpose (its rows are kept, the first wins)."""
    import contextlib

    return pytest.warns(UserWarning, match="repeat an earlier word") if name == "v2_plain" else contextlib.nullcontext()


def _write_record(folder: Path) -> None:
    """Record the directory's files as they are now (a forger who knows the format): only the
    content checks can catch what was changed."""
    options = json.loads((folder / static_directory.SAVED_OPTIONS).read_text())
    storage = TableStorage(**options["storage"])
    version = options["format_version"]
    files = static_directory._file_hashes(str(folder), static_directory._recorded_files(str(folder), version, False))
    old = json.loads((folder / PROVENANCE_FILE).read_text())
    extra = {"pieces": old["pieces"], "piece_rows": options["piece_rows"]} if version == 5 else {}
    record = static_directory._table_record(files, storage, old["rows"], old["width"], **extra)
    (folder / PROVENANCE_FILE).write_text(json.dumps(record))


@pytest.fixture(scope="module")
def distilled():
    return load_encoder(FIXTURES / "v3_subwords")


@pytest.mark.parametrize("storage", STORAGES, ids=str)
def test_every_storage_loads_back_and_works_in_every_adapter(distilled, storage, tmp_path):
    from contextembed.sklearn import TextEmbedder, TokenEmbedder

    distilled.save(tmp_path / "t", storage=storage)
    assert json.loads((tmp_path / "t" / static_directory.SAVED_OPTIONS).read_text())["format_version"] == 5
    loaded = load_encoder(tmp_path / "t")
    assert loaded.storage == storage and loaded.subwords is not None and loaded.words == distilled.words
    least = 0.999 if storage.precision == "float16" else 0.99
    if storage.clusters is None:
        assert _cosines(loaded.table[:-1], distilled.table[:-1]).min() >= least
        assert _cosines(loaded.subwords.vectors, distilled.subwords.vectors).min() >= least
    elif storage.exact_columns is None:
        lengths = np.linalg.norm(loaded.table[:-1], axis=1, keepdims=True)
        directions = np.unique(np.round(loaded.table[:-1] / lengths, 4), axis=0)
        assert len(directions) <= storage.clusters
        np.testing.assert_allclose(lengths[:, 0], np.linalg.norm(distilled.table[:-1], axis=1), rtol=1e-2)
    else:  # the two widest columns kept (to int8's step), the other two clustered
        own = static_directory.shared_rows(distilled.table[:-1], distilled.subwords.vectors)[1]
        stored = np.vstack([distilled.table[:-1], distilled.subwords.vectors[own]])  # the rows format 5 stores
        widest = np.sort(np.argsort(-stored.var(axis=0))[:2])
        step = np.abs(distilled.table).max() / 127
        np.testing.assert_allclose(loaded.table[:-1][:, widest], distilled.table[:-1][:, widest], atol=step)
    sentences = [["the", "Cat", "kitten"], ["Home", "zzqx"]]
    (rows,) = loaded.encode(sentences[:1])
    text = TextEmbedder(str(tmp_path / "t")).fit_transform([" ".join(s) for s in sentences])
    mean = rows[0].mean(axis=0)
    np.testing.assert_allclose(text[0], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
    tokens = TokenEmbedder(str(tmp_path / "t")).fit(sentences)
    np.testing.assert_allclose(tokens.transform(sentences[:1]), rows[0], rtol=1e-6)
    restored = pickle.loads(pickle.dumps(tokens))  # the table travels inside the estimator
    np.testing.assert_array_equal(restored.transform(sentences[:1]), tokens.transform(sentences[:1]))


@pytest.mark.parametrize("storage", [TableStorage("int8", clusters=4), TableStorage("int8", clusters=4, exact_columns=1),
                                     TableStorage("float16")], ids=str)
def test_a_small_table_in_the_spacy_component(distilled, storage, tmp_path):
    spacy = pytest.importorskip("spacy")
    from contextembed.sklearn import TextEmbedder

    distilled.save(tmp_path / "t", storage=storage)
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": str(tmp_path / "t"), "device": "cpu"}})
    doc = nlp("the Cat sat home")
    expected = TextEmbedder(str(tmp_path / "t")).fit_transform([[t.text for t in doc]])[0]
    np.testing.assert_allclose(doc.vector, expected, rtol=1e-6)


def test_options_are_checked():
    for options, message in [({"precision": "int4"}, "precision='int4'"), ({"precision": "float16", "scale": "vector"},
                             "applies to precision 'int8' only"), ({"precision": "int8", "scale": "row"}, "scale='row'"),
                             ({"clusters": 0}, "clusters must be"), ({"clusters": True}, "clusters must be"),
                             ({"clusters": 2.0}, "clusters must be"),
                             ({"exact_columns": 2}, "exact_columns=2 keeps columns beside the clusters"),
                             ({"clusters": 4, "exact_columns": 0}, "exact_columns must be")]:
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


def _forge(folder: Path, change, name: str = static_directory.SAVED_VECTORS) -> None:
    """Change the tensors of the file ``name`` and write a matching provenance record (a forger who
    knows the format): only the content checks can catch it."""
    path = folder / name
    tensors = load_file(path)
    change(tensors)
    save_file(tensors, path)
    _write_record(folder)


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
        (TableStorage(clusters=2, exact_columns=1), lambda t: t["columns"].__setitem__(0, 4),
         "'columns' must increase within the table's 4 columns, found \\[4\\]"),
        (TableStorage(clusters=2, exact_columns=1), lambda t: t.update(columns=t["columns"].astype(np.int64)),
         "an \\(1,\\) int32 tensor 'columns'"),
        (TableStorage(clusters=2, exact_columns=1), lambda t: t.update(exact=t["exact"][:3]), "a \\(5, 1\\) tensor 'exact'"),
        (TableStorage("int8", clusters=2, exact_columns=1), lambda t: t["exact_scales"].__setitem__(1, 0),
         "int8 'exact_scales' scale 1 \\(per vector\\) is 0"),
        (TableStorage("float16", clusters=2, exact_columns=1), lambda t: t["exact"].__setitem__((2, 0), np.inf),
         "row 2 of the saved exact columns is not finite"),
        (TableStorage(clusters=2, exact_columns=1), lambda t: t.pop("exact"), "exact_columns=1\\) table has the tensors"),
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
                             ({"precision": "int8", "scale": "vector", "clusters": None, "exact_columns": 2},
                              "keeps columns beside the clusters"),
                             ({"precision": "int8", "scale": "vector", "clusters": 2, "exact_columns": None},
                              "not as contextembed writes"),
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


# -- format 5: each distinct row stored once -----------------------------------------------------


def test_shared_rows_against_a_plain_loop():
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(6, 3)).astype(np.float32)
    fresh = rng.normal(size=(2, 3)).astype(np.float32)
    pieces = np.stack([vectors[2], fresh[0], vectors[0], fresh[0], fresh[1], vectors[2], np.nextafter(vectors[1], 9)])
    rows, own = static_directory.shared_rows(vectors, pieces)
    # plain loop: the first stored row equal bit for bit, else a new row after the stored ones
    stored, expected = [row.tobytes() for row in vectors], []
    for piece in pieces:
        if piece.tobytes() not in stored:
            stored.append(piece.tobytes())
        expected.append(stored.index(piece.tobytes()))
    assert rows.dtype == np.int32 and rows.tolist() == expected == [2, 6, 0, 6, 7, 2, 8]
    assert own.tolist() == [1, 4, 6]  # a row one float step away is a row of its own: nothing is rounded


def _vocabulary_like(distilled) -> StaticVectors:
    """A table whose words are its pieces, as a vocabulary-mode distillation makes: every piece
    vector is a word's row."""
    tokenizer = distilled.subwords.tokenizer
    words = tokenizer.convert_ids_to_tokens(distilled.subwords.ids.tolist())
    return StaticVectors(words, distilled.subwords.vectors, lowercase=False, oov="mean", subwords=distilled.subwords)


@pytest.mark.parametrize("storage", [TableStorage(), TableStorage("int8", "dimension"), TableStorage("float16", clusters=3)],
                         ids=str)
def test_a_table_whose_pieces_are_its_words_stores_each_row_once(distilled, storage, tmp_path):
    table = _vocabulary_like(distilled)
    table.save(tmp_path / "t", storage=storage)
    options = json.loads((tmp_path / "t" / static_directory.SAVED_OPTIONS).read_text())
    assert options["format_version"] == 5 and options["piece_rows"] == 0
    assert len(load_file(tmp_path / "t" / static_directory.SAVED_VECTORS)["lengths" if storage.clusters else "vectors"]) \
        == len(table.words)
    pieces = load_file(tmp_path / "t" / static_directory.PIECE_ROWS_FILE)
    assert pieces["ids"].tolist() == table.subwords.ids.tolist()
    assert pieces["rows"].tolist() == list(range(len(table.words)))
    loaded = load_encoder(tmp_path / "t")
    np.testing.assert_array_equal(loaded.subwords.vectors, loaded.table[:-1])  # still one row each
    if storage.is_default:
        np.testing.assert_array_equal(loaded.table.view(np.uint32), table.table.view(np.uint32))
    elif storage.clusters is None:
        assert _cosines(loaded.table[:-1], table.table[:-1]).min() >= 0.99
    else:  # each row its own length, on one of 3 directions
        lengths = np.linalg.norm(loaded.table[:-1], axis=1, keepdims=True)
        np.testing.assert_allclose(lengths[:, 0], np.linalg.norm(table.table[:-1], axis=1), rtol=1e-2)
        assert len(np.unique(np.round(loaded.table[:-1] / lengths, 3), axis=0)) <= 3
    words = ["the", "kitten", "zzqx"]
    assert loaded.encode([words])[0].shape == (1, 3, table.width)


def test_format_5_stores_the_pieces_no_word_row_equals(distilled, tmp_path):
    distilled.save(tmp_path / "t")
    options = json.loads((tmp_path / "t" / static_directory.SAVED_OPTIONS).read_text())
    words = {row.tobytes() for row in distilled.table[:-1]}
    own = len({row.tobytes() for row in distilled.subwords.vectors} - words)
    assert options["piece_rows"] == own and 0 < own < len(distilled.subwords.ids)  # the fixture shares some rows
    assert len(load_file(tmp_path / "t" / static_directory.SAVED_VECTORS)["vectors"]) == len(distilled.words) + own
    loaded = load_encoder(tmp_path / "t")
    np.testing.assert_array_equal(loaded.table.view(np.uint32), distilled.table.view(np.uint32))
    np.testing.assert_array_equal(loaded.subwords.vectors.view(np.uint32), distilled.subwords.vectors.view(np.uint32))
    np.testing.assert_array_equal(loaded.subwords.ids, distilled.subwords.ids)
    record = json.loads((tmp_path / "t" / PROVENANCE_FILE).read_text())
    assert record["pieces"] == len(distilled.subwords.ids) and record["piece_rows"] == own
    assert set(record["files"]) == {"vectors.safetensors", "words.json", "contextembed_static.json",
                                    "subwords/piece_rows.safetensors", "subwords/tokenizer.json",
                                    "subwords/tokenizer_config.json"}


@pytest.fixture
def saved5(distilled, tmp_path):
    folder = tmp_path / "t5"
    distilled.save(folder, storage=TableStorage("int8"))
    return folder


def _append_byte(path: Path) -> None:
    path.write_bytes(path.read_bytes() + b" ")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda f: (f / "vectors.safetensors").write_bytes((f / "vectors.safetensors").read_bytes()[:-5]),
         "vectors.safetensors differs"),
        (lambda f: _append_byte(f / "subwords" / "piece_rows.safetensors"), "subwords/piece_rows.safetensors differs"),
        (lambda f: _append_byte(f / "subwords" / "tokenizer.json"), "subwords/tokenizer.json differs"),
        (lambda f: (f / "subwords" / "vocab.txt").write_text("[PAD]\n"), "subwords/vocab.txt is not in the table's record"),
        (lambda f: (f / "subwords" / "tokenizer_config.json").unlink(), "subwords/tokenizer_config.json is missing"),
        (lambda f: (f / "subwords" / "piece_rows.safetensors").unlink(), "subwords/piece_rows.safetensors is missing"),
        (lambda f: (f / "words.json").write_text(json.dumps(json.loads((f / "words.json").read_text())[::-1])),
         "words.json differs"),
        (lambda f: (f / static_directory.SAVED_OPTIONS).write_text(
            (f / static_directory.SAVED_OPTIONS).read_text().replace('"piece_rows": 10', '"piece_rows": 9')),
         "contextembed_static.json differs"),
    ],
)
def test_a_changed_format_5_file_is_refused_naming_it(saved5, damage, named):
    damage(saved5)
    with pytest.raises(ProvenanceError, match=named) as caught:
        load_encoder(saved5)
    assert str(saved5) in str(caught.value) and "its files changed after it was saved" in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t["rows"].__setitem__(1, 17), "piece 1 \\(id \\d+\\) names row 17, outside the 17 rows"),
        (lambda t: t["rows"].__setitem__(0, -1), "piece 0 \\(id \\d+\\) names row -1"),
        (lambda t: t["rows"].__setitem__(t["rows"] >= 7, 0), "row 7 of vectors.safetensors is a piece row that no piece"),
        (lambda t: t.update(rows=t["rows"].astype(np.int64)), "int32 tensor 'rows'"),
        (lambda t: t.update(ids=t["ids"][:-1]), "\\(11,\\) int32 tensor 'rows'"),
        (lambda t: t.update({k: np.delete(t[k], np.flatnonzero(t["rows"] < 7)[0]) for k in ("ids", "rows")}),
         "holds 11 pieces, its record 12"),  # a piece that was a word's row dropped
        (lambda t: t.pop("rows"), "expected the tensors \\['ids', 'rows'\\], found \\['ids'\\]"),
        (lambda t: t["ids"].__setitem__(1, t["ids"][0]), "piece ids repeat"),
        (lambda t: t["ids"].__setitem__(2, 10**6), "piece id 1000000 is outside the tokenizer's vocabulary"),
    ],
)
def test_forged_piece_rows_are_named(saved5, change, message):
    _forge(saved5, change, static_directory.PIECE_ROWS_FILE)
    with pytest.raises(ModelFormatError, match=message) as caught:
        load_encoder(saved5)
    assert str(saved5 / "subwords" / "piece_rows.safetensors") in str(caught.value)


def test_format_5_options_are_checked(saved5):
    options_path = saved5 / static_directory.SAVED_OPTIONS
    options = json.loads(options_path.read_text())
    options_path.write_text(json.dumps({**options, "piece_rows": 9}))
    _write_record(saved5)
    with pytest.raises(ModelFormatError, match="holds 17 rows but words.json 7 words and contextembed_static.json 9 "
                                               "piece rows"):
        load_encoder(saved5)
    for bad in ({"piece_rows": -1}, {"piece_rows": True}, {"piece_rows": None}, {"subwords": False}):
        options_path.write_text(json.dumps({**options, **bad}))
        with pytest.raises(ModelFormatError, match='format_version 5 names "subwords": true, "storage" and "piece_rows"'):
            load_encoder(saved5)
    options_path.write_text(json.dumps(options))
    (saved5 / PROVENANCE_FILE).unlink()
    with pytest.raises(ModelFormatError, match="a format 5 table must have its contextembed_provenance.json"):
        load_encoder(saved5)


# -- values beyond the storage's range --------------------------------------------------------------


@pytest.mark.parametrize("storage", [TableStorage("float16"), TableStorage("float16", clusters=2, exact_columns=1)],
                         ids=str)
def test_a_value_beyond_float16_is_refused_before_the_good_table_is_replaced(storage, tmp_path):
    """Rounded to float16, 1e5 is an infinity: the save names the row and its word, and the table
    already at the target is kept whole (it was once replaced by one that no longer loads)."""
    good = StaticVectors(WORDS, _table(5, 4))
    good.save(tmp_path / "t")
    vectors = _table(5, 4)
    vectors[3, 0] = 1e5  # column 0 is the widest: an exact column when some are clustered
    with pytest.raises(ValueError, match=r"^row 3 \(word 'unknownword'\) of the table exceeds the float16 range "
                                         r"\(largest magnitude 1e\+05\); save it with TableStorage\('float32'\) or "
                                         r"TableStorage\('int8'\)"):
        StaticVectors(WORDS, vectors).save(tmp_path / "t", storage=storage, overwrite=True)
    np.testing.assert_array_equal(load_encoder(tmp_path / "t").table, good.table)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t"]  # no temporary left beside it


def test_a_piece_vector_beyond_float16_is_refused_naming_its_piece(distilled, tmp_path):
    table = pickle.loads(pickle.dumps(distilled))
    own = static_directory.shared_rows(table.table[:-1], table.subwords.vectors)[1]
    table.subwords.vectors = table.subwords.vectors.copy()
    table.subwords.vectors[own[1], 2] = -7e4
    piece = int(table.subwords.ids[own[1]])
    with pytest.raises(ValueError, match=rf"^the vector of the piece with tokenizer id {piece} exceeds the "
                                         r"float16 range \(largest magnitude 7e\+04\)"):
        table.save(tmp_path / "t", storage=TableStorage("float16"))
    assert not (tmp_path / "t").exists()
    table.save(tmp_path / "t", storage=TableStorage("int8"))  # int8 scales any finite range
    assert load_encoder(tmp_path / "t").subwords.vectors[own[1], 2] == pytest.approx(-7e4, rel=1e-2)
