"""BERT Table 7 on CoNLL-2003 with frozen features: tagger train -> dev entity F1.

Two taggers on the same frozen features: ``lr`` (SequenceTagger, window logistic regression) and
``bilstm_crf`` (BiLSTMCRFTagger, the BERT paper's feature-based setup). For ``lr`` it runs every
Table 7 layer strategy for the transformer ``--model`` names (default: MiniLM-L6, ``minilm-l6``; a
local Hugging Face directory such as a base-sized one) and the GloVe row, plus ablations that
measure what the practitioner features add (context window, word-shape flags, the default
classifier's regularisation) and the calibration probe of ../shared/REFERENCE.md (one token vector,
no window, no shape, plain logistic regression); for ``bilstm_crf`` every Table 7 row, the GloVe
row, the transformer stacked with GloVe, and the no-shape ablation. Rows print as they finish and
are appended to ``--out`` as JSON lines, so a long run can be read while it goes; rows already in
``--out`` are not measured again, so a run that stopped can be started again.

Each row records the encoder spec as given, its wall time (``seconds``: building the embedder,
encoding, fitting and scoring), the process's peak resident memory so far (``peak_rss_mb``; rows
run one after another in one process) and the ``--precision`` and ``--cache-dtype`` it ran with
(rows of other values are measured again). ``--cache-dir DIR`` keeps every embedder's encoded rows
in a persistent feature store there (``TokenEmbedder(cache=DIR)``): at base size, later rows and runs
read train and dev from it instead of encoding them again wherever it holds the layers they use;
``--cache-dtype float16`` halves that store.

``--curve`` instead trains on the first 400 / 4,000 / all training sentences: both taggers on
concat-last-four, and spaCy NER with the configs of ``examples/spacy_ner`` (listener ones and
spaCy's own HashEmbedCNN), all scored on the same dev set.

    python benchmarks/ner_table7.py                            # full train -> dev, both taggers
    python benchmarks/ner_table7.py --taggers bilstm_crf       # the neural tagger's column only
    python benchmarks/ner_table7.py --train-limit 4000         # the reference probe's training size
    python benchmarks/ner_table7.py --curve --sizes 400 4000   # the training-size curve
    python benchmarks/ner_table7.py --model ~/.cache/contextembed/models/all-mpnet-base-v2 \
        --cache-dir ~/.cache/contextembed/features --cache-dtype float16   # the table at base size
    python benchmarks/ner_table7.py --context 0 32 64 128       # document context (issue 28)
    python benchmarks/ner_table7.py --context 0 128 --context-rows all --taggers lr --train-limit 4000
    python benchmarks/ner_table7.py --context 64 --context-rows "scalar mix all layers" --stack glove-6b-50d \
        --taggers bilstm_crf
    python benchmarks/ner_table7.py --spacy-context --spacy-configs contextual_scalar_mix

``--context N [N ...]`` instead measures the transformer's concat-last-four with shape features, each sentence
encoded with up to N pieces of its document's text on each side (documents from the ``-DOCSTART-``
lines of train.txt and dev.txt, passed as ``doc_ids`` to fit and score), for each tagger of
``--taggers``; ``--context-rows all`` does so for every Table 7 row (their order, rechecked with
context); ``--stack glove-6b-50d`` stacks static vectors after the transformer and ``--char-dim N``
gives the BiLSTM-CRF a character CNN, each named in the row; ``--model DIR`` (or its older name
``--transformer DIR``) encodes another transformer in context instead of MiniLM (such as one
``contextembed pretrain mlm --init`` adapted), the row naming it by its spec. ``--spacy-context`` trains the
``--spacy-configs`` on whole documents and on one sentence per Doc (``--train-limit`` sentences,
default 4,000), the same dev set scored each way.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import get_args

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from sklearn.linear_model import LogisticRegression  # noqa: E402

import contextembed  # noqa: E402
from contextembed._runtime.precisions import Precision  # noqa: E402
from contextembed.pooling._layers import OutputDtype  # noqa: E402
from contextembed.sklearn import TokenEmbedder  # noqa: E402
from contextembed.sklearn.datasets import read_conll, read_conll_documents  # noqa: E402
from common import DEFAULT_MODEL, peak_rss_mb  # noqa: E402
from examples.table7 import LAST_FOUR, TABLE7_ROWS, Row, format_row, run_rows  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "conll2003"

#: the reference probe's classifier: scikit-learn's plain logistic regression (C=1)
PROBE = LogisticRegression(max_iter=1000)

#: the plans' transformer: the one ``--model`` names
TRANSFORMER = None
#: the static vectors of the plans' GloVe rows
GLOVE = "glove-6b-50d"

#: (encoder, rows, window, shape_features, classifier): the table, then ablations and the calibration
#: probe; ``None`` is the SequenceTagger's default classifier
PLAN = [
    (TRANSFORMER, {"concat last four hidden": TABLE7_ROWS["concat last four hidden"]}, 1, "auto", None),
    (GLOVE, {"vectors": {"layers": 0, "combine": "concat"}}, 1, "auto", None),
    (TRANSFORMER, {"last hidden (probe)": {"layers": -1, "combine": "concat"}}, 0, False, PROBE),
    (TRANSFORMER, {"embeddings (probe)": {"layers": 0, "combine": "concat"}}, 0, False, PROBE),
    (TRANSFORMER, {"concat last four (probe)": {"layers": LAST_FOUR, "combine": "concat"}}, 0, False, PROBE),
    (GLOVE, {"vectors + shape (probe)": {"layers": 0, "combine": "concat"}}, 0, True, PROBE),
    (TRANSFORMER, {k: v for k, v in TABLE7_ROWS.items() if k != "concat last four hidden"}, 1, "auto", None),
    (TRANSFORMER, {"scalar mix hidden layers": {"layers": "hidden", "combine": "scalar_mix"}}, 1, "auto", None),
    (TRANSFORMER, {"concat last four, C=1": TABLE7_ROWS["concat last four hidden"]}, 1, "auto", PROBE),
    (TRANSFORMER, {"concat last four, no shape": TABLE7_ROWS["concat last four hidden"]}, 1, False, None),
    (TRANSFORMER, {"concat last four, no window": TABLE7_ROWS["concat last four hidden"]}, 0, "auto", None),
    (GLOVE, {"vectors, no shape": {"layers": 0, "combine": "concat"}}, 1, False, None),
]


#: (encoder, rows, shape_features, embedder options) for the BiLSTM-CRF column
NEURAL_PLAN = [
    (TRANSFORMER, {"concat last four hidden": TABLE7_ROWS["concat last four hidden"]}, "auto", None),
    (TRANSFORMER, {k: v for k, v in TABLE7_ROWS.items() if k != "concat last four hidden"}, "auto", None),
    (GLOVE, {"vectors": {"layers": 0, "combine": "concat"}}, "auto", None),
    (TRANSFORMER, {"concat last four, no shape": TABLE7_ROWS["concat last four hidden"]}, False, None),
]
CONCAT_LAST_FOUR = {"concat last four hidden": TABLE7_ROWS["concat last four hidden"]}
SPACY_CONFIGS = ("contextual_concat", "contextual_scalar_mix", "hashembed_cnn")


def run_table(args, train, dev) -> None:
    n_train = len(train[0])
    for tagger in args.taggers:
        plan = PLAN if tagger == "lr" else [(e, r, 1, shape, None) for e, r, shape, _ in NEURAL_PLAN]
        for encoder, rows, window, shape, classifier in plan:
            encoder = args.model if encoder is TRANSFORMER else encoder
            for name, row in rows.items():
                # read again before each row: several runs may share one --out
                if encoder not in args.encoders or not wanted(args, name, (encoder, name, tagger, n_train)):
                    continue
                report(args, run_rows(encoder, {name: row}, train, dev, window=window, shape_features=shape,
                                      classifier=classifier, tagger=tagger, tagger_options=_options(args, tagger),
                                      embedder_options=_embedder_options(args, encoder == args.model)),
                       n_train)
        name = "concat last four + vectors"
        if (tagger == "bilstm_crf" and {args.model, GLOVE} <= set(args.encoders)
                and wanted(args, name, (_stacked_name(args.model), name, tagger, n_train))):
            report(args, [stacked(args, train, dev)], n_train)


def wanted(args, name: str, key: tuple) -> bool:
    """A row is run when ``--rows`` names it (or is not given) and ``--out`` does not hold it yet
    (``key``: its encoder, name, tagger and training sentences; this run's seed and settings)."""
    full_key = (*key, args.seed, *_settings_key(_row_settings(args, key[2])))
    return (not args.rows or name in args.rows) and full_key not in measured(args.out)


def measured(out) -> set:
    """``(encoder, name, tagger, train sentences, seed, precision, cache dtype)`` of the rows already in
    ``out``: a run that stopped can be started again and measures only the rest."""
    if out is None or not out.exists():
        return set()
    with open(out, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return {(r["encoder"], r["name"], r["tagger"], r["train_sentences"], r.get("seed", 0), *_settings_key(r))
            for r in rows}


def _row_settings(args, tagger: str) -> dict:
    """What a row ran with beyond its :class:`Row` fields, recorded in its JSON line and telling rows
    apart on resume: the transformer's precision and the store's dtype (spaCy's rows use neither)."""
    return {} if tagger == "spacy" else {"precision": args.precision, "cache_dtype": args.cache_dtype}


def _settings_key(settings: dict) -> tuple:
    """A row's settings as part of its key; rows written before they were recorded ran the defaults."""
    return settings.get("precision", "auto"), settings.get("cache_dtype", "float32")


def _embedder_options(args, transformer: bool) -> dict:
    """What every TokenEmbedder built here takes: the feature store (``--cache-dir``, ``--cache-dtype``)
    and, for the transformer, ``--precision`` (static vectors have one)."""
    options = {"cache": str(args.cache_dir) if args.cache_dir else "memory", "cache_dtype": args.cache_dtype}
    return {**options, "precision": args.precision} if transformer else options


def _stacked_name(model: str) -> str:
    """The encoder of the table's stacked row (the default's keeps the name it was first reported under)."""
    return "minilm+glove" if model == DEFAULT_MODEL else f"{model}+{GLOVE}"


def stacked(args, train, dev):
    """The transformer's concat-last-four stacked with GloVe (flair's StackedEmbeddings) in one BiLSTM-CRF."""
    import time

    from contextembed.sklearn import BiLSTMCRFTagger

    start = time.perf_counter()
    embedders = [TokenEmbedder(args.model, layers=LAST_FOUR, combine="concat", **_embedder_options(args, True)),
                 TokenEmbedder(GLOVE, **_embedder_options(args, False))]
    tagger = BiLSTMCRFTagger(embedders, **_options(args, "bilstm_crf")).fit(*train)
    return Row(_stacked_name(args.model), "concat last four + vectors", "bilstm_crf", 0, "auto", tagger.score(*dev),
               time.perf_counter() - start)


def run_context(args, train, dev) -> None:
    """Each ``--context`` for each ``--context-rows`` Table 7 row (default: concat-last-four), with
    shape features; documents from the -DOCSTART- lines."""
    import time

    from contextembed.sklearn import BiLSTMCRFTagger, SequenceTagger

    n_train = len(train[0])
    train_docs = read_conll_documents(DATA / "train.txt", limit=args.train_limit).doc_ids
    dev_docs = read_conll_documents(DATA / "dev.txt", limit=args.dev_limit).doc_ids
    rows = TABLE7_ROWS if "all" in args.context_rows else {name: TABLE7_ROWS[name] for name in args.context_rows}
    for row_name, row in rows.items():
        for context in args.context:
            for tagger_name in args.taggers:
                # the first rows measured were named "concat last four, context N": kept
                short = "concat last four" if row_name == "concat last four hidden" else row_name
                name = f"{short}, context {context}{_extras_suffix(args)}"
                # the default's rows keep the names they were first reported under
                base = "minilm" if args.stack and args.model == DEFAULT_MODEL else args.model
                encoder = f"{base}+{args.stack}" if args.stack else base
                if not wanted(args, name, (encoder, name, tagger_name, n_train)):
                    continue
                start = time.perf_counter()
                embedder = TokenEmbedder(args.model, layers=row["layers"], combine=row["combine"],
                                         context=context, **_embedder_options(args, True))
                # a static table sees no context: stacked after the transformer as flair's StackedEmbeddings
                embedders = ([embedder, TokenEmbedder(args.stack, **_embedder_options(args, False))] if args.stack
                             else embedder)
                tagger = (BiLSTMCRFTagger(embedders, char_dim=args.char_dim, **_options(args, tagger_name))
                          if tagger_name == "bilstm_crf" else SequenceTagger(embedders))
                tagger.fit(*train, doc_ids=train_docs)
                f1 = tagger.score(*dev, doc_ids=dev_docs)
                report(args, [Row(encoder, name, tagger_name, 0 if tagger_name == "bilstm_crf" else 1, "auto", f1,
                                  time.perf_counter() - start)], n_train)


def _extras_suffix(args) -> str:
    """The end of a context row's name: what ``--stack`` and ``--char-dim`` added."""
    return (" + vectors" if args.stack else "") + (f", char CNN {args.char_dim}" if args.char_dim else "")


def run_curve(args, dev) -> None:
    """Both taggers and the spaCy configs at each training size, on the same dev set."""
    for size in args.sizes:
        train = read_conll(DATA / "train.txt", limit=size or None)
        for tagger in args.taggers:
            report(args, run_rows(args.model, CONCAT_LAST_FOUR, train, dev, tagger=tagger,
                                  tagger_options=_options(args, tagger),
                                  embedder_options=_embedder_options(args, True)), len(train[0]))
        for row in spacy_rows(args, size):
            report(args, [row], len(train[0]))


def spacy_rows(args, size: int, documents: bool = True, suffix: str = ""):
    """``spacy train`` each config of examples/spacy_ner on the first ``size`` sentences, one Doc per
    document (``documents``) or per sentence; ``suffix`` ends each row's name."""
    import tempfile
    import time

    sys.path.insert(0, str(ROOT / "examples" / "spacy_ner"))
    import run as spacy_ner  # noqa: E402

    settings = spacy_ner.RunSettings(train_sentences=size, max_epochs=args.spacy_epochs, max_steps=0,
                                     eval_frequency=args.spacy_eval_frequency, seed=args.seed, encoder=args.model)
    with tempfile.TemporaryDirectory(prefix="ner_curve_") as folder:
        data = Path(folder) / "data"
        spacy_ner.convert(DATA / "train.txt", data / "train.spacy", size, documents=documents)
        spacy_ner.convert(DATA / "dev.txt", data / "dev.spacy", args.dev_limit or 0, documents=documents)
        for config in args.spacy_configs:
            name = f"spaCy {config}{suffix}"
            encoder = args.model if config.startswith("contextual") else "-"
            if not wanted(args, name, (encoder, name, "spacy", size)):
                continue
            start = time.perf_counter()
            scores = spacy_ner.train_and_evaluate(config, Path(folder), data, settings)
            yield Row(encoder, name, "spacy", 0,
                      "shape" if config != "hashembed_cnn" else "-", scores["ents_f"], time.perf_counter() - start)


def run_spacy_context(args, dev) -> None:
    """The spaCy configs trained and scored on whole documents, then on one sentence per Doc."""
    size = args.train_limit or 4000
    for documents, suffix in ((True, ", whole documents"), (False, ", one sentence per Doc")):
        for row in spacy_rows(args, size, documents, suffix):
            report(args, [row], size)


def report(args, rows, n_train: int) -> None:
    """Print each row and append it to ``--out`` with its training size, seed, settings and the
    process's peak resident memory so far (``seconds`` is its wall time)."""
    for row in rows:
        peak = round(peak_rss_mb())
        print(format_row(row), f"[{n_train} train sentences, seed {args.seed}, peak RSS {peak} MiB]", flush=True)
        if args.out:
            line = {**asdict(row), "train_sentences": n_train, "seed": args.seed,
                    **_row_settings(args, row.tagger), "peak_rss_mb": peak}
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")


def _options(args, tagger: str) -> dict:
    return {"show_progress": args.progress, "random_state": args.seed} if tagger == "bilstm_crf" else {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-limit", type=int, default=None, help="training sentences (default: all)")
    parser.add_argument("--dev-limit", type=int, default=None, help="dev sentences (default: all)")
    parser.add_argument("--model", "--transformer", dest="model", default=DEFAULT_MODEL, metavar="SPEC",
                        help=f"the transformer of every row, context runs and the curve included (default: "
                             f"{DEFAULT_MODEL}; a local directory, such as a base-sized one or one `contextembed "
                             "pretrain mlm --init` adapted); --transformer is its older name")
    parser.add_argument("--encoders", nargs="+", default=None, metavar="SPEC",
                        help=f"the table's encoders to run: the --model transformer and/or {GLOVE} (default: both)")
    parser.add_argument("--precision", default="auto", choices=get_args(Precision),
                        help="the transformer's precision (TokenEmbedder(precision=...); default: auto)")
    parser.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                        help="keep every embedder's encoded rows in a feature store in DIR, across rows and runs "
                             "(TokenEmbedder(cache=DIR); default: the process's store, in memory within --cache-gb)")
    parser.add_argument("--cache-dtype", default="float32", choices=get_args(OutputDtype),
                        help="what the feature store keeps its rows in (TokenEmbedder(cache_dtype=...))")
    parser.add_argument("--out", type=Path, default=None, help="append rows here as JSON lines")
    parser.add_argument("--cache-gb", type=float, default=6.0, help="the memory budget (contextembed.set_memory_budget)")
    parser.add_argument("--taggers", nargs="*", choices=["lr", "bilstm_crf"], default=["lr", "bilstm_crf"])
    parser.add_argument("--curve", action="store_true", help="the training-size curve instead of the table")
    parser.add_argument("--sizes", nargs="+", type=int, default=[400, 4000, 0], help="curve sizes (0: all)")
    parser.add_argument("--spacy-configs", nargs="*", choices=SPACY_CONFIGS, default=list(SPACY_CONFIGS))
    parser.add_argument("--spacy-epochs", type=int, default=6, help="spacy train epochs in the curve")
    parser.add_argument("--spacy-eval-frequency", type=int, default=50)
    parser.add_argument("--progress", action="store_true", help="a progress bar per BiLSTM-CRF epoch")
    parser.add_argument("--rows", nargs="*", default=None, help="only the rows of these names (default: all)")
    parser.add_argument("--context", type=int, nargs="+", default=None, metavar="N",
                        help="measure document context of N pieces each (concat last four + shape) instead of the table")
    parser.add_argument("--context-rows", nargs="+", default=["concat last four hidden"],
                        choices=[*TABLE7_ROWS, "all"], help="the Table 7 rows measured with --context")
    parser.add_argument("--stack", default=None, metavar="VECTORS",
                        help="with --context: static vectors (a name or a saved table) stacked after the transformer")
    parser.add_argument("--char-dim", type=int, default=0,
                        help="with --context: the BiLSTM-CRF's character CNN width (0: none)")
    parser.add_argument("--spacy-context", action="store_true", help="the --spacy-configs trained on whole "
                        "documents and on one sentence per Doc (--train-limit sentences, default 4,000)")
    parser.add_argument("--seed", type=int, default=0, help="the BiLSTM-CRF's random_state and spaCy's "
                        "system.seed (rows of other seeds are measured again)")
    args = parser.parse_args(argv)
    if (args.stack or args.char_dim) and (args.context is None or "lr" in args.taggers):
        parser.error("--stack and --char-dim apply to --context runs of the bilstm_crf tagger only")
    args.encoders = args.encoders or [args.model, GLOVE]
    if unknown := [spec for spec in args.encoders if spec not in (args.model, GLOVE)]:
        parser.error(f"--encoders {' '.join(unknown)}: the table's encoders are the --model transformer "
                     f"({args.model}) and {GLOVE}")
    if not (DATA / "train.txt").exists():
        print(f"skipped: {DATA} is not present")
        return 0
    from contextembed import load_encoder

    if args.stack and (family := load_encoder(args.stack).family) != "static":
        parser.error(f"--stack {args.stack} is not static vectors (family: {family}): it takes static vectors "
                     "(rows named '+ vectors', encoded without context)")
    if args.model != DEFAULT_MODEL and (family := _family(args.model, parser)) != "transformer":
        parser.error(f"--model {args.model} is not a transformer (family: {family}): the Table 7 rows and "
                     "document context take a transformer's layers")
    contextembed.set_memory_budget(int(args.cache_gb * (1 << 30)))
    dev = read_conll(DATA / "dev.txt", limit=args.dev_limit)
    print(f"model: {args.model}, precision {args.precision}, feature store: "
          f"{args.cache_dir or 'in memory'} ({args.cache_dtype})", flush=True)
    if args.curve:
        run_curve(args, dev)
        return 0
    if args.spacy_context:
        run_spacy_context(args, dev)
        return 0
    train = read_conll(DATA / "train.txt", limit=args.train_limit)
    print(f"CoNLL-2003: {len(train[0])} train sentences ({sum(map(len, train[0]))} tokens), "
          f"{len(dev[0])} dev sentences", flush=True)
    if args.context is not None:
        run_context(args, train, dev)
        return 0
    run_table(args, train, dev)
    return 0


def _family(spec: str, parser) -> str:
    """The encoder family of ``spec``; a spec that names nothing local is a usage error."""
    from contextembed import load_encoder
    from contextembed.errors import ModelNotFoundError

    try:
        return load_encoder(spec).family
    except ModelNotFoundError as error:
        parser.error(f"--model {spec}: {error}")


if __name__ == "__main__":
    raise SystemExit(main())
