"""``contextembed pretrain {mlm,static,bilm} CORPUS OUT``: parse, check, save the config, call the library.

The resolved configuration is written to ``OUT/pretrain_config.json`` before training starts. Under
``torchrun`` only the main process checks OUT and writes the file.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from contextlib import contextmanager
from pathlib import Path

from .corpus import ENCODING_ERRORS
from .distributed import world_from_env
from .._files import atomic_file
from .run_files import CONFIG_FILE, latest_checkpoint, prepare_output_dir, write_json
from .training import TrainingOptions


def add_pretrain_parser(subparsers) -> None:
    """Register ``pretrain`` and its sub-commands."""
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain an encoder on your own text (mlm: BERT, static: word2vec, bilm: ELMo)",
        description="Pretrain on plain text: one sentence per line, a blank line between documents.",
    )
    objectives = parser.add_subparsers(dest="objective", required=True)
    for add in PRETRAIN_COMMANDS:
        add(objectives)


# -- shared arguments ---------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _add_io_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", help="text file or directory: one sentence per line, blank line between documents")
    parser.add_argument("out", help="output directory (must be empty unless --overwrite or --resume)")
    parser.add_argument("--overwrite", action="store_true", help="allow an OUT that already holds files")
    parser.add_argument("--encoding-errors", choices=ENCODING_ERRORS, default="skip",
                        help="lines that are not UTF-8: skip them with a counted warning (default) or fail")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training")
    group.add_argument("--max-steps", type=_positive, default=1000, help="optimizer updates (default 1000)")
    group.add_argument("--batch-size", type=_positive, default=32, help="examples per micro-batch per process")
    group.add_argument("--grad-accumulation", type=_positive, default=1, help="micro-batches per update")
    group.add_argument("--lr", type=float, default=None, help="peak learning rate (default: per size preset)")
    group.add_argument("--warmup-steps", type=int, default=None, help="linear warmup (default 10%% of --max-steps)")
    group.add_argument("--weight-decay", type=float, default=0.01)
    group.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0: off)")
    group.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32", help="autocast dtype")
    group.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda")
    group.add_argument("--log-every", type=_positive, default=10, help="steps between log.jsonl records")
    group.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints (0: final only)")
    group.add_argument("--keep-checkpoints", type=_positive, default=2)
    group.add_argument("--held-out-fraction", type=float, default=0.05, help="share of documents held out")
    group.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                       help="continue from OUT's latest checkpoint (or the CHECKPOINT file given)")


def _training_options(args: argparse.Namespace, learning_rate: float) -> TrainingOptions:
    return TrainingOptions(
        max_steps=args.max_steps, batch_size=args.batch_size, grad_accumulation=args.grad_accumulation,
        learning_rate=args.lr if args.lr is not None else learning_rate, warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, precision=args.precision,
        device=args.device, seed=args.seed, log_every=args.log_every, checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, held_out_fraction=args.held_out_fraction,
        show_progress=not args.quiet,
    )


def _check_corpus(path: str) -> None:
    if not Path(path).exists():
        raise FileNotFoundError(f"corpus {path!r} does not exist; pass a text file or a directory of text files")


def _save_config(out: str, args: argparse.Namespace, sections: dict, *, resume=False) -> None:
    """Check OUT and write the resolved configuration into it (main process only)."""
    if world_from_env()[0] != 0:
        return
    prepare_output_dir(out, overwrite=args.overwrite, resume=bool(resume))
    record = {"objective": args.objective, "corpus": str(Path(args.corpus).resolve()), **sections}
    write_json(Path(out, CONFIG_FILE), record, default=str)


@contextmanager
def _keep_config_on_failed_resume(out: str, resume):
    """Put back OUT's previous configuration when a resumed run fails before its first new checkpoint.

    The configuration describes the checkpoints in OUT, so a ``--resume`` refused as incompatible
    (or stopped by any other error before it saved) must leave the one they were made with.
    """
    path = Path(out, CONFIG_FILE)
    previous = path.read_bytes() if resume and path.is_file() else None
    checkpoint = latest_checkpoint(out)
    try:
        yield
    except BaseException:
        if previous is not None and world_from_env()[0] == 0 and latest_checkpoint(out) == checkpoint:
            with atomic_file(path, what="configuration") as temporary:
                Path(temporary).write_bytes(previous)
        raise


# -- mlm ----------------------------------------------------------------------------------------


def add_mlm_parser(objectives) -> None:
    from .mlm import BERT_PRESETS

    parser = objectives.add_parser(
        "mlm", help="BERT-style masked language model (+ --nsp); OUT is a Hugging Face model directory",
        description="Masked language modelling (15%; 80/10/10), optionally with next-sentence prediction.",
    )
    _add_io_arguments(parser)
    model = parser.add_argument_group("model")
    model.add_argument("--size", default="tiny",
                       help=f"size preset ({', '.join(BERT_PRESETS)}) or a JSON file of BertConfig fields")
    model.add_argument("--init", default=None, metavar="DIR",
                       help="continue pretraining a local BERT directory (domain-adaptive pretraining)")
    model.add_argument("--vocab-size", type=_positive, default=8000, help="WordPiece vocabulary size")
    model.add_argument("--lowercase", action="store_true", help="lowercase and strip accents before WordPiece")
    model.add_argument("--min-frequency", type=_positive, default=2)
    model.add_argument("--max-length", type=_positive, default=128, help="pieces per example incl. special tokens")
    model.add_argument("--nsp", action="store_true", help="add next-sentence prediction (50%% true / 50%% random)")
    model.add_argument("--mask-probability", type=float, default=0.15)
    _add_training_arguments(parser)
    parser.set_defaults(handler=_run_mlm)


def _run_mlm(args: argparse.Namespace) -> int:
    from .masking import MaskingOptions
    from .mlm import MLMConfig, check_bert_directory, default_learning_rate, pretrain_mlm

    _check_corpus(args.corpus)
    if args.init is not None:
        check_bert_directory(args.init)
    config = MLMConfig(
        size=args.size, init=args.init, vocab_size=args.vocab_size, lowercase=args.lowercase,
        min_frequency=args.min_frequency, max_length=args.max_length, nsp=args.nsp,
        masking=MaskingOptions(mask_probability=args.mask_probability), encoding_errors=args.encoding_errors,
    )
    training = _training_options(args, default_learning_rate(config))
    with _keep_config_on_failed_resume(args.out, args.resume):
        _save_config(args.out, args, {"mlm": asdict(config), "training": asdict(training)}, resume=args.resume)
        summary = pretrain_mlm(args.corpus, args.out, config, training, overwrite=True, resume=args.resume)
    if world_from_env()[0] == 0:
        print(json.dumps({"out": args.out, **summary}))
    return 0


# -- static -------------------------------------------------------------------------------------


def add_static_parser(objectives) -> None:
    parser = objectives.add_parser(
        "static", help="word2vec skip-gram or CBOW with negative sampling; OUT gets vectors.txt and vectors.bin",
        description="Static word vectors (words: lines split on white space).",
    )
    _add_io_arguments(parser)
    parser.add_argument("--architecture", choices=["skipgram", "cbow"], default="skipgram")
    parser.add_argument("--dim", type=_positive, default=100)
    parser.add_argument("--window", type=_positive, default=5)
    parser.add_argument("--negative", type=_positive, default=5, help="noise words per example")
    parser.add_argument("--min-count", type=_positive, default=5)
    parser.add_argument("--max-vocab", type=_positive, default=None)
    parser.add_argument("--sample", type=float, default=1e-3, help="subsampling threshold (0: off)")
    parser.add_argument("--epochs", type=_positive, default=5)
    parser.add_argument("--batch-size", type=_positive, default=1024)
    parser.add_argument("--lr", type=float, default=None, help="default 0.025 (skipgram) / 0.05 (cbow)")
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.set_defaults(handler=_run_static)


def _run_static(args: argparse.Namespace) -> int:
    from .static import StaticConfig, pretrain_static

    _check_corpus(args.corpus)
    config = StaticConfig(
        architecture=args.architecture, dim=args.dim, window=args.window, negative=args.negative,
        min_count=args.min_count, max_vocab=args.max_vocab, sample=args.sample, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.lr, lowercase=args.lowercase, seed=args.seed,
        device=args.device, encoding_errors=args.encoding_errors, show_progress=not args.quiet,
    )
    config.learning_rate = config.lr
    _save_config(args.out, args, {"static": asdict(config)})
    summary = pretrain_static(args.corpus, args.out, config, overwrite=True)
    print(json.dumps({"out": args.out, **summary}))
    return 0


# -- bilm ---------------------------------------------------------------------------------------


def add_bilm_parser(objectives) -> None:
    parser = objectives.add_parser(
        "bilm", help="ELMo-style forward+backward LMs; OUT is an ELMo directory (options.json + weights.hdf5)",
        description="Bidirectional language model over the ELMo char-CNN + biLSTM encoder.",
    )
    _add_io_arguments(parser)
    model = parser.add_argument_group("model")
    model.add_argument("--size", choices=["tiny", "small", "medium", "original"], default="tiny",
                       help="ELMo size preset (small/medium/original: the released architectures)")
    model.add_argument("--n-layers", type=_positive, default=2, help="biLSTM layers")
    model.add_argument("--init", default=None, metavar="DIR",
                       help="continue pretraining an ELMo directory (options.json + weights.hdf5)")
    model.add_argument("--max-vocab", type=_positive, default=50_000, help="softmax vocabulary size")
    model.add_argument("--min-count", type=_positive, default=3)
    model.add_argument("--softmax", choices=["auto", "full", "adaptive"], default="auto",
                       help="auto: adaptive softmax above 10,000 words")
    model.add_argument("--cutoffs", type=lambda t: [int(x) for x in t.split(",")], default=None,
                       help="adaptive-softmax cluster boundaries, e.g. 2000,10000")
    model.add_argument("--max-length", type=_positive, default=50, help="words per example (longer: cut)")
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--lowercase", action="store_true", help="lowercase the softmax vocabulary")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_run_bilm)


def _run_bilm(args: argparse.Namespace) -> int:
    from .bilm import BiLMConfig, default_learning_rate, pretrain_bilm

    _check_corpus(args.corpus)
    config = BiLMConfig(
        size=args.size, n_layers=args.n_layers, init=args.init, max_vocab=args.max_vocab, min_count=args.min_count,
        softmax=args.softmax, cutoffs=args.cutoffs, max_length=args.max_length, dropout=args.dropout,
        lowercase=args.lowercase, encoding_errors=args.encoding_errors,
    )
    training = _training_options(args, default_learning_rate(config))
    with _keep_config_on_failed_resume(args.out, args.resume):
        _save_config(args.out, args, {"bilm": asdict(config), "training": asdict(training)}, resume=args.resume)
        summary = pretrain_bilm(args.corpus, args.out, config, training, overwrite=True, resume=args.resume)
    if world_from_env()[0] == 0:
        print(json.dumps({"out": args.out, **summary}))
    return 0


PRETRAIN_COMMANDS = [add_mlm_parser, add_static_parser, add_bilm_parser]
