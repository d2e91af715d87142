"""What batch-invariant encoding costs: padding every forward pass to a multiple of 16 positions.

For each precision, MiniLM-L6 is run over the same sentences (CoNLL-2003 dev from ../shared, or a
synthetic fallback) with ``pad_multiple=1`` (pad to the longest sequence of the batch: the default
in fp32) and ``pad_multiple=16`` (the default in bf16 and fp16), in alternating repeats, and reports
in one run:

- words/s of each and their ratio;
- the batch effect: the largest absolute difference of any feature (all layers) between a sentence
  encoded alone and the same sentence in the corpus-wide batches, and how many sentences differ.

A precision written ``BACKEND:PRECISION`` runs on that backend (``openvino:fp32``, ``openvino:int8``).

    python benchmarks/batch_invariance.py [--sentences 2000] [--check 300] [--repeats 3]
    python benchmarks/batch_invariance.py --precisions openvino:fp32 openvino:int8
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from common import conll_sentences, synthetic_sentences  # noqa: E402


def batch_effect(encoder, sentences) -> tuple[float, int]:
    """Largest |alone - batched| over all layers and features, and the number of sentences that differ."""
    batched = encoder.encode(sentences)
    differences = [float(np.abs(encoder.encode([s])[0] - b).max(initial=0.0)) for s, b in zip(sentences, batched)]
    return max(differences), sum(d > 0 for d in differences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--check", type=int, default=300, help="sentences compared alone vs batched")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=["bf16", "fp32"])
    args = parser.parse_args()

    from contextembed import load_encoder

    sentences = conll_sentences("dev", args.sentences) or synthetic_sentences(args.sentences)
    words = sum(map(len, sentences))
    print(f"{len(sentences)} sentences, {words} words; MiniLM-L6, last four layers, first piece")
    for precision in args.precisions:
        backend, _, name = precision.rpartition(":")
        encoders = {pad: load_encoder("minilm-l6", device="cpu", precision=name, backend=backend or "torch",
                                      pad_multiple=pad) for pad in (1, 16)}
        for encoder in encoders.values():
            encoder.encode(sentences[:200])  # warm-up
        best = {pad: float("inf") for pad in encoders}
        for _ in range(args.repeats):
            for pad, encoder in encoders.items():
                start = time.perf_counter()
                encoder.encode(sentences, layers=[-4, -3, -2, -1])
                best[pad] = min(best[pad], time.perf_counter() - start)
        for pad, encoder in encoders.items():
            effect, differing = batch_effect(encoder, sentences[: args.check])
            print(f"{precision} pad_multiple={pad:>2}: {words / best[pad]:7.0f} words/s  "
                  f"batch effect max {effect:.3g} ({differing} of {args.check} sentences differ)")
        print(f"{precision}: pad_multiple=16 runs at {best[1] / best[16]:.2f}x the words/s of pad_multiple=1")


if __name__ == "__main__":
    main()
