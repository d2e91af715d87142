"""BERT Table 7 on CoNLL-2003 with frozen features: SequenceTagger train -> dev entity F1.

Runs every Table 7 layer strategy for MiniLM-L6 and the GloVe row, plus ablations that measure
what the practitioner features add (context window, word-shape flags, the default classifier's
regularisation) and the calibration probe of ../shared/REFERENCE.md (one token vector, no window,
no shape, plain logistic regression). Rows print as they finish and
are appended to ``--out`` as JSON lines, so a long run can be read while it goes.

    python benchmarks/ner_table7.py                       # full train -> dev
    python benchmarks/ner_table7.py --train-limit 4000    # the reference probe's training size
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sklearn.linear_model import LogisticRegression  # noqa: E402

from contextembed.sklearn import set_cache_size  # noqa: E402
from contextembed.sklearn.datasets import read_conll  # noqa: E402
from contextembed.sklearn.experiments import LAST_FOUR, TABLE7_ROWS, format_row, run_rows  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "conll2003"

#: the reference probe's classifier: scikit-learn's plain logistic regression (C=1)
PROBE = LogisticRegression(max_iter=1000)

#: (encoder, rows, window, shape_features, classifier): the table, then ablations and the calibration
#: probe; ``None`` is the SequenceTagger's default classifier
PLAN = [
    ("minilm-l6", {"concat last four hidden": TABLE7_ROWS["concat last four hidden"]}, 1, "auto", None),
    ("glove-6b-50d", {"vectors": {"layers": 0, "combine": "concat"}}, 1, "auto", None),
    ("minilm-l6", {"last hidden (probe)": {"layers": -1, "combine": "concat"}}, 0, False, PROBE),
    ("minilm-l6", {"embeddings (probe)": {"layers": 0, "combine": "concat"}}, 0, False, PROBE),
    ("minilm-l6", {"concat last four (probe)": {"layers": LAST_FOUR, "combine": "concat"}}, 0, False, PROBE),
    ("glove-6b-50d", {"vectors + shape (probe)": {"layers": 0, "combine": "concat"}}, 0, True, PROBE),
    ("minilm-l6", {k: v for k, v in TABLE7_ROWS.items() if k != "concat last four hidden"}, 1, "auto", None),
    ("minilm-l6", {"scalar mix hidden layers": {"layers": "hidden", "combine": "scalar_mix"}}, 1, "auto", None),
    ("minilm-l6", {"concat last four, C=1": TABLE7_ROWS["concat last four hidden"]}, 1, "auto", PROBE),
    ("minilm-l6", {"concat last four, no shape": TABLE7_ROWS["concat last four hidden"]}, 1, False, None),
    ("minilm-l6", {"concat last four, no window": TABLE7_ROWS["concat last four hidden"]}, 0, "auto", None),
    ("glove-6b-50d", {"vectors, no shape": {"layers": 0, "combine": "concat"}}, 1, False, None),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-limit", type=int, default=None, help="training sentences (default: all)")
    parser.add_argument("--dev-limit", type=int, default=None, help="dev sentences (default: all)")
    parser.add_argument("--encoders", nargs="+", default=["minilm-l6", "glove-6b-50d"])
    parser.add_argument("--out", type=Path, default=None, help="append rows here as JSON lines")
    parser.add_argument("--cache-gb", type=float, default=6.0, help="in-memory encoding cache size")
    args = parser.parse_args(argv)
    if not (DATA / "train.txt").exists():
        print(f"skipped: {DATA} is not present")
        return 0
    set_cache_size(int(args.cache_gb * (1 << 30)))
    train = read_conll(DATA / "train.txt", limit=args.train_limit)
    dev = read_conll(DATA / "dev.txt", limit=args.dev_limit)
    print(f"CoNLL-2003: {len(train[0])} train sentences ({sum(map(len, train[0]))} tokens), "
          f"{len(dev[0])} dev sentences", flush=True)
    for encoder, rows, window, shape, classifier in PLAN:
        if encoder not in args.encoders:
            continue
        for row in run_rows(encoder, rows, train, dev, window=window, shape_features=shape, classifier=classifier):
            print(format_row(row), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps({**asdict(row), "train_sentences": len(train[0])}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
