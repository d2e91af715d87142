"""Writes that never leave a half-written file under the user's name, never clobber unasked, and
files that are trusted only if this user could have written them.

Atomic writes
    Every file or directory contextembed writes is first written under a temporary name beside its
    target (same directory, so the final rename is atomic on one filesystem) and renamed into place
    only when complete. On any error, ``KeyboardInterrupt`` or (in the CLI) ``SIGTERM``, the
    temporary is removed and whatever was at the target before is left exactly as it was. A
    temporary is created new (never an existing name, never through a link), and its name says whose
    it is: host and process (:func:`remove_stale_partials`).

Trust
    A file that decides what a process computes (a tuning record, a cached engine export, a stored
    feature) is used only if the process's own user, or root (an image prepared ahead), could have
    written it, as OpenSSH refuses a key file with loose permissions: :func:`untrusted_reason` says
    why not (a link, another user's, writable by its group or others). Stores of such files are made
    by :func:`make_trusted_directory`, locked with :func:`open_lock` and read with
    :func:`read_trusted`, none of which follows a link.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, Optional, Union

PathLike = Union[str, os.PathLike]

#: suffix of every temporary name (a leftover after SIGKILL is recognisably partial)
PARTIAL_SUFFIX = ".partial"
#: in a model directory while a set of files is moved in one by one (``contextembed pretrain``):
#: a directory that holds it was left part old model, part new one, and is no model to load
MOVING_IN = ".contextembed-moving-in.json"


def check_writable(target: PathLike, overwrite: bool, *, what: str = "output", flag: str = "overwrite=True") -> None:
    """Raise ``FileExistsError`` if ``target`` exists and ``overwrite`` is false.

    An empty directory does not count as existing (nothing in it can be lost).
    """
    target = os.fspath(target)
    if overwrite or not os.path.lexists(target):
        return
    if os.path.isdir(target) and not os.path.islink(target) and not os.listdir(target):
        return
    kind = "directory" if os.path.isdir(target) else "file"
    raise FileExistsError(
        f"{what} {target} already exists ({kind}); contextembed does not replace it unless asked: "
        f"pass {flag}, or choose another path"
    )


def _temporary_name(target: str) -> str:
    """``.NAME.HOST@PID-RANDOM.partial`` beside ``target``: the host and process id say whose it is
    (:func:`remove_stale_partials`)."""
    directory, name = os.path.split(os.path.abspath(target))
    return os.path.join(directory, f".{name}.{this_host()}@{os.getpid()}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}")


def this_host() -> str:
    """This machine's host name as it appears in temporary names: ASCII letters, digits and ``-``
    (anything else becomes ``-``), at most 64 characters; ``"unknown"`` if it has none."""
    try:
        name = socket.gethostname()
    except OSError:
        name = ""
    return re.sub(r"[^A-Za-z0-9-]", "-", name)[:64] or "unknown"


#: ``.NAME.[HOST@]PID-RANDOM.partial`` (names written before the host was recorded have none)
_OWNER = re.compile(r"\.(?:([A-Za-z0-9-]{1,64})@)?([0-9]+)-[0-9a-f]{8}" + re.escape(PARTIAL_SUFFIX) + r"\Z")


def remove_stale_partials(directory: PathLike) -> list[str]:
    """Remove the temporaries (:func:`atomic_file`, :func:`atomic_directory`) in ``directory`` whose
    process is gone (killed before it could clean up): written on this host (or in an older name
    without one), by a process id that names no running process, or one that started after the
    temporary was last written (the id was reused). A temporary of a running writer, of another
    host (a container or machine sharing the directory, whose processes cannot be seen from here),
    and anything not named as a temporary, is left alone. Returns what was removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _OWNER.search(name)
        path = os.path.join(os.fspath(directory), name)
        if match is None or not name.startswith(".") or match[1] not in (None, this_host()):
            continue
        try:
            written = os.lstat(path).st_mtime
        except OSError:
            continue  # removed meanwhile
        if _running_since(int(match[2]), written):
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            removed.append(path)
        except OSError:
            continue  # another process removed it first
    return removed


def _running_since(pid: int, written: float) -> bool:
    """Whether process ``pid`` runs and started before ``written`` (a time stamp)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or an id no process can have)
        return False
    except OSError:  # another user's process: assume it is the writer
        return True
    try:  # the process's start: its /proc entry's time stamp (Linux); elsewhere assume it is the writer
        started = os.stat(f"/proc/{pid}").st_ctime
    except OSError:
        return True
    return started <= written + 1.0


@contextmanager
def atomic_file(target: PathLike, *, overwrite: bool = True, what: str = "output", flag: str = "overwrite=True",
                mode: int = 0o666) -> Iterator[str]:
    """Yield a new, empty temporary file beside ``target``; rename it to ``target`` when the block succeeds.

    Parameters
    ----------
    target : str or path
        The final file. Its directory must exist.
    overwrite : bool
        Replace an existing ``target``; otherwise ``FileExistsError`` (checked before and again
        just before the rename).
    what, flag : str
        Words for the error message: what the target is, and how to allow overwriting.
    mode : int
        Permissions the temporary is created with (the umask removes bits from them): ``0o644``
        for a file of a trusted store (:func:`untrusted_reason`).

    Raises
    ------
    RuntimeError
        If the block leaves the temporary empty (nothing was written).
    """
    target = os.fspath(target)
    check_writable(target, overwrite, what=what, flag=flag)
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {what} {target}: its directory {directory} does not exist")
    temporary = _temporary_name(target)
    os.close(_create_new(temporary, mode))
    try:
        yield temporary
        if not os.path.isfile(temporary) or os.path.getsize(temporary) == 0:
            raise RuntimeError(f"nothing was written to the temporary file for {target}")
        check_writable(target, overwrite, what=what, flag=flag)
        os.replace(temporary, target)
    finally:
        if os.path.lexists(temporary):
            os.remove(temporary)


def _create_new(path: str, mode: int) -> int:
    """A descriptor of the new file ``path``, open for writing: never an existing name, never
    through a link (``O_EXCL | O_NOFOLLOW``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, mode)


#: ``O_NOFOLLOW`` where the system has it (POSIX): opening a link is an error, not the file it names
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@contextmanager
def atomic_directory(target: PathLike, *, overwrite: bool = False, what: str = "directory", flag: str = "overwrite=True",
                     mode: Optional[int] = None) -> Iterator[str]:
    """Yield a new temporary directory beside ``target``; move it to ``target`` when the block succeeds.

    An existing empty ``target`` is replaced; a non-empty one only with ``overwrite`` (then the old
    directory is removed after the new one is in place, so a failure at any point leaves one complete
    version at ``target``).

    Parameters
    ----------
    mode : int, optional
        For a directory of a trusted store: the temporary is created with these permissions (never
        writable by group or others), and before the move nothing in it is left writable by group
        or others (:func:`restrict_writes`), whatever the umask gave what the block wrote.
    """
    target = os.fspath(target).rstrip(os.sep) or os.sep
    check_writable(target, overwrite, what=what, flag=flag)
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    temporary = _temporary_name(target)
    os.mkdir(temporary, 0o777 if mode is None else _checked_mode(mode))
    old = None
    try:
        yield temporary
        if mode is not None:
            restrict_writes(temporary)
        check_writable(target, overwrite, what=what, flag=flag)
        if os.path.lexists(target):
            old = _temporary_name(target)
            os.rename(target, old)
        os.rename(temporary, target)
    except BaseException:
        if old is not None and not os.path.lexists(target):
            os.rename(old, target)
            old = None
        raise
    finally:
        for leftover in (temporary, old):
            if leftover is not None and os.path.lexists(leftover):
                if os.path.isdir(leftover) and not os.path.islink(leftover):
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    os.remove(leftover)


# -- trust: only what this user (or root) could have written ---------------------------------------


class UntrustedPathError(PermissionError):
    """A file or directory contextembed will not trust: a link, not the kind expected, owned by
    another user, or writable by its group or others (:func:`untrusted_reason`).

    Attributes
    ----------
    path : str
        The file or directory.
    reason : str
        What is wrong with it (``"is writable by others (mode 0o777)"``).
    """

    def __init__(self, path: PathLike, reason: str) -> None:
        self.path, self.reason = os.fspath(path), reason
        super().__init__(errno.EPERM, f"{self.path} {reason}; {TRUST_RULE}", self.path)

    def __str__(self) -> str:
        return self.strerror

    def __reduce__(self):
        return (self.__class__, (self.path, self.reason))


#: what every refusal adds: the rule, and how to satisfy it
TRUST_RULE = ("contextembed trusts only what this user or root owns and neither group nor others can write, and "
              "never follows a link there (fix it with chmod go-w, or use a directory of your own)")
#: permission bits that let group or others write
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def trusted_uids() -> frozenset[int]:
    """The users whose files are trusted: this process's user (real and effective) and root (a
    directory prepared ahead, as for a container image). Empty where the system has no user ids
    (not POSIX: then only the kind of a file is checked, not its owner or mode). Tests replace it to
    play another user."""
    if not hasattr(os, "getuid"):
        return frozenset()
    return frozenset({os.getuid(), os.geteuid(), 0})


def untrusted_reason(path: PathLike, *, directory: bool) -> Optional[str]:
    """Why ``path`` must not be trusted, or ``None`` if it may be.

    Trusted: not a symbolic link (it is not followed), a directory if ``directory`` else a regular
    file, owned by a user of :func:`trusted_uids`, and writable by neither its group nor others.

    Parameters
    ----------
    path : str or path
        An existing file or directory.
    directory : bool
        Whether ``path`` must be a directory (else a regular file).

    Returns
    -------
    str or None
        What is wrong, to follow the path in a message (``"is owned by user 1001, not by this user
        (0) or root"``).

    Raises
    ------
    OSError
        If ``path`` cannot be examined (``FileNotFoundError`` if it does not exist).
    """
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        return f"is a symbolic link (to {os.readlink(path)}), not a {'directory' if directory else 'regular file'}"
    return stat_reason(found, directory=directory)


def stat_reason(found: os.stat_result, *, directory: bool) -> Optional[str]:
    """:func:`untrusted_reason` of what ``os.lstat`` or ``os.fstat`` returned (an open file's, so
    that what is checked is what is read)."""
    kind = "directory" if directory else "regular file"
    if not (stat.S_ISDIR if directory else stat.S_ISREG)(found.st_mode):
        return f"is not a {kind}"
    uids = trusted_uids()
    if not uids:
        return None
    if found.st_uid not in uids:
        own = min(uids - {0}, default=0)
        return f"is owned by user {found.st_uid}, not by this user ({own}) or root"
    writers = [who for bit, who in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if found.st_mode & bit]
    if writers:
        return f"is writable by {' and '.join(writers)} (mode {stat.S_IMODE(found.st_mode):#o})"
    return None


def make_trusted_directory(path: PathLike, *, mode: int = 0o700) -> str:
    """Create the directory ``path`` (and its missing parents) with ``mode``, or find it, and check
    that it may be trusted (:func:`untrusted_reason`).

    Parameters
    ----------
    path : str or path
        The directory.
    mode : int
        Permissions of each directory created (the umask may remove more); never writable by group
        or others. The default ``0o700`` keeps what is inside private; ``0o755`` lets other users
        read it (a store prepared ahead for them). An existing directory is left as it is.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    UntrustedPathError
        If the directory (existing or just made) may not be trusted.
    OSError
        If it cannot be created (``FileExistsError``: a file is in the way).
    ValueError
        If ``mode`` lets group or others write.
    """
    path = os.fspath(path)
    mode = _checked_mode(mode)
    missing, folder = [], os.path.abspath(path)
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:  # made meanwhile by another process: checked below like any other
            pass
    reason = untrusted_reason(path, directory=True)
    if reason is not None:
        raise UntrustedPathError(path, reason)
    return path


def _checked_mode(mode: int) -> int:
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777 or mode & _OTHERS_WRITE:
        raise ValueError(f"mode={mode!r} is not a mode of a trusted store: expected permission bits without "
                         "group or others' write (such as 0o700 or 0o755)")
    return mode


def restrict_writes(root: PathLike) -> None:
    """Remove group and others' write permission from ``root`` and everything below it that this
    process's user owns (links are neither followed nor changed): what a library wrote under the
    umask becomes a file of a trusted store."""
    if not hasattr(os, "geteuid"):  # no POSIX permissions to change
        return
    for folder, folders, files in os.walk(root):
        for path in [folder] + [os.path.join(folder, name) for name in folders + files]:
            found = os.lstat(path)
            if not stat.S_ISLNK(found.st_mode) and found.st_mode & _OTHERS_WRITE and found.st_uid == os.geteuid():
                os.chmod(path, stat.S_IMODE(found.st_mode) & ~_OTHERS_WRITE)


def open_lock(path: PathLike) -> BinaryIO:
    """Open the lock file ``path`` (created with mode ``0o644`` if missing) to lock it with
    ``fcntl.flock``, without following a link.

    Raises
    ------
    UntrustedPathError
        If ``path`` is a link, not a regular file, or a file that may not be trusted
        (:func:`untrusted_reason`).
    OSError
        If it cannot be opened or created.
    """
    return os.fdopen(_open_checked(os.fspath(path), os.O_RDWR | os.O_CREAT, 0o644), "r+b")


def read_trusted(path: PathLike, *, max_bytes: int) -> bytes:
    """The bytes of the file ``path`` if it may be trusted (:func:`untrusted_reason`, checked on the
    open file, so what is checked is what is read), and holds at most ``max_bytes``.

    Raises
    ------
    UntrustedPathError
        If ``path`` is a link, not a regular file, or may not be trusted.
    ValueError
        If it holds more than ``max_bytes`` bytes.
    OSError
        If it cannot be read (``FileNotFoundError``: there is none).
    """
    path = os.fspath(path)
    with os.fdopen(_open_checked(path, os.O_RDONLY, 0), "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    return data


def _open_checked(path: str, flags: int, mode: int) -> int:
    """A descriptor of ``path`` opened with ``flags`` without following a link (nor blocking on a
    FIFO), checked to be a trusted regular file."""
    flags |= _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, mode)
    except OSError as error:
        if error.errno == errno.ELOOP or (error.errno == errno.EMLINK and os.path.islink(path)):
            raise UntrustedPathError(path, "is a symbolic link, not a regular file") from None
        if error.errno == errno.EISDIR:
            raise UntrustedPathError(path, "is not a regular file") from None
        raise
    try:
        reason = stat_reason(os.fstat(descriptor), directory=False)
        if reason is not None:
            raise UntrustedPathError(path, reason)
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def check_apart(output: PathLike, source: PathLike, *, output_what: str = "output", source_what: str = "input") -> None:
    """Refuse an ``output`` that is ``source``, lies inside it or contains it (links resolved).

    Writing there would replace the source, or mix the output into it (a directory read again later).

    Raises
    ------
    ValueError
        Naming both paths as given and as resolved.
    """
    out_real, source_real = os.path.realpath(output), os.path.realpath(source)
    if out_real == source_real:
        relation = "is"
    elif os.path.commonpath([out_real, source_real]) == source_real:
        relation = "lies inside"
    elif os.path.commonpath([out_real, source_real]) == out_real:
        relation = "contains"
    else:
        return
    raise ValueError(
        f"{output_what} {os.fspath(output)} ({out_real}) {relation} {source_what} {os.fspath(source)} "
        f"({source_real}); writing there would replace or mix with it: choose another {output_what}, apart from it"
    )


__all__ = ["MOVING_IN", "PARTIAL_SUFFIX", "TRUST_RULE", "UntrustedPathError", "atomic_directory", "atomic_file",
           "check_apart", "check_writable", "make_trusted_directory", "open_lock", "read_trusted",
           "remove_stale_partials", "restrict_writes", "stat_reason", "this_host", "trusted_uids", "untrusted_reason"]
