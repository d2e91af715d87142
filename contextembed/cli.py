"""The ``contextembed`` console script: parses and checks arguments, then calls library functions.

Sub-commands are registered from the modules that implement them; each ``add_*_parser`` function
adds one sub-parser whose ``handler`` receives the parsed arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Optional

from .errors import MissingDependencyError, ModelNotFoundError
from .pooling import COMBINES, SUBWORD_POOLINGS, TEXT_POOLINGS


def parse_layers(text: str):
    """``"all"``, ``"hidden"``, ``"-1"`` or ``"-4,-3,-2,-1"`` -> a layer spec."""
    if text in ("all", "hidden"):
        return text
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--layers {text!r}: expected 'all', 'hidden', an int or comma-separated ints (e.g. -4,-3,-2,-1)"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("--layers is empty")
    return values[0] if len(values) == 1 and "," not in text else values


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads an encoder."""
    parser.add_argument("spec", help="model name (minilm-l6, glove-6b-50d), directory or vectors file")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1 ...")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16", "int8"])


def add_info_parser(subparsers) -> None:
    parser = subparsers.add_parser("info", help="print an encoder's layers, width, max length, vocabulary")
    add_encoder_arguments(parser)
    parser.set_defaults(handler=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from .encoders import load_encoder

    encoder = load_encoder(args.spec, device=args.device, precision=args.precision)
    print(json.dumps(encoder.info(), indent=2))
    return 0


def add_embed_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="write features for a text, CoNLL or JSONL file to .npy/.npz",
        description=(
            "Word level (default) writes one row per input token; .npz also stores 'lengths' (tokens "
            "per sentence). Text level writes one row per sentence/text."
        ),
    )
    add_encoder_arguments(parser)
    parser.add_argument("input", help="input file (.txt one sentence per line, .conll, .jsonl)")
    parser.add_argument("output", help="output .npy or .npz")
    parser.add_argument("--format", choices=["text", "conll", "jsonl"], help="input format (default: from extension)")
    parser.add_argument("--tokenizer", choices=["whitespace", "spacy"], default="whitespace",
                        help="how plain text lines are split into tokens")
    parser.add_argument("--layers", type=parse_layers, default=None,
                        help="all | hidden | an int | comma-separated ints, written --layers=-4,-3,-2,-1 "
                        "(default: the encoder's: transformers the last four; static and ELMo all)")
    parser.add_argument("--combine", choices=COMBINES, default=None,
                        help="how layers are combined (default: the encoder's, concat for transformers; "
                        "scalar_mix here uses equal weights and gamma 1)")
    parser.add_argument("--subword-pooling", choices=SUBWORD_POOLINGS, default="first")
    parser.add_argument("--level", choices=["word", "text"], default="word")
    parser.add_argument("--text-pooling", choices=TEXT_POOLINGS, default="mean")
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                        help="output dtype (float16 halves the file)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run_embed)


def _run_embed(args: argparse.Namespace) -> int:
    from .io import embed_file

    summary = embed_file(
        args.spec,
        args.input,
        args.output,
        input_format=args.format,
        tokenizer=args.tokenizer,
        layers=args.layers,
        combine=args.combine,
        subword_pooling=args.subword_pooling,
        level=args.level,
        text_pooling=args.text_pooling,
        dtype=args.dtype,
        device=args.device,
        precision=args.precision,
        show_progress=not args.quiet,
    )
    print(json.dumps(summary), file=sys.stderr)
    return 0


def _pretrain_parser(subparsers) -> None:
    from .pretraining.cli import add_pretrain_parser

    add_pretrain_parser(subparsers)


#: sub-command builders, in the order ``--help`` lists them
COMMANDS = [add_info_parser, add_embed_parser, _pretrain_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextembed", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (ModelNotFoundError, MissingDependencyError, ValueError, TypeError, FileNotFoundError,
            FileExistsError) as error:
        print(f"contextembed {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
