"""Batches run one at a time on every thread against several at once, one thread each
(``contextembed._runtime.streams``), measured alternating in one process.

For each precision: MiniLM-L6 word features (concat of the last four layers) of CoNLL-2003 dev
sentences and of long documents (60 sentences joined: windows of 510 pieces), the ``TextEmbedder``
text path on SST-2 sentences, and an ELMo of AllenNLP's "small" size (random weights; all layers)
on the CoNLL-2003 sentences. Prints units/s of both ways, their ratio (best of
``--rounds``), and the largest difference between their features: 0 for MiniLM, whose kernels give
the same bits on one thread as on two; ELMo's LSTMs round differently on two threads (an ulp).

    python benchmarks/streams.py
    python benchmarks/streams.py --precisions int8 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED, conll_sentences, synthetic_sentences  # noqa: E402

from contextembed._runtime.streams import STREAMS_ENV  # noqa: E402

#: the two ways compared: one batch at a time on all threads, and the default (a stream per thread)
WAYS = {"one batch": "1", "streams": ""}


def corpora(n: int) -> dict[str, list]:
    sentences = conll_sentences("dev", n) or synthetic_sentences(n)
    documents = [sum(sentences[i : i + 60], []) for i in range(0, len(sentences) - 59, 60)]
    texts_path = SHARED / "sst2" / "train.tsv"
    if texts_path.exists():
        from contextembed.sklearn.datasets import read_labelled_text

        texts = read_labelled_text(texts_path, limit=n)[0]
    else:
        texts = [" ".join(s) for s in sentences]
    return {"sentences": sentences, "documents": documents, "texts": texts, "elmo": sentences}


def runner(precision: str, corpus: str):
    """``(run, units)``: a function computing the features of ``corpus`` and how many units it has."""
    if corpus == "elmo":
        import torch

        from contextembed.encoders._elmo import ElmoEncoder, elmo_options

        torch.manual_seed(0)
        elmo = ElmoEncoder.from_options(elmo_options("small"), device="cpu", precision=precision)
        return lambda data: elmo.encode(data), lambda data: sum(map(len, data))
    if corpus == "texts":
        from contextembed.sklearn import TextEmbedder

        embedder = TextEmbedder("minilm-l6", precision=precision, cache=None)
        return lambda data: embedder.fit(data[:1]).transform(data), len
    from contextembed import load_encoder

    encoder = load_encoder("minilm-l6", precision=precision)
    return lambda data: encoder.encode(data, layers=[-4, -3, -2, -1]), lambda data: sum(map(len, data))


def compare(run, units, data, rounds: int) -> tuple[dict[str, float], float]:
    """Best units/s of each way over ``rounds`` alternating rounds, and the largest difference
    between their outputs."""
    speeds: dict[str, float] = {}
    outputs = {}
    run(data[:64])  # warm-up
    for _ in range(rounds):
        for way, setting in WAYS.items():
            os.environ[STREAMS_ENV] = setting
            start = time.perf_counter()
            outputs[way] = run(data)
            speeds[way] = max(speeds.get(way, 0.0), units(data) / (time.perf_counter() - start))
    os.environ.pop(STREAMS_ENV, None)
    first, second = outputs.values()
    assert len(first) == len(second), "one output per input both ways"
    return speeds, max(float(np.abs(np.asarray(a) - np.asarray(b)).max(initial=0.0)) for a, b in zip(first, second))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"])
    parser.add_argument("--corpora", nargs="+", default=["sentences", "documents", "texts", "elmo"],
                        choices=["sentences", "documents", "texts", "elmo"])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    import torch

    data = corpora(args.sentences)
    print(f"torch threads: {torch.get_num_threads()}; units/s (words; texts for the text path)")
    print(f"{'precision':9s} {'corpus':10s} {'one batch':>10s} {'streams':>10s} {'ratio':>6s} {'max diff':>9s}")
    for precision in args.precisions:
        for corpus in args.corpora:
            items = data[corpus]
            if not items:  # documents need 60 sentences
                print(f"{precision:9s} {corpus:10s} skipped: --sentences {args.sentences} gives none")
                continue
            run, units = runner(precision, corpus)
            speeds, difference = compare(run, units, items, args.rounds)
            ratio = speeds["streams"] / speeds["one batch"]
            print(f"{precision:9s} {corpus:10s} {speeds['one batch']:10.0f} {speeds['streams']:10.0f} {ratio:6.2f} {difference:9.2g}",
                  flush=True)


if __name__ == "__main__":
    main()
