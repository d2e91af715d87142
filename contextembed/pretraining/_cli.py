"""``contextembed pretrain {mlm,static,bilm} CORPUS OUT``: parse and check the arguments, call the library.

Each sub-command turns its arguments into the method's settings (:class:`~.mlm.MLMConfig`,
:class:`~.bilm.BiLMConfig`, :class:`~.static.StaticConfig`, :class:`~.training.TrainingOptions`,
whose defaults are the ones shown here) and calls :func:`~.outline.run_objective` with
``save_config=True``: the library checks OUT, writes the resolved configuration to
``OUT/pretrain_config.json`` (under ``torchrun``: the main process only) and trains.

Every numeric option is read by its setting's :class:`~.settings.Bound` (the table beside each
settings class), so a number that is not ASCII, not finite or out of range stops ``argparse``
before anything is read or written, naming the option and the range.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import MISSING, fields
from typing import get_args

from ..encoders._elmo.options import ElmoSize
from . import _bilm as bilm, _mlm as mlm
from ._bilm import ADAPTIVE_ABOVE, BILM_BOUNDS, CUTOFF, BiLMConfig, BiLMRecipe, Softmax
from ._corpus import EncodingErrors
from ._distributed import world_from_env
from ._masking import MASKING_BOUNDS, MaskingOptions
from ._mlm import BERT_PRESETS, MLM_BOUNDS, MLMConfig, MLMRecipe
from ._outline import Recipe, run_objective
from .._inputs.bounds import LEARNING_RATE, SEED, parse_integers
from ._static import DEFAULT_LEARNING_RATES, STATIC_BOUNDS, Architecture, StaticConfig, StaticRecipe
from ._training import TRAINING_BOUNDS, TrainingOptions, TrainingPrecision


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


def _defaults(settings: type) -> dict[str, object]:
    """The default of every field of the dataclass ``settings`` that has a plain one."""
    return {field.name: field.default for field in fields(settings) if field.default is not MISSING}


TRAINING = _defaults(TrainingOptions)


def _readers(bounds: dict) -> dict:
    """The ``argparse`` ``type=`` of each numeric setting: its bound's strict reader."""
    return {name: bound.parse for name, bound in bounds.items()}


#: how each numeric training option is read (and checked)
_TRAINING_TYPES = _readers(TRAINING_BOUNDS)


def _add_io_arguments(parser: argparse.ArgumentParser, defaults: dict, *, resumable: bool) -> None:
    """CORPUS, OUT and the options every method has; ``resumable``: the method keeps checkpoints
    that ``--resume`` continues from (:func:`_add_training_arguments`)."""
    parser.add_argument("corpus", help="text file or directory: one sentence per line, blank line between documents")
    parser.add_argument("out", help="output directory (must be empty unless --overwrite"
                        + (" or --resume)" if resumable else ")"))
    parser.add_argument("--overwrite", action="store_true", help="allow an OUT that already holds files")
    parser.add_argument("--encoding-errors", choices=get_args(EncodingErrors), default=defaults["encoding_errors"],
                        help="lines that are not UTF-8: skip them with a counted warning or fail")
    parser.add_argument("--seed", type=SEED.parse, default=defaults["seed"])
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("training")
    number = _TRAINING_TYPES
    group.add_argument("--max-steps", type=number["max_steps"], default=TRAINING["max_steps"],
                       help="optimizer updates")
    group.add_argument("--batch-size", type=number["batch_size"], default=TRAINING["batch_size"],
                       help="examples per micro-batch per process")
    group.add_argument("--grad-accumulation", type=number["grad_accumulation"],
                       default=TRAINING["grad_accumulation"], help="micro-batches per update")
    group.add_argument("--lr", type=LEARNING_RATE.parse, default=None,
                       help="peak learning rate (default: per size preset)")
    group.add_argument("--warmup-steps", type=number["warmup_steps"], default=TRAINING["warmup_steps"],
                       help="linear warmup (default 10%% of --max-steps)")
    group.add_argument("--weight-decay", type=number["weight_decay"], default=TRAINING["weight_decay"])
    group.add_argument("--max-grad-norm", type=number["max_grad_norm"], default=TRAINING["max_grad_norm"],
                       help="gradient clipping (0: off)")
    group.add_argument("--precision", choices=get_args(TrainingPrecision), default=TRAINING["precision"], help="autocast dtype")
    group.add_argument("--device", default=TRAINING["device"], help="auto (CUDA when present), cpu, cuda")
    group.add_argument("--log-every", type=number["log_every"], default=TRAINING["log_every"],
                       help="steps between log.jsonl records")
    group.add_argument("--checkpoint-every", type=number["checkpoint_every"], default=TRAINING["checkpoint_every"],
                       help="steps between checkpoints (0: final only)")
    group.add_argument("--keep-checkpoints", type=number["keep_checkpoints"],
                       default=TRAINING["keep_checkpoints"])
    group.add_argument("--held-out-fraction", type=number["held_out_fraction"], default=TRAINING["held_out_fraction"],
                       help="share of documents held out")
    group.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                       help="continue from OUT's latest checkpoint (or the CHECKPOINT file given)")


def _training_options(args: argparse.Namespace, default_learning_rate: float) -> TrainingOptions:
    """The training arguments; ``--lr`` not given: the method's ``default_learning_rate``."""
    return TrainingOptions(
        max_steps=args.max_steps, batch_size=args.batch_size, grad_accumulation=args.grad_accumulation,
        learning_rate=default_learning_rate if args.lr is None else args.lr, warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay, max_grad_norm=args.max_grad_norm, precision=args.precision,
        device=args.device, seed=args.seed, log_every=args.log_every, checkpoint_every=args.checkpoint_every,
        keep_checkpoints=args.keep_checkpoints, held_out_fraction=args.held_out_fraction,
        show_progress=not args.quiet,
    )


def _run(args: argparse.Namespace, recipe: Recipe, *, resume=False) -> int:
    """Run ``recipe`` with the library's outline and print its summary (main process)."""
    summary = run_objective(recipe, args.corpus, args.out, overwrite=args.overwrite, resume=resume, save_config=True)
    if world_from_env()[0] == 0:
        print(json.dumps({"out": args.out, **summary}))
    return 0


# -- mlm ----------------------------------------------------------------------------------------


def add_mlm_parser(objectives) -> None:
    defaults, number = _defaults(MLMConfig), {**_readers(MLM_BOUNDS), **_readers(MASKING_BOUNDS)}
    parser = objectives.add_parser(
        "mlm", help="BERT-style masked language model (+ --nsp); OUT is a Hugging Face model directory",
        description="Masked language modelling (15%; 80/10/10), optionally with next-sentence prediction.",
    )
    _add_io_arguments(parser, {**defaults, "seed": TRAINING["seed"]}, resumable=True)
    model = parser.add_argument_group("model")
    model.add_argument("--size", default=defaults["size"],
                       help=f"size preset ({', '.join(BERT_PRESETS)}) or a JSON file of BertConfig fields")
    model.add_argument("--init", default=defaults["init"], metavar="DIR",
                       help="continue pretraining a local BERT directory (domain-adaptive pretraining)")
    model.add_argument("--vocab-size", type=number["vocab_size"], default=defaults["vocab_size"],
                       help="WordPiece vocabulary size")
    model.add_argument("--lowercase", action="store_true", help="lowercase and strip accents before WordPiece")
    model.add_argument("--min-frequency", type=number["min_frequency"], default=defaults["min_frequency"])
    model.add_argument("--max-length", type=number["max_length"], default=defaults["max_length"],
                       help="pieces per example incl. special tokens")
    model.add_argument("--nsp", action="store_true", help="add next-sentence prediction (50%% true / 50%% random)")
    model.add_argument("--mask-probability", type=number["mask_probability"],
                       default=_defaults(MaskingOptions)["mask_probability"])
    _add_training_arguments(parser)
    parser.set_defaults(handler=_run_mlm)


def _run_mlm(args: argparse.Namespace) -> int:
    config = MLMConfig(
        size=args.size, init=args.init, vocab_size=args.vocab_size, lowercase=args.lowercase,
        min_frequency=args.min_frequency, max_length=args.max_length, nsp=args.nsp,
        masking=MaskingOptions(mask_probability=args.mask_probability), encoding_errors=args.encoding_errors,
    )
    recipe = MLMRecipe(config, _training_options(args, mlm.default_learning_rate(config)))
    return _run(args, recipe, resume=args.resume)


# -- static -------------------------------------------------------------------------------------


def add_static_parser(objectives) -> None:
    defaults, number = _defaults(StaticConfig), _readers(STATIC_BOUNDS)
    parser = objectives.add_parser(
        "static", help="word2vec skip-gram or CBOW with negative sampling; OUT gets vectors.txt and vectors.bin",
        description="Static word vectors (words: lines split on white space).",
    )
    _add_io_arguments(parser, defaults, resumable=False)  # one pass in memory: no checkpoints to resume
    parser.add_argument("--architecture", choices=get_args(Architecture), default=defaults["architecture"])
    parser.add_argument("--dim", type=number["dim"], default=defaults["dim"])
    parser.add_argument("--window", type=number["window"], default=defaults["window"])
    parser.add_argument("--negative", type=number["negative"], default=defaults["negative"],
                        help="noise words per example")
    parser.add_argument("--min-count", type=number["min_count"], default=defaults["min_count"])
    parser.add_argument("--max-vocab", type=number["max_vocab"], default=defaults["max_vocab"])
    parser.add_argument("--sample", type=number["sample"], default=defaults["sample"],
                        help="subsampling threshold (0: off)")
    parser.add_argument("--epochs", type=number["epochs"], default=defaults["epochs"])
    parser.add_argument("--batch-size", type=number["batch_size"], default=defaults["batch_size"])
    rates = " / ".join(f"{rate} ({architecture})" for architecture, rate in DEFAULT_LEARNING_RATES.items())
    parser.add_argument("--lr", type=number["learning_rate"], default=defaults["learning_rate"],
                        help=f"default {rates}")
    parser.add_argument("--lowercase", action="store_true")
    parser.add_argument("--device", default=defaults["device"])
    parser.set_defaults(handler=_run_static)


def _run_static(args: argparse.Namespace) -> int:
    config = StaticConfig(
        architecture=args.architecture, dim=args.dim, window=args.window, negative=args.negative,
        min_count=args.min_count, max_vocab=args.max_vocab, sample=args.sample, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.lr, lowercase=args.lowercase, seed=args.seed,
        device=args.device, encoding_errors=args.encoding_errors, show_progress=not args.quiet,
    )
    return _run(args, StaticRecipe(config))


# -- bilm ---------------------------------------------------------------------------------------


def add_bilm_parser(objectives) -> None:
    defaults, number = _defaults(BiLMConfig), _readers(BILM_BOUNDS)
    parser = objectives.add_parser(
        "bilm", help="ELMo-style forward+backward LMs; OUT is an ELMo directory (options.json + weights.hdf5)",
        description="Bidirectional language model over the ELMo char-CNN + biLSTM encoder.",
    )
    _add_io_arguments(parser, {**defaults, "seed": TRAINING["seed"]}, resumable=True)
    model = parser.add_argument_group("model")
    model.add_argument("--size", choices=get_args(ElmoSize), default=defaults["size"],
                       help="ELMo size preset (small/medium/original: the released architectures)")
    model.add_argument("--n-layers", type=number["n_layers"], default=defaults["n_layers"], help="biLSTM layers")
    model.add_argument("--init", default=defaults["init"], metavar="DIR",
                       help="continue pretraining an ELMo directory (options.json + weights.hdf5)")
    model.add_argument("--max-vocab", type=number["max_vocab"], default=defaults["max_vocab"],
                       help="softmax vocabulary size")
    model.add_argument("--min-count", type=number["min_count"], default=defaults["min_count"])
    model.add_argument("--softmax", choices=get_args(Softmax), default=defaults["softmax"],
                       help=f"auto: adaptive softmax above {ADAPTIVE_ABOVE:,} words")
    model.add_argument("--cutoffs", type=parse_integers(CUTOFF), default=defaults["cutoffs"],
                       help="adaptive-softmax cluster boundaries, e.g. 2000,10000")
    model.add_argument("--max-length", type=number["max_length"], default=defaults["max_length"],
                       help="words per example (longer: cut)")
    model.add_argument("--dropout", type=number["dropout"], default=defaults["dropout"])
    model.add_argument("--lowercase", action="store_true", help="lowercase the softmax vocabulary")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_run_bilm)


def _run_bilm(args: argparse.Namespace) -> int:
    config = BiLMConfig(
        size=args.size, n_layers=args.n_layers, init=args.init, max_vocab=args.max_vocab, min_count=args.min_count,
        softmax=args.softmax, cutoffs=args.cutoffs, max_length=args.max_length, dropout=args.dropout,
        lowercase=args.lowercase, encoding_errors=args.encoding_errors,
    )
    recipe = BiLMRecipe(config, _training_options(args, bilm.default_learning_rate(config)))
    return _run(args, recipe, resume=args.resume)


PRETRAIN_COMMANDS = [add_mlm_parser, add_static_parser, add_bilm_parser]
