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


#: the model the speed benchmarks measure unless given ``--model``: the bundled MiniLM
DEFAULT_MODEL = "minilm-l6"


def model_directory(spec: str) -> str:
    """The transformer directory ``spec`` names: a bundled name (``minilm-l6``: its
    sentence-transformers directory) or a local Hugging Face directory. The peers (raw transformers,
    sentence-transformers, flair) load it, so every path of a benchmark reads the same files.

    Raises
    ------
    SystemExit
        When ``spec`` names no local transformer directory (nothing is downloaded).
    """
    import os

    from contextembed.encoders._loading import NAMED_MODELS, named_model_files

    directory = named_model_files(spec) if spec in NAMED_MODELS else os.path.abspath(spec)
    if not os.path.isfile(os.path.join(directory, "config.json")):
        raise SystemExit(f"--model {spec}: expected 'minilm-l6' or a Hugging Face model directory (with "
                         f"config.json), got {directory}, which has no config.json")
    return directory


def model_label(spec: str) -> str:
    """A short name for ``spec`` in printed rows: a bundled name as is, a directory by its last part."""
    return Path(spec).name or spec


def model_shape(directory: str) -> tuple[int, int]:
    """``(hidden layers, width)`` of the transformer in ``directory``, from its ``config.json``."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    return config.num_hidden_layers, config.hidden_size


def describe_model(spec: str, directory: str) -> str:
    """``minilm-l6 (DIR; 6 layers x 384)``: the model line of a benchmark's header."""
    layers, width = model_shape(directory)
    where = "" if Path(spec).resolve() == Path(directory).resolve() else f"{directory}; "
    return f"{spec} ({where}{layers} layers x {width})"
