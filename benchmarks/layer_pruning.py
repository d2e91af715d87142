"""What not running the layers a feature does not use saves, per row of docs/choosing.md.

Each Table 7 row (``examples/table7.py``) needs the encoder's hidden states up to its deepest
layer only; the layers above it are never run (``contextembed/encoders/transformer/_pruning.py``). This
encodes the same CoNLL-2003 dev sentences for every row, in one process, the rows taking turns
``--rounds`` times, and prints each row's words/s and its speed-up over running every layer
(``layers="all"``), with a check that the rows' features are the full run's, bit for bit.

    python benchmarks/layer_pruning.py [--model PATH] [--sentences 1000] [--precision fp32] [--rounds 2]

Name the CPU class with the figures (``grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from common import DEFAULT_MODEL, conll_sentences, describe_model, model_directory, synthetic_sentences  # noqa: E402
from examples.table7 import TABLE7_ROWS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from contextembed import load_encoder

    sentences = conll_sentences("dev", args.sentences) or synthetic_sentences(args.sentences)
    n_words = sum(map(len, sentences))
    encoder = load_encoder(args.model, device="cpu", precision=args.precision)
    print(f"{describe_model(args.model, model_directory(args.model))}, precision={encoder.precision}, {len(sentences)} sentences, {n_words:,} words")
    rows = {"every layer": "all", **{name: row["layers"] for name, row in TABLE7_ROWS.items()}}
    middle = encoder.n_layers // 2
    # beyond Table 7: a middle layer, and a mix of the lower two thirds (where NER features peak in MiniLM)
    rows[f"layer {middle}"] = middle
    rows[f"layers 0-{2 * (encoder.n_layers - 1) // 3}"] = list(range(2 * (encoder.n_layers - 1) // 3 + 1))
    encoder.encode(sentences[:32], layers="all")  # warm-up
    best = {name: float("inf") for name in rows}
    full = None
    for _ in range(args.rounds):
        for name, layers in rows.items():
            start = time.perf_counter()
            out = encoder.encode(sentences, layers=layers)
            best[name] = min(best[name], time.perf_counter() - start)
            if name == "every layer":
                full = out
            else:
                index = list(encoder.layer_indexes(layers))
                assert all(np.array_equal(a, b[index]) for a, b in zip(out, full)), f"{name}: not the full run's bits"
    print("\n| row | layers run | words/s | x every layer |\n|---|---|---|---|")
    for name, layers in rows.items():
        deepest = max(encoder.layer_indexes(layers))
        print(f"| {name} | {deepest} of {encoder.n_layers - 1} | {n_words / best[name]:,.0f} | "
              f"{best['every layer'] / best[name]:.2f} |")


if __name__ == "__main__":
    main()
