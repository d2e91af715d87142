"""Shared helpers for the benchmark scripts: data loading, timing, memory."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Callable, Optional

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def conll_sentences(split: str = "dev", limit: Optional[int] = None) -> Optional[list[list[str]]]:
    """Tokens of the CoNLL-2003 split from ../shared, or ``None`` when it is absent."""
    from contextembed.io import read_conll

    path = SHARED / "conll2003" / f"{split}.txt"
    if not path.exists():
        return None
    sentences = [tokens for tokens, _ in read_conll(str(path))]
    return sentences[:limit] if limit else sentences


def conll_tagged(split: str = "dev", limit: Optional[int] = None):
    """``(tokens, ner_tags)`` lists of the CoNLL-2003 split, or ``None`` when absent."""
    from contextembed.io import read_conll

    path = SHARED / "conll2003" / f"{split}.txt"
    if not path.exists():
        return None
    pairs = [(tokens, [c[-1] for c in cols]) for tokens, cols in read_conll(str(path))]
    pairs = pairs[:limit] if limit else pairs
    return [p[0] for p in pairs], [p[1] for p in pairs]


def synthetic_sentences(n: int, seed: int = 0) -> list[list[str]]:
    """Newswire-like random sentences (lengths 3..40) when the shared data is missing."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = ("the a of to in said on for was with European Commission Germany British lamb market "
             "shares rose percent Tuesday officials Reuters London New York Peter ( ) , . 1996 3.5").split()
    return [list(rng.choice(vocab, size=rng.integers(3, 41))) for _ in range(n)]


def timed(function: Callable, repeats: int = 1) -> tuple[float, object]:
    """Best wall time over ``repeats`` and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB (VmHWM: unlike ``ru_maxrss``, not inherited from
    the process that started it, e.g. a benchmark driver already holding other paths' features)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
