"""The feature store: tables of rows in memory within the budget and on disk beyond it, shared by a
job's processes, trusted only where this user wrote them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from contextembed._runtime import store as _store
from contextembed._runtime import store_files as _store_files
from contextembed._runtime import store_memory as _memory
from contextembed.errors import MemoryBudgetError, SettingError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A shared store in a directory of the test's own (as a session store is)."""
    monkeypatch.setattr(_store_files, "_WARNED", set())
    root = tmp_path / "session"
    root.mkdir(mode=0o700)
    return _store.FeatureStore(str(root), shared=True, disk_limit=1 << 40)


@pytest.fixture
def budget(monkeypatch):
    """Set the budget for one test (restored afterwards)."""
    def set_budget(value):
        monkeypatch.setattr(_memory, "_budget", value)
    yield set_budget
    _memory._make_room(0)


def _spec(layers=3, width=4, dtype="float32", kind="words") -> _store.TableSpec:
    return _store.TableSpec("e" * 32, kind, ("first",), dtype, layers, width)


def _key(i: int) -> str:
    return f"{i:040x}"


def _blocks(spec, counts_per_block, seed=0):
    """Random ``(keys, rows, counts)`` blocks and the reference rows of every item."""
    rng = np.random.default_rng(seed)
    blocks, reference, number = [], {}, 0
    for counts in counts_per_block:
        counts = np.array(counts, dtype=np.int64)
        rows = rng.normal(size=(int(counts.sum()), spec.layers, spec.width)).astype(spec.dtype)
        keys = [_key(number + i) for i in range(len(counts))]
        number += len(counts)
        for key, begin, n in zip(keys, np.concatenate([[0], np.cumsum(counts)[:-1]]), counts):
            reference[key] = rows[begin : begin + n].astype(np.float32)
        blocks.append((keys, rows, counts))
    return blocks, reference


def _rows_of(store, spec, keys):
    return _store.StoredRows(spec, store.table(spec).find(keys))


# -- the budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("64MiB", 64 << 20), ("3GB", 3 * 10**9), (1 << 30, 1 << 30)])
def test_the_budget_takes_bytes_or_a_byte_size(budget, value, expected):
    _store.set_memory_budget(value)
    assert _store.memory_budget() == expected
    _store.set_memory_budget(None)
    assert _store.memory_budget() >= _memory.DEFAULT_MIN_BUDGET


@pytest.mark.parametrize("value, error", [(True, TypeError), (1.5e9, TypeError), (float("nan"), TypeError),
                                          (-1, ValueError), (0, ValueError), ("1KB", ValueError),
                                          ("1.5GB", ValueError), ("٣GB", ValueError), (1 << 60, ValueError)])
def test_the_budget_refuses_what_is_not_a_byte_count(budget, value, error):
    with pytest.raises(error, match="budget"):
        _store.set_memory_budget(value)


def test_a_bad_budget_variable_is_an_error_naming_it(monkeypatch, budget):
    budget(None)
    monkeypatch.setenv(_store.BUDGET_ENV, "lots")
    with pytest.raises(SettingError, match="CONTEXTEMBED_MEMORY_BUDGET='lots'"):
        _store.memory_budget()
    monkeypatch.setenv(_store.BUDGET_ENV, "2GiB")
    assert _store.memory_budget() == 2 << 30


def test_reserve_refuses_beyond_the_budget_and_makes_room_within_it(store, budget):
    budget(_memory.MIN_BUDGET)
    spec = _spec(layers=1, width=1 << 18)  # 1 MiB a row
    (keys, rows, counts), = _blocks(spec, [[4] * 2])[0]  # 8 MiB resident
    store.table(spec).add(keys, rows, counts)
    assert 8 << 20 <= _store.resident_bytes() <= _memory.MIN_BUDGET  # with what other tests left, within the budget
    _store.reserve(12 << 20, "twelve")  # resident rows make room
    assert _store.resident_bytes() <= 4 << 20
    with pytest.raises(MemoryBudgetError, match=r"a test array needs 17\.0 MiB .*budget of 16\.0 MiB.*or read less"):
        _store.reserve(17 << 20, "a test array", "read less")
    np.testing.assert_array_equal(_rows_of(store, spec, keys).items(0, 2, [0]), rows)  # read back from disk


# -- tables --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("resident", [True, False], ids=["resident", "on disk"])
def test_rows_come_back_as_stored_in_any_order(store, dtype, resident, monkeypatch):
    if not resident:
        monkeypatch.setattr(_store, "_keep_resident", lambda segment: False)
    spec = _spec(dtype=dtype)
    blocks, reference = _blocks(spec, [[2, 0, 3], [1], [4, 2]])
    table = store.table(spec)
    for keys, rows, counts in blocks:
        table.add(keys, rows, counts)
    order = [_key(i) for i in (5, 0, 1, 3, 0, 2)]  # repeats, an empty item, across segments
    rows = _rows_of(store, spec, order)
    expected = np.concatenate([reference[key] for key in order])
    assert rows.n_items == 6 and rows.n_rows == len(expected)
    np.testing.assert_array_equal(rows.items(0, 6, [0, 1, 2]), expected)
    pick = np.array([7, 0, 0, 3, len(expected) - 1, 2])
    np.testing.assert_array_equal(rows.take(pick, [2, 0]), expected[pick][:, [2, 0]])
    assert all((segment.data is None) != resident for segment in table.segments())


def test_a_key_no_segment_holds_is_missing(store):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[1, 1]])[0]
    store.table(spec).add(keys, rows, counts)
    assert store.table(spec).find([keys[1], _key(99)])[1] is None


def test_a_private_store_spills_beyond_the_budget_and_removes_its_files(budget):
    import gc

    budget(_memory.MIN_BUDGET)
    store = _store.private_store()
    spec = _spec(layers=1, width=1 << 18)
    blocks, reference = _blocks(spec, [[6], [6], [6]])  # 18 MiB: more than the budget keeps
    table = store.table(spec)
    for keys, rows, counts in blocks:
        table.add(keys, rows, counts)
    assert store._private is not None
    directory = store._private.name
    assert any(segment.path is not None for segment in table.segments())
    assert _store.resident_bytes() <= _store.memory_budget()
    keys = [_key(i) for i in range(3)]
    rows = _store.StoredRows(spec, table.find(keys), keep=store)
    np.testing.assert_array_equal(rows.items(0, 3, [0]), np.concatenate([reference[k] for k in keys]))
    store.clear()
    del rows, table, store
    gc.collect()
    assert not os.path.exists(directory)


# -- sharing and trust ---------------------------------------------------------------------------


@pytest.mark.slow
def test_another_process_reads_what_one_wrote(store, tmp_path):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2, 3]])[0]
    store.table(spec).add(keys, rows, counts)
    code = textwrap.dedent(f"""
        import numpy as np
        from contextembed._runtime import store as _store
        spec = _store.TableSpec("e" * 32, "words", ("first",), "float32", 3, 4)
        store = _store.FeatureStore({store.root!r}, shared=True)
        rows = _store.StoredRows(spec, store.table(spec).find({keys!r}))
        np.save({str(tmp_path / "got.npy")!r}, rows.items(0, 2, [0, 1, 2]))
    """)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    np.testing.assert_array_equal(np.load(tmp_path / "got.npy"), rows)


def _segment_files(store, spec):
    directory = Path(store.root) / spec.key
    index = next(directory.glob("*.json"))
    return index, index.with_suffix(".rows")


def _reread(store, spec, keys):
    """What a fresh process finds of ``keys`` (the files alone), and the warnings it gave."""
    fresh = _store.FeatureStore(store.root, shared=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = fresh.table(spec).find(keys)
    return found, [str(w.message) for w in caught if issubclass(w.category, _store.StoreWarning)]


@pytest.mark.parametrize("damage, message", [
    (lambda index, rows: index.write_text("[" * 1500 + "]" * 1500), "not an index"),
    (lambda index, rows: index.write_text("{not json"), "not an index"),
    (lambda index, rows: index.write_text(json.dumps({"format": 1})), "has the fields"),
    (lambda index, rows: rows.write_bytes(rows.read_bytes()[:-4]), "holds 236 bytes where its index"),
    (lambda index, rows: index.write_text(index.read_text().replace('"float32"', '"float16"')), "another table"),
    (lambda index, rows: index.write_text(index.read_text().replace('"counts": [2, 3]', '"counts": [2, -3]')),
     "one 40-digit key and one row count"),
    (lambda index, rows: index.write_text(index.read_text().replace('"counts": [2, 3]', '"counts": [2, 3.0]')),
     "one 40-digit key and one row count"),
    (lambda index, rows: os.chmod(index, 0o646), "writable by others"),
    (lambda index, rows: os.chmod(rows, 0o620), "writable by its group"),
    (lambda index, rows: (rows.rename(rows.with_name("x")), rows.symlink_to(rows.with_name("x"))), "symbolic link"),
], ids=["nested", "not json", "fields", "truncated rows", "other table", "negative count", "float count",
        "index others may write", "rows the group may write", "rows a link"])
def test_a_damaged_forged_or_loose_segment_is_never_trusted(store, damage, message):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2, 3]])[0]
    store.table(spec).add(keys, rows, counts)
    index, rows_file = _segment_files(store, spec)
    damage(index, rows_file)
    found, warned = _reread(store, spec, keys)
    assert found == [None, None]
    assert len(warned) == 1 and message in warned[0]


def test_a_segment_of_another_user_is_never_trusted(store, monkeypatch):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2]])[0]
    store.table(spec).add(keys, rows, counts)
    from contextembed._runtime import files as _files

    monkeypatch.setattr(_files, "trusted_uids", lambda: frozenset({os.getuid() + 12345}))
    found, warned = _reread(store, spec, keys)
    assert found == [None] and "is owned by user" in warned[0]


def test_a_half_written_segment_is_invisible(store):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2]])[0]
    store.table(spec).add(keys, rows, counts)
    index, rows_file = _segment_files(store, spec)
    index.rename(index.with_name(f".{index.name}.host@1-abcd0123.partial"))  # killed before the index was renamed
    found, warned = _reread(store, spec, keys)
    assert found == [None] and warned == []


def test_the_lock_never_follows_a_link(store, tmp_path):
    spec = _spec()
    table = store.table(spec)
    directory = Path(store.root) / spec.key
    directory.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    (directory / ".lock").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic link"):
        with table.encoding():
            pass
    assert not elsewhere.exists()


def test_an_untrusted_cache_directory_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(_store_files, "_WARNED", set())
    loose = tmp_path / "loose"
    (loose / _store.PERSISTENT_DIR).mkdir(parents=True)
    os.chmod(loose / _store.PERSISTENT_DIR, 0o777)
    with pytest.warns(_store.StoreWarning, match="does not trust the cache directory .* writable by others"):
        store = _store.persistent_store(loose)
    assert store is _store.session_store()


@pytest.mark.slow
def test_a_session_is_shared_with_child_processes_and_removed_when_its_owner_exits(tmp_path):
    """The first process names the session in its environment; a child it starts writes there, the
    parent reads what the child wrote, and the directory goes when the parent exits."""
    spec = 'spec = _store.TableSpec("e" * 32, "words", ("first",), "float32", 1, 2)'
    (tmp_path / "child.py").write_text(textwrap.dedent(f"""
        import numpy as np
        from contextembed._runtime import store as _store
        {spec}
        _store.session_store().table(spec).add(["%040x" % 7], np.ones((3, 1, 2), np.float32), np.array([3]))
    """))
    code = textwrap.dedent(f"""
        import subprocess, sys
        from contextembed._runtime import store as _store
        {spec}
        subprocess.run([sys.executable, {str(tmp_path / "child.py")!r}], check=True)
        rows = _store.StoredRows(spec, _store.session_store().table(spec).find(["%040x" % 7]))
        assert rows.n_rows == 3 and rows.items(0, 1, [0]).sum() == 6
        print(_store._SESSION_PATH)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONTEXTEMBED_STORE_DIR": str(tmp_path / "store")}
    env.pop(_store.SESSION_ENV, None)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.returncode == 0, result.stderr
    session = Path(result.stdout.strip())
    assert session.parent == tmp_path / "store" and not session.exists()


def test_a_session_of_a_process_that_is_gone_is_removed(tmp_path, monkeypatch):
    stale = tmp_path / f"session-{_store._host()}@999999999-abcdef01"
    (stale / ("a" * 32)).mkdir(parents=True)
    alive = tmp_path / f"session-{_store._host()}@{os.getpid()}-abcdef02"
    alive.mkdir()
    other_host = tmp_path / "session-elsewhere@999999999-abcdef03"
    other_host.mkdir()
    _store._remove_stale_sessions(str(tmp_path))
    assert not stale.exists() and alive.exists() and other_host.exists()


def test_a_full_session_drops_its_oldest_segments_while_readers_keep_theirs(store):
    store.disk_limit = 2 * 5 * 3 * 4 * 4  # two segments of five rows
    spec = _spec()
    blocks, reference = _blocks(spec, [[5], [5], [5]])
    table = store.table(spec)
    table.add(*blocks[0])
    held = _rows_of(store, spec, blocks[0][0])  # a reader of the first segment
    table.add(*blocks[1])
    table.add(*blocks[2])  # over the limit: the first segment's files go
    assert table.find(blocks[0][0]) == [None]
    assert len(list((Path(store.root) / spec.key).glob("*.rows"))) == 2
    np.testing.assert_array_equal(held.items(0, 1, [0, 1, 2]), reference[blocks[0][0][0]])  # still readable


def test_a_rows_file_swapped_for_a_fifo_after_its_check_is_not_read(store, monkeypatch):
    """Checked by name, then opened: a file swapped in between (a FIFO would block a reader for
    ever) is checked again on the open file, and its items are missing, not hung on."""
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2]])[0]
    store.table(spec).add(keys, rows, counts)
    index, rows_file = _segment_files(store, spec)
    fresh = _store.FeatureStore(store.root, shared=True)
    real_load = _store.Table._load

    def swap_after_check(self, stem):
        segment = real_load(self, stem)
        rows_file.unlink()
        os.mkfifo(rows_file)
        return segment

    monkeypatch.setattr(_store.Table, "_load", swap_after_check)
    assert fresh.table(spec).find(keys) == [None]


def test_a_killed_writers_temporary_is_swept_and_an_interrupted_write_leaves_none(store, monkeypatch):
    spec = _spec()
    (keys, rows, counts), = _blocks(spec, [[2]])[0]
    table = store.table(spec)
    table.add(keys, rows, counts)
    directory = Path(store.root) / spec.key
    dead = directory / f".x.rows.{_store._host()}@999999999-abcdef01.partial"  # its writer was killed
    dead.write_bytes(b"half")
    _store.FeatureStore(store.root, shared=True).table(spec).find(keys)
    assert not dead.exists()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_store.os, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        table.add([_key(50)], rows[:1], np.array([1]))
    assert not any(name.name.endswith(".partial") for name in directory.iterdir())
