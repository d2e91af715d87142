"""Words/s of raw transformers vs contextembed on the same CoNLL-2003 dev sentences, in one run.

Raw transformers: MiniLM-L6, ``output_hidden_states=True``, length-sorted batches of 64, fp32, fast
tokenizer with ``is_split_into_words`` (the work any user must do to get per-layer states).
contextembed: MiniLM-L6, last four layers concatenated, first piece per word, fp32.

    python benchmarks/throughput.py [--sentences 2000] [--repeats 3]

Skips to synthetic sentences when ../shared/data is absent (and says so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import conll_sentences, synthetic_sentences, timed  # noqa: E402

from contextembed import load_encoder  # noqa: E402
from contextembed.features import FeatureExtractor  # noqa: E402


def raw_transformers(model, tokenizer, sentences, batch_size=64):
    """Length-sorted batches of 64 through AutoModel, hidden states of every layer kept."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    outputs = [None] * len(sentences)
    with torch.inference_mode():
        for begin in range(0, len(order), batch_size):
            index = order[begin : begin + batch_size]
            batch = tokenizer([sentences[i] for i in index], is_split_into_words=True, padding=True,
                              truncation=True, return_tensors="pt")
            hidden = model(**batch, output_hidden_states=True).hidden_states
            last_four = torch.cat(hidden[-4:], dim=-1)
            for row, i in enumerate(index):
                outputs[i] = last_four[row]
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sentences = conll_sentences("dev", args.sentences)
    source = "CoNLL-2003 dev"
    if sentences is None:
        sentences, source = synthetic_sentences(args.sentences), "synthetic (../shared absent)"
    n_words = sum(map(len, sentences))
    print(f"inputs: {len(sentences)} sentences, {n_words} words ({source}); torch threads {torch.get_num_threads()}")

    encoder = load_encoder("minilm-l6", device="cpu", precision="fp32")
    extractor = FeatureExtractor(encoder, layers=[-4, -3, -2, -1], combine="concat", subword_pooling="first")
    ours = lambda: extractor.words(sentences)  # noqa: E731
    raw = lambda: raw_transformers(encoder.model, encoder.tokenizer, sentences)  # noqa: E731
    ours()  # warm-up
    raw()
    # interleave the runs so that machine noise hits both alike
    raw_time = ours_time = float("inf")
    for _ in range(args.repeats):
        raw_time = min(raw_time, timed(raw)[0])
        ours_time = min(ours_time, timed(ours)[0])
    features = ours()
    assert sum(len(f) for f in features) == n_words and features[0].shape[1] == 4 * 384
    print(f"raw transformers fp32   {n_words / raw_time:10.0f} words/s")
    print(f"contextembed fp32       {n_words / ours_time:10.0f} words/s")
    print(f"ratio contextembed/raw  {raw_time / ours_time:10.3f}  (target >= 0.95)")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
