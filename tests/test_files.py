"""Atomic writes: the target holds the old or the new content, never a partial one."""

from __future__ import annotations

import os
import re

import pytest

from contextembed._runtime.files import PARTIAL_SUFFIX, atomic_directory, atomic_file, check_writable


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


# -- trust: only what this user (or root) could have written ---------------------------------------

ANOTHER_USER = 4242


@pytest.fixture
def umask():
    """Set the umask for the test (restored after)."""
    saved = os.umask(0)
    os.umask(saved)

    def set_to(value: int) -> None:
        os.umask(value)

    yield set_to
    os.umask(saved)


def _mode(path) -> int:
    return os.lstat(path).st_mode & 0o7777


@pytest.mark.parametrize("prepare, directory, reason", [
    (lambda p: p.mkdir(mode=0o700), True, None),
    (lambda p: p.mkdir(mode=0o755), True, None),
    (lambda p: (p.mkdir(), os.chmod(p, 0o777)), True, r"is writable by its group and others \(mode 0o777\)"),
    (lambda p: (p.mkdir(), os.chmod(p, 0o775)), True, r"is writable by its group \(mode 0o775\)"),
    (lambda p: (p.mkdir(), os.chmod(p, 0o1777)), True, r"is writable by its group and others \(mode 0o1777\)"),
    (lambda p: (p.mkdir(mode=0o700), os.chown(p, ANOTHER_USER, -1)), True,
     rf"is owned by user {ANOTHER_USER}, not by this user \(\d+\) or root"),
    (lambda p: (p.parent.joinpath("real").mkdir(), os.symlink(p.parent / "real", p)), True, "is a symbolic link"),
    (lambda p: p.write_text("x"), True, "is not a directory"),
    (lambda p: (p.write_text("x"), os.chmod(p, 0o644)), False, None),
    (lambda p: (p.write_text("x"), os.chmod(p, 0o666)), False, r"is writable by its group and others"),
    (lambda p: (p.write_text("x"), os.chmod(p, 0o620)), False, r"is writable by its group \(mode 0o620\)"),
    (lambda p: (p.write_text("x"), os.chmod(p, 0o644), os.chown(p, ANOTHER_USER, -1)), False, "owned by user 4242"),
    (lambda p: (p.parent.joinpath("real").write_text("x"), os.symlink(p.parent / "real", p)), False,
     "is a symbolic link"),
    (lambda p: p.mkdir(), False, "is not a regular file"),
    (lambda p: os.mkfifo(p), False, "is not a regular file"),
])
def test_untrusted_reason(tmp_path, prepare, directory, reason):
    from contextembed._runtime.files import untrusted_reason

    path = tmp_path / "it"
    prepare(path)
    found = untrusted_reason(path, directory=directory)
    if reason is None:
        assert found is None
    else:
        assert found is not None and re.search(reason, found), found


def test_root_is_trusted_and_another_user_is_not(tmp_path, monkeypatch):
    """As a user other than root (simulated: the trusted users are replaced), a file that root owns
    (an image prepared ahead) is trusted, one of this user's too, one of a third user's is not."""
    from contextembed._runtime import files as _files
    from contextembed._runtime.files import untrusted_reason

    monkeypatch.setattr(_files, "trusted_uids", lambda: frozenset({1000, 0}))
    for owner, trusted in ((0, True), (1000, True), (ANOTHER_USER, False)):
        path = tmp_path / f"owned-by-{owner}"
        path.write_text("x")
        os.chmod(path, 0o644)
        os.chown(path, owner, -1)
        assert (untrusted_reason(path, directory=False) is None) is trusted, owner
    with pytest.raises(FileNotFoundError):
        untrusted_reason(tmp_path / "missing", directory=False)


def test_make_trusted_directory_creates_private_parents_whatever_the_umask(tmp_path, umask):
    from contextembed._runtime.files import make_trusted_directory

    umask(0o002)  # user private groups: what makedirs would make group-writable
    target = tmp_path / "a" / "b" / "c"
    assert make_trusted_directory(target) == str(target)
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", target)] == [0o700] * 3
    assert make_trusted_directory(target) == str(target)  # an existing one is found
    shared = make_trusted_directory(tmp_path / "shared", mode=0o755)
    assert _mode(shared) == 0o755


def test_make_trusted_directory_refuses_what_it_cannot_trust(tmp_path):
    from contextembed._runtime.files import UntrustedPathError, make_trusted_directory

    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(UntrustedPathError, match=r"loose is writable by its group and others \(mode 0o777\); "
                                                 r"contextembed trusts only .* chmod go-w") as caught:
        make_trusted_directory(loose)
    assert caught.value.path == str(loose) and "writable" in caught.value.reason
    assert isinstance(caught.value, PermissionError)
    assert _mode(loose) == 0o777  # never "repaired" behind the user's back
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(UntrustedPathError, match="is a symbolic link"):
        make_trusted_directory(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UntrustedPathError, match="is not a directory"):
        make_trusted_directory(tmp_path / "file")
    with pytest.raises(ValueError, match="mode=511 is not a mode of a trusted store"):
        make_trusted_directory(tmp_path / "new", mode=0o777)
    assert not (tmp_path / "new").exists()


def test_open_lock_never_follows_a_link(tmp_path):
    from contextembed._runtime.files import UntrustedPathError, open_lock

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lock = tmp_path / "record.json.lock"
    os.symlink(elsewhere / "planted", lock)
    with pytest.raises(UntrustedPathError, match="record.json.lock is a symbolic link"):
        open_lock(lock)
    assert not (elsewhere / "planted").exists()  # nothing created (nor locked) outside
    os.remove(lock)
    os.symlink("/etc/hostname", lock)  # a link to an existing file: not opened either
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        open_lock(lock)


@pytest.mark.parametrize("prepare, reason", [
    (lambda p: os.mkfifo(p), "is not a regular file"),
    (lambda p: p.mkdir(), "is not a regular file"),
    (lambda p: (p.write_text(""), os.chmod(p, 0o666)), "is writable by its group and others"),
    (lambda p: (p.write_text(""), os.chmod(p, 0o644), os.chown(p, ANOTHER_USER, -1)), "owned by user 4242"),
])
def test_open_lock_refuses_a_lock_that_is_not_a_trusted_regular_file(tmp_path, prepare, reason):
    from contextembed._runtime.files import UntrustedPathError, open_lock

    lock = tmp_path / "record.json.lock"
    prepare(lock)
    with pytest.raises(UntrustedPathError, match=reason):
        open_lock(lock)


def test_open_lock_creates_a_lock_that_others_cannot_write(tmp_path, umask):
    import fcntl

    from contextembed._runtime.files import open_lock

    umask(0)
    with open_lock(tmp_path / "x.lock") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert _mode(tmp_path / "x.lock") == 0o644
    with open_lock(tmp_path / "x.lock"):  # and opens it again
        pass


def test_read_trusted(tmp_path):
    from contextembed._runtime.files import UntrustedPathError, read_trusted

    path = tmp_path / "record.json"
    path.write_bytes(b"12345")
    os.chmod(path, 0o644)
    assert read_trusted(path, max_bytes=5) == b"12345"
    with pytest.raises(ValueError, match="record.json is larger than 4 bytes"):
        read_trusted(path, max_bytes=4)
    os.chmod(path, 0o646)
    with pytest.raises(UntrustedPathError, match=r"writable by others \(mode 0o646\)"):
        read_trusted(path, max_bytes=5)
    link = tmp_path / "link.json"
    os.symlink(path, link)
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        read_trusted(link, max_bytes=5)
    with pytest.raises(FileNotFoundError):
        read_trusted(tmp_path / "missing.json", max_bytes=5)


def test_a_temporary_is_created_new_never_through_a_link(tmp_path, monkeypatch):
    """A link planted at the temporary's name (here made predictable) is an error, never followed."""
    from contextembed._runtime import files as _files

    monkeypatch.setattr(_files.secrets, "token_hex", lambda n: "0badc0de")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"precious")
    target = tmp_path / "out.bin"
    planted = _files._temporary_name(str(target))
    os.symlink(elsewhere, planted)
    with pytest.raises(FileExistsError):
        with atomic_file(target) as temporary:
            open(temporary, "wb").write(b"new")
    assert elsewhere.read_bytes() == b"precious" and not target.exists()
    assert os.path.islink(planted)  # not ours: left where it was


def test_a_temporary_has_the_mode_asked_for(tmp_path, umask):
    umask(0o002)
    with atomic_file(tmp_path / "record.json", mode=0o644) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(b"{}")
    assert _mode(tmp_path / "record.json") == 0o644
    with atomic_file(tmp_path / "output.bin") as temporary:  # an output: the umask decides, as for open()
        open(temporary, "wb").write(b"x")
    assert _mode(tmp_path / "output.bin") == 0o664


def test_a_trusted_atomic_directory_leaves_nothing_others_can_write(tmp_path, umask):
    umask(0o002)
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    os.chmod(outside, 0o666)
    target = tmp_path / "export"
    with atomic_directory(target, mode=0o755) as temporary:
        os.mkdir(os.path.join(temporary, "sub"))
        open(os.path.join(temporary, "sub", "model.bin"), "wb").write(b"x")
        os.symlink(outside, os.path.join(temporary, "link"))
    assert [_mode(p) for p in (target, target / "sub", target / "sub" / "model.bin")] == [0o755, 0o755, 0o644]
    assert _mode(outside) == 0o666  # a link's target is never changed
    with pytest.raises(ValueError, match="not a mode of a trusted store"):
        with atomic_directory(tmp_path / "other", mode=0o775):
            pass


# -- stale temporaries: whose process is gone, on this host ----------------------------------------


def test_a_temporary_names_its_host_and_process(tmp_path):
    from contextembed._runtime.files import _temporary_name, this_host

    name = os.path.basename(_temporary_name(str(tmp_path / "out.npy")))
    assert re.fullmatch(rf"\.out\.npy\.{re.escape(this_host())}@{os.getpid()}-[0-9a-f]{{8}}\.partial", name)
    assert re.fullmatch(r"[A-Za-z0-9-]{1,64}", this_host())


@pytest.mark.parametrize("hostname, shown", [("web1.example.com", "web1-example-com"), ("", "unknown"),
                                             ("été/../x", "-t-----x"), ("h" * 100, "h" * 64)])
def test_the_host_name_is_sanitised(monkeypatch, hostname, shown):
    import socket

    from contextembed._runtime.files import this_host

    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    assert this_host() == shown


def test_only_this_hosts_dead_writers_lose_their_temporaries(tmp_path, monkeypatch):
    """A temporary of another host (a container sharing the directory) is never removed: its
    process id says nothing here. One in the older name form, without a host, is this host's."""
    import socket

    from contextembed._runtime.files import remove_stale_partials

    monkeypatch.setattr(socket, "gethostname", lambda: "this-host")
    dead = 999999999  # no such process
    names = {"mine": f".a.npy.this-host@{dead}-deadbeef.partial",
             "older": f".b.npy.{dead}-deadbeef.partial",
             "other": f".c.npy.other-host@{dead}-deadbeef.partial",
             "alive": f".d.npy.this-host@{os.getpid()}-deadbeef.partial",
             "other_dir": f".e.other-host@{dead}-deadbeef.partial"}
    for key, name in names.items():
        (tmp_path / name).mkdir() if key == "other_dir" else (tmp_path / name).write_bytes(b"half")
    removed = remove_stale_partials(tmp_path)
    assert sorted(removed) == sorted(str(tmp_path / names[key]) for key in ("mine", "older"))
    assert sorted(os.listdir(tmp_path)) == sorted(names[key] for key in ("other", "alive", "other_dir"))
