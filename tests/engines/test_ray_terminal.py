"""What ``contextembed embed --engine ray`` shows on the terminal: its own bar and summary, not Ray's
log lines (``CONTEXTEMBED_RAY_LOGS=show`` lets them through), and the workers' errors as their own.

The run starts its own Ray instance (no module-scoped cluster here: one already running is left as
it was set up), so it lives in a module of its own.
"""

from __future__ import annotations

import logging
import os
import re
import sys

import numpy as np
import pytest

from contextembed._runtime import terminal
from contextembed.engines import _ray_lines
from contextembed.engines import ray as ray_engine
from contextembed.errors import SettingError


def test_the_ray_logs_setting_is_checked(monkeypatch):
    monkeypatch.delenv(ray_engine.RAY_LOGS_ENV, raising=False)
    assert ray_engine.ray_logs_shown() is False
    monkeypatch.setenv(ray_engine.RAY_LOGS_ENV, " show ")
    assert ray_engine.ray_logs_shown() is True
    monkeypatch.setenv(ray_engine.RAY_LOGS_ENV, "hide")
    assert ray_engine.ray_logs_shown() is False
    monkeypatch.setenv(ray_engine.RAY_LOGS_ENV, "1")
    with pytest.raises(SettingError, match=r"CONTEXTEMBED_RAY_LOGS='1': expected 'show' or 'hide'"):
        ray_engine.ray_logs_shown()


class _FakeRay:
    """Stands for the ``ray`` module in :func:`connected` (no instance is started)."""

    def __init__(self):
        self.calls = []

    def init(self, **options):
        self.calls.append(("init", options))

    def shutdown(self):
        self.calls.append(("shutdown",))


@pytest.mark.parametrize("setting, aside", [(None, True), ("hide", True), ("show", False)])
def test_connected_keeps_rays_lines_aside_unless_asked(monkeypatch, setting, aside):
    from contextlib import contextmanager

    fake, entered = _FakeRay(), []

    @contextmanager
    def lines_aside():
        entered.append(True)
        yield

    if setting is None:
        monkeypatch.delenv(ray_engine.RAY_LOGS_ENV, raising=False)
    else:
        monkeypatch.setenv(ray_engine.RAY_LOGS_ENV, setting)
    monkeypatch.setattr(ray_engine, "_ready_to_init", lambda address, timeout, options: fake)
    monkeypatch.setattr(ray_engine, "ray_lines_aside", lines_aside)
    monkeypatch.delitem(sys.modules, "ray", raising=False)  # no instance in this process
    with ray_engine.connected(None) as ray:
        assert ray is fake
    assert bool(entered) is aside
    assert fake.calls == [("init", {"address": None, **(ray_engine.QUIET_INIT if aside else {})}), ("shutdown",)]


def test_connected_keeps_the_callers_signal_handlers(monkeypatch):
    """ray.init sets SIGTERM to sys.exit(15) and leaves it so: the CLI's clean interrupt (status 143,
    temporaries removed) must stay in place while Ray runs and after."""
    import signal

    fake = _FakeRay()

    def init(**options):  # what ray.init does in the main thread
        fake.calls.append(("init", options))
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

    fake.init = init

    def ours(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_engine, "_ready_to_init", lambda address, timeout, options: fake)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, ours)
    try:
        with ray_engine.connected(None):
            assert signal.getsignal(signal.SIGTERM) is ours
            assert signal.getsignal(signal.SIGINT) is previous[signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous[signal.SIGTERM])
    assert [call[0] for call in fake.calls] == ["init", "shutdown"]


def test_ray_lines_aside_silences_this_process_stderr_but_contextembeds_own_lines(capfd, monkeypatch):
    """Ray's core writes to descriptor 2, its threads print to ``sys.stderr``, its loggers have
    console handlers; contextembed writes to ``terminal.stderr()``. Both where ``sys.stderr`` is a
    capture (notebooks, pytest) and where it writes to descriptor 2 (a command in a terminal)."""
    bars = pytest.importorskip("ray.data").DataContext.get_current().enable_progress_bars

    def ray_writes(what: str) -> None:
        os.write(2, f"[core_worker.cc] {what}\n".encode())
        print(f"(raylet) {what}", file=sys.stderr)
        print(f"(raylet) Task failed, will be retried: {what}")  # Ray prints the cluster's errors to stdout
        logging.getLogger("ray").warning("Ray's Python side: %s", what)
        logging.getLogger("ray.data.execution").info("Ray Data: %s", what)

    with ray_engine.ray_lines_aside():
        ray_writes("one")
        print("ours, through a capture", file=terminal.stderr())
    terminal_stream = open(2, "w", closefd=False)  # what sys.stderr is in a command run from a terminal
    monkeypatch.setattr(sys, "stderr", terminal_stream)
    with ray_engine.ray_lines_aside():
        assert terminal.stderr() is not terminal_stream and terminal.stderr().fileno() != 2
        ray_writes("two")
        print("ours, through descriptor 2", file=terminal.stderr(), flush=True)
        context = sys.modules["ray.data"].DataContext.get_current()
        assert context.enable_progress_bars is False
    assert sys.stderr is terminal_stream and terminal.stderr() is terminal_stream
    assert not any(_ray_lines._drop in handler.filters for handler in _ray_lines._console_handlers("ray"))
    print("after", file=sys.stderr, flush=True)
    monkeypatch.undo()
    out, err = capfd.readouterr()
    assert err.splitlines() == ["ours, through a capture", "ours, through descriptor 2", "after"]
    assert out == ""
    assert context.enable_progress_bars is bars  # as it was


@pytest.mark.slow
@pytest.mark.loopback
def test_embed_engine_ray_shows_the_bar_and_not_rays_lines(tmp_path, capfd, monkeypatch):
    pytest.importorskip("ray.data")
    import ray

    from contextembed import cli
    from contextembed.encoders import write_word2vec

    assert not ray.is_initialized(), "another test left Ray running: this one must start its own"
    monkeypatch.delenv(ray_engine.RAY_LOGS_ENV, raising=False)
    write_word2vec(tmp_path / "vectors.txt", ["the", "cat", "sat"], np.eye(3, dtype=np.float32))
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"part{i}.txt").write_text("the cat sat\nthe cat\n", encoding="utf-8")
    status = cli.main(["embed", str(tmp_path / "vectors.txt"), str(tmp_path / "in"), str(tmp_path / "out"),
                       "--engine", "ray", "--concurrency", "1"])
    out, err = capfd.readouterr()
    assert status == 0, err
    assert out.splitlines() == ['{"files": 3, "embedded": 3, "skipped": 0, "backend": "numpy", "precision": null}'
                                ]  # and nothing of Ray's
    assert re.search(r"files: 100%.*\| 3/3 .*6 sentences", err), err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert all(line.startswith("files:") for line in lines), f"lines that are not contextembed's bar: {lines}"
    assert not ray.is_initialized()

    # a worker that cannot load the model: the loader's error, as the command's one line; Ray's report
    # of the failed task (and its retries) stays in Ray's logs
    status = cli.main(["embed", str(tmp_path / "no-such-model"), str(tmp_path / "in"), str(tmp_path / "out2"),
                       "--engine", "ray", "--concurrency", "1", "--quiet"])
    out, err = capfd.readouterr()
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("contextembed embed: error: ") and "no-such-model" in err and "does not exist" in err
