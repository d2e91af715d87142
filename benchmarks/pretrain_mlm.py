"""Tiny BERT pretrained with MLM + NSP on the CoNLL-2003 training text.

Prints (1) the masking statistics of the real training batches of one epoch (>= 100,000 maskable
tokens): share selected (target 15%), and of those replaced by [MASK] / a random token / kept
(target 80/10/10); (2) held-out MLM loss and accuracy and NSP accuracy before and after pretraining
(held-out documents: every 20th).

    python benchmarks/pretrain_mlm.py [--max-steps 800] [--batch-size 32] [--max-length 64]

Skips cleanly when ../shared is absent. CPU, one torch thread (fair on a shared box).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pretrain_data import require, write_corpus  # noqa: E402

from contextembed.pretraining import MLMConfig, TrainingOptions, pretrain_mlm, read_corpus  # noqa: E402
from contextembed.pretraining._mlm import BertObjective, SpecialIds, load_tokenizer, tokenize_documents  # noqa: E402


def masking_statistics(out: Path, corpus: Path, config: MLMConfig, batch_size: int) -> dict:
    """Count what dynamic masking did to every token of one epoch of real training batches."""
    tokenizer = load_tokenizer(out)
    ids = SpecialIds.from_tokenizer(tokenizer)
    documents = tokenize_documents(tokenizer, read_corpus(corpus).documents)
    objective = BertObjective(documents, [], ids, config, seed=0, fingerprint={})
    counts = dict.fromkeys(["maskable", "selected", "mask", "random", "kept"], 0)
    generator = torch.Generator().manual_seed(0)
    order = list(range(objective.n_examples()))
    for start in range(0, len(order), batch_size):
        batch = objective.make_batch(0, order[start : start + batch_size], generator)
        inputs, labels = batch["input_ids"], batch["labels"]
        selected = labels != -100
        original = torch.where(selected, labels, inputs)
        maskable = batch["attention_mask"].bool() & (original != ids.cls) & (original != ids.sep)
        counts["maskable"] += int(maskable.sum())
        counts["selected"] += int(selected.sum())
        counts["mask"] += int((selected & (inputs == ids.mask)).sum())
        counts["kept"] += int((selected & (inputs == original)).sum())
    counts["random"] = counts["selected"] - counts["mask"] - counts["kept"]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=800)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_conll = require("train")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_corpus(train_conll, Path(tmp) / "corpus.txt")
        out = Path(tmp) / "tiny-bert"
        config = MLMConfig(size="tiny", vocab_size=8000, max_length=args.max_length, nsp=True)
        training = TrainingOptions(max_steps=args.max_steps, batch_size=args.batch_size, learning_rate=1e-3,
                                   log_every=50, checkpoint_every=0, device="cpu", seed=args.seed,
                                   show_progress=False)
        started = time.perf_counter()
        summary = pretrain_mlm(corpus, out, config, training)
        minutes = (time.perf_counter() - started) / 60
        counts = masking_statistics(out, corpus, config, args.batch_size)
    n = counts["selected"]
    print(f"masking over one epoch: {counts['maskable']:,} maskable tokens, selected {100 * n / counts['maskable']:.2f}%"
          f"; of those [MASK] {100 * counts['mask'] / n:.2f}%, random {100 * counts['random'] / n:.2f}%, "
          f"kept {100 * counts['kept'] / n:.2f}% (target 15; 80/10/10)")
    before, after = summary["held_out_before"], summary["held_out"]
    print(f"tiny BERT (2x128), MLM+NSP, {args.max_steps} steps x {args.batch_size} x {args.max_length} pieces "
          f"in {minutes:.1f} min (2-core CPU dev box, 1 torch thread)")
    print(f"held-out MLM loss {before['mlm_loss']:.3f} -> {after['mlm_loss']:.3f} "
          f"(ratio {after['mlm_loss'] / before['mlm_loss']:.2f}); MLM accuracy {100 * before['mlm_acc']:.1f}% -> "
          f"{100 * after['mlm_acc']:.1f}%")
    print(f"held-out NSP accuracy {100 * before['nsp_acc']:.1f}% -> {100 * after['nsp_acc']:.1f}% "
          f"(NSP loss {before['nsp_loss']:.3f} -> {after['nsp_loss']:.3f})")
    print(json.dumps({"masking": counts, "held_out_before": before, "held_out": after}))


if __name__ == "__main__":
    main()
