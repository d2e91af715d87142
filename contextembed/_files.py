"""Writes that never leave a half-written file under the user's name, and never clobber unasked.

Every file or directory contextembed writes is first written under a temporary name beside its
target (same directory, so the final rename is atomic on one filesystem) and renamed into place only
when complete. On any error, ``KeyboardInterrupt`` or (in the CLI) ``SIGTERM``, the temporary is
removed and whatever was at the target before is left exactly as it was.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Union

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
    """``.NAME.PID-RANDOM.partial`` beside ``target``: the process id says whose it is
    (:func:`remove_stale_partials`)."""
    directory, name = os.path.split(os.path.abspath(target))
    return os.path.join(directory, f".{name}.{os.getpid()}-{secrets.token_hex(4)}{PARTIAL_SUFFIX}")


_OWNER = re.compile(r"\.([0-9]+)-[0-9a-f]{8}" + re.escape(PARTIAL_SUFFIX) + r"\Z")


def remove_stale_partials(directory: PathLike) -> list[str]:
    """Remove the temporaries (:func:`atomic_file`, :func:`atomic_directory`) in ``directory`` whose
    process is gone (killed before it could clean up): their process id names no running process,
    or one that started after the temporary was last written (the id was reused). A temporary of a
    running writer, and anything not named as a temporary, is left alone. Returns what was removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _OWNER.search(name)
        path = os.path.join(os.fspath(directory), name)
        if match is None or not name.startswith("."):
            continue
        try:
            written = os.lstat(path).st_mtime
        except OSError:
            continue  # removed meanwhile
        if _running_since(int(match[1]), written):
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
def atomic_file(target: PathLike, *, overwrite: bool = True, what: str = "output", flag: str = "overwrite=True") -> Iterator[str]:
    """Yield a temporary path beside ``target``; rename it to ``target`` when the block succeeds.

    Parameters
    ----------
    target : str or path
        The final file. Its directory must exist.
    overwrite : bool
        Replace an existing ``target``; otherwise ``FileExistsError`` (checked before and again
        just before the rename).
    what, flag : str
        Words for the error message: what the target is, and how to allow overwriting.
    """
    target = os.fspath(target)
    check_writable(target, overwrite, what=what, flag=flag)
    directory = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {what} {target}: its directory {directory} does not exist")
    temporary = _temporary_name(target)
    try:
        yield temporary
        if not os.path.exists(temporary):
            raise RuntimeError(f"nothing was written to the temporary file for {target}")
        check_writable(target, overwrite, what=what, flag=flag)
        os.replace(temporary, target)
    finally:
        if os.path.lexists(temporary):
            os.remove(temporary)


@contextmanager
def atomic_directory(target: PathLike, *, overwrite: bool = False, what: str = "directory", flag: str = "overwrite=True") -> Iterator[str]:
    """Yield a new temporary directory beside ``target``; move it to ``target`` when the block succeeds.

    An existing empty ``target`` is replaced; a non-empty one only with ``overwrite`` (then the old
    directory is removed after the new one is in place, so a failure at any point leaves one complete
    version at ``target``).
    """
    target = os.fspath(target).rstrip(os.sep) or os.sep
    check_writable(target, overwrite, what=what, flag=flag)
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    temporary = _temporary_name(target)
    os.mkdir(temporary)
    old = None
    try:
        yield temporary
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


__all__ = ["MOVING_IN", "PARTIAL_SUFFIX", "atomic_directory", "atomic_file", "check_apart", "check_writable", "remove_stale_partials"]
