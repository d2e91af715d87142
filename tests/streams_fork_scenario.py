"""A process forked after its streams started runs streams itself, as a script for ``test_streams.py``.

    python streams_fork_scenario.py

The parent runs items on two streams (which starts their pool), then forks; the child runs items on
two streams and prints where they ran. Without :mod:`contextembed._runtime.streams` forgetting its pools in
the child, the child would queue its items for the parent's worker threads, which a fork does not
copy, and wait forever (the test's time limit catches that).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time

import torch

from contextembed._runtime.streams import STREAMS_ENV, run_all


def ran_on(items: list) -> set[str]:
    names, lock = set(), threading.Lock()

    def function(item):
        time.sleep(0.02)  # long enough that both streams take items
        with lock:
            names.add(threading.current_thread().name)

    run_all(function, items)
    return names


def main() -> None:
    os.environ.pop(STREAMS_ENV, None)
    torch.set_num_threads(2)
    assert ran_on(list(range(6))), "the parent ran its items"
    pid = os.fork()
    if pid == 0:
        names = ran_on(list(range(6)))
        print(f"child ran 6 items on {len(names)} streams: {sorted(names)}", flush=True)
        os._exit(0 if all(name.startswith("contextembed-stream") for name in names) else 1)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hang (tests/_scenario.py)
    main()
