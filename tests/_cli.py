"""Running the ``contextembed`` console command from tests: the one place that does it.

Every test that runs the CLI as a subprocess goes through :func:`start_cli` (or :func:`run_cli`),
so the subprocesses' environment is set here and only here (:func:`cli_environment`). A subprocess
costs an interpreter start and the imports (seconds on a loaded machine), so tests of a command's
arguments, output and exit status call it in this process with :func:`call_cli`; the subprocess is
kept for what only a real process shows: signals, pipes, forks, the console module itself.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from contextlib import redirect_stderr, redirect_stdout
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


def call_cli(args, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    """Run ``contextembed *args`` in this process (:func:`contextembed.cli.main`, from ``cwd``:
    :data:`REPO_ROOT` as :func:`run_cli` runs it, unless told) and return what :func:`run_cli` would: the exit
    status, stdout and stderr as text. As in a process of its own, an exception that ``main`` lets
    through prints its traceback on stderr with status 1, and ``SystemExit`` (the parser's errors,
    ``--help``) gives its code. Network attempts fail the test through the suite's ``no_network``
    fixture (``tests/conftest.py``), which watches this process."""
    from contextembed.cli import main

    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = _status_of(main, argv)
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(["contextembed", *argv], status, out.getvalue(), err.getvalue())


def _status_of(main, argv: list[str]) -> int:
    """``main(argv)``'s exit status as the interpreter would report it."""
    try:
        return main(argv)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - an uncaught error ends a real process with its traceback and status 1
        traceback.print_exc()
        return 1
