"""A guard that refuses every network socket: the test suite proves that contextembed never
reaches the network (no DNS lookup, no connection), including in CLI subprocesses.

In the pytest process it is installed for the whole session (``tests/conftest.py``); every attempt
is refused with :class:`SocketBlocked` *and* recorded, so a test fails even when the code under test
swallows the error (huggingface_hub does). Subprocesses get it through ``sitecustomize``
(:func:`guarded_env`), which writes attempts to a log file the test reads back.

Unix-domain sockets (local inter-process pipes) are allowed; loopback TCP only inside
:func:`allow_loopback` (local Ray or Dask clusters started by a test).
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: what was attempted since the last :func:`take_attempts`
ATTEMPTS: list[str] = []
_STATE = {"installed": False, "loopback": False, "log": None}
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", ""}
SITE_DIR = Path(__file__).resolve().parent / "socket_guard_site"
LOG_VARIABLE = "CONTEXTEMBED_SOCKET_GUARD_LOG"


class SocketBlocked(OSError):
    """Raised instead of opening a network socket."""


def _record(what: str) -> None:
    stack = "".join(traceback.format_stack(limit=12)[:-2])
    ATTEMPTS.append(f"{what}\n{stack}")
    if _STATE["log"]:
        with open(_STATE["log"], "a", encoding="utf-8") as handle:
            handle.write(f"{what}\n{stack}\n---\n")


def _is_loopback(host) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    return str(host) in _LOOPBACK_HOSTS or str(host).startswith("127.")


def _refuse(what: str, host=None):
    if _STATE["loopback"] and host is not None and _is_loopback(host):
        return False
    _record(what)
    raise SocketBlocked(f"network access blocked by the contextembed test suite: {what}")


def install(log: str | None = None) -> None:
    """Replace the socket entry points with refusing versions (idempotent)."""
    _STATE["log"] = log
    if _STATE["installed"]:
        return
    original_getaddrinfo = socket.getaddrinfo
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_sendto = socket.socket.sendto

    def getaddrinfo(host, *args, **kwargs):
        _refuse(f"getaddrinfo({host!r})", host)
        return original_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host):
        _refuse(f"gethostbyname({host!r})", host)
        return "127.0.0.1"

    def connect(self, address):
        if self.family != socket.AF_UNIX:
            _refuse(f"connect({address!r})", address[0] if isinstance(address, tuple) else None)
        return original_connect(self, address)

    def connect_ex(self, address):
        if self.family != socket.AF_UNIX:
            _refuse(f"connect_ex({address!r})", address[0] if isinstance(address, tuple) else None)
        return original_connect_ex(self, address)

    def sendto(self, data, *args):
        address = args[-1]
        if self.family != socket.AF_UNIX:
            _refuse(f"sendto({address!r})", address[0] if isinstance(address, tuple) else None)
        return original_sendto(self, data, *args)

    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.socket.sendto = sendto
    _STATE["installed"] = True


def take_attempts() -> list[str]:
    """Return and forget the attempts recorded so far."""
    attempts = list(ATTEMPTS)
    ATTEMPTS.clear()
    return attempts


@contextmanager
def allow_loopback() -> Iterator[None]:
    """Let connections to this machine's loopback addresses through (local clusters in tests)."""
    previous = _STATE["loopback"]
    _STATE["loopback"] = True
    try:
        yield
    finally:
        _STATE["loopback"] = previous


def guarded_env(log: Path, env: dict | None = None) -> dict:
    """Environment for a subprocess that runs with the guard and logs attempts to ``log``."""
    env = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[1])
    paths = [str(SITE_DIR), root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env[LOG_VARIABLE] = str(log)
    return env


def read_log(log: Path) -> str:
    """What a guarded subprocess attempted ('' when nothing)."""
    return log.read_text(encoding="utf-8") if log.exists() else ""
