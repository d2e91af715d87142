"""A tiny biLM pretrained on CoNLL-2003 train text vs. the same architecture with random weights.

Both encoders are frozen; their three ELMo layers (concatenated, 3 x 32 = 96 values per word) feed a
logistic-regression token probe (one row per word, no context window, standardised features)
trained on the first ``--train-sentences`` CoNLL-2003 training sentences; reported: entity F1 on the
dev split (seqeval). Also prints the held-out perplexity before and after pretraining.

    python benchmarks/pretrain_bilm.py [--max-steps 1500] [--train-sentences 4000]

Skips cleanly when ../shared is absent. Runs on the CPU with one torch thread (fair on a shared box).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pretrain_data import require, write_corpus  # noqa: E402

from contextembed import load_encoder  # noqa: E402
from contextembed.encoders._elmo import save_bilm  # noqa: E402
from contextembed.io import read_conll  # noqa: E402
from contextembed.pretraining import BiLMConfig, TrainingOptions, pretrain_bilm  # noqa: E402
from contextembed.pretraining._bilm import BiLMLanguageModel  # noqa: E402


def probe_f1(spec: str, train, dev) -> float:
    """Dev entity F1 of a logistic-regression token probe on frozen features of all layers."""
    from seqeval.metrics import f1_score
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    encoder = load_encoder(spec, device="cpu", precision="fp32")

    def features(sentences):
        # (layers, words, width) per sentence -> (words, layers * width)
        return np.vstack([f.transpose(1, 0, 2).reshape(f.shape[1], -1) for f in encoder.encode(sentences)])

    x_train = features([w for w, _ in train])
    y_train = np.concatenate([t for _, t in train])
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300, C=1.0))
    probe.fit(x_train, y_train)
    predicted = probe.predict(features([w for w, _ in dev]))
    lengths = np.cumsum([len(t) for _, t in dev])[:-1]
    return f1_score([list(t) for _, t in dev], [list(p) for p in np.split(predicted, lengths)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-sentences", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_conll, dev_conll = require("train"), require("dev")
    tagged = lambda path: [(words, [c[-1] for c in columns]) for words, columns in read_conll(str(path))]  # noqa: E731
    train, dev = tagged(train_conll)[: args.train_sentences], tagged(dev_conll)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(train_conll, Path(tmp) / "corpus.txt")
        config = BiLMConfig(size="tiny", n_layers=2, min_count=2, dropout=0.1)
        training = TrainingOptions(max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=2e-3,
                                   log_every=50, checkpoint_every=0, device="cpu", seed=args.seed,
                                   held_out_fraction=0.05, show_progress=False)
        started = time.perf_counter()
        summary = pretrain_bilm(corpus, Path(tmp) / "pretrained", config, training)
        minutes = (time.perf_counter() - started) / 60
        # the same architecture, random weights (bilm-tf initialisation, same seed)
        torch.manual_seed(args.seed)
        random_model = BiLMLanguageModel(config.options, 10, dropout=0.0)
        save_bilm(random_model.encoder, Path(tmp) / "random")
        before, after = summary["held_out_before"], summary["held_out"]
        ppl = lambda h: float(np.exp((h["forward_loss"] + h["backward_loss"]) / 2))  # noqa: E731
        print(f"pretraining: {args.max_steps} steps x {args.batch_size} sentences in {minutes:.1f} min "
              "(2-core CPU dev box, 1 torch thread)")
        print(f"held-out perplexity: {ppl(before):.0f} before -> {ppl(after):.0f} after "
              f"(forward loss {before['forward_loss']:.3f} -> {after['forward_loss']:.3f}, "
              f"backward {before['backward_loss']:.3f} -> {after['backward_loss']:.3f})")
        results = {name: probe_f1(str(Path(tmp) / name), train, dev) for name in ("random", "pretrained")}
    print(f"logistic-regression probe, all 3 ELMo layers concatenated, {len(train)} training sentences:")
    for name, f1 in results.items():
        print(f"  {name:>10} init: dev F1 {100 * f1:.1f}")
    print(f"pretrained - random: {100 * (results['pretrained'] - results['random']):+.1f} F1")
    print(json.dumps({"held_out_before": before, "held_out": after, "dev_f1": results}))


if __name__ == "__main__":
    main()
