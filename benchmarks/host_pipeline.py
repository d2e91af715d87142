"""The host's share of the word and text paths: each run with the model's forward pass and with a
free one, side by side in one process.

The free forward returns zeros of the model's shape (one ``(batch * seq, width)`` tensor per hidden
state wanted) without computing anything, so what is left is the host's work: tokenizing, aligning pieces
to words, batching, gathering and pooling the features and handing them over. Its throughput over
the real fp32 throughput says how much of the path the host is (10x: a tenth); the larger, the
less the host matters. Measured on every machine, a GPU or none.

The model is ``--model`` (default: the bundled MiniLM-L6, ``minilm-l6``; or any local Hugging Face
directory, such as a base-sized one):

- word path: the last four layers concatenated, each word's first piece
  (``FeatureExtractor(...).words``), on CoNLL-2003 dev sentences (``examples/data`` without
  ../shared);
- text path: ``TextEmbedder(MODEL)``'s defaults (uncached) on SST-2 training sentences (synthetic
  ones without ../shared);
- pair path: ``TextPairEmbedder(MODEL)``'s defaults (each side's first pieces averaged per layer,
  ``[u; v; |u - v|; u * v]``; uncached) on pairs of consecutive SST-2 sentences.

Real and free take turns ``--rounds`` times; each reports its best.

    python benchmarks/host_pipeline.py [--model PATH] [--sentences 2000] [--texts 2000] [--pairs 1000]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from common import DEFAULT_MODEL, conll_sentences, model_label, synthetic_sentences  # noqa: E402

LAYERS = [-4, -3, -2, -1]
#: one free forward pass per encoder, its buffers kept across rounds
FREE_FORWARDS: dict = {}


class FreeForward:
    """Stands in for an encoder's forward pass (``TransformerEncoder._forward``, the one place its
    model, flat forward or engine runs): zeros of its output shape, nothing computed.

    Each hidden state is a view of one zero buffer per wanted layer, kept between calls and grown as
    needed (nothing writes into hidden states), so the forward pass costs neither compute nor the
    page faults of fresh memory: what is timed is the host's work alone.
    """

    def __init__(self, width: int, device) -> None:
        self.width, self.device = width, device
        self.buffers: list = []

    def __call__(self, inputs: dict, layer_index) -> list:
        """``len(layer_index)`` x ``(batch * seq, width)`` zeros for a padded batch ``inputs``."""
        import torch

        batch, seq = inputs["input_ids"].shape
        size = batch * seq * self.width
        buffers = self.buffers  # this call's: batches run on several threads, each may grow them
        if len(buffers) < len(layer_index) or buffers[0].numel() < size:
            buffers = self.buffers = [torch.zeros(size, device=self.device) for _ in range(len(layer_index))]
        # len(layer_index) x (batch * seq, width)
        return [buffer[:size].view(batch * seq, self.width) for buffer in buffers[: len(layer_index)]]


@contextlib.contextmanager
def free_forward(encoder):
    """``encoder`` runs :class:`FreeForward` in place of its forward pass inside the block."""
    encoder._forward = FREE_FORWARDS.setdefault(id(encoder), FreeForward(encoder.width, encoder.device))
    try:
        yield
    finally:
        del encoder._forward  # the class's own again


def word_inputs(n: int) -> tuple[list[list[str]], str]:
    sentences = conll_sentences("dev", n)
    if sentences is not None:
        return sentences, "CoNLL-2003 dev"
    sample = ROOT / "examples" / "data" / "sample.txt"
    if sample.exists():
        lines = [line.split() for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
        return (lines * (n // max(1, len(lines)) + 1))[:n], "examples/data/sample.txt (../shared absent)"
    return synthetic_sentences(n), "synthetic"


def text_inputs(n: int) -> tuple[list[str], str]:
    from contextembed.sklearn.datasets import read_labelled_text

    path = ROOT.parent / "shared" / "data" / "sst2" / "train.tsv"
    if not path.exists():
        return [" ".join(s) for s in synthetic_sentences(n)], "synthetic (../shared absent)"
    return read_labelled_text(path, limit=n)[0], "SST-2 train"


def best_rates(runs: dict, count: int, rounds: int) -> dict[str, float]:
    """Items per second of each ``runs`` entry (a ``(function, context)`` pair), the entries taking
    turns ``rounds`` times after one warm-up each; the best of each."""
    rates = {name: 0.0 for name in runs}
    for name, (function, context) in runs.items():
        with context():
            function()  # warm-up: first shapes, thread pools
    for _ in range(rounds):
        for name, (function, context) in runs.items():
            with context():
                start = time.perf_counter()
                function()
                rates[name] = max(rates[name], count / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000, help="CoNLL-2003 dev sentences of the word path")
    parser.add_argument("--texts", type=int, default=2000, help="SST-2 sentences of the text path (0: skip it)")
    parser.add_argument("--pairs", type=int, default=1000, help="pairs of SST-2 sentences of the pair path (0: skip it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=DEFAULT_MODEL, metavar="PATH",
                        help=f"the model of every path: {DEFAULT_MODEL} (default) or a local Hugging Face directory")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    import torch

    from contextembed import load_encoder
    from contextembed.extraction import FeatureExtractor
    from contextembed.sklearn import TextEmbedder, TextPairEmbedder

    encoder = load_encoder(args.model, device=args.device, precision="fp32")
    label = model_label(args.model)
    print(f"{os.cpu_count()} CPUs, torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, "
          f"device {args.device}, fp32; model {args.model} ({encoder.n_layers} layers with the embeddings x "
          f"{encoder.width})")
    extractor = FeatureExtractor(encoder, layers=LAYERS, combine="concat", subword_pooling="first")
    sentences, source = word_inputs(args.sentences)
    n_words = sum(map(len, sentences))
    real = contextlib.nullcontext
    words = best_rates({"real": (lambda: extractor.words(sentences), real),
                        "free": (lambda: extractor.words(sentences), lambda: free_forward(encoder))},
                       n_words, args.rounds)
    print(f"word path, {label}: {len(sentences)} sentences, {n_words} words ({source}), last four layers concatenated, "
          "first piece")
    report("words/s", words)
    if args.texts:
        texts, source = text_inputs(args.texts)
        embedder = TextEmbedder(args.model, device=args.device, precision="fp32", cache=None).fit(texts[:1])
        print(f"text path, {label}: {len(texts)} texts ({source}), TextEmbedder defaults, uncached")
        report("texts/s", estimator_rates(embedder, texts, args.rounds))
    if args.pairs:
        texts, source = text_inputs(2 * args.pairs)
        pairs = list(zip(texts[0::2], texts[1::2]))
        embedder = TextPairEmbedder(args.model, device=args.device, precision="fp32", cache=None).fit(pairs[:1])
        print(f"pair path, {label}: {len(pairs)} pairs ({source}), TextPairEmbedder defaults, uncached")
        report("pairs/s", estimator_rates(embedder, pairs, args.rounds))


def estimator_rates(embedder, inputs: list, rounds: int) -> dict[str, float]:
    """``transform``'s items per second with the real forward pass and with the free one."""
    encoder = embedder.encoder_
    return best_rates({"real": (lambda: embedder.transform(inputs), contextlib.nullcontext),
                       "free": (lambda: embedder.transform(inputs), lambda: free_forward(encoder))},
                      len(inputs), rounds)


def report(unit: str, rates: dict[str, float]) -> None:
    print(f"  real forward  {rates['real']:10,.0f} {unit}")
    print(f"  free forward  {rates['free']:10,.0f} {unit}   host only / real: {rates['free'] / rates['real']:.1f}x")


if __name__ == "__main__":
    main()
