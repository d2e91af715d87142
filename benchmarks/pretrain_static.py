"""Skip-gram (and CBOW) vectors trained on the CoNLL-2003 training text: nearest neighbours.

Prints, for a handful of words, their five nearest neighbours by cosine similarity, and the
training time; the vectors are read back through ``load_encoder`` (word2vec binary).

    python benchmarks/pretrain_static.py [--architecture skipgram] [--epochs 5] [--dim 100]

Skips cleanly when ../shared is absent. CPU, one torch thread (fair on a shared box).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pretrain_data import require, write_corpus  # noqa: E402

from contextembed import load_encoder  # noqa: E402
from contextembed.pretraining import StaticConfig, most_similar, pretrain_static  # noqa: E402

QUERIES = ["monday", "germany", "london", "president", "shares", "police", "won", "two", "january", "soccer"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", choices=["skipgram", "cbow"], default="skipgram")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--min-count", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_conll = require("train")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(train_conll, Path(tmp) / "corpus.txt")
        config = StaticConfig(architecture=args.architecture, dim=args.dim, epochs=args.epochs,
                              min_count=args.min_count, lowercase=True, device="cpu", show_progress=False)
        started = time.perf_counter()
        summary = pretrain_static(corpus, Path(tmp) / "vectors", config)
        seconds = time.perf_counter() - started
        encoder = load_encoder(summary["binary"])
    words, vectors = encoder.words, encoder.table[:-1]
    print(f"{args.architecture}, {args.dim} dims, {args.epochs} epochs over {summary['tokens']:,} tokens, "
          f"{summary['vocab_size']:,} words (min count {args.min_count}, lowercased) in {seconds:.0f} s "
          "(2-core CPU dev box, 1 torch thread)")
    for query in QUERIES:
        if query in encoder.index:
            neighbours = ", ".join(f"{w} ({s:.2f})" for w, s in most_similar(words, vectors, query, k=5))
            print(f"  {query:>10}: {neighbours}")


if __name__ == "__main__":
    main()
