"""Words/s of an ELMo of the original "small" size next to MiniLM-L6, on the same sentences, in one run.

ELMo: randomly initialised (no weights can be downloaded here; speed does not depend on the values)
with the architecture of AllenNLP's small release (2x1024 LSTM, 128 projection, 2048 char filters,
1 highway), all three layers, scalar mix (ELMo's default pooling), fp32 (and bf16 with ``--bf16``).
MiniLM-L6: ``load_encoder("minilm-l6")``, last four layers concatenated, first piece per word, fp32.

    python benchmarks/elmo_throughput.py [--sentences 1000] [--repeats 2] [--batch-words 4096] [--threads N] [--bf16]

Uses the CoNLL-2003 dev words from ../shared; falls back to synthetic sentences (and says so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import conll_sentences, synthetic_sentences, timed  # noqa: E402

from contextembed import load_encoder  # noqa: E402
from contextembed.encoders._elmo import ElmoEncoder, elmo_options  # noqa: E402
from contextembed.extraction import FeatureExtractor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=1000, help="first N dev sentences (0: all)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-words", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--bf16", action="store_true", help="also time ELMo in bf16 (fast on CPUs with AMX/AVX-512 BF16)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sentences = conll_sentences("dev", args.sentences or None)
    source = "CoNLL-2003 dev"
    if sentences is None:
        sentences, source = synthetic_sentences(args.sentences or 3000), "synthetic (../shared absent)"
    n_words = sum(map(len, sentences))
    print(f"inputs: {len(sentences)} sentences, {n_words} words ({source}); torch threads {torch.get_num_threads()}")

    minilm = load_encoder("minilm-l6", device="cpu", precision="fp32")
    runs = {"MiniLM-L6 fp32, last four concatenated": FeatureExtractor(minilm, layers=[-4, -3, -2, -1], combine="concat")}
    for precision in ["fp32"] + (["bf16"] if args.bf16 else []):
        torch.manual_seed(0)
        elmo = ElmoEncoder.from_options(elmo_options("small"), device="cpu", precision=precision, batch_words=args.batch_words)
        runs[f"ELMo small {precision} (random), all layers, scalar mix"] = FeatureExtractor(elmo)
    for extractor in runs.values():  # warm-up
        extractor.words(sentences[:50])
    best = {name: float("inf") for name in runs}
    for _ in range(args.repeats):  # interleaved, so machine noise hits all alike
        for name, extractor in runs.items():
            seconds, features = timed(lambda e=extractor: e.words(sentences))
            assert sum(len(f) for f in features) == n_words
            best[name] = min(best[name], seconds)
    for name, seconds in best.items():
        print(f"{name:50s} {n_words / seconds:10.0f} words/s")
    minilm_time = best[next(iter(runs))]
    for name, seconds in list(best.items())[1:]:
        print(f"{'ratio ' + name.split(' (')[0] + ' / MiniLM':50s} {minilm_time / seconds:10.3f}")


if __name__ == "__main__":
    main()
