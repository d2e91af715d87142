"""Hostile skops files: embedded encoder names that escape, collide or lie write nothing anywhere.

An estimator saved with ``embed_weights=True`` stores its encoder's files as ``{name: bytes}``.
``skops.io.load(path, trusted=TRUSTED_TYPES)`` is documented as safe for untrusted files, so a file
whose names lead out of the unpacking folder (``../``, absolute names), collide, hold NUL, are huge,
or whose content or provenance was swapped must fail with a clear error, and leave no file outside
a temporary directory, nor anything in the process's folder of unpacked encoders.
"""

from __future__ import annotations

import io
import json
import os
import threading
import zipfile
from typing import Optional

import numpy as np
import pytest

from contextembed._runtime import provenance
from contextembed.encoders import write_word2vec
from contextembed.errors import ModelFormatError, ProvenanceError
from contextembed.sklearn import TRUSTED_TYPES, TextEmbedder, TokenEmbedder
from contextembed.sklearn._embedded import MAX_FILES, embedded_root, unpack_encoder

skops_io = pytest.importorskip("skops.io")

WORDS = ["eu", "rejects", "german", "call", "peter", "blackburn"]
SENTENCES = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]


def _vectors(folder, seed: int) -> str:
    path = folder / "vectors.txt"
    write_word2vec(path, WORDS, np.random.default_rng(seed).normal(size=(len(WORDS), 8)).astype(np.float32))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny static-vectors models: the same words, other vectors."""
    return (_vectors(tmp_path_factory.mktemp("model_a"), 0), _vectors(tmp_path_factory.mktemp("model_b"), 1))


@pytest.fixture(scope="module")
def fitted(models):
    return {
        "token": TokenEmbedder(models[0], embed_weights=True).fit(SENTENCES),
        "text": TextEmbedder(models[0], embed_weights=True).fit([" ".join(s) for s in SENTENCES]),
        "other": TokenEmbedder(models[1], embed_weights=True).fit(SENTENCES),
    }


@pytest.fixture
def unpacked_before():
    """What the process's folder of unpacked encoders holds before the test (created if needed)."""
    return set(os.listdir(embedded_root()))


# -- editing a skops file --------------------------------------------------------------------------


def _rewrite(data: bytes, edit, extra: Optional[dict[str, bytes]] = None) -> bytes:
    """The skops file ``data`` with ``edit(packed node)`` applied to the embedded encoder in its
    ``schema.json`` (and ``extra`` zip entries added)."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        entries = {name: source.read(name) for name in source.namelist()}
    schema = json.loads(entries.pop("schema.json"))
    edit(_find(schema, "_embedded_encoder"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name, payload in {**entries, **(extra or {})}.items():
            target.writestr(name, payload)
        target.writestr("schema.json", json.dumps(schema))
    return out.getvalue()


def _find(node, key: str) -> dict:
    """The schema node stored under ``key`` in a dict node anywhere below ``node``."""
    if isinstance(node, dict):
        content = node.get("content")
        if isinstance(content, dict) and key in content:
            return content[key]
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find(child, key)
        if found is not None:
            return found
    return None


def _set_files(packed: dict, files: dict) -> None:
    """Give the packed encoder's ``files`` dict node exactly ``files`` (name -> schema node)."""
    node = packed["content"]["files"]
    node["content"] = files
    key_type = node["key_types"]["content"][0]
    node["key_types"]["content"] = [key_type] * len(files)


def _renamed(renames: dict[str, str]):
    def edit(packed):
        files = packed["content"]["files"]["content"]
        _set_files(packed, {renames.get(name, name): value for name, value in files.items()})
    return edit


def _added(name: str, like: str):
    """Add the file ``name`` holding the same bytes as the embedded file ``like``."""
    def edit(packed):
        files = dict(packed["content"]["files"]["content"])
        files[name] = files[like]
        _set_files(packed, files)
    return edit


def _load(data: bytes):
    return skops_io.loads(data, trusted=TRUSTED_TYPES)


def _assert_nothing_written(before: set, *outside) -> None:
    for path in outside:
        assert not os.path.lexists(path), f"{path} was written"
    assert set(os.listdir(embedded_root())) == before, "files were left in the folder of unpacked encoders"


# -- names ---------------------------------------------------------------------------------------


def _escaping_names(tmp_path) -> dict[str, tuple[str, str]]:
    """Hostile name for ``words.json`` -> (what the error says, a path it must not create)."""
    deep = "../" * 12 + str(tmp_path / "deep").lstrip("/")
    return {
        "parent": ("../escape", "segment '..'", os.path.join(embedded_root(), "escape")),
        "deep parent": (deep, "segment '..'", str(tmp_path / "deep")),
        "absolute": (str(tmp_path / "abs"), "absolute file name", str(tmp_path / "abs")),
        "inner parent": ("a/../../b", "segment '..'", os.path.join(embedded_root(), "b")),
        "backslash": ("..\\escape", "backslash", os.path.join(embedded_root(), "escape")),
        "drive": ("C:/escape", "drive", os.path.join(embedded_root(), "C:")),
        "NUL": ("words\x00.json", "control character", str(tmp_path / "nul")),
        "empty segment": ("a//words.json", "segment ''", str(tmp_path / "empty")),
        "dot segment": ("./words.json", "segment '.'", str(tmp_path / "dot")),
        "empty": ("", "1 to 1024", str(tmp_path / "empty")),
        "huge name": ("a/" * 600 + "w", "1 to 1024", str(tmp_path / "huge")),
        "huge segment": ("w" * 300, "over 255 bytes", str(tmp_path / "segment")),
        "too deep": ("a/" * 40 + "w", "folders deep", str(tmp_path / "deep2")),
    }


@pytest.mark.parametrize("case", ["parent", "deep parent", "absolute", "inner parent", "backslash", "drive", "NUL",
                                  "empty segment", "dot segment", "empty", "huge name", "huge segment", "too deep"])
@pytest.mark.parametrize("estimator", ["token", "text"])
def test_hostile_names_are_refused_before_anything_is_written(fitted, tmp_path, unpacked_before, case, estimator):
    name, says, target = _escaping_names(tmp_path)[case]
    data = _rewrite(skops_io.dumps(fitted[estimator]), _renamed({"words.json": name}))
    with pytest.raises(ModelFormatError, match="embedded encoder") as raised:
        _load(data)
    assert says in str(raised.value)
    _assert_nothing_written(unpacked_before, target)


@pytest.mark.parametrize("first, second, says", [
    ("words.json", "WORDS.json", "name the same file"),
    ("caf\u00e9.json", "cafe\u0301.json", "name the same file"),  # NFC and NFD spellings
    ("words.json", "words.json/inner", "both as a file and as the folder"),
])
def test_names_that_collide_on_some_file_system_are_refused(fitted, tmp_path, unpacked_before, first, second, says):
    renames = {"words.json": first}

    def edit(packed):
        _renamed(renames)(packed)
        _added(second, first)(packed)

    data = _rewrite(skops_io.dumps(fitted["token"]), edit)
    with pytest.raises(ModelFormatError, match=says):
        _load(data)
    _assert_nothing_written(unpacked_before)


@pytest.mark.parametrize("value, says", [
    ({"__class__": "str", "__module__": "builtins", "__loader__": "JsonNode", "content": '"text"', "is_json": True},
     "holds a str, not bytes"),
    ({"__class__": "int", "__module__": "builtins", "__loader__": "JsonNode", "content": "7", "is_json": True},
     "holds a int, not bytes"),
])
def test_a_file_that_is_not_bytes_is_refused(fitted, unpacked_before, value, says):
    def edit(packed):
        files = dict(packed["content"]["files"]["content"])
        files["words.json"] = {**value, "__id__": 10**15}
        _set_files(packed, files)

    with pytest.raises(ModelFormatError, match=says):
        _load(_rewrite(skops_io.dumps(fitted["token"]), edit))
    _assert_nothing_written(unpacked_before)


def test_a_fingerprint_that_is_not_a_str_is_refused(fitted, unpacked_before):
    def edit(packed):
        packed["content"]["fingerprint"] = {"__class__": "int", "__module__": "builtins", "__loader__": "JsonNode",
                                            "content": "7", "is_json": True, "__id__": 10**15}

    with pytest.raises(ModelFormatError, match="records the fingerprint 7"):
        _load(_rewrite(skops_io.dumps(fitted["token"]), edit))
    _assert_nothing_written(unpacked_before)


# -- content -------------------------------------------------------------------------------------


def test_swapped_content_with_a_stale_fingerprint_is_refused(fitted, unpacked_before):
    swapped = json.dumps(list(reversed(WORDS))).encode()

    def edit(packed):
        packed["content"]["files"]["content"]["words.json"]["file"] = "swapped.bin"

    with pytest.raises(ModelFormatError, match="does not match the fingerprint recorded"):
        _load(_rewrite(skops_io.dumps(fitted["token"]), edit, extra={"swapped.bin": swapped}))
    _assert_nothing_written(unpacked_before)


def _renumbered(node, offset: int):
    """A schema node with every object id moved by ``offset`` (ids of two files must not clash)."""
    if isinstance(node, dict):
        return {k: (v + offset if k == "__id__" else _renumbered(v, offset)) for k, v in node.items()}
    if isinstance(node, list):
        return [_renumbered(item, offset) for item in node]
    return node


def test_another_models_consistent_files_are_refused(fitted, unpacked_before):
    """Another estimator's packed files hash consistently, but record another model."""
    other = skops_io.dumps(fitted["other"])
    with zipfile.ZipFile(io.BytesIO(other)) as source:
        entries = {name: source.read(name) for name in source.namelist() if name != "schema.json"}
        transplant = _renumbered(_find(json.loads(source.read("schema.json")), "_embedded_encoder"), 10**16)

    def edit(packed):
        packed.clear()
        packed.update(transplant)

    with pytest.raises(ProvenanceError, match="was made with model=") as raised:
        _load(_rewrite(skops_io.dumps(fitted["token"]), edit, extra=entries))
    assert raised.value.field == "model"
    _assert_nothing_written(unpacked_before)


def test_a_record_that_names_another_family_is_refused(fitted, unpacked_before):
    state = fitted["token"].__getstate__()
    packed = state["_embedded_encoder"]
    record = provenance.loads(packed["provenance"], artifact="test")
    packed["provenance"] = provenance.dumps({**record, "family": "transformer"})
    with pytest.raises(ProvenanceError, match="family") as raised:
        TokenEmbedder.__new__(TokenEmbedder).__setstate__(state)  # what pickle and joblib call
    assert raised.value.field == "family"
    _assert_nothing_written(unpacked_before)


# -- pickle and joblib share the code path -------------------------------------------------------


@pytest.mark.parametrize("packed_edit, error, says", [
    (lambda p: p["files"].update({"../escape": b"x"}), ModelFormatError, "segment '..'"),
    (lambda p: p.update(files=[("words.json", b"x")]), ModelFormatError, "expected a non-empty dict"),
    (lambda p: p.update(files={}), ModelFormatError, "expected a non-empty dict"),
    (lambda p: p["files"].update({3: b"x"}), ModelFormatError, "of type int"),
    (lambda p: p["files"].update({"words.json": bytearray(b"[]")}), ModelFormatError, "holds a bytearray"),
    (lambda p: p.update(fingerprint="../../etc"), ModelFormatError, "32 hexadecimal digits"),
    (lambda p: p.update(provenance={"artifact": "x"}), ModelFormatError, "provenance record of type dict"),
    (lambda p: p.update(provenance=b"{not json"), ProvenanceError, "damaged provenance record"),
    (lambda p: p.update(extra=1), ModelFormatError, "unknown keys 'extra'"),
    (lambda p: p.update(kind="elmo"), ModelFormatError, "kind='elmo'"),
    (lambda p: p.update(files={f"f{i}": b"" for i in range(MAX_FILES + 1)}), ModelFormatError, "at most 10000"),
])
def test_a_tampered_pickled_state_is_refused_the_same_way(fitted, tmp_path, unpacked_before, packed_edit, error, says):
    state = fitted["token"].__getstate__()
    packed_edit(state["_embedded_encoder"])
    with pytest.raises(error, match=says):
        TokenEmbedder.__new__(TokenEmbedder).__setstate__(state)
    _assert_nothing_written(unpacked_before, os.path.join(embedded_root(), "escape"))


def test_a_packed_encoder_that_is_not_a_dict_is_refused(fitted, unpacked_before):
    state = fitted["token"].__getstate__()
    state["_embedded_encoder"] = ["../escape", b"x"]
    with pytest.raises(ModelFormatError, match="is a list, not a dict"):
        TokenEmbedder.__new__(TokenEmbedder).__setstate__(state)
    _assert_nothing_written(unpacked_before)


# -- what still works ----------------------------------------------------------------------------


def test_an_untampered_file_loads_and_concurrent_unpacking_shares_one_folder(fitted):
    data = skops_io.dumps(fitted["token"])
    expected = fitted["token"].transform(SENTENCES)
    restored = [None] * 4

    def load(i):
        restored[i] = _load(data)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    folders = {r.encoder_ref_.spec for r in restored}
    assert len(folders) == 1
    folder = folders.pop()
    assert os.path.dirname(folder) == embedded_root()
    assert not [name for name in os.listdir(embedded_root()) if name.startswith(".")], "a temporary was left"
    np.testing.assert_array_equal(restored[0].transform(SENTENCES), expected)


def test_the_unpacked_folder_records_what_it_holds(fitted):
    packed = fitted["token"].__getstate__()["_embedded_encoder"]
    record = provenance.loads(packed["provenance"], artifact="test")
    assert record["artifact"] == "embedded encoder" and record["family"] == "static"
    assert record["model"] == fitted["token"].encoder_ref_.identity.fingerprint
    assert record["fingerprint"] == packed["fingerprint"]
    ref = unpack_encoder(packed, fitted["token"].encoder_ref_)
    assert ref.identity.fingerprint == packed["fingerprint"]
