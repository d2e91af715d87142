"""Connecting to a Ray cluster: importing Ray, checking an address before Ray is given it, starting a
local instance.

A cluster address is checked before it is handed to Ray (:func:`check_address`): an address that
does not answer within ``connect_timeout`` seconds (:data:`CONNECT_TIMEOUT` by default) is a
:class:`~contextembed.errors.ClusterConnectionError` naming it, instead of Ray's own retries, which
last many minutes and cannot be interrupted. A local instance is started with
:data:`LOCAL_ENVIRONMENT` (no usage report, loopback addresses only) and without the dashboard;
:func:`signal_handlers_kept` puts back the signal handlers ``ray.init`` replaces.
:func:`contextembed.engines.ray.connected` puts these together for a block; the public names are
exported by :mod:`contextembed.engines.ray`.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from .._inputs.bounds import CONNECT_TIMEOUT as CONNECT_TIMEOUT_BOUND
from .._inputs.bounds import check_setting
from ..errors import ClusterConnectionError, missing_extra

#: environment for a Ray instance started on this machine: no usage report, loopback addresses only
LOCAL_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray():
    """``ray`` (with ``ray.data``), or the error that gives the install line."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise missing_extra("ray", "ray", "contextembed.engines.ray") from None
    return ray


#: seconds a cluster address has to answer (``connect_timeout``), by default and at most
CONNECT_TIMEOUT, MAX_CONNECT_TIMEOUT = 30.0, CONNECT_TIMEOUT_BOUND.high
#: what a gRPC server (Ray's GCS, Ray Client's server) is sent to answer: the HTTP/2 client preface
#: and an empty SETTINGS frame; it answers with a SETTINGS frame (type 4 on stream 0)
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: what to check when an address does not answer
_ADVICE = (
    "check that the cluster runs (`ray start --head` on the head node prints its address) and that the host "
    "and port are right: the GCS port, 6379 unless `ray start --port` set another, or Ray Client's port "
    "(10001) for a ray:// address; that no firewall blocks the port from here; or allow more time with "
    "connect_timeout (--connect-timeout)"
)


def init(address: Optional[str] = None, *, connect_timeout: float = CONNECT_TIMEOUT, **options):
    """Connect to the Ray cluster at ``address``, or start one on this machine (``address=None``).

    A local instance is started with :data:`LOCAL_ENVIRONMENT` (set only where not already set, and
    only if Ray was not imported yet: Ray reads it at import), so its processes talk over loopback
    and send no usage report, and without the dashboard. Other ``options`` go to ``ray.init``.

    The address Ray would connect to (``address``, or for ``None`` and ``"auto"`` the one Ray finds:
    ``RAY_ADDRESS``, the cluster last started on this machine) must answer within
    ``connect_timeout`` seconds (:func:`check_address`).

    Raises
    ------
    ClusterConnectionError
        When that address does not answer in time; the message names it and what to check.
    ValueError
        For a ``connect_timeout`` that is not a number of seconds in (0, :data:`MAX_CONNECT_TIMEOUT`],
        or an address that is not ``HOST:PORT``.
    """
    ray = _ready_to_init(address, check_connect_timeout(connect_timeout), options)
    return ray.init(address=address, **options)


def _ready_to_init(address: Optional[str], connect_timeout: float, options: dict):
    """Everything :func:`init` does before ``ray.init``: the address checked, the environment of a
    local instance set, Ray imported, ``include_dashboard=False`` added to ``options`` for a new
    local instance; returns ``ray``."""
    found_by_ray = address in (None, "auto", "local")
    if not found_by_ray:
        check_address(address, connect_timeout)  # before importing Ray, which takes seconds
    if address is None:
        for name, value in LOCAL_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if found_by_ray:
        found = _bootstrap_address(address, options.get("_temp_dir"))
        if found is None:  # Ray starts a new instance here
            options.setdefault("include_dashboard", False)
        else:
            check_address(found, connect_timeout)
    return ray


def check_connect_timeout(value: float, name: str = "connect_timeout") -> float:
    """``value`` as a float if it is a number of seconds in (0, :data:`MAX_CONNECT_TIMEOUT`]; else a
    ``ValueError`` (``TypeError`` for a non-number) naming ``name`` (:data:`contextembed._inputs.bounds.CONNECT_TIMEOUT`)."""
    return float(check_setting(name, value, CONNECT_TIMEOUT_BOUND))


def check_address(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Fail within ``timeout`` seconds unless a gRPC server answers at ``address``.

    ``address`` is ``HOST:PORT`` (``[IPv6]:PORT``), optionally ``ray://HOST:PORT`` (Ray Client);
    other ``scheme://`` addresses (Ray's client plugins) are left to Ray. The host is resolved, a
    TCP connection opened and the HTTP/2 preface sent, all within ``timeout``; Ray's GCS (and Ray
    Client's server) answer it at once. With ``RAY_USE_TLS`` set only the TCP connection is checked.
    Each step waits in Python, so a signal (Ctrl-C, SIGTERM) ends the wait at once.

    Raises
    ------
    ClusterConnectionError
        Naming the address, what went wrong (refused, no answer in time, not a gRPC server) and what
        to check.
    ValueError
        For an address that is not ``HOST:PORT``.
    """
    timeout = check_connect_timeout(timeout, "timeout")
    parsed = _host_port(address)
    if parsed is None:
        return
    deadline = time.monotonic() + timeout
    try:
        _answers(_resolve(*parsed, deadline), deadline, tls=os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"))
    except TimeoutError as error:
        raise ClusterConnectionError(
            f"the Ray cluster at {address} did not answer within {timeout:g} s ({error}); {_ADVICE}"
        ) from None
    except OSError as error:
        raise ClusterConnectionError(f"cannot connect to the Ray cluster at {address}: {error}; {_ADVICE}") from None


def _host_port(address: str) -> Optional[tuple[str, int]]:
    """``(host, port)`` of ``[ray://]HOST:PORT``; ``None`` for other ``scheme://`` addresses."""
    if not isinstance(address, str):
        raise TypeError(f"address={address!r} must be a str (HOST:PORT), got {type(address).__name__}")
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    if "://" in rest:
        return None
    host, _, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"address={address!r} is not HOST:PORT (e.g. 'head-node:6379', or "
                         "'ray://head-node:10001' for Ray Client); pass the address `ray start --head` printed")
    return host, int(port)


def _resolve(host: str, port: int, deadline: float) -> list:
    """``socket.getaddrinfo`` of ``host``, in a thread so that a slow resolver cannot outlast ``deadline``."""
    found: dict = {}

    def lookup() -> None:
        try:
            found["addresses"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as error:
            found["error"] = OSError(f"the host name {host!r} does not resolve ({error})")

    thread = threading.Thread(target=lookup, name="contextembed-resolve", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise TimeoutError(f"resolving the host name {host!r} took longer")
    if "error" in found:
        raise found["error"]
    return found["addresses"]


def _answers(addresses: list, deadline: float, tls: bool) -> None:
    """Connect to the first of ``addresses`` that accepts, and check that it answers as HTTP/2."""
    error: OSError = OSError("no address")
    for family, kind, protocol, _, sockaddr in addresses:
        with socket.socket(family, kind, protocol) as connection:
            try:
                connection.settimeout(_left(deadline, "connecting"))
                connection.connect(sockaddr)
            except socket.timeout:
                raise TimeoutError("no answer to the TCP connection: a firewall may drop it") from None
            except OSError as refused:
                error = OSError(f"{refused.strerror or refused} (nothing listens on port {sockaddr[1]}?)")
                continue
            if not tls:
                _check_http2(connection, deadline)
            return
    raise error


def _check_http2(connection: socket.socket, deadline: float) -> None:
    """The server's first frame after the HTTP/2 preface is SETTINGS, as a gRPC server sends it."""
    try:
        connection.settimeout(_left(deadline, "waiting for its first answer"))
        connection.sendall(_HTTP2_HELLO)
        header = b""
        while len(header) < 9:
            connection.settimeout(_left(deadline, "the port accepted the connection but sent no answer"))
            chunk = connection.recv(9 - len(header))
            if not chunk:
                raise OSError("the port accepted the connection, then closed it without answering")
            header += chunk
    except socket.timeout:
        raise TimeoutError("the port accepted the connection but sent no answer") from None
    if header[3] != 4 or header[5:9] != bytes(4):
        raise OSError(f"the port answered, but not as a Ray cluster (gRPC) does; its first bytes are {header!r}")


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(what)
    return left


def _bootstrap_address(address: Optional[str], temp_dir: Optional[str]) -> Optional[str]:
    """The address ``ray.init(address)`` finds for ``None``, ``"auto"`` or ``"local"``, or ``None`` where
    it starts a new instance."""
    if address == "local":
        return None
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:  # Ray moved it: the documented variable only
        return os.environ.get("RAY_ADDRESS") or None
    try:
        found = get_ray_address_from_environment(address, temp_dir)
    except ConnectionError as error:  # "auto" and no cluster found
        raise ClusterConnectionError(f"address={address!r}: {error}") from None
    return None if found in (None, "local") else found


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """SIGINT's and SIGTERM's Python handlers are the same after the block as before it.

    ``ray.init`` sets SIGTERM to ``sys.exit(15)`` in the main thread and never puts the previous
    handler back: a command that turns SIGTERM into a clean interrupt (the CLI's
    :func:`~contextembed.cli.signals_interrupt`: temporaries removed, status 143, one line saying
    what was kept) would exit with status 15 instead, and the handler would outlive the instance.
    Handlers set outside Python (``getsignal`` gives ``None``) are left as they are.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
