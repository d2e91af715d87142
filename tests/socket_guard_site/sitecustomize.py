"""Installs the test suite's socket guard in a subprocess (see ``tests/socket_guard.py``)."""

import os
import sys

_log = os.environ.get("CONTEXTEMBED_SOCKET_GUARD_LOG")
if _log:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import socket_guard

    socket_guard.install(_log)
    sys.path.pop(0)
