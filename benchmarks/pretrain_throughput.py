"""MLM pretraining tokens/s: contextembed's ``pretrain_mlm`` vs a minimal transformers ``Trainer`` loop.

Both train the same ``tiny`` BERT (2x128, ``BertForMaskedLM``, MLM only, no NSP) from the same random
initialisation seed, on the same examples (contextembed's packed ``[CLS] segment [SEP]`` examples of the
CoNLL-2003 training text, or a synthetic corpus when ../shared is absent), with the same WordPiece
vocabulary, batch size, sequence length, steps, optimiser settings (AdamW, lr 1e-3, linear warmup and
decay, weight decay 0.01, clipping 1.0), fp32 and torch thread count; both drop an epoch's last
partial batch. The transformers side is
``BertForMaskedLM`` + ``DataCollatorForLanguageModeling(mlm_probability=0.15)`` + ``Trainer``.

Tokens are counted the same way for both: non-padding input pieces ([CLS]/[SEP] included) of the
training batches after ``--warmup`` steps, divided by the wall time of those steps (batch building,
masking, forward, backward, optimiser step). One-time setup (vocabulary training, tokenization,
model construction, saving) is not timed. Ours is timed from ``log.jsonl`` (``log_every=1``:
``tokens / tokens_per_s`` per step); transformers' by a ``TrainerCallback`` (``on_step_end`` to
``on_step_end``) and a collator wrapper that records each batch's token count.

The two loops run back to back, ``--repeats`` times alternating (ours first, then transformers);
the medians and their ratio are printed with the machine's load average.

    python benchmarks/pretrain_throughput.py [--steps 100] [--warmup 5] [--batch-size 32]
        [--max-length 128] [--threads 1] [--repeats 2]

Needs ``accelerate`` for ``Trainer``: ``pip install ".[bench]"`` (from the repository).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pretrain_data import conll_path, write_corpus  # noqa: E402

from contextembed.pretraining import MLMConfig, TrainingOptions, pretrain_mlm, read_corpus  # noqa: E402
from contextembed.pretraining._corpus import split_held_out  # noqa: E402
from contextembed.pretraining._mlm import (  # noqa: E402
    BertObjective,
    SpecialIds,
    bert_config,
    load_tokenizer,
    tokenize_documents,
)

LEARNING_RATE = 1e-3
SEED = 0


def synthetic_corpus(target: Path, n_documents: int = 400, seed: int = 0) -> Path:
    """A corpus of random sentences over a Zipf-like 3,000-word vocabulary (used without ../shared)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    documents = []
    for _ in range(n_documents):
        sentences = [" ".join(rng.choices(words, weights, k=rng.randint(5, 30))) for _ in range(rng.randint(3, 15))]
        documents.append("\n".join(sentences))
    target.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return target


def run_ours(corpus: Path, out: Path, args) -> dict:
    """Train with ``pretrain_mlm``; tokens/s over the steps after the warm-up, from ``log.jsonl``."""
    config = MLMConfig(size="tiny", vocab_size=args.vocab_size, max_length=args.max_length, nsp=False)
    training = TrainingOptions(max_steps=args.warmup + args.steps, batch_size=args.batch_size,
                               learning_rate=LEARNING_RATE, warmup_steps=args.lr_warmup, weight_decay=0.01,
                               max_grad_norm=1.0, precision="fp32", device="cpu", seed=SEED, log_every=1,
                               checkpoint_every=0, held_out_fraction=0.0, show_progress=False)
    pretrain_mlm(corpus, out, config, training, overwrite=True)
    records = [json.loads(line) for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    timed = [r for r in records if "tokens" in r and r["step"] > args.warmup]
    if len(timed) != args.steps:
        raise RuntimeError(f"log.jsonl has {len(timed)} timed step records, expected {args.steps}")
    tokens = sum(r["tokens"] for r in timed)
    seconds = sum(r["tokens"] / r["tokens_per_s"] for r in timed)
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def training_examples(corpus: Path, model_dir: Path, max_length: int):
    """The tokenizer of ``model_dir`` and contextembed's MLM training examples (lists of ids)."""
    tokenizer = load_tokenizer(model_dir)
    documents = read_corpus(corpus).documents
    train_docs, _ = split_held_out(documents, 0.0)
    config = MLMConfig(size="tiny", max_length=max_length, nsp=False)
    objective = BertObjective(tokenize_documents(tokenizer, train_docs), [], SpecialIds.from_tokenizer(tokenizer),
                              config, SEED, {})
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    examples = [{"input_ids": [cls, *segment, sep], "special_tokens_mask": [1] + [0] * len(segment) + [1]}
                for segment in objective._flat]
    return tokenizer, examples


def run_transformers(tokenizer, examples: list[dict], out: Path, args) -> dict:
    """Train with a minimal ``Trainer`` MLM loop; tokens/s over the steps after the warm-up."""
    from transformers import (BertForMaskedLM, DataCollatorForLanguageModeling, Trainer, TrainerCallback,
                              TrainingArguments)

    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15)
    batch_tokens: list[int] = []

    def counting_collator(features):
        batch = collator(features)
        batch_tokens.append(int(batch["attention_mask"].sum()))
        return batch

    step_ends: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_end(self, arguments, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    torch.manual_seed(SEED)
    model = BertForMaskedLM(bert_config("tiny", len(tokenizer), args.max_length, tokenizer.pad_token_id))
    arguments = TrainingArguments(
        output_dir=str(out), max_steps=args.warmup + args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=LEARNING_RATE, warmup_steps=args.lr_warmup, lr_scheduler_type="linear", weight_decay=0.01,
        adam_epsilon=1e-6, max_grad_norm=1.0, optim="adamw_torch", use_cpu=True, seed=SEED, report_to="none",
        save_strategy="no", logging_strategy="no", eval_strategy="no", disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=False, dataloader_drop_last=True, remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=examples, data_collator=counting_collator,
                      callbacks=[StepTimer()])
    trainer.train()
    n = args.warmup + args.steps
    if len(step_ends) != n or len(batch_tokens) < n:
        raise RuntimeError(f"timed {len(step_ends)} steps and {len(batch_tokens)} batches, expected {n}")
    seconds = step_ends[-1] - step_ends[args.warmup - 1]
    tokens = sum(batch_tokens[args.warmup : n])
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before them (>= 1)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both loops")
    parser.add_argument("--repeats", type=int, default=2, help="alternating runs of each loop")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic corpus even if CoNLL is present")
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error(f"--warmup {args.warmup} must be >= 1")
    args.lr_warmup = max(1, (args.warmup + args.steps) // 10)
    try:
        import accelerate  # noqa: F401
    except ImportError:
        sys.exit('transformers.Trainer needs accelerate: pip install ".[bench]" (from the repository)')
    torch.set_num_threads(args.threads)
    conll = None if args.synthetic else conll_path("train")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if conll is not None:
            corpus, source = write_corpus(conll, tmp / "corpus.txt"), "CoNLL-2003 train text"
        else:
            corpus, source = synthetic_corpus(tmp / "corpus.txt"), "synthetic corpus"
        ours, theirs, loads = [], [], [load_average()]
        tokenizer = examples = None
        for repeat in range(args.repeats):
            ours.append(run_ours(corpus, tmp / "ours", args))
            if examples is None:
                tokenizer, examples = training_examples(corpus, tmp / "ours", args.max_length)
            theirs.append(run_transformers(tokenizer, examples, tmp / "hf", args))
            loads.append(load_average())
            print(f"repeat {repeat + 1}: contextembed {ours[-1]['tokens_per_s']:,.0f} tokens/s, "
                  f"transformers Trainer {theirs[-1]['tokens_per_s']:,.0f} tokens/s (load {loads[-1]})", flush=True)
    mine = statistics.median(r["tokens_per_s"] for r in ours)
    hf = statistics.median(r["tokens_per_s"] for r in theirs)
    print(f"tiny BERT (2x128) MLM, {source} ({len(examples):,} examples, vocab {len(tokenizer):,}), "
          f"{args.steps} timed steps after {args.warmup} warm-up x batch {args.batch_size} x {args.max_length} "
          f"pieces, fp32, {torch.get_num_threads()} torch thread(s), medians of {args.repeats}")
    print(f"contextembed pretrain_mlm : {mine:,.0f} tokens/s")
    print(f"transformers Trainer      : {hf:,.0f} tokens/s")
    print(f"ratio ours / transformers : {mine / hf:.2f} (target >= 1.0)")
    # equal in a repeat when both loops saw the same batches (the WordPiece vocabulary, retrained by
    # every run of ours, can differ slightly between repeats; transformers uses the first one's)
    print("timed tokens per repeat (contextembed / transformers): "
          + ", ".join(f"{a['tokens']:,.0f} / {b['tokens']:,.0f}" for a, b in zip(ours, theirs)))
    print(f"load average (1, 5, 15 min) before/after each repeat: {' | '.join(loads)}")
    print(json.dumps({"ours": ours, "transformers": theirs, "ratio": mine / hf, "load": loads}))


if __name__ == "__main__":
    main()
