"""``TokenEmbedder(n_jobs=2)`` after the encoder ran in the parent, as a script for
``test_joblib_workers.py``.

    python joblib_scenario.py ENCODER_DIR OUT.npz

Encodes with ``n_jobs=1`` (so the encoder runs in this process first), then with ``n_jobs=2``
under joblib's ``multiprocessing`` backend (forked workers, which inherit the loaded encoder and
torch's thread state); writes both feature matrices. The default ``loky`` backend starts fresh
interpreters (fork and exec), which inherit no thread state: ``test_encoding_cache.py`` runs it
after ``n_jobs=1`` in the test process.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

import numpy as np
from joblib import parallel_backend

from contextembed.sklearn import TokenEmbedder, _encoding

SENTENCES = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Peter", "Blackburn"],
    ["The", "European", "Commission", "said", "on", "Thursday", "it", "disagreed", "."],
    ["Germany", "'s", "representative", "to", "the", "EU", "said", "."],
] * 3 + [["one", "more", "sentence"]]


def main(encoder: str, out: str) -> None:
    _encoding.BLOCK_SIZE = 2  # several blocks, so that n_jobs=2 really runs two workers
    features = {"serial": TokenEmbedder(encoder, cache=None, n_jobs=1).fit(SENTENCES).transform(SENTENCES)}
    with parallel_backend("multiprocessing"):
        features["multiprocessing"] = TokenEmbedder(encoder, cache=None, n_jobs=2).fit(SENTENCES).transform(SENTENCES)
    np.savez(out, **features)


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hang (tests/_scenario.py)
    main(*sys.argv[1:])
