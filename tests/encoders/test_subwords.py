"""``SubwordVectors``: out-of-vocabulary words of a static table as the mean of their pieces."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from contextembed import StaticVectors, load_encoder
from contextembed.encoders._static import subwords as subwords_module
from contextembed.encoders._static.subwords import SUBWORD_FOLDER, SUBWORD_VECTORS, SubwordVectors
from contextembed.errors import ModelFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "static_tables"


@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    return load_encoder(tiny_bert_dir, device="cpu", precision="fp32").tokenizer


@pytest.fixture
def table(tokenizer):
    """Pieces of "cat" and "s" known, with vectors 10*id; a 2-word table beside them."""
    ids = np.array(sorted({*tokenizer("cats", add_special_tokens=False)["input_ids"],
                           *tokenizer("cat", add_special_tokens=False)["input_ids"]}))
    vectors = np.stack([np.full(3, 10.0 * i) for i in ids])
    return StaticVectors(["the", "dog"], np.eye(2, 3), oov="zeros", subwords=SubwordVectors(tokenizer, ids, vectors))


def _reference(tokenizer, table, word):
    """Plain loop: the mean of the word's pieces that have a vector."""
    known = dict(zip(table.subwords.ids.tolist(), table.subwords.vectors))
    rows = [known[i] for i in tokenizer(word, add_special_tokens=False)["input_ids"] if i in known]
    return np.mean(rows, axis=0) if rows else np.zeros(3)


def test_unknown_words_take_their_known_pieces_mean(tokenizer, table):
    sentence = ["the", "cats", "cat", "dog", "zebra", "cats"]
    (rows,) = table.encode([sentence])
    assert rows.shape == (1, len(sentence), 3)  # one row per input word
    np.testing.assert_array_equal(rows[0, [0, 3]], np.eye(2, 3))
    for i in (1, 2, 4, 5):
        np.testing.assert_allclose(rows[0, i], _reference(tokenizer, table, sentence[i]), rtol=1e-6)
    assert np.any(rows[0, 1] != 0) and not np.any(rows[0, 4])  # "zebra": no known piece, the OOV vector


def test_results_do_not_depend_on_the_cache(monkeypatch, tokenizer, table):
    sentences = [["cats", "catcat", "dogs"], ["cat", "cats"], ["dogs", "dogs", "cats"]] * 3
    expected = table.encode(sentences)
    for sentence, want in zip(sentences, expected):  # every word cached now: the same rows from the cache
        np.testing.assert_array_equal(table.encode([sentence])[0], want)
    assert table.subwords._cache.size == len({"cats", "catcat", "dogs", "cat"})
    monkeypatch.setattr(subwords_module, "CACHE_WORDS", 2)
    small = StaticVectors(["the", "dog"], np.eye(2, 3), oov="zeros", subwords=table.subwords.transformed(table.subwords.vectors))
    for sentence, want in zip(sentences, expected):  # one lookup per sentence: the cache is emptied when full
        np.testing.assert_array_equal(small.encode([sentence])[0], want)
        assert small.subwords._cache.size <= 2
    # more new words in one lookup than the cache holds: the first ones are kept, every result is right
    np.testing.assert_array_equal(small.encode([[w for s in sentences for w in s]])[0], np.concatenate(expected, axis=1))


def test_concurrent_lookups_agree_with_one_thread(monkeypatch, table):
    from concurrent.futures import ThreadPoolExecutor

    words = [f"cat{'s' * (i % 7)}{'cat' * (i % 5)}" for i in range(400)] + ["zebra", "dogs"]
    expected = table.subwords.transformed(table.subwords.vectors).lookup(words)
    monkeypatch.setattr(subwords_module, "CACHE_WORDS", 16)  # the cache is replaced many times meanwhile
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda k: table.subwords.lookup(words[k:] + words[:k]), range(0, 400, 7)))
    for k, (vectors, found) in zip(range(0, 400, 7), results):
        np.testing.assert_array_equal(vectors, np.roll(expected[0], -k, axis=0))
        np.testing.assert_array_equal(found, np.roll(expected[1], -k))


def test_save_load_and_pickle_round_trips(tmp_path, table):
    table.save(tmp_path / "table")
    loaded = load_encoder(tmp_path / "table")
    for other in (loaded, pickle.loads(pickle.dumps(table))):
        np.testing.assert_array_equal(other.subwords.ids, table.subwords.ids)
        np.testing.assert_array_equal(other.encode([["cats", "zebra", "the"]])[0], table.encode([["cats", "zebra", "the"]])[0])


@pytest.mark.parametrize(
    ("ids", "vectors", "message"),
    [
        ([1, 1], np.zeros((2, 3)), "piece ids repeat"),
        ([-1], np.zeros((1, 3)), "piece id -1 is outside the tokenizer's vocabulary"),
        ([10**6], np.zeros((1, 3)), "piece id 1000000 is outside"),
        ([1, 2], np.zeros((1, 3)), r"piece vectors must be \(2, width\), got shape \(1, 3\)"),
        ([1.5], np.zeros((1, 3)), "1-d integer array"),
        ([1, 2], np.array([[0.0, 0, 0], [0, np.nan, 0]]), r"piece id 2 \(row 1\) is not finite"),
    ],
)
def test_bad_piece_tables(tokenizer, ids, vectors, message):
    with pytest.raises(ValueError, match=message):
        SubwordVectors(tokenizer, np.asarray(ids), vectors)


def test_table_and_pieces_must_be_equally_wide(tokenizer):
    pieces = SubwordVectors(tokenizer, np.array([1]), np.zeros((1, 4)))
    with pytest.raises(ValueError, match="subword vectors are 4 wide, the table 3"):
        StaticVectors(["a"], np.zeros((1, 3)), subwords=pieces)


def _format_3_copy(tmp_path) -> Path:
    """A table saved by format 3 (subword vectors in their own file, no record), to damage."""
    target = tmp_path / "table"
    shutil.copytree(FIXTURES / "v3_subwords", target)
    return target


def test_broken_subword_folders_of_format_3_are_clear_errors(tmp_path):
    target = _format_3_copy(tmp_path)
    folder = target / SUBWORD_FOLDER
    (folder / SUBWORD_VECTORS).write_bytes(b"\x00" * 8)
    with pytest.raises(ModelFormatError, match="cannot read the piece vectors") as error:
        load_encoder(target)
    assert SUBWORD_VECTORS in str(error.value)
    (folder / SUBWORD_VECTORS).unlink()
    with pytest.raises(ModelFormatError, match=f"{SUBWORD_FOLDER}/{SUBWORD_VECTORS} is missing"):
        load_encoder(target)
    from safetensors.numpy import save_file

    save_file({"ids": np.array([1, 1]), "vectors": np.zeros((2, 4), dtype=np.float32)}, str(folder / SUBWORD_VECTORS))
    with pytest.raises(ModelFormatError, match="piece ids repeat"):
        load_encoder(target)
    save_file({"vectors": np.zeros((2, 4), dtype=np.float32)}, str(folder / SUBWORD_VECTORS))
    with pytest.raises(ModelFormatError, match="expected tensors 'ids' and 'vectors', found \\['vectors'\\]"):
        load_encoder(target)


def test_a_changed_subword_file_is_named_by_the_record(tmp_path, table):
    from contextembed.errors import ProvenanceError

    table.save(tmp_path / "table")
    pieces = tmp_path / "table" / SUBWORD_FOLDER / "piece_rows.safetensors"
    pieces.write_bytes(b"\x00" * 8)
    with pytest.raises(ProvenanceError, match="subwords/piece_rows.safetensors differs from the file that was saved"):
        load_encoder(tmp_path / "table")


def test_saved_options_must_match_the_subwords_version(tmp_path):
    import json

    target = _format_3_copy(tmp_path)
    options = target / "contextembed_static.json"
    saved = json.loads(options.read_text())
    assert saved["format_version"] == 3 and saved["subwords"] is True
    options.write_text(json.dumps({**saved, "subwords": False}))
    with pytest.raises(ModelFormatError, match='"subwords": false does not fit format_version 3'):
        load_encoder(target)
    options.write_text(json.dumps({**saved, "format_version": 2}))
    with pytest.raises(ModelFormatError, match='"subwords": true does not fit format_version 2'):
        load_encoder(target)
    options.write_text(json.dumps({**saved, "piece_rows": 2}))
    with pytest.raises(ModelFormatError, match='"piece_rows" belongs to format_version 5, not 3'):
        load_encoder(target)
