"""Running a scenario script in its own process group with a hard time limit.

Multiprocessing tests run their scenario in a subprocess so that a deadlock fails the test
instead of blocking the suite: past ``timeout`` the scenario and every worker it forked dump
their Python stacks (``faulthandler`` on SIGUSR1) and are killed (the whole process group), and
the test fails naming the scenario and showing the stacks. The subprocess imports
``contextembed`` from this checkout and runs under the socket guard.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import socket_guard

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_scenario(script: Path, *args, timeout: float = 90) -> subprocess.CompletedProcess:
    """Run ``python script *args``; fail the test on a timeout, a non-zero exit or a socket."""
    handle, log = tempfile.mkstemp(prefix="contextembed-sockets-", suffix=".log")
    os.close(handle)
    os.unlink(log)  # the guard creates it at the first attempt
    env = socket_guard.guarded_env(Path(log), {**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    command = [sys.executable, str(script), *map(str, args)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=REPO_ROOT, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _dump_stacks(process)
        _kill_group(process.pid)
        out, err = process.communicate()
        pytest.fail(f"{script.name} {' '.join(map(str, args))} hung: still running after {timeout} s "
                    f"(killed with its workers)\nstdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}", pytrace=False)
    finally:
        _kill_group(process.pid)  # workers left behind by a scenario that exited
    attempts = socket_guard.read_log(Path(log))
    Path(log).unlink(missing_ok=True)
    assert process.returncode == 0, f"{script.name} {args} failed:\n{err[-4000:]}"
    assert attempts == "", f"{script.name} tried to open network sockets:\n{attempts}"
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _dump_stacks(process: subprocess.Popen) -> None:
    """Ask the scenario and its workers for their Python stacks (scenarios register
    ``faulthandler`` on SIGUSR1; forked workers inherit it) before killing them."""
    try:
        os.killpg(process.pid, signal.SIGUSR1)
        process.wait(timeout=3)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
