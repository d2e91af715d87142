"""The ``contextembed`` console script: parses and checks arguments, then calls library functions.

Sub-commands are registered from the modules that implement them; each ``add_*_parser`` function
adds one sub-parser whose ``handler`` receives the parsed arguments.
"""


from __future__ import annotations

import argparse
import copy
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Optional

from . import tuning
from .errors import ClusterConnectionError, MissingDependencyError, ModelNotFoundError
from .pooling import COMBINES, SUBWORD_POOLINGS, TEXT_POOLINGS


#: what ``contextembed --help`` says first
DESCRIPTION = "Frozen pretrained encoders as word and text features: inspect, embed files, pretrain."
#: and last
EPILOG = """examples:
  contextembed embed minilm-l6 examples/data/sample.txt features.npz   # one row per token
  contextembed info glove-6b-50d                                       # layers, width, vocabulary

'contextembed COMMAND --help' describes each command."""

#: signals that stop a command cleanly (exit status 128 + the signal number: 130, 143)
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: exit status when the reader of the output went away (``| head``): 128 + SIGPIPE, as a shell shows it
PIPE_CLOSED_STATUS = 141


class Interrupted(KeyboardInterrupt):
    """A signal (SIGINT or SIGTERM) stopped the command; raised by :func:`signals_interrupt`.

    A ``KeyboardInterrupt`` so that everything that cleans up after Ctrl-C (the atomic writers of
    :mod:`contextembed._runtime.files`, tqdm) does so for SIGTERM too, and ``except Exception`` does not
    swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)


@contextmanager
def signals_interrupt(
    signals: Sequence[int] = INTERRUPT_SIGNALS, *, done: Optional[Callable[[], bool]] = None
) -> Iterator[list[int]]:
    """While the block runs, the first of ``signals`` to arrive raises :class:`Interrupted`.

    The exception unwinds the command like Ctrl-C, so files being written are removed and previous
    ones kept. Signals arriving after the first (while it unwinds) are ignored, so that a second
    Ctrl-C cannot cut the clean-up short (SIGKILL still stops the process at once). When ``done()``
    is true as a signal arrives (the command's output is already in place), the signal is not raised
    but appended to the yielded list. A signal that is ignored (``SIG_IGN``, e.g. SIGINT of a
    background job) or handled outside Python stays so. The previous handlers are restored on exit.
    Outside the main thread, where handlers cannot be set, nothing changes.
    """
    deferred: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield deferred
        return
    raised = False

    def handler(signum, frame):
        nonlocal raised
        if raised:
            return
        if done is not None and done():
            deferred.append(signum)
            return
        raised = True
        raise Interrupted(signum)

    previous = {}
    try:
        for signum in signals:
            if signal.getsignal(signum) not in (signal.SIG_IGN, None):
                previous[signum] = signal.signal(signum, handler)
        yield deferred
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written, and every option's default at the end of its help.

    An option whose help already says its default (one that depends on another option, or is
    described in words) keeps its help as written; one without a default (``None``, a flag that is
    off) says nothing.
    """

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and _has_default(action):  # an option without help still shows its default
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not _has_default(action):
            return text
        return f"{text} (default: %(default)s)"


def _has_default(action: argparse.Action) -> bool:
    """An option whose default is worth stating (not ``None``, not a flag that is off)."""
    return bool(action.option_strings) and not any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS))


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose help shows the defaults (:class:`HelpFormatter`); the
    sub-command parsers are of this class too."""

    def __init__(self, *args, formatter_class=HelpFormatter, **kwargs) -> None:
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


class _OutputState:
    """The file at a command's output path when it starts, to tell later whether it was replaced."""

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        self.before = self._identity()

    def _identity(self):
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns

    def replaced(self) -> bool:
        return self._identity() != self.before

    def describe(self) -> str:
        if self.replaced():
            return f"{self.path} had already been written completely"
        if self.before is None:
            return f"{self.path} was not written"
        return f"{self.path} was not written; the previous file is unchanged"


#: one item of ``--layers``: ASCII digits with an optional leading ``-`` (``int()`` also takes ``'٣'``,
#: ``'１'``, ``'1_0'``, ``'+2'`` and ``' 3'``; :mod:`contextembed._inputs.bounds` refuses them too)
_LAYER_INDEX = re.compile(r"-?[0-9]+")


def parse_layers(text: str):
    """``"all"``, ``"hidden"``, ``"-1"`` or ``"-4,-3,-2,-1"`` -> a layer spec; any other item (an
    empty one included: ``'3,'``, ``'-1,,-2'``) is an error naming ``--layers`` and the item."""
    if text in ("all", "hidden"):
        return text
    parts = text.split(",")
    for part in parts:
        if not _LAYER_INDEX.fullmatch(part):
            item = "an empty item" if not part else f"the item {part!r}"
            raise argparse.ArgumentTypeError(
                f"--layers {text!r} has {item}; expected 'all', 'hidden', an int or comma-separated ints written in "
                "ASCII digits with an optional leading '-' (e.g. -4,-3,-2,-1)"
            )
    values = [int(part) for part in parts]
    return values[0] if len(values) == 1 else values


def add_encoder_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads an encoder."""
    parser.add_argument("spec", help="model name (minilm-l6, glove-6b-50d), directory or vectors file")
    from ._runtime.devices import PRECISION_NAMES, check_device, check_precision

    parser.add_argument("--device", default="auto", type=_checked(check_device, "device"),
                        help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--precision", default="auto", type=_checked(check_precision, "precision"),
                        metavar="{" + ",".join(PRECISION_NAMES) + "}",
                        help="compute precision of transformer and ELMo encoders; static vectors take auto or fp32")
    from ._runtime.backends import BACKEND_NAMES

    parser.add_argument("--backend", default="torch", choices=BACKEND_NAMES,
                        help="what runs a transformer's forward pass: torch (exact), openvino (CPU, the openvino "
                        "extra) or auto (the faster, measured once per machine and remembered: contextembed "
                        "tune); ELMo and static vectors take torch or auto")


def running(encoder) -> dict:
    """What a command's summary says the encoder ran on: its backend and precision (after ``auto``)."""
    return {"backend": getattr(encoder, "backend", None), "precision": getattr(encoder, "precision", None)}


def _checked(check: Callable, name: str) -> Callable[[str], str]:
    """An argparse ``type`` that checks a value with the library's own ``check(value, name=...)``,
    so that the command refuses what the library refuses, with its message, before any work."""

    def parse(text: str) -> str:
        try:
            check(text, name=name)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text

    parse.__name__ = name
    return parse


def add_info_parser(subparsers) -> None:
    parser = subparsers.add_parser("info", help="print an encoder's layers, width, max length, vocabulary")
    add_encoder_arguments(parser)
    parser.set_defaults(handler=_run_info)


def _run_info(args: argparse.Namespace) -> int:
    from .encoders import load_encoder

    encoder = load_encoder(args.spec, device=args.device, precision=args.precision, backend=args.backend)
    print(json.dumps({**encoder.info(), **running(encoder)}, indent=2))
    return 0


def _by_level(name: str, word_none: str = "") -> str:
    """How the help says the default of an option that depends on ``--level`` (from the one table)."""
    from .extraction import LEVEL_DEFAULTS

    word, text = LEVEL_DEFAULTS["word"][name], LEVEL_DEFAULTS["text"][name]
    return f"default at word level: {word_none if word is None else word}; at text level: {text}"


def add_embed_parser(subparsers) -> None:
    from ._inputs.bounds import CONNECT_TIMEOUT, Bound
    from .corpus import ENGINES, OUTPUT_FORMATS
    from .extraction import LEVEL_DEFAULTS, LEVELS
    from .io._pipeline import OUTPUT_DTYPES
    from .io.readers import DOC_SEPS, INPUT_FORMATS
    from .tokenizers import TOKENIZERS

    parser = subparsers.add_parser(
        "embed",
        help="write features for a text, CoNLL, CoNLL-U or JSONL file to .npy/.npz",
        description=(
            "Word level (default) writes one row per input token; .npz also stores 'lengths' (tokens "
            "per sentence). Text level writes one row per sentence/text: by default TextEmbedder's vector (the "
            "mean of every piece of every layer, scaled to unit length). The output is written under a "
            "temporary name and renamed only when complete: an error or interruption leaves any previous "
            "file unchanged. With a directory or a quoted glob as INPUT, OUTPUT is a directory that gets one "
            "output per input file (same relative name; links are followed, each real file is one input). An "
            "output that already exists is skipped only if its provenance record (input content, model, options, "
            "its own content) matches this run; otherwise it is an error (--overwrite redoes it), so an "
            "interrupted run can be started again."
        ),
    )
    add_encoder_arguments(parser)
    parser.add_argument("input", help="input file (.txt one sentence per line, .conll, .conllu, .jsonl), or a "
                        "directory or quoted glob ('corpus/**/*.txt') of input files")
    parser.add_argument("output", help="output .npy or .npz (refused if it exists, unless --overwrite); a "
                        "directory for a directory or glob of inputs")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output (once complete); with several inputs, redo every output "
                        "instead of checking and keeping the existing ones")
    parser.add_argument("--format", choices=INPUT_FORMATS, help="input format (default: from extension)")
    parser.add_argument("--tokenizer", choices=list(TOKENIZERS), default=None,
                        help="how plain text lines (and JSONL 'text') are split into tokens: auto and regex split "
                        "words and punctuation marks, whitespace splits on white space, spacy uses spaCy's rules "
                        f"({_by_level('tokenizer')})")
    parser.add_argument("--layers", type=parse_layers, default=None,
                        help="all | hidden | an int | comma-separated ints, written --layers=-4,-3,-2,-1 "
                        f"({_by_level('layers', word_none=_ENCODER_LAYERS)})")
    parser.add_argument("--combine", choices=COMBINES, default=None,
                        help="how layers are combined; scalar_mix here uses equal weights and gamma 1 "
                        f"({_by_level('combine', word_none=_ENCODER_COMBINE)})")
    parser.add_argument("--subword-pooling", choices=SUBWORD_POOLINGS, default=None,
                        help=f"how a word's pieces become one vector ({_by_level('subword_pooling')})")
    parser.add_argument("--level", choices=LEVELS, default="word",
                        help="word: one row per token; text: one row per sentence/text")
    parser.add_argument("--text-pooling", choices=TEXT_POOLINGS, default=None,
                        help="--level text: how a text becomes one vector; piece_mean averages every piece, mean "
                        f"every word (default {LEVEL_DEFAULTS['text']['text_pooling']})")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="--level text: scale each text vector to unit length; an empty text stays zeros "
                        f"(default: {'on' if LEVEL_DEFAULTS['text']['normalize'] else 'off'})")
    parser.add_argument("--context", type=Bound(int, 0, 10**6, "--context").parse, default=0, metavar="N",
                        help="word level, transformers: encode each sentence with up to N pieces of its document's "
                        "text on each side (documents: -DOCSTART- lines in CoNLL, '# newdoc' in CoNLL-U, the 'doc' "
                        "field in JSONL, the whole file in plain text); 0: each sentence alone")
    parser.add_argument("--doc-sep", choices=DOC_SEPS, default="none",
                        help="plain text with --context: 'blank' makes a blank line end a document (it is still an "
                        "empty sentence); 'none': the file is one document")
    parser.add_argument("--dtype", choices=OUTPUT_DTYPES, default="float32",
                        help="output dtype (float16 halves the file)")
    parser.add_argument("--output-format", choices=OUTPUT_FORMATS, default="npz",
                        help="with several inputs: the output written per input (default npz, with 'lengths')")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local: this process; ray: Ray actors, one file per task, with the ray extra: "
                        "pip install \".[ray]\" in the contextembed repository")
    parser.add_argument("--address", default=None,
                        help="--engine ray: the cluster's address (default: start Ray on this machine)")
    parser.add_argument("--connect-timeout", type=CONNECT_TIMEOUT.parse, default=None, metavar="SECONDS",
                        help="--engine ray: seconds --address has to answer before the command fails (default 30, "
                        "at most 600)")
    parser.add_argument("--concurrency", type=Bound(int, 1, 10**5, "--concurrency").parse, default=None,
                        help="--engine ray: actors, each loading the model once (default: the cluster's CPUs)")
    parser.add_argument("--num-gpus", type=Bound(float, 0, 1024, "--num-gpus").parse, default=None,
                        help="--engine ray: GPUs per actor (e.g. 1, 0.5)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run_embed, output_file=_single_output)


#: what the embed help says the word-level defaults of --layers and --combine are
_ENCODER_LAYERS = "the encoder's, the last four for transformers and all for static and ELMo"
_ENCODER_COMBINE = "the encoder's, concat for transformers"


def _single_output(args: argparse.Namespace) -> Optional[str]:
    """The output file of a one-file run (watched for interruptions); ``None`` for a corpus."""
    from .corpus import is_corpus

    return None if is_corpus(args.input) or args.engine != "local" else args.output


def _run_embed(args: argparse.Namespace) -> int:
    from .corpus import embed_corpus, is_corpus
    from .io._pipeline import embed_file

    options = {"input_format": args.format, "tokenizer": args.tokenizer, "layers": args.layers,
               "combine": args.combine, "subword_pooling": args.subword_pooling, "level": args.level,
               "text_pooling": args.text_pooling, "normalize": args.normalize, "context": args.context,
               "doc_sep": args.doc_sep, "dtype": args.dtype, "device": args.device,
               "precision": args.precision, "backend": args.backend, "show_progress": not args.quiet,
               "overwrite": args.overwrite}
    if is_corpus(args.input):
        summary = embed_corpus(args.spec, args.input, args.output, output_format=args.output_format,
                               engine=args.engine, address=args.address, connect_timeout=args.connect_timeout,
                               concurrency=args.concurrency,
                               num_gpus=args.num_gpus, **options)
        summary.pop("outputs")
    elif args.engine != "local":
        raise ValueError(f"--engine {args.engine} shards by files: pass a directory or a quoted glob as INPUT")
    else:
        for name in ("address", "connect_timeout", "concurrency", "num_gpus"):
            if getattr(args, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} applies to --engine ray only")
        summary = embed_file(args.spec, args.input, args.output, **options)
    print(json.dumps(summary))
    return 0


def add_distill_parser(subparsers) -> None:
    from typing import get_args

    from .pretraining._distillation import Case, Weighting
    from .encoders._static.vectors import OovVector
    from .encoders._static.tables import Int8Scale, StoragePrecision
    from .io.readers import INPUT_FORMATS
    from .tokenizers import TOKENIZERS
    from ._inputs.bounds import Bound

    parser = subparsers.add_parser(
        "distill",
        help="distil an encoder into static word vectors that load_encoder(OUT) reads",
        description=(
            "With --corpus, each word's vector is the mean of its contextual vectors over its occurrences "
            "in the corpus; without, each whole word of the tokenizer's vocabulary is encoded alone. Words "
            "outside the table take the mean of their pieces' vectors (transformer teachers). OUT is "
            "written under a temporary name and renamed when complete."
        ),
    )
    add_encoder_arguments(parser)
    parser.add_argument("output", help="output directory (refused if it exists and is not empty, unless --overwrite)")
    parser.add_argument("--corpus", default=None, help="text (one sentence per line), CoNLL, CoNLL-U or JSONL file")
    parser.add_argument("--format", choices=INPUT_FORMATS, help="corpus format (default: from extension)")
    parser.add_argument("--tokenizer", choices=list(TOKENIZERS), default="auto",
                        help="how plain text lines are split into words")
    parser.add_argument("--layers", type=parse_layers, default=None,
                        help="teacher layers: all | hidden | an int | comma-separated ints, written --layers=-4,-3,-2,-1 "
                        "(default: the two middle layers, e.g. 3,4 of a 6-layer transformer)")
    parser.add_argument("--combine", choices=COMBINES, default="mean", help="how the layers are combined")
    parser.add_argument("--dim", type=_pca_dim, default="auto",
                        help="reduce (and centre) to this many columns by PCA; none: no PCA; auto (default): "
                        "the teacher's width (centred, nothing cut) without a corpus, none with one (measured best)")
    parser.add_argument("--weighting", choices=get_args(Weighting), default="auto",
                        help="sif: weight every vector by a/(a+p(w)) after PCA; auto (default): sif without a "
                        "corpus, none with one (measured best)")
    parser.add_argument("--sif-a", type=Bound(float, 0, 1, "--sif-a", low_open=True).parse, default=1e-4,
                        help="SIF's constant a (default 1e-4)")
    parser.add_argument("--frequencies", default=None,
                        help="a 'word count' file giving p(w) (default: the corpus's counts, or the Zipf rank "
                        "of each word's first piece in the teacher's vocabulary)")
    parser.add_argument("--storage", choices=get_args(StoragePrecision), default="float32",
                        help="how the saved vectors are stored (float16 and int8: a half and a quarter the size)")
    parser.add_argument("--int8-scale", choices=get_args(Int8Scale), default=None,
                        help="int8's scales: one per vector (default) or per dimension")
    parser.add_argument("--clusters", type=Bound(int, 1, 2**31 - 1, "--clusters").parse, default=None,
                        help="store this many k-means centroids and an index per word instead of every vector")
    parser.add_argument("--exact-columns", type=Bound(int, 1, 2**31 - 1, "--exact-columns").parse, default=None,
                        help="with --clusters: keep this many columns (those of largest variance) exactly per word "
                        "and cluster the others")
    parser.add_argument("--min-count", type=Bound(int, 1, 10**9, "--min-count").parse, default=1,
                        help="corpus words seen fewer times are left out")
    parser.add_argument("--case", choices=get_args(Case), default="keep",
                        help="keep written forms (with pooled lowercase rows) or fold every word to lowercase")
    parser.add_argument("--subwords", action=argparse.BooleanOptionalAction, default=None,
                        help="keep piece vectors for words outside the table (default: when the teacher has pieces)")
    parser.add_argument("--oov", choices=get_args(OovVector), default="mean",
                        help="vector of a word outside the table none of whose pieces is known")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run_distill)


def _pca_dim(text: str):
    """``--dim``: ``auto``, ``none`` or a width from 1 to 65,536."""
    from ._inputs.bounds import Bound

    if text in ("auto", "none"):
        return None if text == "none" else text
    return Bound(int, 1, 2**16, "--dim").parse(text)


def _run_distill(args: argparse.Namespace) -> int:
    from .pretraining._distillation import check_output, distill
    from .encoders._static.tables import TableStorage
    from .encoders import load_encoder
    from .io.readers import read_sentences
    from .tokenizers import get_tokenizer

    check_output(args.spec, args.output, overwrite=args.overwrite, flag="--overwrite")
    corpus = None
    if args.corpus is not None:
        corpus = read_sentences(args.corpus, args.format, get_tokenizer(args.tokenizer))
    elif args.format is not None:
        raise ValueError("--format applies to --corpus only")
    if args.int8_scale is not None and args.storage != "int8":
        raise ValueError(f"--int8-scale applies to --storage int8, not --storage {args.storage}")
    if args.exact_columns is not None and args.clusters is None:
        raise ValueError(f"--exact-columns {args.exact_columns} keeps columns beside the clusters: pass --clusters too")
    # checked before the teacher loads
    storage = TableStorage(args.storage, args.int8_scale, args.clusters, args.exact_columns)
    encoder = load_encoder(args.spec, device=args.device, precision=args.precision, backend=args.backend)
    student = distill(encoder, args.output, corpus=corpus, layers=args.layers, combine=args.combine, dim=args.dim,
                      weighting=args.weighting, sif_a=args.sif_a, frequencies=args.frequencies, storage=storage,
                      min_count=args.min_count, case=args.case, subwords=args.subwords, oov=args.oov,
                      overwrite=args.overwrite, show_progress=not args.quiet,
                      corpus_name=args.corpus or "")
    print(json.dumps({"output": args.output, "words": student.vocab_size, "dim": student.width, **running(encoder)}))
    return 0


def _pretrain_parser(subparsers) -> None:
    from .pretraining._cli import add_pretrain_parser

    add_pretrain_parser(subparsers)


def add_tune_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="measure once what precision='auto' and backend='auto' choose for a model on this machine, and remember it",
        description=(
            "Measures what 'auto' compares (fp32, bf16 and int8 on this CPU; torch against the OpenVINO engine "
            "for transformers, when the openvino extra is installed), exports and compiles the engine, and "
            "writes tuning records (CONTEXTEMBED_TUNING_DIR, default ~/.cache/contextembed/tuning) that every "
            "later process on this machine reuses: the same choice in every process, no measurement at start-up. "
            "Run it once when a container image or a cluster's workers are built. Prints what was chosen, with "
            "the measured speeds, as JSON."
        ),
    )
    add_encoder_arguments(parser)
    parser.set_defaults(backend="auto")
    parser.add_argument("--refresh", action="store_true",
                        help="measure again and rewrite the records (they are otherwise reused when they match "
                        "this machine, the libraries' versions and the model)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(handler=_run_tune)


def _run_tune(args: argparse.Namespace) -> int:
    from .encoders import tune

    print(json.dumps(tune(args.spec, device=args.device, precision=args.precision, backend=args.backend,
                          refresh=args.refresh), indent=2))
    return 0


#: sub-command builders, in the order ``--help`` lists them
COMMANDS = [add_info_parser, add_embed_parser, add_distill_parser, add_tune_parser, _pretrain_parser]


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = ArgumentParser(prog="contextembed", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


#: errors a user can fix: one line on stderr and exit status 2, no traceback
EXPECTED_ERRORS = (ValueError, TypeError, FileNotFoundError, FileExistsError, IsADirectoryError, PermissionError,
                   ModelNotFoundError, MissingDependencyError, ClusterConnectionError)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point; returns the exit status.

    Expected errors (:data:`EXPECTED_ERRORS`) print ``contextembed <command>: error: <message>`` and
    return 2; others keep their traceback. While the command runs, SIGINT and SIGTERM raise
    :class:`Interrupted` (see :func:`signals_interrupt`), so that files being written are removed and
    previous ones kept; the status is then 130 (SIGINT) or 143 (SIGTERM). A reader that stops early
    (``contextembed info ... | head -1``) ends the command quietly with status 141, as SIGPIPE would.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    output_file = args.output_file(args) if hasattr(args, "output_file") else None
    output = _OutputState(output_file) if output_file is not None else None
    try:
        with signals_interrupt(done=output.replaced if output else None) as deferred, \
                tuning.announcing(not getattr(args, "quiet", False)):
            status = args.handler(args)
            sys.stdout.flush()  # a reader gone shows here, not in the interpreter's last flush
    except BrokenPipeError:
        _discard_stdout()
        return PIPE_CLOSED_STATUS
    except KeyboardInterrupt as stop:  # Interrupted, or a SIGINT outside the guarded block
        signum = getattr(stop, "signum", signal.SIGINT)
        outcome = f"; {output.describe()}" if output else ""
        print(f"contextembed {args.command}: interrupted by {signal.Signals(signum).name}{outcome}", file=sys.stderr)
        return 128 + signum
    except EXPECTED_ERRORS as error:
        print(f"contextembed {args.command}: error: {error}", file=sys.stderr)
        return 2
    for signum in deferred:
        print(f"contextembed {args.command}: {signal.Signals(signum).name} arrived after {output.path} was "
              "written; it is complete", file=sys.stderr)
    return status


def _discard_stdout() -> None:
    """Point standard output at the null device, so that the interpreter's last flush of what the
    closed pipe did not take raises nothing (Python's advice for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (output captured in memory)
        pass


# the command's entry point and its parser (the rest is how the command is built and run)
__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
