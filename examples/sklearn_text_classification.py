"""Sentence classification (SST-2) with a Pipeline of TextEmbedder and logistic regression.

A GridSearchCV picks the layer strategy; every text is encoded once (with all layers) and each
candidate only re-pools the cached layers, so the search costs little more than one fit.

By default it runs on a small slice of SST-2 (300 training sentences, 200 test) so it finishes in
well under a minute on a laptop CPU; ``--full`` trains on 3,000 sentences and tests on 1,000. The
data (SST-2's ``train.tsv``) is read from ``--data FILE``, else ``$CONTEXTEMBED_DATA/sst2/train.tsv``,
else ``../shared/data/sst2/train.tsv`` beside the repository (``--help`` says where to get it);
without it the script says so on stderr and falls back to a tiny built-in sample (16 sentences),
whose scores mean nothing.
Where to get SST-2 (never downloaded here): ``docs/data.md``.

    python examples/sklearn_text_classification.py [--data FILE] [--full] [--encoder minilm-l6]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from contextembed.sklearn import TextEmbedder  # noqa: E402
from contextembed.sklearn.datasets import read_labelled_text  # noqa: E402
from examples.corpora import SST2_SOURCE, epilog, sst2_file  # noqa: E402

SAMPLE = [
    ("a gorgeous , witty , seductive movie", 1), ("an utterly charming and hilarious film", 1),
    ("the acting is superb and the story moving", 1), ("one of the best films of the year", 1),
    ("a warm , funny and wise picture", 1), ("beautifully shot and wonderfully acted", 1),
    ("a delightful surprise from start to finish", 1), ("smart , tender and deeply felt", 1),
    ("contains no wit , only labored gags", 0), ("a dull , lifeless and tedious mess", 0),
    ("the plot is predictable and the jokes fall flat", 0), ("an ugly , boring waste of time", 0),
    ("painfully slow and badly acted", 0), ("the worst film i have seen in years", 0),
    ("clumsy , shrill and utterly forgettable", 0), ("a tiresome , empty exercise", 0),
]

GRID = {
    "textembedder__layers": [-1, -2, [-4, -3, -2, -1]],
    "textembedder__combine": ["mean", "concat"],
}


def load_data(full: bool, data: Optional[Path] = None):
    """(train, test) as (texts, labels) from ``data`` (default: :func:`examples.corpora.sst2_file`)."""
    data = sst2_file() if data is None else data
    if data.exists():
        n_train, n_test = (3000, 1000) if full else (300, 200)
        texts, labels = read_labelled_text(data, limit=n_train + n_test)
        return (texts[:n_train], labels[:n_train]), (texts[n_train:], labels[n_train:])
    if full:
        raise SystemExit(f"--full needs SST-2 at {data}; pass --data FILE or set CONTEXTEMBED_DATA\n\n{SST2_SOURCE}")
    print(f"WARNING: no SST-2 at {data} (pass --data FILE or set CONTEXTEMBED_DATA; --help says where to get it); "
          f"using the tiny built-in sample of {len(SAMPLE)} sentences: its scores mean nothing", file=sys.stderr)
    texts, labels = [t for t, _ in SAMPLE], [y for _, y in SAMPLE]
    order = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    texts, labels = [texts[i] for i in order], [labels[i] for i in order]
    return (texts[:12], labels[:12]), (texts[12:], labels[12:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="SST-2 with TextEmbedder + LogisticRegression",
                                     epilog=epilog("sst2/train.tsv", SST2_SOURCE),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="SST-2 train.tsv (default: see below)")
    parser.add_argument("--full", action="store_true", help="3,000 training and 1,000 test sentences")
    parser.add_argument("--encoder", default="minilm-l6")
    args = parser.parse_args(argv)
    (train_x, train_y), (test_x, test_y) = load_data(args.full, args.data)
    print(f"{len(train_x)} training texts, {len(test_x)} test texts")
    pipeline = make_pipeline(TextEmbedder(args.encoder), LogisticRegression(max_iter=2000))
    start = time.perf_counter()
    search = GridSearchCV(pipeline, GRID, cv=3).fit(train_x, train_y)
    print(f"grid search over {len(search.cv_results_['params'])} layer strategies x 3 folds: "
          f"{time.perf_counter() - start:.0f} s")
    for params, score in zip(search.cv_results_["params"], search.cv_results_["mean_test_score"]):
        print(f"  layers={params['textembedder__layers']!s:<16} combine={params['textembedder__combine']:<7} "
              f"cv accuracy {score:.3f}")
    print(f"best: {search.best_params_}; test accuracy {search.score(test_x, test_y):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
