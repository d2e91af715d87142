"""The one provenance mechanism: records compare field by field, and content hashes see every byte."""

from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest

from contextembed._runtime import provenance
from contextembed.errors import ProvenanceError


def test_a_record_compares_equal_to_itself_after_a_round_trip_through_json(tmp_path):
    made = provenance.record("embedding output", input="abc", layers=(-4, -3), options={"b": 1, "a": 2.5},
                             count=np.int64(3))
    provenance.write(tmp_path / "p.json", made)
    found = provenance.read(tmp_path / "p.json")
    assert found == made
    provenance.check(found, provenance.record("embedding output", input="abc", layers=[-4, -3],
                                              options={"a": 2.5, "b": 1}, count=3), artifact="x", fix="y")


@pytest.mark.parametrize(("changed", "field"), [
    ({"input": "abd"}, "input"),
    ({"layers": [-4, -2]}, "layers"),
    ({"extra": 1}, "extra"),
])
def test_a_field_that_differs_is_named_with_both_values_and_the_fix(changed, field):
    found = provenance.record("embedding output", input="abc", layers=[-4, -3])
    expected = provenance.record("embedding output", **{"input": "abc", "layers": [-4, -3], **changed})
    with pytest.raises(ProvenanceError) as raised:
        provenance.check(found, expected, artifact="output out/a.npz", fix="pass --overwrite to redo it")
    message = str(raised.value)
    assert raised.value.field == field and "output out/a.npz" in message and "pass --overwrite" in message
    assert f"{field}=" in message


def test_a_field_the_artifact_lacks_is_a_difference():
    found = provenance.record("embedding output", input="abc")
    expected = provenance.record("embedding output", input="abc", model="m")
    with pytest.raises(ProvenanceError, match="model=<not recorded>") as raised:
        provenance.check(found, expected, artifact="a", fix="f")
    assert raised.value.field == "model"


def test_the_library_version_is_recorded_but_not_compared():
    found = dict(provenance.record("checkpoint", step=1), contextembed="0.0.1")
    provenance.check(found, provenance.record("checkpoint", step=1), artifact="a", fix="f")


@pytest.mark.parametrize(("found", "match"), [
    (None, "records no provenance"),
    ([1, 2], "damaged"),
    ({"artifact": "checkpoint", "format": provenance.FORMAT_VERSION}, "is a 'checkpoint', not a 'embedding output'"),
    ({"artifact": "embedding output", "format": 99}, "provenance format 99"),
])
def test_missing_damaged_foreign_and_future_records_are_refused(found, match):
    with pytest.raises(ProvenanceError, match=match):
        provenance.check(found, provenance.record("embedding output"), artifact="a", fix="f")


def test_reserved_and_unrecordable_fields_are_refused():
    with pytest.raises(ValueError, match="reserved"):
        provenance.record("x", format=2)
    with pytest.raises(ValueError, match="finite"):
        provenance.record("x", lr=math.nan)
    with pytest.raises(TypeError, match="JSON value"):
        provenance.record("x", path=object())


@pytest.mark.parametrize("content", [b"", b"not json", b"\xff\xfe", b"[1]"])
def test_a_damaged_record_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with pytest.raises(ProvenanceError, match="damaged provenance record"):
        provenance.read(path, artifact="the output")


def test_a_missing_record_file_reads_as_none_and_a_linked_one_is_refused(tmp_path):
    assert provenance.read(tmp_path / "none.json") is None
    provenance.write(tmp_path / "real.json", provenance.record("x"))
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    with pytest.raises(ProvenanceError, match="not a regular file"):
        provenance.read(tmp_path / "link.json")


def test_errors_survive_pickling():
    error = ProvenanceError("m", artifact="a", field="f")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.artifact, copy.field) == ("m", "a", "f")


def test_tree_hash_sees_subdirectories_and_ends_link_loops(tmp_path):
    root = tmp_path / "m"
    (root / "sub").mkdir(parents=True)
    (root / "a").write_bytes(b"1")
    (root / "sub" / "b").write_bytes(b"2")
    os.symlink("..", root / "sub" / "loop")
    names = [name for name, _ in provenance.tree_files(root)]
    assert names == ["a", "sub/b"]
    before = provenance.tree_hash(root)
    (root / "sub" / "b").write_bytes(b"3")
    assert provenance.tree_hash(root) != before
    (root / "sub" / "b").rename(root / "sub" / "c")
    renamed = provenance.tree_hash(root)
    (root / "sub" / "c").rename(root / "sub" / "b")
    assert renamed != provenance.tree_hash(root)


def test_file_hash_is_the_content_hash():
    import hashlib
    import tempfile

    with tempfile.NamedTemporaryFile(delete=False) as handle:
        handle.write(b"x" * 3_000_000)
    try:
        assert provenance.file_hash(handle.name) == hashlib.blake2b(b"x" * 3_000_000, digest_size=16).hexdigest()
    finally:
        os.remove(handle.name)
