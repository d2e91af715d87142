"""Words/s of an ELMo of the original "small" size next to MiniLM-L6, on the same sentences, in one run.

ELMo: randomly initialised (no weights can be downloaded here; speed does not depend on the values)
with the architecture of AllenNLP's small release (2x1024 LSTM, 128 projection, 2048 char filters,
1 highway), all three layers, scalar mix (ELMo's default pooling), fp32.
MiniLM-L6: ``load_encoder("minilm-l6")``, last four layers concatenated, first piece per word, fp32.

    python benchmarks/elmo_throughput.py [--sentences 1000] [--repeats 2] [--batch-words 4096]

Uses the CoNLL-2003 dev words from ../shared; falls back to synthetic sentences (and says so).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contextembed import load_encoder  # noqa: E402
from contextembed.encoders.elmo import ElmoEncoder, elmo_options  # noqa: E402
from contextembed.features import FeatureExtractor  # noqa: E402
from contextembed.io import read_conll  # noqa: E402

CONLL_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003" / "dev.txt"


def conll_dev(limit: Optional[int]) -> Optional[list[list[str]]]:
    """Tokens of the CoNLL-2003 dev sentences, or ``None`` when ../shared is absent."""
    if not CONLL_DEV.exists():
        return None
    sentences = [tokens for tokens, _ in read_conll(str(CONLL_DEV))]
    return sentences[:limit] if limit else sentences


def synthetic(n: int, seed: int = 0) -> list[list[str]]:
    """Newswire-like random sentences of 3..40 words."""
    rng = np.random.default_rng(seed)
    vocab = ("the a of to in said on for was with European Commission Germany British market shares rose "
             "percent Tuesday officials Reuters London New York Peter ( ) , . 1996 3.5").split()
    return [list(rng.choice(vocab, size=rng.integers(3, 41))) for _ in range(n)]


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1000, help="first N dev sentences (0: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-words", type=int, default=4096)
    args = parser.parse_args()
    sentences = conll_dev(args.sentences or None)
    source = "CoNLL-2003 dev"
    if sentences is None:
        sentences, source = synthetic(args.sentences or 3000), "synthetic (../shared absent)"
    n_words = sum(map(len, sentences))
    print(f"inputs: {len(sentences)} sentences, {n_words} words ({source}); torch threads {torch.get_num_threads()}")

    torch.manual_seed(0)
    elmo = ElmoEncoder.from_options(elmo_options("small"), device="cpu", precision="fp32", batch_words=args.batch_words)
    minilm = load_encoder("minilm-l6", device="cpu", precision="fp32")
    runs = {
        "ELMo small (random), all layers, scalar mix": FeatureExtractor(elmo),
        "MiniLM-L6, last four concatenated": FeatureExtractor(minilm, layers=[-4, -3, -2, -1], combine="concat"),
    }
    for extractor in runs.values():  # warm-up
        extractor.words(sentences[:50])
    best = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
        for name, extractor in runs.items():
            seconds, features = timed(lambda e=extractor: e.words(sentences))
            assert sum(len(f) for f in features) == n_words
            best[name] = min(best[name], seconds)
    for name, seconds in best.items():
        print(f"{name:45s} {n_words / seconds:10.0f} words/s")
    elmo_time, minilm_time = best.values()
    print(f"{'ratio ELMo / MiniLM (words/s)':45s} {minilm_time / elmo_time:10.3f}")


if __name__ == "__main__":
    main()
