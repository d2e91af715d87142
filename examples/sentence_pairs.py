"""Sentence pairs: do two CoNLL-2003 sentences come from the same news document?

A pair task built from data we have: positive pairs are two sentences of one Reuters article,
negative pairs two sentences of different articles (balanced, sentences of at least 5 tokens).
Training pairs come from CoNLL-2003 train, test pairs from dev. Every feature set goes into the same
logistic regression:

- joint pass (``TextPairEmbedder``: the encoder reads ``[CLS] A [SEP] B [SEP]`` once):
  ``interactions`` ``[u; v; |u - v|; u * v]``, ``segments`` ``[u; v]`` and ``cls``;
- two separate passes (``TextEmbedder`` on each sentence), joined as ``[u; v; |u - v|; u * v]``.

The data is read from ``--data DIR`` (``train.txt`` and ``dev.txt``), else
``$CONTEXTEMBED_DATA/conll2003``, else ``../shared/data/conll2003`` beside the repository
(``--help`` says where to get it); without it the script says so on stderr and falls back to a tiny
built-in sample whose scores mean nothing.
Where to get CoNLL-2003 (never downloaded here): ``docs/data.md``.

    python examples/sentence_pairs.py [--data DIR] [--train-pairs 2000] [--test-pairs 1000] [--encoder minilm-l6]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from contextembed.io import read_documents as read_conll_documents  # noqa: E402
from contextembed.sklearn import TextEmbedder, TextPairEmbedder  # noqa: E402
from examples.corpora import CONLL_SOURCE, conll_dir, epilog  # noqa: E402
MIN_TOKENS = 5

SAMPLE = [
    ["EU rejects German call to boycott British lamb .", "The European Commission said it disagreed .",
     "Germany 's representative to the EU 's committee spoke .", "Britain 's farm ministry welcomed the move ."],
    ["Rabinovich is winding up his term as ambassador .", "He will be replaced by Eliahu Ben-Elissar .",
     "Israel 's ambassador to Washington met the press .", "The talks will resume in Washington next week ."],
    ["Cricket - Leicestershire take over at top after innings victory .", "Leicestershire beat Somerset by an innings .",
     "Simon Wells took four wickets for the hosts .", "The match ended on the third day at Taunton ."],
]


def make_pairs(documents: list[list[list[str]]], n_pairs: int, seed: int) -> tuple[list, list]:
    """Balanced pairs: half from one document (label 1), half from two documents (label 0)."""
    rng = random.Random(seed)
    documents = [[s for s in doc if len(s) >= MIN_TOKENS] for doc in documents]
    documents = [doc for doc in documents if len(doc) >= 2]
    if len(documents) < 2:
        raise SystemExit("need at least two documents of two sentences each")
    pairs, labels = [], []
    for k in range(n_pairs):
        if k % 2 == 0:
            first, second = rng.sample(rng.choice(documents), 2)
        else:
            doc_a, doc_b = rng.sample(documents, 2)
            first, second = rng.choice(doc_a), rng.choice(doc_b)
        pairs.append((first, second))
        labels.append(1 - k % 2)
    return pairs, labels


def read_documents(path: Path) -> list[list[list[str]]]:
    """CoNLL-2003 as documents (``-DOCSTART-`` lines start one) of sentences (blank lines end one),
    read by :func:`contextembed.io.read_documents`: a damaged line is an error naming it."""
    documents: list[list[list[str]]] = []
    for document, sentence in read_conll_documents(str(path), "conll"):
        if document == len(documents):
            documents.append([])
        documents[document].append(sentence)
    return documents


def load_documents(data: Optional[Path] = None) -> tuple[list, list]:
    """(train, test) documents from ``data`` (default: :func:`examples.corpora.conll_dir`)."""
    data = conll_dir() if data is None else data
    if (data / "train.txt").exists():
        return read_documents(data / "train.txt"), read_documents(data / "dev.txt")
    print(f"WARNING: no CoNLL-2003 in {data} (pass --data DIR or set CONTEXTEMBED_DATA; --help says where to get "
          f"it); using the tiny built-in sample of {len(SAMPLE)} documents: its scores mean nothing", file=sys.stderr)
    documents = [[sentence.split() for sentence in doc] for doc in SAMPLE]
    return documents, documents


def interactions(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.hstack([u, v, np.abs(u - v), u * v])


def evaluate(name: str, train_x, train_y, test_x, test_y, started: float) -> dict:
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1)).fit(train_x, train_y)
    row = {"features": name, "accuracy": model.score(test_x, test_y), "seconds": time.perf_counter() - started,
           "width": train_x.shape[1]}
    print(f"{row['features']:<44} accuracy {row['accuracy']:.3f}   width {row['width']:>5}   {row['seconds']:6.1f} s",
          flush=True)
    return row


def run(encoder: str, train: tuple, test: tuple, layers="all", combine="mean") -> list[dict]:
    options = {"layers": layers, "combine": combine}
    rows = []
    for features in ("interactions", "segments", "cls"):
        started = time.perf_counter()
        embedder = TextPairEmbedder(encoder, pair_features=features, **options).fit(train[0])
        rows.append(evaluate(f"joint pass, {features}", embedder.transform(train[0]), train[1],
                             embedder.transform(test[0]), test[1], started))
    started = time.perf_counter()
    single = TextEmbedder(encoder, **options).fit([a for a, _ in train[0]])

    def separate(pairs):
        return interactions(single.transform([a for a, _ in pairs]), single.transform([b for _, b in pairs]))

    rows.append(evaluate("two separate passes, interactions", separate(train[0]), train[1],
                         separate(test[0]), test[1], started))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="same-document sentence pairs on CoNLL-2003",
                                     epilog=epilog("conll2003", CONLL_SOURCE),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None,
                        help="directory with CoNLL-2003 train.txt and dev.txt (default: see below)")
    parser.add_argument("--encoder", default="minilm-l6")
    parser.add_argument("--train-pairs", type=int, default=2000)
    parser.add_argument("--test-pairs", type=int, default=1000)
    parser.add_argument("--layers", default="all", help="'all', 'hidden' or an int")
    parser.add_argument("--combine", default="mean", choices=["mean", "concat", "sum"])
    args = parser.parse_args(argv)
    layers = args.layers if args.layers in ("all", "hidden") else int(args.layers)
    train_docs, test_docs = load_documents(args.data)
    train, test = make_pairs(train_docs, args.train_pairs, seed=0), make_pairs(test_docs, args.test_pairs, seed=1)
    print(f"{len(train[0])} training pairs, {len(test[0])} test pairs; encoder {args.encoder}, "
          f"layers={layers!r}, combine={args.combine!r}")
    run(args.encoder, train, test, layers, args.combine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
