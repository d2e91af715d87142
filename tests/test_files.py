"""Atomic writes: the target holds the old or the new content, never a partial one."""

from __future__ import annotations

import os

import pytest

from contextembed._files import PARTIAL_SUFFIX, atomic_directory, atomic_file, check_writable


def _leftovers(folder) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(PARTIAL_SUFFIX)]


def test_atomic_file_writes_and_renames(tmp_path):
    target = tmp_path / "out.bin"
    with atomic_file(target) as temporary:
        assert os.path.dirname(temporary) == str(tmp_path)
        assert not target.exists()
        with open(temporary, "wb") as handle:
            handle.write(b"new")
    assert target.read_bytes() == b"new"
    assert _leftovers(tmp_path) == []


def test_atomic_file_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(target) as temporary:
            with open(temporary, "wb") as handle:
                handle.write(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_file_refuses_to_overwrite_unless_asked(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError, match=r"out\.bin already exists.*pass --overwrite"):
        with atomic_file(target, overwrite=False, flag="--overwrite"):
            pytest.fail("the block must not run")
    assert target.read_bytes() == b"old"


def test_atomic_file_needs_its_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with atomic_file(tmp_path / "missing" / "out.bin"):
            pass


def test_atomic_file_block_that_writes_nothing_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="nothing was written"):
        with atomic_file(tmp_path / "out.bin"):
            pass
    assert not (tmp_path / "out.bin").exists()


def test_atomic_directory_replaces_only_when_asked(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights").write_text("old")
    with pytest.raises(FileExistsError, match="model already exists"):
        with atomic_directory(target):
            pass
    with atomic_directory(target, overwrite=True) as temporary:
        with open(os.path.join(temporary, "weights"), "w") as handle:
            handle.write("new")
    assert (target / "weights").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_atomic_directory_failure_keeps_the_old_directory(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "weights").write_text("old")
    with pytest.raises(ValueError):
        with atomic_directory(target, overwrite=True) as temporary:
            with open(os.path.join(temporary, "weights"), "w") as handle:
                handle.write("half")
            raise ValueError("writer failed")
    assert (target / "weights").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["model"]


def test_atomic_directory_fills_an_empty_directory(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    with atomic_directory(target) as temporary:
        open(os.path.join(temporary, "weights"), "w").close()
    assert os.listdir(target) == ["weights"]


def test_check_writable_ignores_empty_directories(tmp_path):
    check_writable(tmp_path, overwrite=False)
    (tmp_path / "x").write_text("x")
    with pytest.raises(FileExistsError):
        check_writable(tmp_path, overwrite=False)
