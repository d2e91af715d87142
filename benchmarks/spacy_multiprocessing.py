"""``nlp.pipe(n_process=2)`` against ``n_process=1`` after the pipeline ran in the parent.

A blank English pipeline with the ``contextembed`` component (MiniLM-L6 by default) is warmed
with one ``nlp(text)``, then for each corpus size the same texts (CoNLL-2003 dev from ../shared, or
a synthetic fallback) go through ``n_process=1`` (torch's default threads), ``n_process=2`` with
one torch thread per worker (contextembed's default in forked children) and ``n_process=2`` with
the parent's thread count per worker (``set_child_threads(None)``). Reports the best of
``--repeats`` wall times and the ratios to ``n_process=1``, measured in one run; worker start-up
(fork, pipes) is part of every ``n_process=2`` time.

    python benchmarks/spacy_multiprocessing.py [--model minilm-l6] [--texts 30 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import conll_sentences, synthetic_sentences, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--texts", type=int, nargs="+", default=[30, 200])
    parser.add_argument("--batch-size", type=int, default=16, help="nlp.pipe batch_size (each worker gets batches)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import spacy
    import torch

    import contextembed.spacy  # noqa: F401
    from contextembed._runtime import forking

    sentences = conll_sentences("dev", limit=max(args.texts)) or synthetic_sentences(max(args.texts))
    texts = [" ".join(tokens) for tokens in sentences]
    nlp = spacy.blank("en")
    nlp.add_pipe("contextembed", config={"encoder": {"name": args.model, "device": "cpu", "precision": args.precision}})
    nlp(texts[0])  # the usual order: the pipeline has run in the parent
    print(f"{args.model}, precision {nlp.get_pipe('contextembed').encoder.precision}, torch threads "
          f"{torch.get_num_threads()}, batch_size {args.batch_size}, best of {args.repeats}")
    print(f"{'texts':>6} {'n_process=1':>12} {'n_process=2':>12} {'ratio':>6} {'2, parent threads':>18} {'ratio':>6}")
    def run(n: int, n_process: int):
        return lambda: sum(len(doc) for doc in nlp.pipe(texts[:n], n_process=n_process, batch_size=args.batch_size))

    for n in args.texts:
        single, _ = timed(run(n, 1), args.repeats)
        forking.set_child_threads(1)
        multi, _ = timed(run(n, 2), args.repeats)
        forking.set_child_threads(None)
        multi_parent_threads, _ = timed(run(n, 2), args.repeats)
        forking.set_child_threads(1)
        print(f"{n:>6} {single:>11.2f}s {multi:>11.2f}s {single / multi:>5.2f}x {multi_parent_threads:>17.2f}s "
              f"{single / multi_parent_threads:>5.2f}x")


if __name__ == "__main__":
    main()
