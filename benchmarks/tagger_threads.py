"""BiLSTMCRFTagger's ``n_threads``: seconds per training epoch with torch's default threads and with
fewer, side by side in one run (alternating, the best of ``--rounds``), on CoNLL-2003 sentences.

On a machine other jobs keep busy, torch's OpenMP threads spin waiting for cores they do not get
and one thread can be much faster; on a quiet one more threads win. The features are encoded once
(the estimators' memory cache), so the times are the tagger's training alone.

    python benchmarks/tagger_threads.py [--sentences 1000] [--epochs 3] [--rounds 2] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import conll_tagged  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="glove-6b-50d")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="n_threads values besides None")
    args = parser.parse_args(argv)
    import torch

    from contextembed.sklearn import BiLSTMCRFTagger, TokenEmbedder

    data = conll_tagged("train", args.sentences)
    if data is None:
        print("no CoNLL-2003 in ../shared/data/conll2003: nothing to measure", file=sys.stderr)
        return 1

    def fit(n_threads):
        tagger = BiLSTMCRFTagger(TokenEmbedder(args.encoder), max_epochs=args.epochs, patience=args.epochs,
                                 validation_fraction=0.1, n_threads=n_threads)
        start = time.perf_counter()
        tagger.fit(*data)
        return (time.perf_counter() - start) / tagger.n_epochs_, tagger.validation_f1_

    fit(1)  # encodes once into the memory cache, and warms torch up
    settings = [None, *args.threads]
    best = {n: (float("inf"), 0.0) for n in settings}
    for _ in range(args.rounds):
        for n in settings:
            seconds, f1 = fit(n)
            best[n] = min(best[n], (seconds, f1))
    base = best[None][0]
    print(f"{args.sentences} sentences, {args.encoder}, torch default threads {torch.get_num_threads()}")
    for n, (seconds, f1) in best.items():
        print(f"n_threads={n!s:<5} {seconds:6.2f} s/epoch  {base / seconds:5.2f}x the default  valid F1 {f1:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
