"""Feature-based NER on CoNLL-2003 with frozen encoder features (the BERT paper's Table 7).

A SequenceTagger (frozen MiniLM-L6 word vectors, a window of neighbouring words, word-shape flags,
logistic regression) is trained once per layer strategy; the script prints dev entity F1 for each,
then the per-entity report (precision, recall, F1, support) of the best row and, with ``--plot``,
saves the scalar mixes' learned layer weights (needs matplotlib). ``--progress`` shows progress
bars, ``--verbose`` logs what ``"auto"`` chose (device, precision, batch size).

By default it runs on a small slice (200 training sentences, 150 dev) so it finishes in about a
minute on a laptop CPU; ``--full`` uses all of CoNLL-2003 train -> dev. The data (``train.txt`` and
``dev.txt`` in CoNLL-2003 format) is read from ``--data DIR``, else ``$CONTEXTEMBED_DATA/conll2003``,
else ``../shared/data/conll2003`` beside the repository (``--help`` says where to get it); without
it the script says so on stderr and falls back to a tiny built-in sample (8 sentences), whose
scores mean nothing.
Where to get CoNLL-2003 (never downloaded here): ``docs/data.md``.

    python examples/feature_based_ner.py [--data DIR] [--full] [--encoder minilm-l6] [--plot weights.png]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contextembed.sklearn.metrics import format_report  # noqa: E402
from contextembed.sklearn.datasets import read_conll_documents  # noqa: E402
from examples.corpora import CONLL_SOURCE, conll_dir, epilog  # noqa: E402
from examples.table7 import format_row, run_rows, table7_configs  # noqa: E402

SAMPLE = [
    ("EU rejects German call to boycott British lamb .", "B-ORG O B-MISC O O O B-MISC O O"),
    ("Peter Blackburn", "B-PER I-PER"),
    ("BRUSSELS 1996-08-22", "B-LOC O"),
    ("The European Commission said on Thursday it disagreed with German advice .",
     "O B-ORG I-ORG O O O O O O B-MISC O O"),
    ("Germany 's representative to the European Union 's veterinary committee Werner Zwingmann said .",
     "B-LOC O O O O B-ORG I-ORG O O O B-PER I-PER O O"),
    ("Fischler proposed EU-wide measures after reports from Britain and France .",
     "B-PER O B-MISC O O O O B-LOC O B-LOC O"),
    ("Spanish Farm Minister Loyola de Palacio had earlier accused Fischler .",
     "B-MISC O O B-PER I-PER I-PER O O O B-PER O"),
    ("Rabinovich is winding up his term as ambassador in Washington .",
     "B-PER O O O O O O O O B-LOC O"),
]


def load_data(full: bool, data: Optional[Path] = None):
    """(train, dev) as (sentences, tags, doc_ids) from ``data`` (default: :func:`examples.corpora.conll_dir`);
    a small slice unless ``full``. The taggers' ``fit(*train)`` and ``score(*dev)`` take the
    document ids (from the -DOCSTART- lines) as ``doc_ids``."""
    data = conll_dir() if data is None else data
    if (data / "train.txt").exists():
        limits = (None, None) if full else (200, 150)
        return (read_conll_documents(data / "train.txt", limit=limits[0]),
                read_conll_documents(data / "dev.txt", limit=limits[1]))
    if full:
        raise SystemExit(f"--full needs CoNLL-2003 (train.txt, dev.txt) in {data}; pass --data DIR or set "
                         f"CONTEXTEMBED_DATA\n\n{CONLL_SOURCE}")
    print(f"WARNING: no CoNLL-2003 in {data} (pass --data DIR or set CONTEXTEMBED_DATA; --help says where to get "
          f"it); using the tiny built-in sample of {len(SAMPLE)} sentences: its scores mean nothing", file=sys.stderr)
    sentences = [text.split() for text, _ in SAMPLE]
    tags = [labels.split() for _, labels in SAMPLE]
    return (sentences[:6], tags[:6], [0] * 6), (sentences[6:], tags[6:], [1, 1])


def require_matplotlib():
    """``matplotlib.pyplot`` (Agg backend), or exit with the install line before any work starts."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit('--plot needs matplotlib: pip install ".[plot]" from the repository (or pip install matplotlib)')
    return plt


def plot_weights(models: dict, path: Path) -> None:
    """One panel per row whose tagger learned a scalar mix: its weight per layer, and gamma."""
    from contextembed.plotting import plot_layer_weights

    plt = require_matplotlib()
    mixed = {name: model for name, model in models.items() if hasattr(model, "mix_weights_")}
    if not mixed:
        print("no row learned a scalar mix (static vectors have one layer): nothing to plot")
        return
    fig, axes = plt.subplots(1, len(mixed), figsize=(5 * len(mixed), 3.5), squeeze=False)
    for ax, (name, model) in zip(axes[0], mixed.items()):
        plot_layer_weights(model, ax=ax)
        ax.set_title(f"{name}\n{ax.get_title()}", fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    print(f"saved the learned layer weights to {path}")


def print_report(rows, models: dict, dev) -> None:
    """The per-entity scores of the row with the best dev F1."""
    best = max(rows, key=lambda row: row.f1)
    print(f"\nper entity type, dev, {best.name}:")
    print(format_report(models[best.name].report(*dev)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Table 7 style feature-based NER",
                                     epilog=epilog("conll2003", CONLL_SOURCE),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None,
                        help="directory with CoNLL-2003 train.txt and dev.txt (default: see below)")
    parser.add_argument("--full", action="store_true", help="all of CoNLL-2003 train -> dev")
    parser.add_argument("--encoder", default="minilm-l6", help="a contextembed encoder spec")
    parser.add_argument("--window", type=int, default=1, help="neighbouring words on each side")
    parser.add_argument("--plot", type=Path, default=None, help="save the learned mix weights here")
    parser.add_argument("--progress", action="store_true", help="progress bars over encoding and training")
    parser.add_argument("--verbose", action="store_true", help="log what 'auto' chose and the cache's hits")
    args = parser.parse_args(argv)
    if args.plot:
        require_matplotlib()  # before the work, not after it
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    from contextembed import load_encoder

    train, dev = load_data(args.full, args.data)
    print(f"{len(train[0])} training sentences, {len(dev[0])} dev sentences")
    rows_config = table7_configs(load_encoder(args.encoder).n_layers)
    rows, models = [], {}
    options = {"show_progress": args.progress, **({} if args.full else {"max_epochs": 8})}  # a quick mix on the slice
    for row in run_rows(args.encoder, rows_config, train, dev, window=args.window, embedder_options=options,
                        fitted=lambda row, model: models.update({row.name: model})):
        print(format_row(row), flush=True)
        rows.append(row)
    print_report(rows, models, dev)
    if args.plot:
        plot_weights(models, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
