"""Starting the ``contextembed`` console command in a subprocess: the one place that does it.

Every test that runs the CLI as a subprocess goes through :func:`start_cli` (or :func:`run_cli`),
so the subprocesses' environment is set here and only here (:func:`cli_environment`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

#: the checkout under test (the package is also installed from elsewhere, editable)
REPO_ROOT = Path(__file__).resolve().parents[1]


def cli_environment() -> dict[str, str]:
    """Environment of CLI subprocesses: the parent's, importing ``contextembed`` from this checkout."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def _default_sigint() -> None:
    # a runner started in the background may ignore SIGINT, and Python keeps an ignored SIGINT
    # ignored; give the child the default so that it gets its KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(args, **popen_kwargs) -> subprocess.Popen:
    """Start ``python -m contextembed *args``; stdout and stderr are captured as text."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "env": cli_environment(),
               "cwd": REPO_ROOT}
    if os.name == "posix":
        options["preexec_fn"] = _default_sigint
    options.update(popen_kwargs)
    return subprocess.Popen([sys.executable, "-m", "contextembed", *map(str, args)], **options)


def run_cli(args, timeout: float = 120, **popen_kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m contextembed *args`` to the end (killed after ``timeout`` seconds)."""
    process = start_cli(args, **popen_kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)
