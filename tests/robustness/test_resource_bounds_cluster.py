"""Bounded waits for a cluster address: one that does not answer (nothing listening, a port that
accepts and stays silent, a port that answers as something else) fails within ``connect_timeout``
with an error naming the address and what to check, and a signal while connecting ends the command
at once. Ray's own connection retries last many minutes and delay SIGTERM by ~40 s.

Loopback only: the ports are this machine's, opened by the tests (nothing reaches the network).
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

from contextembed import cli
from contextembed.corpus import embed_corpus
from contextembed.encoders import write_word2vec
from contextembed.engines import ray as ray_engine
from contextembed.errors import ClusterConnectionError

pytestmark = pytest.mark.loopback

#: the timeout the tests ask for, and the slack allowed on top of it (a loaded 2-core machine)
TIMEOUT, SLACK = 2.0, 2.0


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, noted, closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def _listener(reply: bytes = b""):
    """A loopback port that accepts connections; with ``reply``, sends it to each and keeps them
    open; without, sends nothing. Yields ``(address, accepted)``: ``accepted`` is set at the first
    connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted, held = threading.Event(), []

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed
                return
            held.append(connection)
            if reply:
                connection.sendall(reply)
            accepted.set()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        server.close()
        for connection in held:
            connection.close()


@pytest.fixture
def corpus(tmp_path):
    write_word2vec(tmp_path / "vectors.txt", ["the", "cat"], np.eye(2, dtype=np.float32))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("the cat\n", encoding="utf-8")
    return tmp_path


def _fails_in_time(call, *, timeout: float = TIMEOUT) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(ClusterConnectionError) as error:
        call()
    elapsed = time.monotonic() - start
    assert elapsed < timeout + SLACK, f"took {elapsed:.1f} s for a {timeout} s timeout"
    return str(error.value), elapsed


def test_nothing_listening_fails_at_once_naming_the_address():
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ClusterConnectionError) as error:
        with ray_engine.connected(address, connect_timeout=TIMEOUT):
            pytest.fail("connected to a closed port")
    message = str(error.value)
    assert address in message and "nothing listens" in message
    assert "ray start --head" in message and "--connect-timeout" in message  # what to check


@pytest.mark.slow
def test_a_silent_port_fails_after_the_timeout_not_minutes():
    with _listener() as (address, accepted):
        message, elapsed = _fails_in_time(lambda: ray_engine.check_address(address, TIMEOUT))
    assert accepted.is_set() and elapsed >= TIMEOUT * 0.9  # it did wait for an answer, that long
    assert f"{address} did not answer within 2 s" in message and "sent no answer" in message


def test_a_port_that_answers_as_something_else_is_refused():
    with _listener(b"HTTP/1.1 400 Bad Request\r\n\r\n") as (address, _):
        message, _ = _fails_in_time(lambda: ray_engine.check_address(address, TIMEOUT))
    assert address in message and "not as a Ray cluster (gRPC) does" in message


@pytest.mark.slow
def test_embed_corpus_with_an_unanswering_address_fails_in_time_and_writes_nothing(corpus):
    with _listener() as (address, _):
        _fails_in_time(lambda: embed_corpus(str(corpus / "vectors.txt"), str(corpus / "in"), str(corpus / "out"),
                                            engine="ray", address=address, connect_timeout=TIMEOUT,
                                            show_progress=False))
    assert not (corpus / "out").exists() or not any((corpus / "out").rglob("*.np*"))


def test_the_command_fails_in_time_with_one_line(corpus, capsys):
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    status = cli.main(["embed", str(corpus / "vectors.txt"), str(corpus / "in"), str(corpus / "out"),
                       "--engine", "ray", "--address", address, "--connect-timeout", "2", "--quiet"])
    assert status == 2 and time.monotonic() - start < TIMEOUT + SLACK
    err = capsys.readouterr().err
    assert err.startswith("contextembed embed: error: cannot connect to the Ray cluster at " + address)
    assert "Traceback" not in err


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread() or os.name != "posix",
                    reason="signal handlers are set in the main thread, on POSIX")
def test_sigterm_while_connecting_ends_the_command_at_once(corpus, capsys):
    """The default timeout (30 s) runs; SIGTERM once the address has the connection: exit 143 at once."""
    sent = {}
    with _listener() as (address, accepted):
        def terminate():
            if accepted.wait(60):
                time.sleep(0.2)  # waiting for the answer now
                sent["at"] = time.monotonic()
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=terminate, daemon=True).start()
        status = cli.main(["embed", str(corpus / "vectors.txt"), str(corpus / "in"), str(corpus / "out"),
                           "--engine", "ray", "--address", address, "--quiet"])
    assert "at" in sent, "the command never connected"
    assert status == 128 + signal.SIGTERM and time.monotonic() - sent["at"] < 1.0
    assert "interrupted by SIGTERM" in capsys.readouterr().err


@pytest.mark.parametrize("value, error", [
    (0, ValueError), (-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), (1e9, ValueError),
    (ray_engine.MAX_CONNECT_TIMEOUT + 1, ValueError), (True, TypeError), ("2", TypeError),
])
def test_connect_timeout_is_checked_before_any_work(tmp_path, value, error):
    with pytest.raises(error, match="connect_timeout="):  # before the missing input is noticed
        embed_corpus("vectors.txt", str(tmp_path / "missing"), str(tmp_path / "out"), engine="ray",
                     address=f"127.0.0.1:{_closed_port()}", connect_timeout=value)
    with pytest.raises(error, match="connect_timeout="):
        with ray_engine.connected("127.0.0.1:1", connect_timeout=value):
            pass


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "1e9", "²", "٣", "abc", ""])
def test_the_connect_timeout_option_is_checked_by_the_parser(corpus, capsys, text):
    with pytest.raises(SystemExit) as stop:
        cli.main(["embed", str(corpus / "vectors.txt"), str(corpus / "in"), str(corpus / "out"), "--engine", "ray",
                  f"--connect-timeout={text}"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "argument --connect-timeout: expected a finite number in (0, 600] (seconds; default 30)" in error
    assert error.rstrip().endswith(f"got {text!r}")


def test_connect_timeout_applies_to_the_ray_engine_only(corpus):
    with pytest.raises(ValueError, match="connect_timeout.*apply to engine='ray' only"):
        embed_corpus(str(corpus / "vectors.txt"), str(corpus / "in"), str(corpus / "out"), connect_timeout=5,
                     show_progress=False)


@pytest.mark.parametrize("address", ["head-node", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:²",
                                     ":6379", "ray://head-node"])
def test_an_address_that_is_not_host_port_is_a_value_error(address):
    with pytest.raises(ValueError, match=r"is not HOST:PORT"):
        ray_engine.check_address(address, TIMEOUT)
