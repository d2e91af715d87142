"""Starting the ``contextembed`` console command in a subprocess: the one place that does it.

Every test that runs the CLI as a subprocess goes through :func:`start_cli` (or :func:`run_cli`),
so the subprocesses' environment is set here and only here (:func:`cli_environment`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import socket_guard

#: the checkout under test (the package is also installed from elsewhere, editable)
REPO_ROOT = Path(__file__).resolve().parents[1]


def cli_environment(socket_log: Path) -> dict[str, str]:
    """Environment of CLI subprocesses: the parent's, importing ``contextembed`` from this checkout,
    with the test suite's socket guard logging any network attempt to ``socket_log``."""
    return socket_guard.guarded_env(socket_log, {**os.environ, "PYTHONPATH": str(REPO_ROOT)})


def check_no_sockets(process: subprocess.Popen) -> None:
    """Fail if the finished CLI process tried to open a network socket (and forget its log)."""
    log = Path(process.socket_log)
    attempts = socket_guard.read_log(log)
    log.unlink(missing_ok=True)
    assert attempts == "", f"the CLI tried to open network sockets:\n{attempts}"


def _default_sigint() -> None:
    # a runner started in the background may ignore SIGINT, and Python keeps an ignored SIGINT
    # ignored; give the child the default so that it gets its KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(args, **popen_kwargs) -> subprocess.Popen:
    """Start ``python -m contextembed *args``; stdout and stderr are captured as text."""
    handle, log = tempfile.mkstemp(prefix="contextembed-sockets-", suffix=".log")
    os.close(handle)
    os.unlink(log)  # the guard creates it at the first attempt
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": cli_environment(Path(log)),
               "cwd": REPO_ROOT}
    if os.name == "posix":
        options["preexec_fn"] = _default_sigint
    options.update(popen_kwargs)
    process = subprocess.Popen([sys.executable, "-m", "contextembed", *map(str, args)], **options)
    process.socket_log = log
    return process


def run_cli(args, timeout: float = 120, **popen_kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m contextembed *args`` to the end (killed after ``timeout`` seconds)."""
    process = start_cli(args, **popen_kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException:
        process.kill()
        process.communicate()
        raise
    check_no_sockets(process)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
